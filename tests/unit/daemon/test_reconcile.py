"""Reconciliation: Slurm is the source of truth; intents are completed or rolled back every cycle."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from themis_slurm.daemon.loop import Daemon

from .conftest import daemon_config, run
from .fake_slurm import FakeSlurm


def test_vanished_jobs_are_removed_and_their_work_booked(slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    d = make_daemon()
    a = slurm.submit("alice", "a", 2, 1000.0, est_s=1000.0)
    run(d, slurm, 30)
    slurm.cancel(a)
    d.cycle()
    assert d.store.job(a) is None
    app = d.store.apps()["alice/a"]
    assert app.finished_work > 0 and not app.active
    assert d.store.query("SELECT kind FROM events WHERE job_id = ? ORDER BY id DESC", (a,))[0][0] == "vanished"


def test_released_job_that_does_not_start_is_reheld_and_replanned(
        slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    slurm.auto_schedule = False  # Slurm never starts anything: a stuck release
    d = make_daemon(release_timeout_s=20.0)
    a = slurm.submit("alice", "a", 2, 100.0, est_s=100.0)
    d.cycle()
    assert d.store.job(a).intent == "starting" and not slurm.jobs[a].held
    for _ in range(5):
        slurm.advance(5)
        d.cycle()
    kinds = [r[0] for r in d.store.query("SELECT kind FROM events WHERE job_id = ?", (a,))]
    assert "release-timeout" in kinds
    assert ("hold", a) in slurm.calls
    slurm.auto_schedule = True
    run(d, slurm, 20)
    assert slurm.jobs[a].state == "RUNNING", "re-planned and started again"
    assert d.store.job(a).intent == "running"


def test_job_requeued_by_its_owner_is_held_again(slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    d = make_daemon()
    # the cluster is full with a long app, so the requeued job cannot simply be granted again at once
    a = slurm.submit("alice", "a", 8, 10_000.0, est_s=10_000.0)
    run(d, slurm, 10)
    slurm.auto_schedule = False
    slurm.user_requeue(a)
    d.cycle()
    assert ("hold", a) in slurm.calls
    assert slurm.jobs[a].held or slurm.jobs[a].state == "RUNNING"
    kinds = [r[0] for r in d.store.query("SELECT kind FROM events WHERE job_id = ?", (a,))]
    assert "requeued-outside" in kinds


def test_running_job_themis_did_not_start_is_adopted_with_a_lease(
        slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    a = slurm.submit("alice", "a", 4, 1000.0, est_s=1000.0, held=False)
    slurm.schedule()  # Slurm started it before themisd ever looked (e.g. submitted in observe mode)
    d = make_daemon()
    d.cycle()
    row = d.store.job(a)
    assert row.intent == "running" and row.adopted == 1
    assert row.lease_expiry == pytest.approx(slurm.jobs[a].start_time + 60.0)
    assert ("start", a) not in slurm.calls


def test_node_down_under_a_leased_job_follows_slurm(
        tmp_path: Path, slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    # a restart costs a whole lease here, so b is never swapped out for a on the one node left (without
    # that cost a and b would trade the node lease by lease: equal jobs, time-sliced)
    d = make_daemon(daemon_config(tmp_path / "state", restart_cost_s=60.0))
    a = slurm.submit("alice", "a", 4, 1000.0, gpus_per_node=4, est_s=1000.0)
    b = slurm.submit("bob", "b", 4, 1000.0, gpus_per_node=4, est_s=1000.0)
    run(d, slurm, 10)
    node = next(iter(slurm.jobs[a].node_gpus))
    slurm.node_down(node)  # Slurm requeues the job (pending, not held)
    d.cycle()
    assert d.store.job(a).intent == "waiting"
    assert slurm.jobs[a].held, "held again: only Themis starts it"
    run(d, slurm, 200)
    assert slurm.jobs[a].state == "PENDING", "no GPUs on a down node are offered"
    assert d.store.job(b).intent == "running"
    snap = slurm.snapshot()
    assert len(snap.unavailable) == 4
    slurm.node_up(node)
    run(d, slurm, 20)
    assert slurm.jobs[a].state == "RUNNING"


def test_unmanaged_gpus_are_never_offered(slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    slurm.add_unmanaged("node1", 3)
    d = make_daemon()
    jobs = [slurm.submit("alice", "a", 1, 500.0, est_s=500.0) for _ in range(8)]
    run(d, slurm, 30)
    running = [j for j in jobs if slurm.jobs[j].state == "RUNNING"]
    assert len(running) == 5  # 8 GPUs - 3 unmanaged


def test_malformed_progress_comment_is_logged_once_and_ignored(
        slurm: FakeSlurm, make_daemon: Callable[..., Daemon], caplog: pytest.LogCaptureFixture) -> None:
    d = make_daemon()
    a = slurm.submit("alice", "a", 2, 1000.0, est_s=1000.0, progress_error="themis:progress=lots: not a number")
    b = slurm.submit("alice", "b", 2, 1000.0, est_s=1000.0, progress=0.25)
    c = slurm.submit("alice", "c", 2, 1000.0, est_s=1.0)  # below estimates.min_s
    run(d, slurm, 30)
    assert caplog.text.count("progress report ignored") == 1
    assert f"job={c}: estimate: est= 1s raised to the minimum 10s" in caplog.text
    assert d.store.job(a).progress is None and d.store.job(a).done_service > 0
    assert d.store.job(b).progress == 0.25
    assert slurm.jobs[a].state == "RUNNING"
