"""Leases in time: renewal is a database write; losers are warned, then requeued after the grace period;
jobs that cannot be requeued are never preempted; the minimum run time is respected."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from themis_slurm.daemon.loop import Daemon
from themis_slurm.daemon.planning import build_round
from themis_slurm.slurm.model import ManagedJob
from themis_slurm.state.jobs import submitted
from themis_slurm.state.rows import JobRow

from .conftest import run
from .fake_slurm import FakeSlurm

MUTATIONS = ("start", "warn", "requeue", "hold", "release_unpinned")
JOB = ManagedJob(
    job_id="7", slurm_id=7, app_key="u/a", user="u", state="PENDING", held=True, gpus=1, gpus_per_node=None,
    nodes=None, node_gpus={}, gpu_ids=frozenset(), est_s=None, time_limit_s=None, profile=None, progress=None,
    progress_error=None, requeue_ok=True, restart_cnt=1, submit_time=0.0, start_time=None, required_nodes=(),
    priority=0,
)


def actions(slurm: FakeSlurm, kind: str, job: str | None = None) -> list[tuple[str, str]]:
    return [c for c in slurm.calls if c[0] == kind and (job is None or c[1] == job)]


def test_renewal_needs_no_slurm_action(slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    d = make_daemon()
    a = slurm.submit("alice", "a", 4, 1000.0, gpus_per_node=4, est_s=1000.0)
    run(d, slurm, 20)
    assert actions(slurm, "start", a) == [("start", a)]
    first = d.store.job(a)
    assert first.intent == "running"
    calls_before = len(slurm.calls)
    run(d, slurm, 200)  # three lease expiries with nobody else waiting
    assert len(slurm.calls) == calls_before, "renewals touch Slurm not at all"
    row = d.store.job(a)
    assert row.intent == "running" and row.lease_expiry > first.lease_expiry
    renewals = d.store.query("SELECT COUNT(*) FROM decisions WHERE action = 'renewal' AND job_id = ?", (a,))
    assert renewals[0][0] >= 2


def test_loser_is_warned_then_requeued_after_grace(slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    d = make_daemon(grace_s=20.0)
    hog = [slurm.submit("alice", "hog", 4, 5000.0, gpus_per_node=4, est_s=5000.0) for _ in range(2)]
    run(d, slurm, 10)
    assert all(slurm.jobs[j].state == "RUNNING" for j in hog)
    late = slurm.submit("bob", "late", 4, 300.0, gpus_per_node=4, est_s=300.0)
    warned_at = None
    for _ in range(40):
        d.cycle()
        if warned_at is None and actions(slurm, "warn"):
            warned_at = slurm.now
            victim = actions(slurm, "warn")[0][1]
            assert not actions(slurm, "requeue"), "no requeue in the same cycle as the warning"
        if actions(slurm, "requeue"):
            assert slurm.now - warned_at >= 20.0, "requeue only after the grace period"
            break
        slurm.advance(5)
    assert warned_at is not None, "the late app wins a lease at the first expiry"
    assert actions(slurm, "requeue") == [("requeue", victim)]
    assert slurm.jobs[victim].warnings == 1
    run(d, slurm, 15)
    assert slurm.jobs[late].state == "RUNNING"
    assert d.store.job(victim).intent == "waiting"
    assert slurm.jobs[victim].held and slurm.jobs[victim].state == "PENDING"
    pre = d.store.query("SELECT cause, reason FROM decisions WHERE action = 'preemption' AND job_id = ?", (victim,))
    assert pre and tuple(pre[0]) == ("lost", "")  # typed (PreemptionCause.LOST); no prose stored


def test_non_requeueable_job_is_never_preempted(slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    d = make_daemon()
    keep = slurm.submit("alice", "i", 8, 2000.0, requeue_ok=False, est_s=2000.0)
    run(d, slurm, 10)
    assert slurm.jobs[keep].state == "RUNNING"
    slurm.submit("bob", "b", 2, 100.0, est_s=100.0)
    run(d, slurm, 400)
    assert not actions(slurm, "warn") and not actions(slurm, "requeue")
    assert slurm.jobs[keep].state == "RUNNING"
    # its usage still counts: service accrues
    assert d.store.job(keep).service_s >= 8 * 300


def test_min_runtime_is_respected(slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    d = make_daemon(min_runtime_s=150.0)  # lease 60 s, but never preempted before 150 s of run time
    hog = slurm.submit("alice", "hog", 8, 5000.0, est_s=5000.0)
    run(d, slurm, 5)
    started = slurm.jobs[hog].start_time
    slurm.submit("bob", "late", 8, 300.0, est_s=300.0)
    for _ in range(80):
        d.cycle()
        if actions(slurm, "warn"):
            break
        slurm.advance(5)
    assert actions(slurm, "warn"), "preempted eventually"
    assert slurm.now - started >= 150.0


def test_a_requeued_job_keeps_its_first_submit_time(slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    """Slurm resets SubmitTime at a requeue (the fake does too). Read afresh, every lease a job lost would
    push it later on its app's private timeline: a longer T_id, a better-looking rho, a weaker claim."""
    d = make_daemon(grace_s=20.0)
    hog = [slurm.submit("alice", "hog", 4, 5000.0, gpus_per_node=4, est_s=5000.0) for _ in range(2)]
    submitted_at = slurm.now
    run(d, slurm, 10)
    slurm.submit("bob", "late", 4, 300.0, gpus_per_node=4, est_s=300.0)
    for _ in range(60):
        d.cycle()
        if actions(slurm, "requeue"):
            break
        slurm.advance(5)
    [(_, victim)] = actions(slurm, "requeue")
    assert slurm.jobs[victim].submit_time > submitted_at  # what Slurm shows now
    d.cycle()
    assert d.store.job(victim).submit_time == submitted_at
    inp = build_round(slurm.snapshot(), d.store.jobs(), d.store.apps(active_only=True), d.cfg, slurm.now)
    [app] = [a for a in inp.state.apps if a.id.endswith("/hog")]
    assert {j.id: j.submit for j in app.jobs} == dict.fromkeys(hog, submitted_at)
    assert d.store.apps()[app.id].arrival == submitted_at


def test_submitted_falls_back_to_first_seen_on_rows_of_older_daemons() -> None:
    row = JobRow(job_id="7", slurm_id=7, app_key="u/a", intent="waiting", gpus=1, work=10.0, first_seen=100.0)
    assert submitted(row, replace(JOB, submit_time=90.0)) == 90.0  # SubmitTime before themisd saw it: kept
    assert submitted(row, replace(JOB, submit_time=500.0)) == 100.0  # requeued since: first_seen is earlier
    assert submitted(row, replace(JOB, submit_time=0.0)) == 100.0  # unknown
    assert submitted(replace(row, submit_time=42.0), replace(JOB, submit_time=500.0)) == 42.0


def test_a_loser_that_ends_before_its_requeue_is_not_run_again(slurm: FakeSlurm,
                                                                make_daemon: Callable[..., Daemon]) -> None:
    # Slurm requeues a finished batch job too: a loser that completes between the cycle's read and its
    # requeue (end of grace) would run a second time. The requeue is refused; the job is booked finished.
    d = make_daemon(grace_s=20.0)
    hog = [slurm.submit("alice", "hog", 4, 5000.0, gpus_per_node=4, est_s=5000.0) for _ in range(2)]
    run(d, slurm, 10)
    late = slurm.submit("bob", "late", 4, 300.0, gpus_per_node=4, est_s=300.0)
    for _ in range(40):
        d.cycle()
        if actions(slurm, "warn"):
            break
        slurm.advance(5)
    [(_, victim)] = actions(slurm, "warn")
    assert victim in hog
    read = slurm.snapshot

    def read_then_finish() -> object:  # the victim completes just after the cycle's read
        snap = read()
        if d.store.job(victim).intent == "warned" and slurm.now - d.store.job(victim).warn_time >= 20.0:
            slurm.cancel(victim, "COMPLETED")
        return snap

    slurm.snapshot = read_then_finish  # type: ignore[method-assign]
    for _ in range(10):
        slurm.advance(5)
        d.cycle()
    assert actions(slurm, "requeue", victim) == [("requeue", victim)], "tried once, refused by the state check"
    slurm.snapshot = read  # type: ignore[method-assign]
    run(d, slurm, 20)
    assert victim not in slurm.jobs
    assert actions(slurm, "requeue", victim) == [("requeue", victim)], "not retried"
    assert d.store.job(victim) is None, "booked as finished"
    assert slurm.jobs[late].state == "RUNNING"
