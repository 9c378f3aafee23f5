"""Discrete-event simulator: drives one Policy over a trace on a virtual cluster.

The policy is the same object the daemon would call (for Themis, :func:`themis_slurm.core.arbiter.run_round`
unchanged); the simulator plays Slurm and the jobs. Events are job arrivals (an app arrives with its first
job), completions, lease expiries (a grant's ``lease_expiry``; ``inf`` means none) and the policy's own
wake-ups (:meth:`Policy.next_wakeup`). Events closer than ``SimConfig.coalesce_s`` are one instant, and one
instant is at most one policy call, with the reasons that caused it.

Model (choices and why):

* **Work** of a trace job is ``duration_s x gpus`` ideal GPU-seconds (the trace's run time is on its own GPUs
  at ideal placement). A running job progresses at ``|G| x factor(level(G))`` (core placement model).
* **Estimates**: policies see ``Job.work`` = the trace's estimate (``TraceJob.estimate_s``, e.g. a replayed
  Slurm job's time limit, x its GPUs; the true work when the trace has none) x an :class:`EstimateError`
  factor, and ``Job.done``;
  completion uses true work. A job that outlives its estimate gets it bumped (:func:`estimate_error.bumped`).
* **Calibration** (``SimConfig.calibration``, on by default, as in themisd): when a job completes, its
  true work / first estimate joins its user's history, and every unfinished job of a user is seen with its
  estimate x that user's factor (:mod:`themis_slurm.core.calibration`). A factor is applied again only
  when it moved by more than ``CALIBRATION_TOLERANCE`` (waiting jobs keep their cached snapshots until
  then); with exact estimates every ratio is 1 and nothing changes. Before every policy call, what is
  present is added as themisd adds it each cycle (``_present``: each user's median claimed run time,
  est0 / GPUs, and (est0, done) of every started unfinished job): running overruns raise their users at
  once and users without evidence are held to their peers' claims (core/calibration.py, ``with_present``).
* **Progress reports** (``SimConfig.progress_interval_s``, off by default): a running job reports its true
  fraction done every that many seconds of its run, as a Slurm job does with ``themis progress``; policies
  then see (done, work) refined by the last report exactly as the daemon refines them
  (:func:`~themis_slurm.core.workload.refine_by_progress`: p of the estimate is done).
* **Preemption** keeps progress (the job checkpoints on SIGUSR1, as the daemon asks Slurm jobs to) and the
  job pays ``restart_cost_s`` of no progress when it next starts (also on a migration), while holding its
  GPUs: restart cost is GPU time used, as on a real cluster. A job that does not checkpoint at the warning
  (``TraceJob.checkpoint_s``, ``SimConfig.no_checkpoint``) also loses what it did since its last checkpoint
  (everything, when it never checkpoints); policies see that work as :attr:`Job.unsaved` while it runs.
* **Leases**: a renewal extends the lease in place at no cost. An expired lease that the policy neither renews
  nor preempts keeps running (and shows as expired at later calls): the caller never kills a job on its own.
* **Calls**: the policy is called at an instant when a lease expired, its wake-up fell due, or jobs wait. Every
  policy declares ``grants_only_free_or_expired`` (:class:`~themis_slurm.policies.base.Policy`); one that
  declares True (Themis by construction: it only hands out free GPUs and GPUs of expired leases; the
  baselines that never preempt) is not called while no GPU is free and no lease expired, since the call
  could not change anything. This keeps Themis's per-event cost down on a full cluster. The simulator knows
  no policy by name or class.
* **Contention** N at an instant is the number of apps with present (arrived, unfinished) jobs; an app's
  contention is the time-average of max(1, N) over its life so far, which is what
  :class:`~themis_slurm.core.fairness.ContentionClock` computes; a single cluster-wide clock is kept and each
  app remembers its integral at arrival, so the cost per event does not grow with the number of apps.
* **Tenancy** (``SimConfig.tenancy``, core/tenancy.py): with levels above the app (account, user), an app's
  N at an instant is its effective N, one over its fraction of the cluster in the account -> user -> app
  tree of the apps with present jobs (:func:`~themis_slurm.core.tenancy.contention`), and its contention is
  the time-average of that. The core splits the lowest entity's fraction (a user's, or an account's when
  users do not count) equally among its apps, so all present apps of one entity have the same N: the
  simulator keeps one integral per entity (:class:`_G`), asks the core for one app per entity whenever the
  set of apps with present jobs changes (once per instant, before the clock moves on or the policy is
  called) and multiplies by the entity's number of present apps; each app keeps the entity's integral at
  its (re)activation. This costs O(entities) per change instead of O(apps) (philly_mix1 grouped by job has
  ~1,400 apps present at once in 11 entities); the first change with two apps under one entity is checked
  against the core's answer for every app, so a core that stops splitting equally is caught, not followed.
  An app with no present job for a while (its next jobs not yet arrived) keeps the N it last had, as a
  :class:`~themis_slurm.core.fairness.ContentionClock` that is not advanced until the app is seen again does. The state carries the tenancy and each app its account (its first job's) and owner (its
  first job's user). With the levels ``("app",)`` (the default) none of this runs: the cluster-wide clock
  above is the whole story and every result is what it always was.
* The state passed to the policy holds only apps with present jobs and only their present jobs (waiting
  ones first, then running ones, each in arrival order); an app's
  ``finished_work`` is the true work of its completed jobs and ``peak_gpus`` its peak concurrent demand.

Every decision is validated (:mod:`themis_slurm.sim.validate`) before it is applied; a bad one raises
:class:`InvalidDecision` and nothing of it is applied. Deterministic for a seed: no wall clock, no hash order.
"""

from __future__ import annotations

import gc
import heapq
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from themis_slurm.core.arbiter import ArbiterConfig
from themis_slurm.core.calibration import (
    NONE,
    CalibrationConfig,
    Present,
    UserHistory,
    calibrate,
    finished_ratio,
    with_present,
)
from themis_slurm.core.decision import Decision
from themis_slurm.core.gpu_types import gang_speed
from themis_slurm.core.placement import DEFAULT_PROFILE, Profile, ProfileRef, get_profile, site_profile
from themis_slurm.core.state import ClusterState
from themis_slurm.core.tenancy import FLAT, Entity, Tenancy, TenantBook
from themis_slurm.core.tenancy import contention as tenancy_contention
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App, Job, Lease, refine_by_progress
from themis_slurm.gc_pause import collector_paused
from themis_slurm.policies.base import Policy, PolicyContext
from themis_slurm.sim.estimate_error import EstimateError, bumped
from themis_slurm.sim.trace import Trace, TraceJob
from themis_slurm.sim.validate import Holding, InvalidDecision, check_decision

__all__ = [
    "AppResult",
    "InvalidDecision",
    "JobResult",
    "SimConfig",
    "SimResult",
    "SimulationStalled",
    "Simulator",
    "simulate",
]

_COMPLETE, _LEASE, _WAKE, _TICK = 0, 1, 2, 3
_FUTURE, _WAITING, _RUNNING, _DONE = 0, 1, 2, 3
_STALL_CALLS = 1000  # consecutive do-nothing wake-ups with nothing running before we call it a stall
#: A simulation runs with the cyclic collector paused (see run); a full collection every this many policy
#: calls keeps memory bounded should a policy ever make reference cycles (none do: a whole paper run leaves
#: none behind).
_COLLECT_EVERY_CALLS = 10_000
#: A user's calibration factor is applied again to their unfinished jobs only when it moved by more than
#: this (relative): each application re-snapshots the user's waiting jobs. themisd applies it every cycle.
CALIBRATION_TOLERANCE = 0.02


class SimulationStalled(RuntimeError):
    """Jobs wait but nothing can happen any more (the policy never grants them and asks for no wake-up)."""


@dataclass(frozen=True)
class SimConfig:
    """Knobs of the simulated world (not of the policy).

    restart_cost_s: seconds of no progress (GPUs held) a preempted job pays when it starts again: what the
        simulated world charges. Not a policy knob: Themis's bids assume their own
        ``ArbiterConfig.restart_cost_s`` (the mechanism's model of this cost). The default is read from
        ArbiterConfig, so that unless an experiment sets them apart (to study a wrong assumption) the world
        charges what Themis assumes; ``themis simulate --restart-cost`` sets both.
    estimate_error: how wrong the work estimates policies see are.
    seed: for the estimate errors (policies get their own seeds).
    default_profile: placement profile of jobs whose model has none (built in, or one of `profiles`).
    profiles: a site's own model classes (themis.yaml ``models:``, :attr:`Config.models
        <themis_slurm.daemon.config.Config.models>`): they override the built-in classes of the same name,
        and `default_profile` may name one; the jobs carry them into the policies as themisd's do. Trace
        models are the built-in names only (sim/trace.py), so a class of a new name applies through
        `default_profile`. Empty (the default): the built-in table, as before sites could define classes.
    elastic: make every job elastic (it may run on 1..gpus GPUs).
    node_shaped: a job wider than a node asks Slurm-style for whole nodes (``nodes x gpus_per_node``).
    validate: check every decision (leave on; off only for benchmarking a trusted policy).
    record_allocations: keep every (job, GPUs, start, end) interval in the result, for invariant checks.
    coalesce_s: events closer than this are one instant (one policy call).
    calibration: learning each user's estimate bias from their finished jobs (on by default, as in themisd;
        ``CalibrationConfig(enabled=False)`` to see raw estimates).
    progress_interval_s: 0 (default): jobs report no progress. When > 0, a running job reports its true
        fraction done every that many seconds after it (re)starts; the last report stays while it waits.
    round_interval_s: 0 (default) calls the policy at every event instant. When > 0, events are batched and
        the policy is called at most once per interval, at multiples of it (like Slurm's sched_min_interval or
        the Themis YARN prototype's periodic rounds): completions free GPUs at once but they are handed out
        at the next tick. An approximation that trades fidelity for speed on very large traces.
    no_checkpoint: the fraction of jobs that never checkpoint (each drawn with `seed`; a preemption throws
        away everything such a job did), among those whose trace says nothing (TraceJob.checkpoint_s None:
        they checkpoint at the warning). ``themis simulate --no-checkpoint``.
    tell_unsaved: policies see a running job's unsaved work (:attr:`Job.unsaved`), as themisd tells the core;
        False hides it (every job looks as cheap to preempt as one that checkpoints at the warning), to
        measure what knowing it is worth (benchmarks/checkpoint_cost.py).
    tenancy: which levels of the account -> user -> app tree count and their shares (core/tenancy.py;
        sim/tenants.py reads ``themis simulate --levels/--shares``). The default, apps alone, is the paper's
        1/N share; the policies see it as ``ClusterState.tenancy``.
    """

    restart_cost_s: float = ArbiterConfig.restart_cost_s  # the world's cost; by default what Themis assumes
    estimate_error: EstimateError = field(default_factory=EstimateError)
    seed: int = 0
    default_profile: str = DEFAULT_PROFILE
    elastic: bool = False
    node_shaped: bool = False
    validate: bool = True
    record_allocations: bool = False
    coalesce_s: float = 1e-6
    round_interval_s: float = 0.0
    progress_interval_s: float = 0.0
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    tenancy: Tenancy = FLAT
    no_checkpoint: float = 0.0
    tell_unsaved: bool = True
    profiles: Mapping[str, Profile] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.no_checkpoint <= 1.0:
            raise ValueError(f"no_checkpoint must be a fraction in [0, 1], got {self.no_checkpoint}")
        if not (self.progress_interval_s >= 0 and math.isfinite(self.progress_interval_s)):
            raise ValueError(f"progress_interval_s must be >= 0 seconds, got {self.progress_interval_s}")
        if not (self.round_interval_s >= 0 and math.isfinite(self.round_interval_s)):
            raise ValueError(f"round_interval_s must be >= 0 seconds, got {self.round_interval_s}")
        if not (self.restart_cost_s >= 0 and math.isfinite(self.restart_cost_s)):
            raise ValueError(f"restart_cost_s must be >= 0 seconds, got {self.restart_cost_s}")
        if not self.coalesce_s >= 0:
            raise ValueError(f"coalesce_s must be >= 0, got {self.coalesce_s}")
        if site_profile(self.default_profile, self.profiles) is None:
            get_profile(self.default_profile)  # raises, naming the built-in profiles


@dataclass(frozen=True, slots=True)
class JobResult:
    """One job's record: times in seconds, work in ideal GPU-seconds, gpu_seconds = GPU time held.

    `holds` is every interval it held GPUs: (start, end, GPUs), in order; the job waited the rest of
    [arrival, finish] (per-user GPU time while waiting, sim/metrics.py, is computed from these).
    """

    job_id: str
    app_id: str
    gpus: int
    profile: ProfileRef  # a built-in name, or a site's class (SimConfig.profiles)
    arrival: float
    first_start: float
    finish: float
    true_work: float
    estimate: float  # the estimate the job was submitted with (before any calibration or bump)
    gpu_seconds: float
    starts: int
    preemptions: int
    holds: tuple[tuple[float, float, int], ...] = ()
    lost_work: float = 0.0  # true work its preemptions threw away (done since its last checkpoint)
    speeds: tuple[tuple[str, float], ...] = ()  # its speed per GPU type (TraceJob.speeds), for T_id after the fact

    @property
    def jct(self) -> float:
        return self.finish - self.arrival


@dataclass(frozen=True, slots=True)
class AppResult:
    """One app's record. `contention` is the time-averaged N over [arrival, finish] (the effective N under
    ``SimConfig.tenancy``); `account` is its first job's account ("" when the trace has none)."""

    app_id: str
    owner: str
    arrival: float
    finish: float
    contention: float
    peak_gpus: int
    true_work: float
    n_jobs: int
    account: str = ""


@dataclass(frozen=True)
class SimResult:
    """Everything metrics need, computed the same way for every policy (see sim/metrics.py)."""

    policy: str
    topology: Topology
    config: SimConfig
    jobs: tuple[JobResult, ...]
    apps: tuple[AppResult, ...]
    util_times: tuple[float, ...]  # busy GPU count changes to util_busy[i] at util_times[i]
    util_busy: tuple[int, ...]
    preemptions: int
    events: int  # event instants processed
    policy_calls: int
    wall_s: float
    allocations: tuple[tuple[str, frozenset[int], float, float], ...] = ()
    lost_work: float = 0.0  # true work preemptions threw away, all jobs (TraceJob.checkpoint_s)


class _J:
    """Mutable per-job bookkeeping (private; the policy only ever sees immutable Job snapshots)."""

    __slots__ = (
        "tj", "id", "app", "gpus", "true_work", "est", "est0", "profile", "factors", "gpn", "nodes", "elastic",
        "state", "done", "service", "t_base", "progress_from", "rate", "held", "lease", "version",
        "lease_token", "needs_restart", "first_start", "finish", "starts", "preemptions", "snap", "holding",
        "reported", "hold_from", "holds", "ckpt", "run_done0", "lost",
    )  # fmt: skip

    def __init__(self, tj: TraceJob, est: float, profile: ProfileRef, gpn: int | None, nodes: int | None, elastic: bool):
        self.tj = tj
        self.id = tj.job_id
        self.app = tj.app_id
        self.gpus = tj.gpus
        self.true_work = tj.duration_s * tj.gpus
        self.est = self.est0 = est
        self.profile = profile
        self.factors = get_profile(profile).factors
        self.gpn, self.nodes, self.elastic = gpn, nodes, elastic
        self.state = _FUTURE
        self.done = self.service = self.t_base = self.progress_from = self.rate = 0.0
        self.held: frozenset[int] = frozenset()
        self.lease: Lease | None = None
        self.holding: Holding | None = None
        self.version = self.lease_token = 0
        self.needs_restart = False
        self.first_start = math.nan
        self.finish = math.nan
        self.starts = self.preemptions = 0
        self.snap: Job | None = None  # cached snapshot while waiting (nothing about it changes)
        self.reported: float | None = None  # fraction of true work done at its last progress report
        self.hold_from = 0.0  # when it last started (its current hold, while running)
        self.holds: list[tuple[float, float, int]] = []  # (start, end, GPUs) of every finished hold
        self.ckpt = tj.checkpoint_s  # None: at the warning; inf: never; else every that many seconds of run
        self.run_done0 = 0.0  # true work done when its current run started making progress
        self.lost = 0.0  # true work thrown away by its preemptions (done since the last checkpoint)


class _A:
    """Mutable per-app bookkeeping."""

    __slots__ = ("id", "owner", "arrival", "cint0", "total", "completed", "present", "demand", "peak",
                 "finished_work", "finished_path", "finish", "contention", "running", "snaps",
                 "runners", "account", "shell", "group", "base", "nint", "nt", "ncur")  # fmt: skip

    def __init__(self, app_id: str, owner: str, arrival: float, cint0: float, total: int,
                 account: str = "") -> None:
        self.id, self.owner, self.arrival, self.cint0, self.total = app_id, owner, arrival, cint0, total
        self.account = account
        #: with tenancy levels: the app as core/tenancy.py sees it (id, owner, account) and its entity; its
        #: integral of effective N over [arrival, `nt`] when not present (then `ncur` is the N it keeps), or
        #: up to its last activation while present, when `base` is its entity's integral at that moment
        self.shell = App(app_id, owner, arrival, account=account)
        self.group: _G | None = None
        self.base = self.nint = 0.0
        self.nt, self.ncur = arrival, 1.0
        self.completed = 0
        self.present: dict[str, _J] = {}
        self.demand = self.peak = 0
        self.finished_work = self.finished_path = 0.0
        self.finish = math.nan
        self.contention = 1.0
        self.running = 0  # of its present jobs
        #: the snapshots of its waiting jobs while none of them starts and none comes or goes (each is the
        #: job's cached waiting snapshot); running jobs are snapshot afresh at every call
        self.snaps: tuple[Job, ...] | None = None
        #: its running jobs in arrival order, kept (and dropped) with `snaps`: no pass over all its jobs
        self.runners: tuple[_J, ...] = ()


class _G:
    """With tenancy levels: the lowest entity above some apps (a user, or an account), whose present apps
    all have the same effective N `n` (the core splits its fraction equally). `integral` is the integral
    of that N over [0, `t`] (valid, with `n` in force since `t`: :meth:`at`); `rep` is one of its apps, the
    one the core is asked about. Its :class:`~themis_slurm.core.tenancy.TenantBook` since it last became
    active: `entitled` (the integral of ``cluster_gpus x frac``, its fraction of the cluster, up to `t`) and
    `finished` (the true work of its jobs that completed)."""

    __slots__ = ("rep", "key", "count", "integral", "t", "n", "frac", "entitled", "finished")

    def __init__(self, rep: App, key: Entity) -> None:
        self.rep, self.key = rep, key
        self.count = 0  # its apps with present jobs
        self.integral = self.t = 0.0
        self.n = 1.0
        self.frac = self.entitled = self.finished = 0.0

    def at(self, t: float) -> float:
        return self.integral + (t - self.t) * self.n

    def book(self, t: float, cluster_gpus: float) -> TenantBook:
        return TenantBook(self.entitled + (t - self.t) * cluster_gpus * self.frac, self.finished)


Observer = Callable[["Simulator", Decision], None]


class Simulator:
    """One run of one policy over one trace. Call :meth:`run` once.

    `observer`, when given, is called after each applied decision with the simulator (tests use it to check
    invariants through :meth:`free_gpus` and :meth:`waiting_jobs`). `progress` receives the fraction of jobs
    finished, about every 1%.
    """

    def __init__(
        self,
        trace: Trace | Sequence[TraceJob],
        topology: Topology,
        policy: Policy,
        config: SimConfig | None = None,
        observer: Observer | None = None,
        progress: Callable[[float], None] | None = None,
    ) -> None:
        self.cfg = config or SimConfig()
        self.topo = topology
        self.policy = policy
        self.policy_name = getattr(policy, "name", type(policy).__name__)
        self.observer = observer
        self.progress = progress
        passive = getattr(policy, "grants_only_free_or_expired", None)
        if not isinstance(passive, bool):
            raise TypeError(f"policy {self.policy_name!r} must declare grants_only_free_or_expired = True or False "
                            "(see themis_slurm.policies.base.Policy)")  # fmt: skip
        self._passive = passive
        tjobs = tuple(trace.jobs if isinstance(trace, Trace) else sorted(trace, key=lambda j: j.arrival_s))
        factors = self.cfg.estimate_error.factors(len(tjobs), self.cfg.seed)
        if self.cfg.no_checkpoint > 0:  # which jobs never checkpoint: one draw per job, in trace order
            draw = random.Random(f"no-checkpoint:{self.cfg.seed}")
            never = [draw.random() < self.cfg.no_checkpoint for _ in tjobs]
            tjobs = tuple(replace(tj, checkpoint_s=math.inf) if n and tj.checkpoint_s is None else tj
                          for tj, n in zip(tjobs, never, strict=True))  # fmt: skip
        per_node = max(len(v) for v in topology.node_gpus.values())
        self._arrivals: list[_J] = []
        self._jobs: dict[str, _J] = {}
        counts: dict[str, int] = {}
        for tj, f in zip(tjobs, factors, strict=True):
            self._arrivals.append(self._make_job(tj, float(f), per_node))
            counts[tj.app_id] = counts.get(tj.app_id, 0) + 1
        self._app_total = counts
        self._apps: dict[str, _A] = {}
        self._active: dict[str, _A] = {}  # apps with present jobs, in order of (re)activation
        self._running: dict[str, _J] = {}
        self._holdings: dict[str, Holding] = {}
        self._waiting: dict[str, _J] = {}
        #: every present job's latest snapshot by id, the policies' ClusterState.job_index: changed for the
        #: few jobs that move between calls (running ones, and the apps whose waiting jobs changed) instead
        #: of built at every call; in the order jobs were first seen (nothing may depend on it)
        self._index: dict[str, Job] = {}
        self._index_holes = 0  # finished jobs dropped from it since it was last compacted (see _state)
        self._free: set[int] = set(range(topology.size))
        self._heap: list[tuple[float, int, int, str, int]] = []
        self._seq = 0
        self._wake_token = 0
        self._now = 0.0
        self._cint = 0.0  # integral of max(1, N) dt since time 0
        self._nested = not self.cfg.tenancy.flat  # apps' N from the tenancy tree (each its own integral)
        self._tdirty = False  # the set of apps with present jobs changed at `_now` since the last _retally
        self._groups: dict[object, _G] = {}  # every entity seen, by (level, key)
        self._gactive: dict[object, _G] = {}  # the entities with present apps, in order of (re)activation
        self._gchecked = False  # the grouping was checked against the core's answer for every app
        self._busy_times: list[float] = []
        self._busy_vals: list[int] = []
        self._allocs: list[tuple[str, frozenset[int], float, float]] = []
        self._preemptions = 0
        self._lost = 0.0  # true work thrown away by preemptions of jobs that had not saved it
        self._done_jobs = 0
        self._events = 0
        self._calls = 0
        self._histories: dict[str, UserHistory] = {}  # per user: (ratio, true work) of finished jobs
        self._calibration = NONE
        self._learned = NONE  # what the finished jobs alone say (calibrate); _calibration adds what is present
        self._applied: dict[str, float] = {}  # per user: the factor its unfinished jobs' estimates carry
        #: per user: the claimed run time (first estimate / GPUs) of each present job, and their median (None:
        #: to be recomputed), for the peer floor; and jobs that ran, were preempted and wait (their done counts)
        self._claims: dict[str, dict[str, float]] = {}
        self._claim_median: dict[str, float | None] = {}
        self._resumable: dict[str, _J] = {}
        self._resumable_over: dict[str, _J] = {}  # those of them past their first estimate x the tolerance

    # ----------------------------------------------------------------- setup
    def _make_job(self, tj: TraceJob, factor: float, per_node: int) -> _J:
        if tj.job_id in self._jobs:
            raise ValueError(f"duplicate job id {tj.job_id!r}")
        elastic = self.cfg.elastic
        gpn = nodes = None
        if self.cfg.node_shaped and tj.gpus > per_node and not elastic:
            if tj.gpus % per_node:
                raise ValueError(f"job {tj.job_id}: {tj.gpus} GPUs is not a whole number of {per_node}-GPU nodes")
            gpn, nodes = per_node, tj.gpus // per_node
        if tj.gpus > self.topo.size and not elastic:
            raise ValueError(f"job {tj.job_id} gangs {tj.gpus} GPUs but the cluster has {self.topo.size}")
        if nodes is not None and nodes > len(self.topo.node_gpus):
            raise ValueError(f"job {tj.job_id} needs {nodes} whole nodes but the cluster has {len(self.topo.node_gpus)}")
        profile = site_profile(tj.model or self.cfg.default_profile, self.cfg.profiles)
        assert profile is not None  # trace models are built-in names; default_profile is checked in SimConfig
        believed = tj.estimate_s if tj.estimate_s is not None else tj.duration_s  # e.g. a Slurm time limit
        j = _J(tj, believed * tj.gpus * factor, profile, gpn, nodes, elastic)
        self._jobs[j.id] = j
        return j

    # ----------------------------------------------------------------- public views (for observers)
    @property
    def now(self) -> float:
        return self._now

    def free_gpus(self) -> frozenset[int]:
        return frozenset(self._free)

    def waiting_jobs(self) -> list[Job]:
        return [self._snapshot(j, self._now) for j in self._waiting.values()]

    def running(self) -> dict[str, frozenset[int]]:
        return {jid: j.held for jid, j in self._running.items()}

    # ----------------------------------------------------------------- the loop
    def run(self) -> SimResult:
        """Run the trace to its end. The cyclic collector is paused throughout, as around a policy call
        (themis_slurm/gc_pause.py): the simulator's own objects die by reference counting too, and with the
        collector on, its automatic passes walked the whole live trace between calls (on the paper
        workload 13% of a Themis simulation's CPU, 3% of a baseline's), to find nothing. Every
        :data:`_COLLECT_EVERY_CALLS` calls a full collection runs anyway."""
        with collector_paused():
            return self._run()

    def _run(self) -> SimResult:
        t0 = time.perf_counter()
        arrivals, heap, eps = self._arrivals, self._heap, self.cfg.coalesce_s
        n_jobs, i, idle_calls = len(arrivals), 0, 0
        tick, pending, tick_due = self.cfg.round_interval_s, set[str](), math.inf
        step = max(1, n_jobs // 100)
        next_report = step
        while self._done_jobs < n_jobs:
            t_arr = arrivals[i].tj.arrival_s if i < n_jobs else math.inf
            t_evt = heap[0][0] if heap else math.inf
            t = min(t_arr, t_evt)
            if t == math.inf:
                self._stalled("no event is left")
            self._advance(t)
            horizon = t + eps
            reasons: set[str] = set()
            real_event = False
            while heap and heap[0][0] <= horizon:
                _, _, kind, jid, token = heapq.heappop(heap)
                if kind == _WAKE:
                    if token == self._wake_token:
                        reasons.add("wakeup")
                    continue
                if kind == _TICK:
                    reasons |= pending
                    pending, tick_due = set(), math.inf
                    continue
                j = self._jobs[jid]
                if j.state != _RUNNING:
                    continue
                if kind == _COMPLETE and token == j.version:
                    self._complete(j, t)
                    reasons.add("completion")
                    real_event = True
                elif kind == _LEASE and token == j.lease_token:
                    if j.lease is not None and j.lease.expiry > t:  # coalesced a hair early: expired now
                        j.lease = Lease(j.id, j.held, j.lease.start, t)
                    reasons.add("lease")
                    real_event = True
            while i < n_jobs and arrivals[i].tj.arrival_s <= horizon:
                self._arrive(arrivals[i], t)
                i += 1
                reasons.add("arrival")
                real_event = True
            if not reasons:
                continue
            self._events += 1
            if tick > 0:  # batch to the next multiple of the interval
                due = math.ceil(t / tick - 1e-9) * tick  # the next multiple of the interval (t itself if on one)
                if due > horizon:
                    pending |= reasons
                    if due < tick_due:
                        tick_due = due
                        self._push(due, _TICK, "", 0)
                    self._note_busy(t)
                    continue
                reasons |= pending
                pending = set()
            if self._should_call(reasons):
                decision = self._call(t, reasons)
                if not real_event and not self._running and i >= n_jobs and decision.empty:
                    idle_calls += 1
                    if idle_calls >= _STALL_CALLS:
                        self._stalled(f"{_STALL_CALLS} wake-ups in a row changed nothing")
                else:
                    idle_calls = 0
            self._note_busy(t)
            if self.progress is not None and self._done_jobs >= next_report:
                self.progress(self._done_jobs / n_jobs)
                next_report = self._done_jobs + step
        return self._result(time.perf_counter() - t0)

    def _stalled(self, why: str) -> None:
        where = f"policy {self.policy_name!r} at t={self._now:g}: {why}"
        if self._waiting:
            ids = ", ".join(list(self._waiting)[:5])
            raise SimulationStalled(f"{where}, but {len(self._waiting)} job(s) wait (first: {ids}); "
                                    "the policy never grants them")  # fmt: skip
        raise SimulationStalled(f"{where} before every job finished")

    def _should_call(self, reasons: set[str]) -> bool:
        if "lease" in reasons or "wakeup" in reasons:
            return True
        if not self._waiting:
            return False
        return bool(self._free) or not self._passive

    def _advance(self, t: float) -> None:
        """Move the clock to t, integrating the contention of the interval just ended."""
        if t > self._now:
            if self._tdirty:
                self._retally()
            self._cint += (t - self._now) * max(1, len(self._active))
            self._now = t

    def _retally(self) -> None:
        """With tenancy levels: the set of apps with present jobs changed at `_now`. Bring each entity's
        integral up to now at the N it had, then give it its new N: the core's N for one app of it (as if
        alone under it) times its number of present apps."""
        t = self._now
        groups = list(self._gactive.values())
        size = self.topo.size
        for g in groups:
            g.integral = g.at(t)
            g.entitled += (t - g.t) * size * g.frac
            g.t = t
        n = tenancy_contention(self.cfg.tenancy, [g.rep for g in groups])
        for g in groups:
            g.n = n[g.rep.id] * g.count
            g.frac = 1.0 / n[g.rep.id]
        self._tdirty = False
        if not self._gchecked and any(g.count > 1 for g in groups):
            self._gchecked = True
            full = tenancy_contention(self.cfg.tenancy, [a.shell for a in self._active.values()])
            for a in self._active.values():
                assert a.group is not None
                if not math.isclose(full[a.id], a.group.n, rel_tol=1e-9):
                    raise RuntimeError(f"core/tenancy.py gives app {a.id!r} N = {full[a.id]:g}, not its share of "
                                       f"its entity's ({a.group.n:g}): it no longer splits an entity's fraction "
                                       "equally among its apps, which sim/engine.py's grouping relies on")  # fmt: skip

    def _activate(self, a: _A, t: float) -> None:
        """With tenancy levels: `a` has present jobs again (or for the first time) at t."""
        a.nint += (t - a.nt) * a.ncur  # the N it kept while it had none (nothing for a new app)
        g = a.group
        if g is None:
            key = self.cfg.tenancy.path(a.shell)[-1]
            g = a.group = self._groups.get(key) or self._groups.setdefault(key, _G(a.shell, key))
        if not g.count:  # a new busy period: a new book (as an app that comes back is a new app)
            g.integral = g.at(t)
            g.t = t
            g.frac = g.entitled = g.finished = 0.0
        a.base = g.at(t)
        g.count += 1
        if g.count == 1:
            self._gactive[id(g)] = g
        self._tdirty = True

    def _deactivate(self, a: _A, t: float) -> None:
        """With tenancy levels: `a`'s last present job ended at t; it keeps its N until it comes back."""
        g = a.group
        assert g is not None
        a.nint += g.at(t) - a.base
        a.nt, a.ncur = t, g.n
        g.count -= 1
        if not g.count:
            del self._gactive[id(g)]
        self._tdirty = True

    def _contention_of(self, a: _A, t: float) -> float:
        """With tenancy levels: `a`'s time-averaged effective N over [arrival, t] (its N now when t is its
        arrival). Call after _retally."""
        g = a.group
        if g is not None and a.present:
            return g.n if t <= a.arrival else (a.nint + g.at(t) - a.base) / (t - a.arrival)
        return a.ncur if t <= a.arrival else (a.nint + (t - a.nt) * a.ncur) / (t - a.arrival)

    # ----------------------------------------------------------------- job transitions
    def _arrive(self, j: _J, t: float) -> None:
        a = self._apps.get(j.app)
        if a is None:
            a = self._apps[j.app] = _A(j.app, j.tj.user, t, self._cint, self._app_total[j.app], j.tj.account)
        if not a.present:
            self._active[a.id] = a
            if self._nested:
                self._activate(a, t)
        a.present[j.id] = j
        a.snaps = None
        if self.cfg.calibration.enabled:
            self._claims.setdefault(a.owner, {})[j.id] = j.est0 / j.gpus
            self._claim_median[a.owner] = None
            self._recalibrate(a.owner)
            j.est = j.est0 * self._applied[a.owner]
        a.demand += j.gpus
        a.peak = max(a.peak, a.demand)
        j.state = _WAITING
        self._waiting[j.id] = j

    def _settle(self, j: _J, t: float) -> None:
        """Bring a running job's done/service up to t."""
        if t > j.t_base:
            start = max(j.t_base, j.progress_from)
            if t > start:
                j.done = min(j.true_work, j.done + j.rate * (t - start))
            j.service += len(j.held) * (t - j.t_base)
            j.t_base = t

    def _release(self, j: _J, t: float) -> None:
        self._settle(j, t)
        if self.cfg.record_allocations:
            self._allocs.append((j.id, j.held, j.lease.start if j.lease else t, t))
        self._free |= j.held
        j.holds.append((j.hold_from, t, len(j.held)))
        del self._running[j.id]
        del self._holdings[j.id]
        a = self._apps[j.app]
        a.running -= 1
        a.snaps = None
        j.held = frozenset()
        j.lease = None
        j.holding = None
        j.version += 1
        j.lease_token += 1

    def _complete(self, j: _J, t: float) -> None:
        self._release(j, t)
        j.done = j.true_work
        j.state = _DONE
        j.finish = t
        self._done_jobs += 1
        a = self._apps[j.app]
        del a.present[j.id]
        if self._index.pop(j.id, None) is not None:
            self._index_holes += 1
        a.demand -= j.gpus
        a.completed += 1
        a.finished_work += j.true_work
        if a.group is not None:
            a.group.finished += j.true_work
        a.finished_path = max(a.finished_path, max(0.0, j.tj.arrival_s - a.arrival) + j.true_work / j.gpus)
        if not a.present:
            del self._active[a.id]
            if self._nested:
                self._deactivate(a, t)
        if a.completed == a.total:
            a.finish = t
            if self._nested:
                a.contention = self._contention_of(a, t)
            else:
                a.contention = (self._cint - a.cint0) / (t - a.arrival) if t > a.arrival else 1.0
        cal = self.cfg.calibration
        if cal.enabled:
            claims = self._claims[a.owner]
            claims.pop(j.id, None)
            self._claim_median[a.owner] = None
            if not claims:  # only users with present jobs are passed over at every call
                del self._claims[a.owner]
        ratio = finished_ratio(j.est0, j.true_work) if cal.enabled else None
        if ratio is not None:
            self._histories[a.owner] = self._histories.get(a.owner, UserHistory()).add(ratio, j.true_work, cal.window)
            self._learned = calibrate(self._histories, cal)
            self._calibration = with_present(self._learned, self._histories, self._present(t), cal)
            for owner in {b.owner for b in self._active.values()}:
                self._recalibrate(owner)

    def _present(self, t: float) -> dict[str, Present]:
        """Every user's present jobs for core/calibration.py: the median claim of their present jobs and
        (first estimate, done at t) of each started one (running, or preempted and waiting again). The
        started jobs are given only for users with one past its estimate by more than the tolerance: for
        the others they cannot prove a raise (core/calibration.py, _proven_raise), and collecting them at
        every call cost a fifth of a baseline's simulation time."""
        started: dict[str, list[tuple[float, float]]] = {}
        cal = self.cfg.calibration
        if cal.running:
            tol = cal.raise_above
            runs = []
            over = {self._apps[j.app].owner for j in self._resumable_over.values()}
            for j in self._running.values():
                begin = max(j.t_base, j.progress_from)
                done = min(j.true_work, j.done + j.rate * (t - begin)) if t > begin else j.done
                owner = self._apps[j.app].owner
                runs.append((owner, j.est0, done))
                if done > j.est0 * tol:
                    over.add(owner)
            if over:
                for owner, est, done in runs:
                    if owner in over:
                        started.setdefault(owner, []).append((est, done))
                for j in self._resumable.values():
                    owner = self._apps[j.app].owner
                    if owner in over:
                        started.setdefault(owner, []).append((j.est0, j.done))
        out: dict[str, Present] = {}
        for user, claims in self._claims.items():
            if not claims:
                continue
            m = self._claim_median[user]
            if m is None:
                m = self._claim_median[user] = Present.of(claims.values()).claim
            out[user] = Present(m, tuple(started.get(user, ())))
        return out

    def _refresh_calibration(self, t: float) -> None:
        """Before a policy call: what present jobs say (overruns of started jobs, the peer floor), applied
        to every user whose factor moved past the tolerance. Without those rules, or while they change
        nothing, the factors are the finished jobs' alone, as they were applied at the last completion."""
        cal = self._calibration
        self._calibration = with_present(self._learned, self._histories, self._present(t), self.cfg.calibration)
        if self._calibration is cal:
            return
        for owner in {b.owner for b in self._active.values()}:
            self._recalibrate(owner)

    def _recalibrate(self, user: str) -> None:
        """Apply `user`'s current factor to their unfinished jobs if it moved past the tolerance."""
        f = self._calibration.factor(user)
        old = self._applied.get(user)
        if old is not None and abs(f - old) <= CALIBRATION_TOLERANCE * old:
            return
        self._applied[user] = f
        if old is None:
            return
        for a in self._active.values():
            if a.owner != user:
                continue
            a.snaps = None
            for j in a.present.values():
                j.est = j.est0 * f  # bumped again at the next snapshot if the job outlived it
                j.snap = None

    def _preempt(self, j: _J, t: float) -> None:
        self._release(j, t)
        saved = self._saved(j, t, j.done)
        if saved < j.done:  # it restarts from its last checkpoint
            j.lost += j.done - saved
            self._lost += j.done - saved
            j.done = saved
            if j.reported is not None and j.reported * j.true_work > saved:
                j.reported = saved / j.true_work  # what it reports when it runs again
        self._resumable[j.id] = j
        if j.done > j.est0 * self.cfg.calibration.raise_above:
            self._resumable_over[j.id] = j
        j.state = _WAITING
        j.needs_restart = True
        j.preemptions += 1
        j.snap = None
        self._waiting[j.id] = j
        self._preemptions += 1

    def _saved(self, j: _J, t: float, done: float) -> float:
        """Of `done`, the true work of running `j` at `t`, what it keeps if preempted then: all of it when it
        checkpoints at the warning, what it had when this run began when it never checkpoints (that is 0:
        each of its runs starts from zero), else the work at its last checkpoint of this run (one every
        `ckpt` seconds of progress, the first `ckpt` seconds after the restart cost)."""
        every = j.ckpt
        if every is None:
            return done
        if every == math.inf or t <= j.progress_from:
            return min(done, j.run_done0)
        saves = math.floor((t - j.progress_from) / every)
        return min(done, j.run_done0 + j.rate * saves * every)

    @staticmethod
    def _typed(j: _J) -> Job:
        """A Job carrying only what :func:`gang_speed` reads of `j` (its per-type speeds)."""
        return Job(j.id, j.app, j.gpus, 1.0, speeds=j.tj.speeds)

    def _start(self, j: _J, gpus: frozenset[int], expiry: float, t: float) -> None:
        del self._waiting[j.id]
        self._resumable.pop(j.id, None)
        self._resumable_over.pop(j.id, None)
        j.snap = None
        j.state = _RUNNING
        j.held = gpus
        self._free -= gpus
        self._running[j.id] = j
        a = self._apps[j.app]
        a.running += 1
        a.snaps = None
        j.holding = self._holdings[j.id] = Holding(j.app, gpus, True)
        j.rate = len(gpus) * j.factors[self.topo.level_of(gpus)]
        if self.topo.heterogeneous:  # x its speed on that GPU type (core/gpu_types.py)
            j.rate *= gang_speed(self.topo, self._typed(j), gpus)
        j.t_base = j.hold_from = t
        j.progress_from = t + (self.cfg.restart_cost_s if j.needs_restart else 0.0)
        j.run_done0 = j.done
        j.starts += 1
        if j.starts == 1:
            j.first_start = t
        j.version += 1
        self._push(j.progress_from + (j.true_work - j.done) / j.rate, _COMPLETE, j.id, j.version)
        j.lease = Lease(j.id, gpus, t, expiry)
        self._push_lease(j, expiry)

    def _push_lease(self, j: _J, expiry: float) -> None:
        j.lease_token += 1
        if expiry != math.inf:
            self._push(expiry, _LEASE, j.id, j.lease_token)

    def _push(self, t: float, kind: int, jid: str, token: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, jid, token))

    # ----------------------------------------------------------------- policy calls
    def _snapshot(self, j: _J, t: float) -> Job:
        if j.state == _RUNNING:
            start = max(j.t_base, j.progress_from)
            done = min(j.true_work, j.done + j.rate * (t - start)) if t > start else j.done
            service = j.service + len(j.held) * (t - j.t_base)
            every = self.cfg.progress_interval_s
            if every > 0 and t >= j.t_base + every:  # the last report of this run, at t_base + k x every
                at = j.t_base + math.floor((t - j.t_base) / every) * every
                at_done = min(j.true_work, j.done + j.rate * (at - start)) if at > start else j.done
                j.reported = at_done / j.true_work
        else:
            if j.snap is not None:
                return j.snap
            done, service = j.done, j.service
        j.est = bumped(j.est, done)
        seen_done, seen_work = done, j.est
        if j.reported is not None:
            seen_done, seen_work = refine_by_progress(j.est, done, j.reported)
        unsaved = 0.0
        if j.ckpt is not None and j.state == _RUNNING and self.cfg.tell_unsaved:
            unsaved = min(seen_done, done - self._saved(j, t, done))
        snap = Job(j.id, j.app, j.gpus, seen_work, seen_done, j.profile, j.gpn, j.nodes, j.elastic, True,
                   j.tj.arrival_s, service, None, unsaved, j.tj.speeds)  # fmt: skip
        if j.state == _WAITING:
            j.snap = snap
        return snap

    def _state(self, t: float) -> tuple[ClusterState, Mapping[str, Job]]:
        """The policy's view, and its jobs by id for the decision's check. The hot loop of the simulator:
        waiting jobs reuse their cached snapshot, and the jobs' index changes only where jobs moved."""
        index = self._index
        if self._index_holes * 2 > len(index):
            # the policies copy it at every call (check_state), and dict.copy clones the table only while
            # at most a third of it is deleted entries (else it inserts entry by entry, 6x slower with
            # 2,600 jobs): compact it then, order kept
            index = self._index = dict(index)
            self._index_holes = 0
        apps: list[App] = []
        n_now = max(1, len(self._active))
        nested = self._nested
        if self._tdirty:
            self._retally()
        snapshot = self._snapshot
        for a in self._active.values():
            # waiting jobs first, then running ones, each in arrival order: the waiting snapshots are the
            # same objects call after call, so the core's per-app running sums (FairnessModel.facts) keep
            # them as a prefix and recompute only the running jobs, whose done work moved
            snaps = a.snaps
            if snaps is None:
                snaps = a.snaps = tuple(
                    j.snap or snapshot(j, t) for j in a.present.values() if j.state == _WAITING
                )
                for s in snaps:
                    index[s.id] = s
                a.runners = tuple(j for j in a.present.values() if j.state == _RUNNING) if a.running else ()
            if a.running:
                now_running = tuple(snapshot(j, t) for j in a.runners)
                for s in now_running:
                    index[s.id] = s
                snaps += now_running
            if nested:
                contention = self._contention_of(a, t)
            else:
                contention = (self._cint - a.cint0) / (t - a.arrival) if t > a.arrival else n_now
            apps.append(App(a.id, a.owner, a.arrival, snaps, contention, a.finished_work, a.peak,
                            a.finished_path, a.account))
        leases = tuple(j.lease for j in self._running.values() if j.lease is not None)
        free = frozenset(self._free)
        books = {g.key: g.book(t, self.topo.size) for g in self._gactive.values()} if nested else {}
        state = ClusterState(self.topo, t, free, leases, tuple(apps), self.topo.size, job_index=index,
                             tenancy=self.cfg.tenancy, tenant_books=books)
        return state, index

    def _call(self, t: float, reasons: set[str]) -> Decision:
        cal = self.cfg.calibration
        if cal.enabled and (cal.running or cal.peer_floor):
            self._refresh_calibration(t)
        state, jobs = self._state(t)
        self._calls += 1
        if self._calls % _COLLECT_EVERY_CALLS == 0:
            gc.collect()
        decision = self.policy.schedule(PolicyContext(state, frozenset(reasons)))  # collector paused (run)
        if self.cfg.validate:
            check_decision(self.policy_name, decision, t, self.topo, state.free, self._holdings, jobs)
        for p in decision.preemptions:
            self._preempt(self._jobs[p.job_id], t)
        for r in decision.renewals:
            j = self._jobs[r.job_id]
            assert j.lease is not None
            j.lease = Lease(j.id, j.held, j.lease.start, r.lease_expiry)
            self._push_lease(j, r.lease_expiry)
        for g in decision.grants:
            self._start(self._jobs[g.job_id], frozenset(g.gpus), g.lease_expiry, t)
        wake = self.policy.next_wakeup(t)
        if wake is not None and wake > t and wake != math.inf:
            self._wake_token += 1
            self._push(wake, _WAKE, "", self._wake_token)
        if self.observer is not None:
            self.observer(self, decision)
        return decision

    def _note_busy(self, t: float) -> None:
        busy = self.topo.size - len(self._free)
        if not self._busy_vals or self._busy_vals[-1] != busy:
            if self._busy_times and self._busy_times[-1] == t:
                self._busy_vals[-1] = busy
            else:
                self._busy_times.append(t)
                self._busy_vals.append(busy)

    # ----------------------------------------------------------------- result
    def _result(self, wall: float) -> SimResult:
        jobs = tuple(
            JobResult(j.id, j.app, j.gpus, j.profile, j.tj.arrival_s, j.first_start, j.finish, j.true_work,
                      j.est0, j.service, j.starts, j.preemptions, tuple(j.holds), j.lost, j.tj.speeds)  # fmt: skip
            for j in self._arrivals
        )
        work: dict[str, float] = {}
        for j in self._arrivals:
            work[j.app] = work.get(j.app, 0.0) + j.true_work
        apps = tuple(
            AppResult(a.id, a.owner, a.arrival, a.finish, max(1.0, a.contention), a.peak, work[a.id], a.total,
                      a.account)
            for a in self._apps.values()
        )
        return SimResult(
            policy=self.policy_name,
            topology=self.topo,
            config=self.cfg,
            jobs=jobs,
            apps=apps,
            util_times=tuple(self._busy_times),
            util_busy=tuple(self._busy_vals),
            preemptions=self._preemptions,
            lost_work=self._lost,
            events=self._events,
            policy_calls=self._calls,
            wall_s=wall,
            allocations=tuple(self._allocs),
        )


def simulate(
    trace: Trace | Sequence[TraceJob],
    topology: Topology,
    policy: Policy,
    config: SimConfig | None = None,
    progress: Callable[[float], None] | None = None,
) -> SimResult:
    """Run `policy` over `trace` on `topology` (see :class:`Simulator`)."""
    return Simulator(trace, topology, policy, config, progress=progress).run()
