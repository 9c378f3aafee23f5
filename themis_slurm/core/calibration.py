"""Estimate calibration: learn from a user's finished jobs how far their estimates overshoot.

Why: Themis's rho divides by T_id, and T_id comes from the work estimates (users' ``--themis-estimate`` or
time limits). Users overshoot, and the overshoot is a bias shared by all of one user's jobs: each app's
elapsed time is then divided by a T_id that is too long by that user's average overshoot, so apps look
better off than they are. Progress reports (:func:`~themis_slurm.core.workload.refine_by_progress`)
correct only jobs that have run; most of a sweep's work is in jobs that have not. Measured on the 84-app
paper workload on 64 GPUs (docs/eval/discussion.md, "Learning the bias"): uniform 1-3x over-estimates
raised Themis's max rho from 1.19 to 1.56 (1.46 with progress reports); scaling every unfinished job's
estimate by the median over finished jobs of true work / estimate brought it to 1.25 (1.17 with reports).

The rule, the same for themisd and the simulator:

* A finished job's **ratio** is the work it really did divided by the estimate it was first given (ideal
  GPU-seconds; on Slurm, attained service of a job that ended COMPLETED; cancelled and failed jobs say
  nothing about their estimate and are not counted).
* Over a user's last ``window`` finished jobs, once they have at least ``min_jobs`` of them, two medians
  of the ratio: the plain one and the work-weighted one (each job weighs its true work). Medians, not
  means: one job that crashed early and exited 0 moves them little.
* An under-estimating user (weighted median above ``raise_above``, 1.25) gets weighted median /
  raise_above as their **factor**: their estimates are raised until they are short by at most that
  tolerance. Weighted, so that many tiny honest jobs cannot hide the long ones whose estimates lie.
  Otherwise an over-estimating user (plain median below 1) gets that median: lowering only ever helps the
  user it applies to, so it needs no defence against its own user, and the plain median is the steadier
  one (measured: with lognormal(0.5) errors the weighted one cost 0.2 of max rho, docs/design.md). Under-estimation is the dangerous direction: a job claiming
  ``--themis-est=1m`` for ten hours makes its waiting app look hundreds of times worse off than it is, and
  such an app would win every auction (a running job that passes its estimate is stretched, see
  ``OVERRUN_FRACTION``, but the app's waiting jobs are not). The tolerance keeps honest users whose
  ratios exceed 1 only through Themis's own preemptions (work redone after a requeue) out of it.
* A user with fewer finished jobs gets the **cluster factor**: the median over users of each user's own
  median (one vote per user, so one user's estimates cannot move everyone else's), once at least
  ``min_jobs`` jobs have finished in all. It only ever lowers estimates (at most 1): one user's
  under-estimates are theirs to answer for.

A factor below 1 lowers a user's own estimates, and the caller floors the result where it has a floor
(themisd: ``estimates.min_s``): calibration never gives a user an estimate they could not have asked for
themselves. A factor above 1 raises them, capped by the caller where it knows a ceiling (themisd: the
job's time limit, past which Slurm ends it, and ``estimates.max_s``). Pure: the caller keeps the
histories (themisd in its store, the simulator in memory).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median

#: Where a user's factor came from (for ``themis explain`` and the simulator's bookkeeping).
FROM_USER, FROM_CLUSTER, UNCALIBRATED = "user", "cluster", "none"
#: The smallest factor: estimates are never scaled below this fraction (callers floor them further).
MIN_FACTOR = 0.01
#: The largest factor: estimates are never raised above this multiple (callers cap them further).
MAX_FACTOR = 100.0


@dataclass(frozen=True)
class CalibrationConfig:
    """Knobs of estimate calibration (themis.yaml ``estimates.calibration``; ``themis simulate``).

    min_jobs: finished jobs a user needs before their own median is used (and the cluster needs before
        the cluster factor is); fewer, and one early exit would swing the factor.
    window: how many of a user's most recent finished jobs count, so that the factor follows a user who
        changes their habits (or their code).
    raise_above: a user whose median ratio is above this has their estimates raised by median / raise_above
        (under-estimates are corrected down to this tolerance); ``math.inf`` never raises.
    """

    enabled: bool = True
    min_jobs: int = 10
    window: int = 50
    raise_above: float = 1.25

    def __post_init__(self) -> None:
        if isinstance(self.min_jobs, bool) or not isinstance(self.min_jobs, int) or self.min_jobs < 1:
            raise ValueError(f"calibration min_jobs must be a whole number >= 1, got {self.min_jobs!r}")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < self.min_jobs:
            raise ValueError(f"calibration window must be a whole number >= min_jobs ({self.min_jobs}), "
                             f"got {self.window!r}")
        if isinstance(self.raise_above, bool) or not isinstance(self.raise_above, int | float) or \
                not self.raise_above >= 1:
            raise ValueError(f"calibration raise_above must be a number >= 1 (inf: never raise), "
                             f"got {self.raise_above!r}")

    def factor(self, median: float, weighted: float) -> float:
        """A user's factor from their median ratio and their work-weighted median ratio (module docstring)."""
        if weighted > self.raise_above:
            return min(weighted / self.raise_above, MAX_FACTOR)
        if median < 1.0:
            return max(median, MIN_FACTOR)
        return 1.0


def finished_ratio(estimate: float, work: float) -> float | None:
    """True work / estimate of a finished job, or None when either is unusable (never counted)."""
    if not (math.isfinite(estimate) and estimate > 0 and math.isfinite(work) and work >= 0):
        return None
    return work / estimate


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


@dataclass(frozen=True)
class Calibration:
    """The factor of every user with enough history, and the cluster's for the rest (1: none yet)."""

    by_user: Mapping[str, float] = field(default_factory=dict)
    cluster: float = 1.0
    counts: Mapping[str, int] = field(default_factory=dict)  # finished jobs behind each user's history

    def factor(self, user: str) -> float:
        """What to multiply `user`'s estimates by (in [MIN_FACTOR, MAX_FACTOR]; the cluster's is at most 1)."""
        return self.by_user.get(user, self.cluster)

    def source(self, user: str) -> str:
        """FROM_USER, FROM_CLUSTER or UNCALIBRATED: where :meth:`factor` comes from."""
        if user in self.by_user:
            return FROM_USER
        return FROM_CLUSTER if self.cluster < 1.0 else UNCALIBRATED


NONE = Calibration()


def calibrate(histories: Mapping[str, UserHistory], cfg: CalibrationConfig) -> Calibration:
    """Every user's factor from their finished jobs (see the module docstring for the rule)."""
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
    cluster = max(min(1.0, median(medians)), MIN_FACTOR) if total >= cfg.min_jobs else 1.0
    return Calibration(by_user, cluster, counts)


def calibrated_work(work: float, factor: float) -> float:
    """The estimate a policy should see: `work` x `factor` (callers floor or cap it where they can)."""
    return work * factor
