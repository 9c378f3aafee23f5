"""Apps, jobs and leases: what the arbiter schedules.

An **app** is the unit of fairness (a job, a job array, or a tagged group such as a hyperparameter sweep);
a **job** is the unit of allocation: a **gang** that gets all its GPUs or none. Work is measured in ideal
GPU-seconds (seconds on one GPU at placement factor 1), so a job of `work` on `g` GPUs at factor `f` needs
``work / (g * f)`` seconds. Rigid Slurm-style gangs (optionally shaped as ``nodes x gpus_per_node``) and
elastic jobs (any size from 1 to `gpus`, as in the authors' simulator's max parallelism) are both modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from themis_slurm.core.quick_init import quick_init

if TYPE_CHECKING:
    from themis_slurm.core.placement import ProfileRef

#: Remaining work assumed for a job that has run past its estimate (a fraction of the estimate).
OVERRUN_FRACTION = 0.05


@quick_init
@dataclass(frozen=True, slots=True)
class Job:
    """One gang-scheduled job of an app.

    `work` is the total estimate and `done` the ideal GPU-seconds attained so far; policies only ever see
    these estimates (the simulator tracks true work separately).

    `allowed_nodes` are the nodes Slurm could start the job on (its GPU type, ``-w``/``-x`` lists, CPUs and
    memory per node, features), worked out by the daemon: None means any node, an empty set no node (the
    job can never be placed). Every placement the core and the baselines make for a new start stays on
    them; a lease holder keeps renewing where it runs (Slurm already started it there). Given as any
    iterable of names, it is kept as a frozenset (a hashable, immutable Job). Last, so positional
    constructions of the other fields keep their meaning.
    """

    id: str
    app_id: str
    gpus: int
    work: float
    done: float = 0.0
    #: its placement profile: a built-in name, or a site's own class as a Profile (core.placement.site_profile)
    profile: ProfileRef = "low"
    gpus_per_node: int | None = None
    nodes: int | None = None
    elastic: bool = False
    preemptible: bool = True
    submit: float = 0.0
    service: float = 0.0  # GPU-seconds attained so far (wall time x GPUs held), what LAS-style policies rank by
    allowed_nodes: frozenset[str] | None = None  # nodes Slurm could start it on (None: any; empty: none)
    #: of `done`, the work a preemption now would throw away: done since the job's last checkpoint (0 for a
    #: job that checkpoints at Themis's warning, all its done work for one that never checkpoints). The
    #: caller works it out (the simulator from the job's checkpoint interval, themisd from --themis-ckpt
    #: and what the job reports); the bids and the leftover charge it to the app whose holder would lose
    #: it (core/agent.py), so such a job is preempted only when that pays. Last, like allowed_nodes.
    unsaved: float = 0.0
    #: its speed on each GPU type, ((type, speed), ...), in work per GPU-second relative to the reference type
    #: (measured, as Gavel's per-job rates, or its model class's in themis.yaml ``gpu_types:``); a type not
    #: listed runs at the topology's default for it (:attr:`Topology.type_speeds`), 0 means never there
    #: (core/gpu_types.py). Last, like unsaved.
    speeds: tuple[tuple[str, float], ...] = ()

    @property
    def kind(self) -> tuple:
        """Shape, profile and allowed nodes: two jobs of an app with the same kind are interchangeable (same
        throughput on the same GPUs, same rho, startable on the same nodes), so one may stand in for the
        other without changing the app's lot. The allowed nodes belong here: the auction places one job
        per kind and drops a kind that does not fit, and keep-in-place hands one job's GPUs to another of
        its kind, so a kind that ignored them would let a job that may run anywhere wait behind one that
        may not, or give a job GPUs on a node Slurm would refuse it."""
        if self.speeds:  # two jobs that run at different speeds on some type are not interchangeable
            return (self.gpus, self.gpus_per_node, self.nodes, self.profile, self.elastic, self.allowed_nodes,
                    self.speeds)  # fmt: skip
        return (self.gpus, self.gpus_per_node, self.nodes, self.profile, self.elastic, self.allowed_nodes)

    def __post_init__(self) -> None:
        allowed = self.allowed_nodes
        if allowed is not None and type(allowed) is not frozenset:
            if isinstance(allowed, str):  # a node name would become a set of its letters
                raise TypeError(f"job {self.id}: allowed_nodes must be a set of node names, got {allowed!r}")
            object.__setattr__(self, "allowed_nodes", frozenset(allowed))
        if self.speeds:
            if type(self.speeds) is not tuple:
                object.__setattr__(self, "speeds", tuple((str(t), float(v)) for t, v in dict(self.speeds).items()))
            for t, v in self.speeds:
                if not 0.0 <= v < float("inf"):
                    raise ValueError(f"job {self.id}: speed on GPU type {t!r} must be a number >= 0, got {v!r}")
        if self.gpus < 1:
            raise ValueError(f"job {self.id}: gpus must be >= 1, got {self.gpus}")
        if not self.work > 0:
            raise ValueError(f"job {self.id}: work must be > 0 GPU-seconds, got {self.work}")
        if self.done < 0:
            raise ValueError(f"job {self.id}: done must be >= 0, got {self.done}")
        if not 0.0 <= self.unsaved <= self.done:
            raise ValueError(f"job {self.id}: unsaved must be between 0 and done ({self.done}), got {self.unsaved}")
        if (self.gpus_per_node is None) != (self.nodes is None):
            raise ValueError(f"job {self.id}: give both gpus_per_node and nodes, or neither")
        if self.nodes is not None and self.gpus_per_node is not None:
            if self.nodes < 1 or self.gpus_per_node < 1 or self.nodes * self.gpus_per_node != self.gpus:
                raise ValueError(
                    f"job {self.id}: nodes={self.nodes} x gpus_per_node={self.gpus_per_node} "
                    f"must equal gpus={self.gpus}"
                )
            if self.elastic:
                raise ValueError(f"job {self.id}: a node-shaped gang cannot be elastic")

    @property
    def remaining(self) -> float:
        """Estimated ideal GPU-seconds still to do.

        A job that is still here is not finished, whatever its estimate says: past its estimate it is
        assumed to need another ``OVERRUN_FRACTION`` of it, so it keeps bidding (never starves) and its
        app's rho stays finite and meaningful.
        """
        return max(self.work - self.done, OVERRUN_FRACTION * self.work)

    @property
    def min_gpus(self) -> int:
        return 1 if self.elastic else self.gpus


@quick_init
@dataclass(frozen=True, slots=True)
class Lease:
    """A grant in time: `job_id` holds `gpus` from `start` until `expiry` (inf: never re-auctioned)."""

    job_id: str
    gpus: frozenset[int]
    start: float
    expiry: float


@quick_init
@dataclass(frozen=True, slots=True)
class App:
    """A unit of fairness.

    `contention` is the time-averaged number of apps contending during this app's life so far (N in
    T_id, see fairness.py); the caller keeps it with :class:`themis_slurm.core.fairness.ContentionClock`.
    `finished_work` and `peak_gpus` remember jobs that already left, so T_id does not shrink as an
    app's jobs complete; so does `finished_path`, the latest a finished job could have ended on a private
    cluster (seconds after `arrival`: its submit offset plus work / gpus, see :func:`job_path`).
    With tenancy levels (core/tenancy.py) `contention` is the time-average of the app's effective N, one
    over its fraction of the cluster in the account -> user -> app tree; `account` is the Slurm account
    its jobs run under ("" when unknown) and `owner` its user.
    """

    id: str
    owner: str
    arrival: float
    jobs: tuple[Job, ...] = field(default_factory=tuple)
    contention: float = 1.0
    finished_work: float = 0.0
    peak_gpus: int = 0
    finished_path: float = 0.0
    account: str = ""

    def __post_init__(self) -> None:
        for j in self.jobs:
            if j.app_id != self.id:
                raise ValueError(f"job {j.id} belongs to app {j.app_id}, not {self.id}")
        if self.contention < 1.0:
            object.__setattr__(self, "contention", 1.0)

    @property
    def total_work(self) -> float:
        return self.finished_work + sum(j.work for j in self.jobs)

    @property
    def remaining_work(self) -> float:
        return sum(j.remaining for j in self.jobs)

    @property
    def remaining_path(self) -> float:
        """Seconds the longest remaining job needs on all its GPUs: no allocation finishes the app sooner."""
        return max((j.remaining / j.gpus for j in self.jobs), default=0.0)

    @property
    def demand(self) -> int:
        """GPUs its unfinished jobs ask for at once (each job's full gang)."""
        return sum(j.gpus for j in self.jobs)

    @property
    def max_parallelism(self) -> int:
        """GPUs the app could use at once: its peak demand (at least what its current jobs ask for)."""
        return max(self.peak_gpus, self.demand)


def job_path(job: Job, arrival: float, factor: float = 1.0) -> float:
    """The earliest a job can end, in seconds after its app's arrival, on any private cluster.

    A gang cannot run faster than on all its GPUs at once: its submit offset plus ``work / (gpus x factor)``
    (factor: its placement factor, 1 for a gang inside one machine). The floor of T_id (fairness.py).
    """
    return max(0.0, job.submit - arrival) + job.work / (job.gpus * factor)


#: A job still active is never treated as done by a progress report: its remaining work stays at least this
#: fraction of the estimate, so a job that reports 100 % while it still runs is not taken for finished.
REPORT_MIN_REMAINING = 0.01


def refine_by_progress(work: float, done_service: float, progress: float) -> tuple[float, float]:
    """(done, work) of a job whose estimate is `work` after it reports `progress` (the fraction of its own
    work it has done, in [0, 1]) with `done_service` ideal GPU-seconds attained so far.

    The daemon (``themis progress`` on Slurm) and the simulator (``SimConfig.progress_interval_s``) both
    use this. A report is read against the estimate: p of it is done, (1 - p) x work remains. A report
    further along than the service believes knows about slow steps; one behind it changes nothing.

    A report is the user's word, so it only ever moves `done` forward and never changes `work`: the
    remaining work is never above ``work - done_service`` (no report) and never below
    :data:`REPORT_MIN_REMAINING` of the estimate while the job runs, and T_id, which is computed from
    `work`, is the same with or without a report: a report can only make its app look better off.

    Why not also read it against the job's own rate (service x (1 - p) / p left, which would correct a time
    limit 3x too long)? Measured (docs/eval/design-journal.md, "Progress reports"): with T_id still from the
    estimate, the remaining work of the jobs that report is corrected and the rest of their app's numbers are
    not, so apps whose jobs ran look better off than they are; on the 84-app workload with uniform 1-3x
    over-estimates Themis's max rho went from 1.56 without reports to 1.80 with them. Shrinking `work` as well
    would make T_id follow, but then a made-up report raises the rho of an app that has waited long (201.8 ->
    219.6 in a check): reports could buy GPUs. Read against the estimate, p makes an app's remaining work and
    its T_id wrong by the same factor; its elapsed time is not, so an app whose job was over-estimated and has
    run looks to have slack it does not have (rho p x true / estimate + 1 - p instead of 1 for a job run
    without a break): measured, one app at rho 1.81 instead of 1.12 without reports on one draw of lognormal
    errors (docs/eval/discussion.md, "Progress reports can make an honest app look better off"). The price of
    a reading no report can game; a better one is open.
    """
    floor = REPORT_MIN_REMAINING * work
    return min(max(progress * work, done_service), work - floor), work
