"""Estimate calibration: learn how far a user's estimates miss, from their finished jobs and at once from
the jobs that run past them, and bound what a user with no such evidence can claim.

Why: Themis's rho divides by T_id, and T_id comes from the work estimates (users' ``--themis-estimate`` or
time limits). Users overshoot, and the overshoot is a bias shared by all of one user's jobs: each app's
elapsed time is then divided by a T_id that is too long by that user's average overshoot, so apps look
better off than they are. Progress reports (:func:`~themis_slurm.core.workload.refine_by_progress`)
correct only jobs that have run; most of a sweep's work is in jobs that have not. Measured on the 84-app
paper workload on 64 GPUs (docs/eval/discussion.md, "Learning the bias"): uniform 1-3x over-estimates
raised Themis's max rho from 1.19 to 1.56 (1.46 with progress reports); scaling every unfinished job's
estimate by the median over finished jobs of true work / estimate brought it to 1.25 (1.17 with reports).

Under-estimation is the other direction, and the one that buys GPUs: a job claiming ``--themis-est=1m``
for five minutes makes its app's T_id five times too short, its virtual deadlines (the leftover's order)
five times too early and its rho grow five times too fast while it waits. Measured before the rules on
running jobs and on peers below (benchmarks/estimate_gaming.py): a new user's 16 such jobs against an
honest user's 16 equal ones on 16 GPUs held 81% of the GPUs in the first minute (the issue's real cluster:
93%), because nothing limited a claim until 10 of the liar's jobs had completed, and every one outran it.

The rule, the same for themisd and the simulator (each job's **ratio** is its true work over the estimate
it was first given, the user's word, in ideal GPU-seconds):

* **Finished jobs** (on Slurm: ended COMPLETED, with their attained service; cancelled and failed jobs
  say nothing about their estimate) join their user's history of the last ``window``.
* **Started jobs that have not finished** are evidence at once (``running``): a job that has done ``d``
  of an estimate ``e`` has a ratio of *at least* d / e, a censored sample. Its lower bound (weighted by
  ``d``) joins the finished samples for the raising test below, never for lowering. Every value is at
  most the job's true ratio, so the weighted median of the pool is at most what the true ratios would
  give: a raise from it is proven by work already done, and it needs no completion. A liar whose 13
  running jobs pass their 1-minute claims has, 90 s into them, a pooled median of 1.5 and at 5 minutes
  of 5: their waiting jobs' estimates follow (/ the 1.25 tolerance) at every round, not after 10 jobs.
  A raise only: it applies when it is above what the user's finished jobs (or the cluster's prior, for a
  user without them) already give. A user whose started jobs prove more than their finished ones
  **loses the shield of that history** for the peer floor below: their history said their claims were
  good, their present jobs say they are not, so their claims count as a newcomer's (measured: a liar
  that first ran 10 one-minute jobs with exact estimates and then claimed one minute for five was, 95 s
  into those jobs, counted at 90 s, rising with their run time to 300 s at 5 minutes; it is now counted
  at 300 s from 95 s on).
* A user with at least ``min_jobs`` finished jobs gets **their own factor** from two medians of their
  ratios: the plain one and the work-weighted one (each job weighs its true work). Medians, not means:
  one job that crashed early and exited 0 moves them little. An under-estimating user (weighted median,
  over the pool with their started jobs when it holds ``min_jobs``, above ``raise_above``, 1.25) gets
  weighted median / raise_above: their estimates are raised until they are short by at most that
  tolerance. Weighted, so that many tiny honest jobs cannot hide the long ones whose estimates lie.
  Otherwise an over-estimating user (plain median of finished jobs below 1) gets that median: lowering
  only ever helps the user it applies to, so it needs no defence against its own user, and the plain
  median is the steadier one (measured: with lognormal(0.5) errors the weighted one cost 0.2 of max
  rho, docs/eval/design-journal.md). The tolerance keeps honest users whose ratios exceed 1 only through Themis's
  own preemptions (work redone after a requeue) out of it.
* A user without a factor of their own gets the **cluster's prior**: the configured ``prior``, else the
  learned one. Learned: the median over users of each user's median ratio (one vote per user, so one
  user's estimates cannot move everyone else's) once ``min_jobs`` jobs have finished in all, capped at
  1; and above 1 when most users who have their own factor are raised (the median of those factors),
  provided at least ``prior_users`` of them vote: a cluster where users typically understate treats a
  newcomer as typical, but one or two under-estimating users never raise anyone else's estimates.
* **The claim of a user without a factor of their own is bounded by their peers'** (``peer_floor``; and
  of a user whose started jobs contradict their history, above): their words count for nothing yet, so
  when their median claimed run time is more than
  ``peer_tolerance`` (2) times below the lowest of the other present users' median claims (one value per
  user; claims compared as given, before anyone's calibration, like with like), it is raised to that
  lowest claim, and then scaled by the cluster's prior.
  The issue's liar (1 minute claimed against 5) is counted at 5 minutes; a claim within the tolerance
  wins at most what being that much shorter wins, until the user's started jobs prove more (above) or
  ``min_jobs`` of them finish. A user *proven* short (their own factor raises) who still claims shorter
  than every other user loses the tolerance: they are raised to that lowest claim, at most to their full
  correction (weighted median, not / raise_above). When both rules apply (a newcomer, or a contradicted
  history, whose started jobs prove a raise), the larger counts: before, the proven raise replaced the
  newcomer's floor, and a liar counted at 5 minutes from its first round fell to 90 s once its jobs had
  run 90 s (the evidence of its lie lowered its estimates). The lowest of the peers, not their median, and a
  tolerance of 2: a newcomer whose jobs are honestly short is raised only when they claim much shorter
  than everybody. In the evaluation's workloads every app is its own user, so a newcomer all its life:
  with a tolerance of 1.25, 52 of its runs moved (Themis's max rho by -0.07 to +0.10, from apps whose
  median job was 1.3-1.7 times shorter than the next app's); with 2, 16 runs moved, Themis's max rho in
  three (contention 2: 1.046 -> 1.087; docs/eval/design-journal.md). A liar who runs a second account with short
  claims of its own can hide behind it (that account's jobs must exist and run).

**The bound** (tested as properties in tests/unit/core/test_calibration_gaming.py), with ``floor`` the
lowest of the other present users' median claims, ``prior`` the cluster's prior and ``own`` the user's
factor from their evidence (finished jobs, raised by started ones), each user is seen, in median:

1. without evidence of their own (no factor from finished jobs, no raise from started ones): no shorter
   than prior x floor / peer_tolerance;
2. without a factor from finished jobs, or with one their started jobs prove too low, and claiming more
   than peer_tolerance times below the floor: no shorter than prior x floor;
3. proven short (own > 1) and claiming below the floor: no shorter than min(floor, claim x own x
   raise_above);

and *evidence never lowers*: the factor with a user's started jobs is never below the factor without
them (same finished jobs, same claims). What it does not bound: the order of equal work. A claim within
the tolerances is the user's word until their jobs run past it, and a job Themis has started keeps its
GPUs to the end of its lease and is renewed unless a worse-off app outbids a restart; so a short claim can
win the first lease (81-85% of the first minute with one app per job), and in waves of equal jobs, where
each wave's GPUs go mostly to one user, the user who wins two of the first three waves holds 58-66% of the
first 15 minutes, as the honest user who asks first does (benchmarks/estimate_gaming.py). Any claim below
the others' can win such a tie, so no tolerance above 1 closes it; a claim 1.2 times too short (within
both tolerances) is never caught. With tenancy levels (user, app) each user's quota holds every case to
at most 53% of the first 15 minutes.

A factor below 1 lowers a user's own estimates, and the caller floors the result where it has a floor
(themisd: ``estimates.min_s``): calibration never gives a user an estimate they could not have asked for
themselves. A factor above 1 raises them, capped by the caller where it knows a ceiling (themisd: the
job's time limit, past which Slurm ends it, and ``estimates.max_s``). Pure: the caller keeps the
histories (themisd in its store, the simulator in memory) and says what is present each round.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median

#: Where a user's factor came from (for ``themis explain``, the log and the simulator's bookkeeping):
#: their finished jobs, their running jobs' overruns, the cluster's prior, the peers' claims, or nothing.
FROM_USER, FROM_RUNNING, FROM_CLUSTER, FROM_PEERS, UNCALIBRATED = "user", "running", "cluster", "peers", "none"
#: The smallest factor: estimates are never scaled below this fraction (callers floor them further).
MIN_FACTOR = 0.01
#: The largest factor: estimates are never raised above this multiple (callers cap them further).
MAX_FACTOR = 100.0


def _whole(name: str, v: object, least: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < least:
        raise ValueError(f"calibration {name} must be a whole number >= {least}, got {v!r}")


@dataclass(frozen=True)
class CalibrationConfig:
    """Knobs of estimate calibration (themis.yaml ``estimates.calibration*``; ``themis simulate``).

    min_jobs: finished jobs a user needs before their own median is used (and the cluster needs before
        the cluster factor is); fewer, and one early exit would swing the factor. Started jobs count
        towards it for the raising test only.
    window: how many of a user's most recent finished jobs count, so that the factor follows a user who
        changes their habits (or their code).
    raise_above: a user whose median ratio is above this has their estimates raised by median / raise_above
        (under-estimates are corrected down to this tolerance); ``math.inf`` never raises.
    running: started, unfinished jobs are censored evidence for raising at once (module docstring).
    prior: the factor of users without their own (None: learned from the cluster's users).
    prior_users: users with their own factor needed before the learned prior may raise estimates.
    peer_floor: a user without their own factor (or proven short) claims no shorter than the other user
        with the shortest claims (beyond peer_tolerance, for the user without evidence).
    peer_tolerance: how many times shorter than the shortest other user's a claim without evidence may be.
    """

    enabled: bool = True
    min_jobs: int = 10
    window: int = 50
    raise_above: float = 1.25
    running: bool = True
    prior: float | None = None
    prior_users: int = 3
    peer_floor: bool = True
    peer_tolerance: float = 2.0

    def __post_init__(self) -> None:
        _whole("min_jobs", self.min_jobs, 1)
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < self.min_jobs:
            raise ValueError(f"calibration window must be a whole number >= min_jobs ({self.min_jobs}), "
                             f"got {self.window!r}")
        if isinstance(self.raise_above, bool) or not isinstance(self.raise_above, int | float) or \
                not self.raise_above >= 1:
            raise ValueError(f"calibration raise_above must be a number >= 1 (inf: never raise), "
                             f"got {self.raise_above!r}")
        p = self.prior
        if p is not None and (isinstance(p, bool) or not isinstance(p, int | float) or
                              not MIN_FACTOR <= p <= MAX_FACTOR):
            raise ValueError(f"calibration prior must be a number in [{MIN_FACTOR}, {MAX_FACTOR:g}] or None "
                             f"(learned), got {p!r}")
        _whole("prior_users", self.prior_users, 1)
        t = self.peer_tolerance
        if isinstance(t, bool) or not isinstance(t, int | float) or not 1 <= t < math.inf:
            raise ValueError(f"calibration peer_tolerance must be a number >= 1, got {t!r}")
        for name in ("enabled", "running", "peer_floor"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"calibration {name} must be true or false, got {getattr(self, name)!r}")

    def factor(self, median: float, weighted: float) -> float:
        """A user's factor from their median ratio and their work-weighted median ratio (module docstring)."""
        if weighted > self.raise_above:
            return self.raised(weighted)
        if median < 1.0:
            return max(median, MIN_FACTOR)
        return 1.0

    def raised(self, weighted: float) -> float:
        """The factor of a user whose work-weighted median ratio is `weighted` (> raise_above)."""
        return min(weighted / self.raise_above, MAX_FACTOR)


def finished_ratio(estimate: float, work: float) -> float | None:
    """True work / estimate of a finished job, or None when either is unusable (never counted)."""
    if not (math.isfinite(estimate) and estimate > 0 and math.isfinite(work) and work >= 0):
        return None
    return work / estimate


def censored_ratio(estimate: float, done: float) -> float | None:
    """The least ratio a started, unfinished job can end with (done / estimate), or None when it has done
    nothing yet or a number is unusable: it proves nothing then."""
    if not (math.isfinite(estimate) and estimate > 0 and math.isfinite(done) and done > 0):
        return None
    return done / estimate


def weighted_median(samples: Sequence[tuple[float, float]]) -> float:
    """The smallest value whose samples, with all smaller ones, hold at least half the weight (value,
    weight pairs; weights >= 0). When every weight is 0, the plain median of the values."""
    total = sum(w for _, w in samples)
    if not samples:
        return math.nan
    if total <= 0:
        return median(v for v, _ in samples)
    acc = 0.0
    for v, w in sorted(samples):
        acc += w
        if acc >= total / 2:
            return v
    return max(v for v, _ in samples)  # float rounding: never reached in exact arithmetic


@dataclass(frozen=True, slots=True)
class UserHistory:
    """(ratio, true work) of one user's most recent finished jobs, oldest first, with the median ratio and
    the work-weighted median ratio."""

    samples: tuple[tuple[float, float], ...] = ()
    median: float = field(default=math.nan, compare=False)
    weighted: float = field(default=math.nan, compare=False)

    @classmethod
    def of(cls, samples: Iterable[tuple[float, float]], window: int) -> UserHistory:
        kept = tuple(samples)[-window:]
        return cls(kept, median(r for r, _ in kept) if kept else math.nan, weighted_median(kept))

    def add(self, ratio: float, work: float, window: int) -> UserHistory:
        """This history with one more finished job (the oldest falls out past `window`)."""
        return UserHistory.of((*self.samples, (ratio, work)), window)


@dataclass(frozen=True, slots=True)
class Present:
    """One user's unfinished jobs at this instant, as the caller sees them.

    claim: the median claimed run time in seconds of the user's present jobs (each job's estimate as
        given, before calibration; :meth:`of` computes it); nan when there is none.
    started: (first estimate, done) in ideal GPU-seconds of each job that has run and not finished.
    """

    claim: float = math.nan
    started: tuple[tuple[float, float], ...] = ()

    @classmethod
    def of(cls, claims: Iterable[float], started: Iterable[tuple[float, float]] = ()) -> Present:
        """From every present job's claimed run time (unusable ones ignored) and the started jobs."""
        usable = [x for x in claims if _usable(x)]
        return cls(median(usable) if usable else math.nan, tuple(started))


@dataclass(frozen=True)
class Calibration:
    """The factor of every user with evidence of their own, the cluster's prior for the rest (1: none),
    and the factors the peer floor set for users without evidence (module docstring)."""

    by_user: Mapping[str, float] = field(default_factory=dict)
    cluster: float = 1.0
    counts: Mapping[str, int] = field(default_factory=dict)  # finished jobs behind each user's history
    peers: Mapping[str, float] = field(default_factory=dict)  # users without evidence whose claims were raised
    running: frozenset[str] = frozenset()  # users whose factor their running jobs' overruns raised

    def factor(self, user: str) -> float:
        """What to multiply `user`'s estimates by (in [MIN_FACTOR, MAX_FACTOR])."""
        f = self.peers.get(user)
        if f is not None:
            return f
        return self.by_user.get(user, self.cluster)

    def source(self, user: str) -> str:
        """FROM_USER, FROM_RUNNING, FROM_CLUSTER, FROM_PEERS or UNCALIBRATED: where :meth:`factor` comes from."""
        if user in self.peers:
            return FROM_PEERS
        if user in self.by_user:
            return FROM_RUNNING if user in self.running else FROM_USER
        return FROM_CLUSTER if self.cluster != 1.0 else UNCALIBRATED


NONE = Calibration()


def calibrate(histories: Mapping[str, UserHistory], cfg: CalibrationConfig,
              present: Mapping[str, Present] | None = None) -> Calibration:
    """Every user's factor from their finished jobs and, when given, from what is `present` (see the module
    docstring for the rule). Same as ``with_present(calibrate(histories, cfg), histories, present, cfg)``:
    a caller that recalibrates more often than jobs finish keeps the first part."""
    if not cfg.enabled:
        return NONE
    by_user: dict[str, float] = {}
    medians: list[float] = []
    total = 0
    counts: dict[str, int] = {}
    for user, h in histories.items():
        n = min(len(h.samples), cfg.window)
        if n == 0:
            continue
        if len(h.samples) > cfg.window:
            h = UserHistory.of(h.samples, cfg.window)
        total += n
        counts[user] = n
        medians.append(h.median)
        if n >= cfg.min_jobs:
            by_user[user] = cfg.factor(h.median, h.weighted)
    if cfg.prior is not None:
        cluster = float(cfg.prior)
    else:
        cluster = max(min(1.0, median(medians)), MIN_FACTOR) if total >= cfg.min_jobs else 1.0
        if len(by_user) >= cfg.prior_users:
            typical = median(by_user.values())
            if typical > 1.0:
                cluster = typical
    learned = Calibration(by_user, cluster, counts)
    return with_present(learned, histories, present, cfg) if present else learned


def with_present(learned: Calibration, histories: Mapping[str, UserHistory],
                 present: Mapping[str, Present] | None, cfg: CalibrationConfig) -> Calibration:
    """`learned` (from :func:`calibrate` on the same histories) with this instant's evidence: raises proven
    by started jobs, and the peer floor for users without evidence of their own."""
    if not cfg.enabled or not present:
        return learned
    by_user = dict(learned.by_user)
    running: set[str] = set()
    if cfg.running:
        for user, p in present.items():
            proven = _proven_raise(histories.get(user), p, cfg)
            if proven is not None and proven > learned.factor(user):  # a raise, never below the prior
                by_user[user] = proven
                running.add(user)
    peers: dict[str, float] = {}
    if cfg.peer_floor:
        typical = {u: p.claim for u, p in present.items() if _usable(p.claim)}
        if len(typical) >= 2:
            lowest = sorted(typical.values())[:2]
            for user, mine in typical.items():
                floor = lowest[1] if mine == lowest[0] else lowest[0]  # the lowest of the *others*
                f = _peer_factor(mine, floor, by_user.get(user), user in running, learned.cluster, cfg)
                if f is not None:
                    peers[user] = f
    if not running and not peers:
        return learned
    return Calibration(by_user, learned.cluster, learned.counts, peers, frozenset(running))


def _peer_factor(mine: float, floor: float, own: float | None, contradicted: bool, cluster: float,
                 cfg: CalibrationConfig) -> float | None:
    """The factor the peer floor sets for a user claiming `mine` (median) when the lowest other user's
    median claim is `floor`, or None when it sets none (module docstring). `own` is the user's factor from
    their evidence (finished jobs, raised by started ones), `contradicted` whether their started jobs
    proved more than their finished ones did (or the prior)."""
    found: list[float] = []
    # no evidence of their own, or a history their running jobs prove wrong: their word counts for no
    # less than the peers' (beyond the tolerance), as a newcomer's
    if (own is None or contradicted) and floor > mine * cfg.peer_tolerance:
        found.append(min(max(cluster * floor / mine, MIN_FACTOR), MAX_FACTOR))
    if own is not None and own > 1.0 and mine * own < floor:  # proven short, and still claiming shortest
        found.append(min(floor / mine, own * cfg.raise_above, MAX_FACTOR))
    if not found:
        return None
    f = max(found)
    return f if own is None or f > own else None  # evidence of a lie never lowers the estimates it raised


def _proven_raise(history: UserHistory | None, p: Present, cfg: CalibrationConfig) -> float | None:
    """The raise a user's finished jobs and started jobs prove together (module docstring), or None."""
    censored = [(r, d) for e, d in p.started if (r := censored_ratio(e, d)) is not None]
    if not censored or not any(r > cfg.raise_above for r, _ in censored):
        return None
    finished = history.samples[-cfg.window:] if history is not None else ()
    pooled = [*finished, *censored]
    if len(pooled) < cfg.min_jobs:
        return None
    wm = weighted_median(pooled)
    return cfg.raised(wm) if wm > cfg.raise_above else None


def _usable(x: float) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def calibrated_work(work: float, factor: float) -> float:
    """The estimate a policy should see: `work` x `factor` (callers floor or cap it where they can)."""
    return work * factor
