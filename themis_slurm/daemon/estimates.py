"""Work estimates and progress: turning a Slurm job into the core's Job (work and done in ideal GPU-seconds).

Both inputs are untrusted. The estimate comes from the trusted AdminComment record's ``est=`` (which the
user chose), else the job's time limit (an upper bound users inflate), else the configured default; it is
clamped to [estimates.min_s, estimates.max_s] so that nobody can make a job look tiny (to jump the queue)
or huge, and the reason is kept for ``themis explain`` and the log. Progress comes from attained service
(GPU-seconds held, weighted by the placement factor) and, when the job reports it, from its Comment
``themis:progress=F`` with F in [0, 1]; a report that is not a number in that range is ignored with a reason,
never fatal. Pure functions: the loop calls them with values from the snapshot and the store.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from themis_slurm.core.calibration import Present
from themis_slurm.core.placement import PROFILES
from themis_slurm.core.workload import REPORT_MIN_REMAINING, Job, refine_by_progress
from themis_slurm.daemon.config import EstimatesConfig
from themis_slurm.daemon.store import JobRow
from themis_slurm.slurm.model import ManagedJob

#: A job still active is never treated as done: remaining work stays at least this fraction of the estimate,
#: so a job that reports 100 % (or outruns its estimate) is not preempted as "finished" while it still runs.
MIN_REMAINING = REPORT_MIN_REMAINING
#: When attained service passes the estimate, the estimate is stretched to this multiple of what was done.
OVERRUN_STRETCH = 1.25


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


def done_and_work(work: float, done_service: float, progress: float | None) -> tuple[float, float, str]:
    """(done, work) to give the arbiter, and a note when the estimate had to bend.

    A progress report refines attained service (:func:`~themis_slurm.core.workload.refine_by_progress`,
    shared with the simulator): it is the user's word, so it can only make the job look *further along*:
    the remaining work is never above the estimate fixed at submit minus the work already done at the
    job's placement (``done_service``).
    The loop also drops a report lower than the last accepted one (`planning.account`). Without a report,
    service is the measure. A job that outruns its estimate gets a longer one first, with or without a
    report (the simulator bumps its estimates the same way).
    """
    note = ""
    if done_service >= (1.0 - MIN_REMAINING) * work:
        work = done_service * OVERRUN_STRETCH
        note = f"ran past its estimate: work stretched to {work:.0f} GPU-s"
    if progress is not None:
        done, work = refine_by_progress(work, done_service, progress)
        return done, work, note
    return done_service, work, note


def profile_of(job: ManagedJob) -> str:
    """The placement profile name; unknown names (a newer job_submit.lua) fall back to the default class."""
    name = (job.profile or "").lower()
    return name if name in PROFILES else "low"


def shape_of(job: ManagedJob) -> tuple[int | None, int | None]:
    """(gpus_per_node, nodes) for the core, or (None, None) when the job does not fix its shape.

    ``--gres=gpu:4`` is per node and Slurm gives one node unless -N says otherwise, so a per-node count
    with no node count still fixes the shape.
    """
    gpn, nodes = job.gpus_per_node, job.nodes
    if gpn is None or gpn < 1:
        return None, None
    if nodes is None:
        if job.gpus % gpn:
            return None, None
        nodes = job.gpus // gpn
    if nodes < 1 or nodes * gpn != job.gpus:
        return None, None
    return gpn, nodes


def submitted(row: JobRow, job: ManagedJob) -> float:
    """When the job was submitted. Not Slurm's SubmitTime as it is now: a requeue resets that to the moment
    of the requeue, and a job preempted by Themis would then look submitted later after every lease it
    lost (its app's T_id longer, its rho better than it is). The row keeps the SubmitTime themisd first
    saw; a row written by an older themisd has only first_seen, which comes before any requeue themisd made.
    """
    if row.submit_time is not None:
        return row.submit_time
    return min(row.first_seen, job.submit_time) if job.submit_time else row.first_seen


def core_job(job: ManagedJob, work: float, done: float, preemptible: bool, service_s: float, submit: float) -> Job:
    """The arbiter's view of one managed job; `submit` is :func:`submitted`."""
    gpn, nodes = shape_of(job)
    return Job(
        id=job.job_id,
        app_id=job.app_key,
        gpus=job.gpus,
        work=work,
        done=max(0.0, done),
        profile=profile_of(job),
        gpus_per_node=gpn,
        nodes=nodes,
        preemptible=preemptible,
        submit=submit,
        service=service_s,
        allowed_nodes=job.allowed_nodes,  # where Slurm could start it (slurm/snapshot.placement_limits)
    )
