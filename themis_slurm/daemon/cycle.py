"""The typed state of one themisd cycle, filled in step by step (daemon/loop.py lists the steps, STEPS).

Each step reads what earlier steps wrote and writes its own fields; the comment of each field names the
step that writes it. What lasts from one cycle to the next (the config, the store, the backlog of actions,
the last round's signature, ...) is the Daemon's, not the cycle's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from themis_slurm.core.decision import Decision
from themis_slurm.daemon.reconcile import Fix
from themis_slurm.slurm.model import ManagedJob, Snapshot
from themis_slurm.state.record import InPlace
from themis_slurm.state.round_input import RoundInput
from themis_slurm.state.rows import AppRow, JobRow


@dataclass(frozen=True)
class CycleReport:
    """What one cycle did (for tests, the benchmark and the debug log)."""

    time: float
    duration_s: float
    slurm_calls: int
    snapshot_s: float
    fixes: int
    trigger: str | None = None
    round_s: float = 0.0
    grants: int = 0
    renewals: int = 0
    preemptions: int = 0
    actions: int = 0
    errors: int = 0
    decision: Decision | None = None
    deferred: int = 0  # actions put off to the next cycle (the cycle's read had grown stale)


@dataclass
class Cycle:
    """One cycle's working state. A step that ends the cycle early (Slurm could not be read) sets `report`."""

    started: float  # perf() when the cycle began
    snap: Snapshot | None = None  # read_slurm: the one read of Slurm every decision of the cycle comes from
    snap_s: float = 0.0  # read_slurm: how long it took
    now: float = 0.0  # read_slurm: the read's time, the cycle's clock
    jobs: dict[str, ManagedJob] = field(default_factory=dict)  # read_slurm: the managed jobs by id
    rows: dict[str, JobRow] = field(
        default_factory=dict
    )  # reconcile_intents; kept current by every later step
    fixes: list[Fix] = field(default_factory=list)  # reconcile_intents
    apps: dict[str, AppRow] = field(default_factory=dict)  # plan_round: the active apps, accounted up to now
    inp: RoundInput | None = None  # plan_round: the round's input
    trigger: str | None = None  # plan_round: why a round runs; None when none is due
    signature: object = (
        None  # decide: the input's signature as round_due saw it (what a recorded round settles)
    )
    decision: Decision | None = (
        None  # decide: as themisd carries it out (planning.as_applied); None: no round
    )
    in_place: dict[str, InPlace] = field(default_factory=dict)  # decide: renewals made instead of migrations
    new_rows: dict[str, JobRow] = field(default_factory=dict)  # decide: the intents the decision sets
    round_s: float = 0.0  # decide: how long the round took
    report: CycleReport | None = None  # report (or read_slurm, when Slurm could not be read)
