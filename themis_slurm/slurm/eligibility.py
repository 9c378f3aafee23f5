"""Would Slurm start this job if Themis released it now? (pure)

Themis holds every managed job, so Slurm's own reason for a held job is always ``JobHeldUser`` and hides
the reasons it would give once the hold is gone. A grant to a job Slurm will not start keeps its GPUs idle
until the release times out, then the job is held, planned and granted again: GPUs idle in a loop. So a
waiting job is *eligible* for a grant only when none of these holds (each checked from the job's own
record, the way slurmctld checks it in job_independent() / job_test_resv() / the array throttle):

* **BeginTime** in the future (``--begin``). Not for a job Themis requeued: Slurm sets BeginTime itself
  on requeue, and the start action resets it to now.
* **Dependency** not yet satisfied (``afterok:12(unfulfilled)``) or never satisfiable (``(failed)``).
  Slurm removes satisfied dependencies from the string, so anything left blocks.
* **Owner's hold**: ``hold=user`` in the Comment (see `options.has_user_hold`).
* **Array throttle** (``--array=0-7%2``): no more tasks than the throttle may run at once, counting the
  array's running tasks and the ones Themis already granted (`throttled`).

Reasons that Slurm only tells after a release (QOS or association limits, ...) are learned by the daemon
from a release that timed out; see ``daemon/loop.py``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Iterable, Mapping

from themis_slurm.slurm.model import ManagedJob
from themis_slurm.slurm.options import has_user_hold
from themis_slurm.slurm.records import SlurmJob

_DEP_ITEM = re.compile(r"^\s*([^()]+?)\s*(?:\(([A-Za-z_]+)\))?\s*$")


def pending_dependencies(dependency: str) -> list[tuple[str, str]]:
    """``afterok:12(unfulfilled),singleton(unfulfilled)`` -> [(spec, status), ...], satisfied ones left out.

    The separator is ``,`` (all must hold) or ``?`` (any may hold); either way a dependency left in the
    string is one Slurm still waits for. An item without a status counts as unfulfilled.
    """
    out: list[tuple[str, str]] = []
    for item in re.split(r"[,?]", dependency or ""):
        if not item.strip() or item.strip() == "(null)":
            continue
        m = _DEP_ITEM.match(item)
        spec, status = (m.group(1), (m.group(2) or "unfulfilled").lower()) if m else (item.strip(), "unfulfilled")
        if status != "satisfied":
            out.append((spec, status))
    return out


def _clock(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def blocked_reason(job: SlurmJob, now: float | None) -> str | None:
    """Why Slurm would not start this pending job if it were released now (None: it would).

    ``now`` None skips the BeginTime check (no clock known).
    """
    if job.state != "PENDING":
        return None
    if has_user_hold(job.comment):
        return "held by its owner (hold=user in its Comment; `scontrol release` removes it)"
    deps = pending_dependencies(job.dependency)
    failed = [spec for spec, status in deps if status == "failed"]
    if failed:
        return f"DependencyNeverSatisfied: {', '.join(failed)} can no longer be met"
    if deps:
        return f"Dependency: waits for {', '.join(spec for spec, _ in deps)}"
    if now is not None and job.eligible_time is not None and job.eligible_time > now and job.restart_cnt == 0:
        return f"BeginTime: not before {_clock(job.eligible_time)}"
    return None


def throttled(jobs: Iterable[ManagedJob], busy: Collection[str] = ()) -> dict[str, str]:
    """Pending array tasks beyond their array's ``%N`` throttle -> reason.

    A task uses a slot when Slurm shows it active and not pending, or when its id is in ``busy`` (granted
    or being started by Themis). The remaining slots go to the waiting tasks in task order, as Slurm
    starts them; the others are blocked.
    """
    arrays: dict[int, list[ManagedJob]] = {}
    for mj in jobs:
        if mj.array_job_id is not None and mj.array_max_tasks:
            arrays.setdefault(mj.array_job_id, []).append(mj)
    out: dict[str, str] = {}
    for array_id, tasks in arrays.items():
        limit = max(m.array_max_tasks or 0 for m in tasks)
        used = sum(1 for m in tasks if m.state != "PENDING" or m.job_id in busy)
        waiting = sorted((m for m in tasks if m.state == "PENDING" and m.job_id not in busy and m.blocked is None),
                         key=lambda m: (m.array_task_id if m.array_task_id is not None else -1, m.job_id))
        free = max(0, limit - used)
        for m in waiting[free:]:
            out[m.job_id] = (f"JobArrayTaskLimit: array {array_id} may run {limit} task(s) at once "
                             f"and {used} run or are granted")
    return out


def ineligible(jobs: Iterable[ManagedJob], busy: Collection[str] = (),
               learned: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every waiting job that must not be granted -> why: its own record, the throttle, learned reasons."""
    jobs = list(jobs)
    out = {m.job_id: m.blocked for m in jobs if m.state == "PENDING" and m.blocked}
    for jid, why in (learned or {}).items():
        out.setdefault(jid, why)
    for jid, why in throttled(jobs, busy).items():
        out.setdefault(jid, why)
    return out  # type: ignore[return-value]
