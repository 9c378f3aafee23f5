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
* A user's **factor** is the median ratio of their last ``window`` finished jobs, once they have at least
  ``min_jobs`` of them. The median, not the mean: one job that crashed early and exited 0 moves it little.
* A user with fewer finished jobs gets the **cluster factor**: the median over users of each user's own
  median (one vote per user, so one user's estimates cannot move everyone else's), once at least
  ``min_jobs`` jobs have finished in all.
* Factors are capped at 1: only over-estimates are corrected. An under-estimate already corrects itself
  (a job that runs past its estimate is stretched, see ``OVERRUN_FRACTION``), and scaling estimates up
  would make apps look better off than their history shows.

A factor only ever lowers a user's own estimates, and the caller floors the result where it has a floor
(themisd: ``estimates.min_s``): calibration never gives a user an estimate they could not have asked for
themselves. Pure: the caller keeps the histories (themisd in its store, the simulator in memory).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from statistics import median

#: Where a user's factor came from (for ``themis explain`` and the simulator's bookkeeping).
FROM_USER, FROM_CLUSTER, UNCALIBRATED = "user", "cluster", "none"
#: The smallest factor: estimates are never scaled below this fraction (callers floor them further).
MIN_FACTOR = 0.01


@dataclass(frozen=True)
class CalibrationConfig:
    """Knobs of estimate calibration (themis.yaml ``estimates.calibration``; ``themis simulate``).

    min_jobs: finished jobs a user needs before their own median is used (and the cluster needs before
        the cluster factor is); fewer, and one early exit would swing the factor.
    window: how many of a user's most recent finished jobs count, so that the factor follows a user who
        changes their habits (or their code).
    """

    enabled: bool = True
    min_jobs: int = 10
    window: int = 50

    def __post_init__(self) -> None:
        if isinstance(self.min_jobs, bool) or not isinstance(self.min_jobs, int) or self.min_jobs < 1:
            raise ValueError(f"calibration min_jobs must be a whole number >= 1, got {self.min_jobs!r}")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < self.min_jobs:
            raise ValueError(f"calibration window must be a whole number >= min_jobs ({self.min_jobs}), "
                             f"got {self.window!r}")


def finished_ratio(estimate: float, work: float) -> float | None:
    """True work / estimate of a finished job, or None when either is unusable (never counted)."""
    if not (math.isfinite(estimate) and estimate > 0 and math.isfinite(work) and work >= 0):
        return None
    return work / estimate


@dataclass(frozen=True, slots=True)
class UserHistory:
    """The ratios of one user's most recent finished jobs, oldest first, and their median."""

    ratios: tuple[float, ...] = ()
    median: float = field(default=math.nan, compare=False)

    @classmethod
    def of(cls, ratios: Iterable[float], window: int) -> UserHistory:
        kept = tuple(ratios)[-window:]
        return cls(kept, median(kept) if kept else math.nan)

    def add(self, ratio: float, window: int) -> UserHistory:
        """This history with one more finished job (the oldest falls out past `window`)."""
        return UserHistory.of((*self.ratios, ratio), window)


@dataclass(frozen=True)
class Calibration:
    """The factor of every user with enough history, and the cluster's for the rest (1: none yet)."""

    by_user: Mapping[str, float] = field(default_factory=dict)
    cluster: float = 1.0
    counts: Mapping[str, int] = field(default_factory=dict)  # finished jobs behind each user's history

    def factor(self, user: str) -> float:
        """What to multiply `user`'s estimates by (in (0, 1])."""
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
    for user, h in histories.items():
        n = min(len(h.ratios), cfg.window)
        if n == 0:
            continue
        m = h.median if len(h.ratios) <= cfg.window else median(h.ratios[-cfg.window:])
        total += n
        medians.append(m)
        if n >= cfg.min_jobs:
            by_user[user] = _capped(m)
    cluster = _capped(median(medians)) if total >= cfg.min_jobs else 1.0
    counts = {u: min(len(h.ratios), cfg.window) for u, h in histories.items() if h.ratios}
    return Calibration(by_user, cluster, counts)


def _capped(x: float) -> float:
    """A factor in (0, 1]: a median of 0 (every job exited at once) still leaves estimates positive."""
    return min(1.0, max(x, MIN_FACTOR))


def calibrated_work(work: float, factor: float) -> float:
    """The estimate a policy should see: `work` x `factor` (factor <= 1 only ever lowers it)."""
    return work * min(1.0, factor)
