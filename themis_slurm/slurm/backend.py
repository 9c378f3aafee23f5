"""`CliBackend`: the default (and only shipped) `SlurmBackend`, driving Slurm's command-line clients.

Why the CLI and not pyslurm: pyslurm on PyPI exists only for Slurm 25.11 (and ancient 17.x/18.x), and
pyslurm must match the installed libslurm exactly. Debian 12 ships Slurm 22.05 and Debian 13 24.11, so no
Slurm we can install and test against here has a pyslurm, and a backend no test runs would not be
shipped. The client commands, by contrast, exist on every Slurm node, speak JSON (``squeue/sinfo --json``)
whose version differences the parsers absorb, and need no build against libslurm. The cost is a process
spawn per call; the snapshot makes two or three calls per cycle, and actions are a few per decision.

A pyslurm backend can later implement the same `SlurmBackend` protocol (model.py), turning pyslurm's job
and node objects into the same `SlurmJob`/`SlurmNode` records and reusing `build_snapshot`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from themis_slurm.slurm.actions import Actions
from themis_slurm.slurm.model import AdapterConfig, ManagedJob, Snapshot
from themis_slurm.slurm.runner import Runner, SubprocessRunner
from themis_slurm.slurm.snapshot import SnapshotReader


class CliBackend:
    """Reads with `SnapshotReader` and acts with `Actions`, both over one `Runner` (shared call stats)."""

    def __init__(self, runner: Runner | None = None, config: AdapterConfig | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config or AdapterConfig()
        self.runner = runner or SubprocessRunner(self.config.slurm_conf, self.config.timeout_s)
        self.reader = SnapshotReader(self.runner, self.config, clock)
        self.actions = Actions(self.runner, self.config.action_timeout_s)

    def snapshot(self) -> Snapshot:
        return self.reader.snapshot()

    def start(self, job: ManagedJob, node_gpus: Mapping[str, int]) -> None:
        self.actions.start(job, node_gpus)

    def warn(self, job: ManagedJob) -> None:
        self.actions.warn(job)

    def requeue(self, job: ManagedJob) -> None:
        self.actions.requeue(job)

    def hold(self, job: ManagedJob) -> None:
        self.actions.hold(job)

    def release_unpinned(self, job: ManagedJob) -> None:
        self.actions.release_unpinned(job)
