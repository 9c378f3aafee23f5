"""The core's view of a managed job: its Job from what Slurm shows and what themisd stored (pure).

A job's work (ideal GPU-seconds) is its calibrated estimate (daemon/estimates.py and planning.account keep
it in the row); what it has done is its attained service at its placement, refined by the progress it
reports (:func:`done_and_work`); its submit time is the first one themisd saw (:func:`submitted`). The round
(state/round_input.py) and the status API's finish-time estimates (state/finish.py) build their Jobs here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

from themis_slurm.core.gpu_types import class_speeds
from themis_slurm.core.placement import DEFAULT_PROFILE, Profile, ProfileRef, site_profile
from themis_slurm.core.workload import REPORT_MIN_REMAINING, Job, refine_by_progress
from themis_slurm.slurm.model import ManagedJob
from themis_slurm.state.rows import JobRow

#: A job still active is never treated as done: remaining work stays at least this fraction of the estimate,
#: so a job that reports 100 % (or outruns its estimate) is not preempted as "finished" while it still runs.
MIN_REMAINING = REPORT_MIN_REMAINING
#: When attained service passes the estimate, the estimate is stretched to this multiple of what was done.
OVERRUN_STRETCH = 1.25


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


# ------------------------------------------------------------------------------------------- checkpoints
# A job that saves its state at Themis's warning (SIGUSR1, then a requeue) loses only its restart cost when
# preempted; one that never saves loses its whole run; one that saves every I seconds loses what it did since
# its last save. themisd counts the run it sees (JobRow.run_start, and run_base: the work done when the run
# began), tells the core the work at stake while the run holds its GPUs (Job.unsaved: bids, ranking and the
# offer charge it, core/agent.py) and takes it back when the run ends in a requeue (planning.account). Work
# is taken to accrue evenly over the run, so I-second saves keep floor(r / I) x I of an r-second run.


def effective_ckpt(job: ManagedJob, row: JobRow) -> float | None:
    """When the job saves its state: its owner's word (--themis-ckpt) where given, else never when themisd
    learned so (a requeued job whose progress restarted lower), else at the warning (None). A claim that it
    never saves is set aside once a report after a requeue went on from where it was (``learned "yes"``)."""
    if row.ckpt_learned == "yes":
        return None
    if job.ckpt_given:
        return job.ckpt_s
    return math.inf if row.ckpt_learned == "no" else None


def saved_fraction(run_s: float, ckpt_s: float | None) -> float:
    """Of the work an `run_s`-second run did, the part its saves keep."""
    if ckpt_s is None:
        return 1.0
    if ckpt_s == math.inf or run_s <= 0.0:
        return 0.0
    return min(1.0, math.floor(run_s / ckpt_s) * ckpt_s / run_s)


def kept_after(row: JobRow, ckpt_s: float | None, until: float) -> float:
    """done_service that a restart at `until` resumes from: the run's base plus what its saves kept."""
    if row.run_start is None:
        return row.done_service
    gained = max(0.0, row.done_service - row.run_base)
    return row.run_base + gained * saved_fraction(until - row.run_start, ckpt_s)


def unsaved_work(row: JobRow, ckpt_s: float | None, now: float, done: float) -> float:
    """The work a preemption now would throw away, as the core's Job.unsaved: at most `done`."""
    if ckpt_s is None or row.run_start is None:
        return 0.0
    return min(done, max(0.0, row.done_service - kept_after(row, ckpt_s, now)))


NO_SITE_MODELS: Mapping[str, Profile] = MappingProxyType({})


def profile_of(job: ManagedJob, site: Mapping[str, Profile] = NO_SITE_MODELS) -> ProfileRef:
    """The job's Job.profile: its model's or class's, a site's own class as its Profile (themis.yaml
    ``models:``, :func:`~themis_slurm.core.placement.site_profile`); a name themisd does not know (one that
    job_submit.lua accepts but themis.yaml does not define, or a newer job_submit.lua's) falls back to the
    default class, as :func:`unknown_profile_note` says."""
    found = site_profile(job.profile, site)
    if found is not None:
        return found
    return site.get(DEFAULT_PROFILE, DEFAULT_PROFILE)


def unknown_profile_note(job: ManagedJob, site: Mapping[str, Profile] = NO_SITE_MODELS) -> str:
    """Why the job is placed as the default class although it named another, or "" when it is not."""
    if not job.profile or site_profile(job.profile, site) is not None:
        return ""
    return (f"model {job.profile!r} is unknown to themisd (neither built in nor in themis.yaml models): placed "
            f"as the default class {DEFAULT_PROFILE}")


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


def core_job(
    job: ManagedJob, work: float, done: float, preemptible: bool, service_s: float, submit: float,
    unsaved: float = 0.0, site: Mapping[str, Profile] = NO_SITE_MODELS,
    speeds_by_class: Mapping[str, Mapping[str, float]] | None = None,
) -> Job:
    """The arbiter's view of one managed job; `submit` is :func:`submitted`, `unsaved` :func:`unsaved_work`,
    `site` the site's own model classes (:func:`profile_of`), `speeds_by_class` themis.yaml ``gpu_types:``
    per class (its class's speed on each GPU type, :attr:`Job.speeds`)."""
    gpn, nodes = shape_of(job)
    profile = profile_of(job, site)
    speeds = class_speeds(speeds_by_class, profile if isinstance(profile, str) else profile.name) if speeds_by_class else ()
    return Job(
        id=job.job_id,
        app_id=job.app_key,
        gpus=job.gpus,
        work=work,
        done=max(0.0, done),
        profile=profile,
        gpus_per_node=gpn,
        nodes=nodes,
        preemptible=preemptible,
        submit=submit,
        service=service_s,
        allowed_nodes=job.allowed_nodes,  # where Slurm could start it (slurm/snapshot.placement_limits)
        unsaved=min(max(0.0, done), unsaved),
        speeds=speeds,
    )
