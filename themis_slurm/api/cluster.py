"""The live side of the API: the cluster as Slurm shows it (topology, which GPU is free, leased, ...).

The state database holds Themis's intents and history but not the cluster's shape, so the views also need
a `Snapshot`. Inside themisd the daemon hands over the snapshot of its last cycle (no extra Slurm call);
standalone (``themis serve-api``, or the CLI reading the database directly) :class:`CachedSnapshot` takes
one itself through the adapter, at most once per `ttl_s` whatever the request rate, so the API can never
flood slurmctld (two calls per snapshot: ``squeue --json`` and ``sinfo --json``).

:func:`held_for_granted` (GPUs held for granted jobs not running yet) is defined here, below the daemon,
and used by both themisd's round and the API's GPU states.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

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


#: "starting": granted to a job Slurm has not started yet (not "reserved": that word is the core's, for GPUs
#: held idle for a wide gang, core/reservation.py)
GPU_STATES = ("free", "starting", "leased", "unmanaged", "unavailable")


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


class GrantedRow(Protocol):
    """What :func:`held_for_granted` reads of a job's row (daemon.store.JobRow, or :class:`Granted`)."""

    @property
    def job_id(self) -> str: ...
    @property
    def intent(self) -> str: ...
    @property
    def grant_time(self) -> float | None: ...
    @property
    def planned_nodes(self) -> Mapping[str, int]: ...
    @property
    def planned_gpus(self) -> frozenset[int]: ...


@dataclass(frozen=True)
class Granted:
    """A GrantedRow from a row dict of the jobs table (api.db: JSON columns decoded)."""

    job_id: str
    intent: str
    grant_time: float | None
    planned_nodes: Mapping[str, int]
    planned_gpus: frozenset[int]

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Granted:
        return cls(str(row["job_id"]), str(row.get("intent")), row.get("grant_time"),
                   {str(n): int(c) for n, c in dict(row.get("planned_nodes") or {}).items()},
                   frozenset(int(g) for g in row.get("planned_gpus") or ()))


#: Intents of a job that lost its lease; one whose row plans GPUs is moving there (daemon/planning.py).
MOVING = ("warning", "warned", "requeueing")


def held_for_granted(snap: Snapshot, rows: Iterable[GrantedRow]) -> dict[str, frozenset[int]]:
    """GPUs held for jobs a round granted (intent granted or starting) that Slurm does not show running yet,
    and for jobs being moved (warned and requeued to start on other GPUs: their destination, `MOVING`).

    The one definition, used by themisd's round (the GPUs are not offered again; `themis_gpus{state=
    "starting"}`) and by the API's GPU states (`themis status`, /v1/topology), so the two cannot disagree.
    Slurm chooses GPU indices inside a node, so what a grant holds is a per-node count: the granted ids
    while they are free, else other free ids of the same node. Released jobs (``starting``) come first
    (Slurm may start them any moment), then grants in the order they were made. (Not the core's
    wide-gang reservation, which is Decision.reserved_gpus.)
    """
    topo = snap.topology
    live = {m.job_id: m for m in snap.managed}
    avail = set(snap.free)
    out: dict[str, frozenset[int]] = {}
    pending = [r for r in rows if r.job_id in live and (
        (r.intent in ("starting", "granted") and live[r.job_id].state != "RUNNING")
        or (r.intent in MOVING and r.planned_nodes))]  # fmt: skip
    pending.sort(key=lambda r: (r.intent != "starting", r.grant_time or 0.0, r.job_id))
    for r in pending:
        got: set[int] = set()
        for node, count in sorted(r.planned_nodes.items()):
            on_node = topo.node_gpus.get(node, ())
            first = [g for g in on_node if g in r.planned_gpus and g in avail]
            rest = [g for g in on_node if g not in r.planned_gpus and g in avail]
            take = (first + rest)[:count]
            got.update(take)
            avail.difference_update(take)
        out[r.job_id] = frozenset(got)
    return out


def held_from_rows(snap: Snapshot, rows: Iterable[Mapping[str, Any]]) -> dict[str, frozenset[int]]:
    """:func:`held_for_granted` over the jobs table's row dicts (what the views read)."""
    return held_for_granted(snap, [Granted.of(r) for r in rows
                                   if r.get("intent") in ("granted", "starting", *MOVING)])
