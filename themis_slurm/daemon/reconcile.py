"""Intent versus reality: what to do about each managed job this cycle (pure).

Slurm is the source of truth for what runs; the store holds what Themis meant to happen. Each cycle
:func:`reconcile` compares the two for every job and returns :class:`Fix` values: the row to record FIRST
(the new intent), the idempotent Slurm action to perform after it (if any), and the row to record once
the action succeeded. The loop applies them in that order, so a crash at any point leaves a recorded intent
that the next call of this same function completes or rolls back. The full table is in
docs/admin-guide.md ("Reconciliation"); in short:

* a job that vanished from Slurm (finished, cancelled, failed) is removed and its work booked to its app;
* a job Slurm shows RUNNING that Themis did not start is **adopted**: it gets a lease from the moment it was
  seen, its usage counts for fairness and its GPUs go back to the auction when that lease expires (killing
  work somebody released by hand would be worse, and ignoring it would make its GPUs vanish from the
  books);
* a managed job found pending but not held (the owner or an admin ran ``scontrol requeue``/``release``,
  job_submit.lua was off, or a crash hit between two steps) is held again (enforce mode); a running job
  that Slurm shows requeued while it still completes (``ManagedJob.requeued``) is held at once, and one
  that was requeued and started again while themisd was not looking is adopted with a fresh lease;
* a released job that did not start within ``release_timeout_s`` is held again and planned afresh;
* a warned job past its grace period is requeued (held, pin cleared); a requeue that did not take is sent
  again; a ``warning`` whose SIGUSR1 may not have gone out is sent again (at least once, by design);
* a job that Slurm requeued by itself (node failure) goes back to waiting: its fate follows Slurm.

In observe mode no action is ever returned: intents simply mirror what Slurm does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from themis_slurm.daemon.config import Config
from themis_slurm.daemon.estimates import estimate
from themis_slurm.slurm.model import ManagedJob
from themis_slurm.state.intents import Intent
from themis_slurm.state.jobs import unknown_profile_note
from themis_slurm.state.rows import JobRow

#: Backend actions a Fix may ask for (SlurmBackend method names).
ACTIONS = ("hold", "start", "warn", "requeue")

RUNNING = "RUNNING"
PENDING = "PENDING"


@dataclass(frozen=True)
class Fix:
    """One correction: record `before` (None: delete the row), call `action`, then record `after`."""

    job_id: str
    kind: str
    reason: str
    before: JobRow | None
    action: str | None = None
    after: JobRow | None = None
    app_key: str = ""


def lease_from(mj: ManagedJob, now: float) -> float:
    """When a job's lease starts once Slurm shows it running: its start time, if Slurm gives a sane one."""
    if mj.start_time is not None and 0 < mj.start_time <= now:
        return float(mj.start_time)
    return now


#: A run that started this much after the last cycle that saw the job running is a new run (Slurm's StartTime
#: is whole seconds, and slurmctld's clock may differ a little from themisd's; a requeued job starts again
#: no sooner than cred_expire + 1 s after its requeue, 121 s by default).
RESTART_SLACK_S = 10.0


def restarted_unseen(mj: ManagedJob, row: JobRow) -> bool:
    """True when Slurm shows a run that began after the last cycle that saw this job running: it was
    requeued and started again outside Themis while themisd was not looking (a blocked or stopped daemon)."""
    return (mj.start_time is not None and row.accounted_until is not None
            and mj.start_time > row.accounted_until + RESTART_SLACK_S)


def running_row(row: JobRow, mj: ManagedJob, now: float, lease_s: float, adopted: bool = False) -> JobRow:
    start = lease_from(mj, now)
    return replace(row, intent=Intent.RUNNING, lease_start=start, lease_expiry=start + lease_s, release_time=None,
                   warn_time=None, requeue_time=None, adopted=int(adopted or row.adopted))  # fmt: skip


def waiting_row(row: JobRow) -> JobRow:
    return replace(row, intent=Intent.WAITING, planned_nodes={}, planned_gpus=frozenset(), grant_time=None,
                   lease_start=None, lease_expiry=None, release_time=None, warn_time=None,
                   requeue_time=None, adopted=0)  # fmt: skip


def new_row(mj: ManagedJob, cfg: Config, now: float) -> JobRow:
    est = estimate(mj, cfg.estimates)
    # est_note stays empty here so that the first accounting logs the clamping once
    return JobRow(job_id=mj.job_id, slurm_id=mj.slurm_id, app_key=mj.app_key, intent=Intent.WAITING, gpus=mj.gpus,
                  work=est.work(mj.gpus), est_work=est.work(mj.gpus), first_seen=now, est_source=est.source,
                  submit_time=mj.submit_time or None)  # fmt: skip


def reconcile(now: float, jobs: Mapping[str, ManagedJob], rows: Mapping[str, JobRow], cfg: Config) -> list[Fix]:
    """All corrections for this cycle, in a stable order (job id)."""
    enforce = cfg.mode == "enforce"
    out: list[Fix] = []
    for jid in sorted(rows.keys() - jobs.keys()):
        row = rows[jid]
        out.append(Fix(jid, "vanished", f"no longer in Slurm (was {row.intent}): finished or cancelled",
                       None, app_key=row.app_key))
    for jid in sorted(jobs):
        mj = jobs[jid]
        row = rows.get(jid)
        if row is None:
            fresh = new_row(mj, cfg, now)
            unknown = unknown_profile_note(mj, cfg.models)  # logged, and kept for `themis explain`
            unknown = f"; {unknown}" if unknown else ""
            if mj.state == RUNNING:
                out.append(Fix(jid, "adopted", "found running without a Themis start: adopted with a lease"
                               + unknown, running_row(fresh, mj, now, cfg.scheduler.lease_s, adopted=True),
                               app_key=mj.app_key))
            else:
                needs_hold = enforce and mj.state == PENDING and not mj.held
                out.append(Fix(jid, "new", "new job" + (" found released: held" if needs_hold else "") + unknown,
                               fresh, "hold" if needs_hold else None, app_key=mj.app_key))
            continue
        fix = _one(now, mj, row, cfg) if enforce else _observe(now, mj, row, cfg)
        if fix is not None:
            out.append(fix)
    return out


def _observe(now: float, mj: ManagedJob, row: JobRow, cfg: Config) -> Fix | None:
    """Observe mode: mirror Slurm, act on nothing."""
    if mj.state == RUNNING and row.intent != Intent.RUNNING:
        return Fix(mj.job_id, "running", "Slurm started it", running_row(row, mj, now, cfg.scheduler.lease_s),
                   app_key=mj.app_key)
    if mj.state == PENDING and row.intent != Intent.WAITING:
        return Fix(mj.job_id, "pending", "pending in Slurm", waiting_row(row), app_key=mj.app_key)
    return None


def _one(now: float, mj: ManagedJob, row: JobRow, cfg: Config) -> Fix | None:
    """Enforce mode: the reconciliation table for one job that both Slurm and the store know."""
    sched = cfg.scheduler
    lease_s = sched.lease_s
    jid, app, intent = mj.job_id, mj.app_key, row.intent
    running, pending = mj.state == RUNNING, mj.state == PENDING

    def fix(kind: str, reason: str, before: JobRow | None, action: str | None = None,
            after: JobRow | None = None) -> Fix:
        return Fix(jid, kind, reason, before, action, after, app)

    if running:
        if intent in (Intent.WAITING, Intent.GRANTED):
            return fix("adopted", f"running although {intent}: released outside Themis; adopted with a lease",
                       running_row(row, mj, now, lease_s, adopted=True))
        if intent == Intent.STARTING:
            return fix("started", "Slurm started it", running_row(row, mj, now, lease_s))
        if intent == Intent.WARNING:
            warned = replace(row, intent=Intent.WARNED, warn_time=now)
            return fix("warn", "lease lost: checkpoint warning (SIGUSR1)", row, "warn", warned)
        if intent == Intent.WARNED and row.warn_time is not None and now >= row.warn_time + sched.grace_s:
            rq = replace(row, intent=Intent.REQUEUEING, requeue_time=now)
            return fix("requeue", f"grace of {sched.grace_s:g}s over: requeue held", rq, "requeue")
        if intent == Intent.REQUEUEING:
            return fix("requeue", "requeue not taken yet: sent again", replace(row, requeue_time=now), "requeue")
        if intent == Intent.RUNNING and restarted_unseen(mj, row):
            return fix("restarted-outside", "started again since themisd last saw it run (requeued outside Themis "
                       "and started by Slurm while themisd was not looking): adopted with a fresh lease",
                       running_row(row, mj, now, lease_s, adopted=True))
        return None
    if not pending:
        if mj.requeued and intent == Intent.RUNNING:  # the owner's `scontrol requeue`: hold it before Slurm restarts it
            return fix("requeued-outside", "requeued outside Themis (its owner's `scontrol requeue`?) while it "
                       "runs: held again at once, before Slurm can start it by itself", waiting_row(row),
                       None if mj.held else "hold")
        return None  # COMPLETING, SUSPENDED, ...: wait for Slurm to settle
    if intent == Intent.WAITING:
        if not mj.held:
            return fix("rehold", "pending but not held (released or requeued outside Themis): held again",
                       row, "hold")
        return None
    if intent == Intent.GRANTED:
        bound = (row.grant_time or now) + sched.grace_s + sched.release_timeout_s
        if now > bound:
            return fix("replan", "its GPUs did not free up in time: back to waiting", waiting_row(row),
                       None if mj.held else "hold")
        if not mj.held:
            return fix("rehold", "granted but released outside Themis: held until its GPUs are free", row, "hold")
        return None
    if intent == Intent.STARTING:
        late = row.release_time is None or now - row.release_time > sched.release_timeout_s
        if late:
            return fix("release-timeout", f"released but not running after {sched.release_timeout_s:g}s: "
                       "held again and re-planned", waiting_row(row), "hold")
        if mj.held:
            return fix("retry-start", "start not taken (error or restart): pin and release again", row, "start")
        return None
    # running / warning / warned / requeueing but Slurm shows it pending: it went back to the queue
    # (our requeue took, or Slurm requeued it after a node failure, or its owner requeued it)
    if intent in (Intent.WARNED, Intent.REQUEUEING) and row.planned_nodes:  # moved: its destination waits for it
        moved = replace(waiting_row(row), intent=Intent.GRANTED, planned_nodes=dict(row.planned_nodes),
                        planned_gpus=row.planned_gpus, grant_time=now)
        return fix("requeued", f"pending again (was {intent}): granted the GPUs it was moved to "
                   f"({_nodes_text(row.planned_nodes)})", moved, None if mj.held else "hold")
    kind = "requeued" if intent in (Intent.WARNED, Intent.REQUEUEING) else "requeued-outside"
    return fix(kind, f"pending again (was {intent}): waiting", waiting_row(row), None if mj.held else "hold")


def _nodes_text(nodes: Mapping[str, int]) -> str:
    return ",".join(f"{n}:{c}" for n, c in sorted(nodes.items()))
