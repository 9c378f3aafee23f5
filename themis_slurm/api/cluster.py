"""The live side of the API: the cluster as Slurm shows it (topology, which GPU is free, leased, ...).

The state database holds Themis's intents and history but not the cluster's shape, so the views also need
a `Snapshot`. Inside themisd the daemon hands over the snapshot of its last cycle (no extra Slurm call);
standalone (``themis serve-api``, or the CLI reading the database directly) :class:`CachedSnapshot` takes
one itself through the adapter, at most once per `ttl_s` whatever the request rate, so the API can never
flood slurmctld (two calls per snapshot: ``squeue --json`` and ``sinfo --json``).

Which GPUs are held for granted jobs (the GPU state ``starting``) is themisd's own rule, state.held.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from themis_slurm.api.wire import GPU_STATES  # noqa: F401 (re-exported: views and tests use it here)
from themis_slurm.slurm.model import AdapterConfig, Snapshot

SnapshotSource = Callable[[], Snapshot | None]


class CachedSnapshot:
    """A SnapshotSource over the CLI backend, cached for `ttl_s`; errors are kept for the response."""

    def __init__(self, partitions: Iterable[str] = ("gpu",), slurm_conf: str | None = None,
                 ttl_s: float = 5.0, timeout_s: float = 10.0,
                 reader: Callable[[], Snapshot] | None = None) -> None:
        self.ttl_s = ttl_s
        self._reader = reader or self._cli_reader(tuple(partitions), slurm_conf, timeout_s)
        self._lock = threading.Lock()
        self._snap: Snapshot | None = None
        self._at = -1e18
        self.error: str | None = None

    @staticmethod
    def _cli_reader(partitions: tuple[str, ...], slurm_conf: str | None, timeout_s: float) -> Callable[[], Snapshot]:
        from themis_slurm.slurm.backend import CliBackend  # late: unit tests inject a reader, no Slurm needed

        backend = CliBackend(config=AdapterConfig(managed_partitions=partitions, slurm_conf=slurm_conf,
                                                  timeout_s=timeout_s))
        return backend.snapshot

    def __call__(self) -> Snapshot | None:
        with self._lock:
            now = time.monotonic()
            if now - self._at >= self.ttl_s:
                self._at = now
                try:
                    self._snap = self._reader()
                    self.error = None
                except Exception as e:  # Slurm down or unreadable: the views say so and use the database
                    self._snap = None
                    self.error = f"cannot read Slurm: {e}"
            return self._snap


@dataclass(frozen=True)
class GpuState:
    """One GPU as the API shows it; `job` is the managed job holding it or starting on it, when known."""

    id: int
    node: str
    index: int
    island: int
    rack: str
    state: str  # free | starting | leased | unmanaged | unavailable
    job: str | None = None


def gpu_states(snap: Snapshot, starting: Mapping[str, Iterable[int]]) -> list[GpuState]:
    """Every managed-partition GPU with its state. `starting`: job -> GPU ids granted but not running yet.

    Precedence follows the adapter's conservative accounting: unavailable and unmanaged first (never
    offered), then GPUs a managed job holds (leased), then free GPUs granted to a starting job, then free.
    """
    holder: dict[int, str] = {}
    for mj in snap.managed:
        for g in mj.gpu_ids:
            holder[g] = mj.job_id
    leased = set(snap.managed_used) | set(holder)
    res: dict[int, str] = {}
    for job, ids in starting.items():
        for g in ids:
            res.setdefault(g, job)
    out = []
    for g in snap.topology.gpus:
        if g.id in snap.unavailable:
            state, job = "unavailable", None
        elif g.id in snap.unmanaged:
            state, job = "unmanaged", None
        elif g.id in leased:
            state, job = "leased", holder.get(g.id)
        elif g.id in res and g.id in snap.free:
            state, job = "starting", res[g.id]
        elif g.id in snap.free:
            state, job = "free", None
        else:
            state, job = "unavailable", None
        out.append(GpuState(g.id, g.node, g.index, g.island, g.rack, state, job))
    return out
