"""Work estimates and progress reports of Slurm jobs (ideal GPU-seconds), as untrusted inputs.

Both inputs are untrusted. The estimate comes from the trusted AdminComment record's ``est=`` (which the
user chose), else the job's time limit (an upper bound users inflate), else the configured default; it is
clamped to [estimates.min_s, estimates.max_s] so that nobody can make a job look tiny (to jump the queue)
or huge, and the reason is kept for ``themis explain`` and the log. Progress comes from attained service
(GPU-seconds held, weighted by the placement factor) and, when the job reports it, from its Comment
``themis:progress=F`` with F in [0, 1]; a report that is not a number in that range is ignored with a reason,
never fatal. Pure functions: the loop calls them with values from the snapshot and the store. What the
estimate and the progress make of a job for the round (work done, the core's Job) is state/jobs.py's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from themis_slurm.core.calibration import Present
from themis_slurm.daemon.config import EstimatesConfig
from themis_slurm.slurm.model import ManagedJob
from themis_slurm.state.rows import JobRow


@dataclass(frozen=True, slots=True)
class Estimate:
    """Run time on the requested GPUs, where it came from, and what clamping did to it."""

    est_s: float
    source: str  # "est=", "time limit" or "default"
    note: str = ""

    def work(self, gpus: int) -> float:
        """Ideal GPU-seconds: the estimate is wall time on all the job's GPUs."""
        return self.est_s * gpus


def estimate(job: ManagedJob, cfg: EstimatesConfig) -> Estimate:
    """The job's run-time estimate, clamped, with the reason."""
    raw, source = None, "default"
    if _usable(job.est_s):
        raw, source = float(job.est_s), "est="  # type: ignore[arg-type]
    elif _usable(job.time_limit_s):
        raw, source = float(job.time_limit_s), "time limit"  # type: ignore[arg-type]
    if raw is None:
        return Estimate(cfg.default_s, "default", f"no est= and no time limit: default {cfg.default_s:g}s")
    if raw < cfg.min_s:
        return Estimate(cfg.min_s, source, f"{source} {raw:g}s raised to the minimum {cfg.min_s:g}s")
    if raw > cfg.max_s:
        return Estimate(cfg.max_s, source, f"{source} {raw:g}s lowered to the maximum {cfg.max_s:g}s")
    return Estimate(raw, source)


def present_by_user(rows: Mapping[str, JobRow], jobs: Mapping[str, ManagedJob],
                    cfg: EstimatesConfig) -> dict[str, Present]:
    """What each user's present jobs tell calibration this cycle (core/calibration.py): the median of their
    claimed run times (the clamped estimate of :func:`estimate`: est=, else the time limit, else the
    default), and (first estimate, work done at its placement) of every job that has run and not finished,
    whose overrun is evidence at once. The same as the simulator gives it (sim/engine.py, _present)."""
    claims: dict[str, list[float]] = {}
    started: dict[str, list[tuple[float, float]]] = {}
    for jid, row in rows.items():
        mj = jobs.get(jid)
        if mj is None:
            continue
        est = estimate(mj, cfg)
        claims.setdefault(mj.user, []).append(est.est_s)
        if row.done_service > 0:
            started.setdefault(mj.user, []).append((est.work(mj.gpus), row.done_service))
    return {user: Present.of(c, started.get(user, ())) for user, c in claims.items()}


def _usable(x: float | None) -> bool:
    return x is not None and isinstance(x, int | float) and math.isfinite(x) and x > 0


def checked_progress(job: ManagedJob) -> tuple[float | None, str]:
    """The job's reported progress if it is usable, else None and why (empty when nothing was reported)."""
    if job.progress_error:
        return None, f"progress report ignored: {job.progress_error}"
    p = job.progress
    if p is None:
        return None, ""
    if isinstance(p, bool) or not isinstance(p, int | float) or not math.isfinite(p) or not 0.0 <= p <= 1.0:
        return None, f"progress report ignored: {p!r} is not a number in [0, 1]"
    return float(p), ""
