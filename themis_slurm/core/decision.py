"""What a round decided, and why: the arbiter's output, consumed by the daemon and the simulator.

Grants start jobs (and leases); renewals extend a lease holder that won its own GPUs back (no Slurm action,
no restart); preemptions take GPUs from a holder whose lease expired and who lost. Every app gets an
:class:`AppRecord` so that `themis explain` can say why a job runs or waits. Everything is data (enums,
counts, ids); sentences are made from it at the edges, by themis_slurm/reasons.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from themis_slurm.core.quick_init import quick_init


class Outcome(StrEnum):
    """What the round did for an app (AppRecord.outcome). Sentences are made from it at the edges only."""

    NOTHING_WAITING = "nothing_waiting"   # no waiting job: not ranked
    NOT_OFFERED = "not_offered"           # ranked below the visibility cut (1 - f of the ranked apps bid)
    LOST = "lost"                         # bid and won nothing
    WON = "won"                           # bid and won GPUs in the auction
    POLICY = "policy"                     # a baseline policy's round with work waiting (simulator only; see note)


class KeptBy(StrEnum):
    """Why a winner kept fewer GPUs than it won (AppRecord.kept_by)."""

    ALL = "all"                           # kept everything it won
    PAYMENT = "payment"                   # the hidden payment withheld some
    VISIBILITY = "visibility"             # its rho fell to the worst outside the auction: the rest went on
    QUOTA = "quota"                       # its tenant (user or account) reached its quota (core/quota.py)


class GrantSource(StrEnum):
    """Why a job was started (Grant.source)."""

    AUCTION = "auction"                   # won in the auction and kept after the hidden payment
    LEFTOVER = "leftover"                 # work conservation: GPUs nobody won, or withheld ones
    RESERVATION = "reservation"           # a wide gang that waited a lease, started on GPUs reserved for it
    POLICY = "policy"                     # a baseline policy started it in its priority order (simulator only)
    BACKFILL = "backfill"                 # a baseline started it out of order on GPUs nobody ahead can use


class RenewalCause(StrEnum):
    NOT_PREEMPTIBLE = "not_preemptible"   # the job cannot be preempted: it keeps its GPUs
    WON_BACK = "won_back"                 # won its own GPUs back in the auction
    LEFTOVER = "leftover"                 # kept its GPUs as leftover
    UNSAVED = "unsaved"                   # it would lose more work than its lease frees: its app is not clearly ahead
    WIDE_GANG = "wide_gang"               # a started wide gang keeps its GPUs: its app is not clearly ahead
    RESERVATION = "reservation"           # the reservation phase's wide gang already runs: it keeps its GPUs
    IN_PLACE = "in_place"                 # the daemon renewed it instead of moving a same-kind job onto its GPUs
    POLICY = "policy"                     # a baseline policy kept it running (simulator only)


class PreemptionCause(StrEnum):
    LOST = "lost"                         # lease expired and the job won nothing
    MOVED = "moved"                       # lease expired; the job starts again on other GPUs
    POLICY = "policy"                     # a baseline policy took its GPUs back (simulator only)


@dataclass(frozen=True, slots=True)
class ReservationNote:
    """The wide gang a round reserved GPUs for (AppRecord.reservation)."""

    job_id: str
    gpus: int                             # the gang's width
    held: int                             # GPUs held idle for it now (0: none idle meanwhile)
    start_in_s: float                     # until all its GPUs are free (0 when it started now)
    started: bool                         # it started on its reservation in this round


@quick_init
@dataclass(frozen=True, slots=True)
class Grant:
    """Start `job_id` on `gpus` (per-node counts in `nodes`) with a lease until `lease_expiry`.

    `source` says why (:class:`GrantSource`): auction, leftover or reservation in a Themis round; policy
    or backfill in a baseline's.
    `migrated` is set when the job held other GPUs until now (it is preempted from those first).
    """

    job_id: str
    app_id: str
    gpus: frozenset[int]
    nodes: Mapping[str, int]
    level: str
    lease_expiry: float
    source: GrantSource
    migrated: bool = False


@quick_init
@dataclass(frozen=True, slots=True)
class Renewal:
    """A lease holder keeps its GPUs, untouched, until `lease_expiry`."""

    job_id: str
    app_id: str
    gpus: frozenset[int]
    lease_expiry: float
    cause: RenewalCause = RenewalCause.WON_BACK
    cut_s: float | None = None            # lease cut to this many seconds by the hidden payment
    note: str = ""                        # a baseline's free-text note (Themis: empty; see themis_slurm.reasons)


@quick_init
@dataclass(frozen=True, slots=True)
class Preemption:
    """Take `gpus` back from `job_id`: warn (SIGUSR1), then requeue it to wait for a later round."""

    job_id: str
    app_id: str
    gpus: frozenset[int]
    cause: PreemptionCause = PreemptionCause.LOST
    note: str = ""                        # a baseline's free-text note (Themis: empty)


@quick_init
@dataclass(frozen=True, slots=True)
class AppRecord:
    """One app's part in a round, for the audit log and `themis explain`."""

    app_id: str
    rho_before: float
    rho_after: float
    rank: int | None  # 1 = worst rho among apps wanting GPUs; None when it wanted none
    bid: bool
    won_gpus: int = 0
    kept_gpus: int = 0
    payment_fraction: float | None = None  # c_i when it won something in the auction
    leftover_gpus: int = 0
    note: str = ""                        # a baseline's free-text note (Themis: empty; words come from the fields)
    outcome: Outcome = Outcome.NOTHING_WAITING
    ranked: int = 0                       # how many apps were ranked (had waiting work) in the round
    kept_by: KeptBy = KeptBy.ALL
    reservation: ReservationNote | None = None
    # tenancy levels (core/tenancy.py; empty when flat): the app's tenant (("user", (account, user)) or
    # ("account", (account,))), the GPUs the leftover's quota gave that tenant and the GPUs it holds after
    # the round (kept leases and everything granted or renewed)
    tenant: tuple = ()
    tenant_quota: float | None = None
    tenant_gpus: int = 0


class LazyRecords(Mapping[str, "AppRecord"]):
    """Decision.apps built on first read: the same records, computed only if someone reads them.

    A baseline's records need every app's rho before and after its call, a pass over every unfinished
    job; the simulator applies a decision without reading them (only an observer or themisd does), and
    on the paper workload that pass was 10-19% of a baseline's call. A Themis round's records (an
    AppRecord per app) were 8% of a round in the contended simulation. `build` must not depend on
    anything that changes after the Decision is made (the baselines' scratchpad is dropped with their
    call; the round's state is not changed once the round is over).
    """

    __slots__ = ("_build", "_records")

    def __init__(self, build: Callable[[], Mapping[str, AppRecord]]) -> None:
        self._build: Callable[[], Mapping[str, AppRecord]] | None = build
        self._records: Mapping[str, AppRecord] | None = None

    def _get(self) -> Mapping[str, AppRecord]:
        records = self._records
        if records is None:
            build = self._build
            if build is None:  # another thread built them meanwhile (it sets the records first)
                assert self._records is not None
                return self._records
            records = build()  # two threads may both build: the same records, the second kept
            self._records = records
            self._build = None  # let go of what it closed over
        return records

    def __getitem__(self, app_id: str) -> AppRecord:
        return self._get()[app_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __repr__(self) -> str:
        return f"LazyRecords({dict(self._get())!r})"


@dataclass(frozen=True)
class Decision:
    """Everything one round decided."""

    now: float
    grants: tuple[Grant, ...] = ()
    renewals: tuple[Renewal, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    apps: Mapping[str, AppRecord] = field(default_factory=dict)
    solver: str = ""
    objective: float = 0.0
    offered_gpus: int = 0
    idle_gpus: frozenset[int] = frozenset()
    reserved_gpus: frozenset[int] = frozenset()  # held free for a wide gang (core/reservation.py), not idle

    @property
    def empty(self) -> bool:
        return not (self.grants or self.renewals or self.preemptions)
