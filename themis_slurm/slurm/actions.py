"""Applying the arbiter's decisions with scontrol/scancel: start, warn, requeue, hold, hand back.

Each action is a short fixed sequence of commands whose end state does not depend on how often it ran,
so the daemon may simply retry an action that failed half-way (after a timeout, say):

* start    pin (``ReqNodeList`` + ``NumNodes``) -> ``StartTime=now`` if the job was requeued -> release.
           Pin before release: every update triggers a scheduling pass, and a released unpinned job could
           start anywhere. ``StartTime=now`` because a requeued job otherwise waits cred_expire + 1 s.
           That wait exists for a reason Themis must honour itself: slurmd refuses a batch launch whose
           credential is not newer, in whole seconds, than the job's revoke at its requeue, and the job
           then FAILS (slurmd: "already killed, do not launch batch job"; slurm_cred ``ctime <= revoked``).
           So a requeued job is released only once the clock is past the second of its requeue (Slurm
           sets SubmitTime to that moment) with a margin for clock skew: `requeue_settle_s`.
* warn     ``scancel --batch --signal=USR1 --state=RUNNING``: the batch shell only (the checkpoint
           warning). Only for a job the snapshot shows RUNNING: scancel retries a signal to a pending
           job for about 95 s ("Job can not be altered now") before failing. ``--state=RUNNING`` covers
           the race where the job stopped running since the snapshot: then there is nothing to warn and
           scancel returns at once. For an array task scancel runs verbose and is stopped at its "Job is in
           transitional state, retrying": see "Array tasks" below.
* hold     first asks Slurm for the job's state (``squeue -h -j X -o %T``; one cheap RPC, and holds are
           rare) and refuses a job that is not PENDING: ``scontrol hold`` on a running job succeeds in
           Slurm (it shows R with JobHeldAdmin and priority 0) and would pin a stale view onto a job that
           started since the snapshot.
* requeue  ``scontrol requeuehold`` (same JobId, Restarts+1, held), then clear the pin, which survives a
           requeue and would otherwise tie the job to nodes it may never get again. If the job is already
           pending (a retry after the requeue went through), it is held instead: same end state.
           Then hold, then clear the pin, so the clearing update cannot start the job unpinned.
* release_unpinned  clear the pin, release: Slurm schedules it (kill switch / observe mode).

Jobs are addressed by their user-visible id (``123`` or ``123_4``): Slurm resolves ``123_4`` for a task
still inside a pending array record and for a task split off already, whereas the numeric id of a pending
array record would act on every remaining task. Never preempting a job that cannot be requeued is checked
here, not left to Slurm: Slurm would refuse the requeue only after the warning signal was sent.

Array tasks. slurmctld answers a signal other than SIGKILL addressed as ``A_T`` with "Job can not be
altered now" (ESLURM_TRANSITION_STATE_NO_UPDATE) whenever the array still has pending tasks, after
delivering it to the running task T: ``job_str_signal`` first offers the signal to the pending meta
record, which refuses it, and keeps that error (``src/slurmctld/job_mgr.c``; seen on 22.05 and 25.11).
scancel then re-sends the signal every 5-15 s for about 95 s and fails: the warning was delivered over and
over, never recorded, and the task never requeued. scancel cannot be given another address: with
``--batch``/``--signal`` it reads the job table and rebuilds ``A_T`` from any id, the task's own JobId
included (on 22.05 slurmctld also refuses a split-off task's own JobId for a signal: "Invalid job id";
25.11 accepts it, which the pyslurm backend uses). So for an array task scancel runs with ``-v`` and is
stopped at its first "Job is in transitional state, retrying": the one signal was delivered (scancel's
``--state=RUNNING`` only sends it to a task it read as running), and the warning counts as sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from themis_slurm.slurm import hostlist
from themis_slurm.slurm.model import ManagedJob
from themis_slurm.slurm.runner import Runner, SlurmCommandError, StoppedAt

# Slurm's text for ESLURM_JOB_PENDING, what requeuehold answers for a job that is already waiting.
ALREADY_PENDING = "pending execution"

#: How long after a requeue (SubmitTime, whole seconds) a requeued job may be released: one second so the
#: launch credential's timestamp is newer than the revoke's, half a second for skew between this host's
#: clock and slurmctld's.
REQUEUE_SETTLE_S = 1.5


class ActionRefused(RuntimeError):
    """An action Themis must not take on this job (e.g. preempting a job that cannot be requeued)."""


def _target(job: ManagedJob) -> str:
    return job.job_id


#: What scancel -v prints before it re-sends a signal slurmctld refused for now (see "Array tasks").
RETRYING = "transitional state, retrying"


def own_record(job: ManagedJob) -> bool:
    """True for an array task that Slurm keeps under a JobId of its own (split off from the array)."""
    return job.array_task_id is not None and job.array_job_id is not None and job.slurm_id != job.array_job_id


def signal_args(job: ManagedJob, signal: str = "USR1") -> list[str]:
    """``scancel --batch --signal=SIG --state=RUNNING ID`` for the batch shell of a running job; verbose
    for an array task, whose answer is read (see "Array tasks")."""
    verbose = ["-v"] if job.array_task_id is not None else []
    return ["scancel", *verbose, "--batch", f"--signal={signal}", "--state=RUNNING", _target(job)]


def check_preemptible(job: ManagedJob) -> None:
    """Raise ActionRefused unless the job can be requeued (batch job without --no-requeue)."""
    if not job.requeue_ok:
        raise ActionRefused(f"job {job.job_id} cannot be requeued (not a batch job or --no-requeue): "
                            "Themis never preempts it; let it run to its end")


def check_warnable(job: ManagedJob) -> None:
    """Raise ActionRefused unless the job may get the checkpoint warning: preemptible and RUNNING.

    Only a job the snapshot shows RUNNING has a batch shell to signal; a signal to a pending job is
    retried by scancel for about 95 s before it fails.
    """
    check_preemptible(job)
    if job.state != "RUNNING":
        raise ActionRefused(f"job {job.job_id} is {job.state}, not RUNNING: no batch shell to warn")


def check_still_pending(job: ManagedJob, state: str) -> None:
    """Raise ActionRefused unless Slurm still shows the job PENDING (a hold is for waiting jobs only), or
    COMPLETING after a requeue (`ManagedJob.requeued`): held then, it cannot be started again by Slurm
    at its BeginTime (measured on 22.05 and 25.11: the hold takes, and the job goes PENDING, held)."""
    if state == "COMPLETING" and job.requeued:
        return
    if state != "PENDING":
        raise ActionRefused(f"job {job.job_id} is {state or 'gone'} in Slurm now, not PENDING: not held")


#: States in which a requeue takes the GPUs back from a run (PENDING: requeued before, or it never ran: the
#: requeue falls back to a hold). Anything else has ended, and Slurm would requeue a finished job too: it
#: runs again (measured on 22.05: `scontrol requeuehold` of a COMPLETED job makes it PENDING, held).
REQUEUEABLE_STATES = frozenset({"RUNNING", "SUSPENDED", "CONFIGURING", "PENDING"})


def check_still_requeueable(job: ManagedJob, state: str) -> None:
    """Raise ActionRefused unless Slurm shows the job still running (or already pending again, or leaving its
    nodes after a requeue): a job that finished between the cycle's read and the requeue must not run twice."""
    if state in REQUEUEABLE_STATES or (state == "COMPLETING" and job.requeued):
        return
    raise ActionRefused(f"job {job.job_id} is {state or 'gone'} in Slurm now (it ended): not requeued, "
                        "so it does not run again")


def is_already_pending(message: str) -> bool:
    """True for Slurm's answer to a requeue of a job that is already waiting (ESLURM_JOB_PENDING)."""
    return ALREADY_PENDING in message.lower()


def requeue_settle_s(job: ManagedJob, now: float) -> float:
    """Seconds to wait before releasing ``job`` so that slurmd will launch it (0 if it never requeued).

    At a requeue Slurm revokes the job's credential on its nodes and resets SubmitTime to that moment;
    slurmd refuses (and Slurm fails the job) a launch whose credential is stamped in the same second.
    """
    if job.restart_cnt <= 0 or not job.submit_time:
        return 0.0
    return max(0.0, job.submit_time + REQUEUE_SETTLE_S - now)


def pin_args(job: ManagedJob, node_gpus: Mapping[str, int]) -> list[str]:
    """``scontrol update JobId=X ReqNodeList=... NumNodes=N`` for a placement, after sanity checks."""
    nodes = [n for n, g in node_gpus.items() if g > 0]
    if not nodes:
        raise ValueError(f"job {job.job_id}: a placement needs at least one node with GPUs")
    if job.allowed_nodes is not None and not set(nodes) <= job.allowed_nodes:
        raise ValueError(f"job {job.job_id}: placement on {hostlist.fold(nodes)} is outside the nodes Slurm could "
                         f"start it on ({job.limits})")
    total = sum(node_gpus[n] for n in nodes)
    if job.gpus and total != job.gpus:
        raise ValueError(f"job {job.job_id}: placement has {total} GPUs, the job asks for {job.gpus}")
    if job.nodes is not None and len(nodes) != job.nodes:
        raise ValueError(f"job {job.job_id}: placement uses {len(nodes)} nodes, the job fixed {job.nodes}")
    if job.gpus_per_node and any(node_gpus[n] != job.gpus_per_node for n in nodes):
        raise ValueError(f"job {job.job_id}: the job asks for {job.gpus_per_node} GPUs on each node, "
                         f"placement gives {dict(node_gpus)}")
    return ["scontrol", "update", f"JobId={_target(job)}", f"ReqNodeList={hostlist.fold(nodes)}",
            f"NumNodes={len(nodes)}"]


class Actions:
    """The five actions over a `Runner`; every call has the runner's per-call timeout."""

    def __init__(self, runner: Runner, timeout_s: float | None = None,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep) -> None:
        self.runner = runner
        self.timeout_s = timeout_s
        self.clock = clock
        self.sleep = sleep

    def _run(self, *argv: str) -> str:
        return self.runner.run(list(argv), self.timeout_s)

    def pin(self, job: ManagedJob, node_gpus: Mapping[str, int]) -> None:
        """``scontrol update JobId=X ReqNodeList=... NumNodes=N`` (see `pin_args`)."""
        self.runner.run(pin_args(job, node_gpus), self.timeout_s)

    def clear_pin(self, job: ManagedJob) -> None:
        """``scontrol update JobId=X ReqNodeList=``: the job may run anywhere again, or only on its owner's
        -w list (from the record) when it had one: the pin replaced that list, this puts it back."""
        self._run("scontrol", "update", f"JobId={_target(job)}", f"ReqNodeList={hostlist.fold(list(job.user_nodes))}")

    def settle_after_requeue(self, job: ManagedJob) -> None:
        """Sleep until a just-requeued job may be launched again (see `requeue_settle_s`): at most ~2.5 s."""
        wait = requeue_settle_s(job, self.clock())
        if wait > 0:
            self.sleep(wait)

    def start(self, job: ManagedJob, node_gpus: Mapping[str, int]) -> None:
        """Pin to exactly these nodes, then release (a requeued job once its requeue has settled)."""
        self.pin(job, node_gpus)
        if job.restart_cnt > 0:
            self.settle_after_requeue(job)
            self._run("scontrol", "update", f"JobId={_target(job)}", "StartTime=now")
        self._run("scontrol", "release", _target(job))

    def warn(self, job: ManagedJob) -> None:
        """SIGUSR1 to the batch shell: checkpoint now, the GPUs go away after the grace period."""
        check_warnable(job)
        argv = signal_args(job)
        if job.array_task_id is None:
            self._run(*argv)
            return
        try:  # see "Array tasks": stopped at scancel's retry, the signal was delivered once
            self.runner.run(argv, self.timeout_s, stop_at=RETRYING)
        except StoppedAt:
            return

    def requeue(self, job: ManagedJob) -> None:
        """Take the GPUs back: requeue held, then clear the pin; ActionRefused for a job that has ended."""
        check_preemptible(job)
        check_still_requeueable(job, self.state(job))
        try:
            self._run("scontrol", "requeuehold", _target(job))
        except SlurmCommandError as exc:
            if not is_already_pending(exc.stderr):
                raise
            self._run("scontrol", "hold", _target(job))  # requeued before, or never ran: just hold it
        self.clear_pin(job)

    def state(self, job: ManagedJob) -> str:
        """The job's state as Slurm reports it now (``squeue -h -j X -o %T``), e.g. ``PENDING``."""
        out = self._run("squeue", "-h", "-j", _target(job), "-o", "%T").split()
        return out[0].upper() if out else ""

    def hold(self, job: ManagedJob) -> None:
        """(Re)hold a pending job and clear its pin; ActionRefused for a job Slurm no longer shows pending."""
        check_still_pending(job, self.state(job))
        self._run("scontrol", "hold", _target(job))
        self.clear_pin(job)

    def release_unpinned(self, job: ManagedJob) -> None:
        """Hand the job back to Slurm's own scheduling."""
        self.clear_pin(job)
        self._run("scontrol", "release", _target(job))
