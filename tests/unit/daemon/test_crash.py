"""kill -9 at any point loses nothing and duplicates nothing: intents are recorded before Slurm actions,
actions are idempotent, and the next daemon reconciles. A crash is a BaseException the loop does not
catch (like SIGKILL, it stops everything at once); a restart is a new Daemon on the same database."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from themis_slurm.daemon.loop import Daemon
from themis_slurm.state.store import Store

from .conftest import daemon_config
from .fake_slurm import FakeSlurm


class Crash(BaseException):
    """The process dies here."""


def restart(d: Daemon, make_daemon: Callable[..., Daemon]) -> Daemon:
    d.store.close()
    return make_daemon(d.cfg)


@pytest.mark.parametrize("when", ["fail", "fail_after"])
def test_crash_around_start(when: str, slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    d = make_daemon()
    a = slurm.submit("alice", "a", 4, 200.0, gpus_per_node=4, est_s=200.0)
    getattr(slurm, when)["start"] = Crash()
    with pytest.raises(Crash):
        d.cycle()
    slurm.fail.clear()
    assert d.store.job(a).intent == "starting", "intent recorded before the action"
    d = restart(d, make_daemon)
    for _ in range(5):
        d.cycle()
        slurm.advance(5)
    assert slurm.starts_seen[a] == 1, "started exactly once"
    assert d.store.job(a).intent == "running"
    grants = d.store.query("SELECT COUNT(*) FROM decisions WHERE action = 'grant' AND job_id = ?", (a,))
    assert grants[0][0] == 1, "not planned twice"


@pytest.mark.parametrize(("action", "when"), [("warn", "fail"), ("warn", "fail_after"),
                                              ("requeue", "fail"), ("requeue", "fail_after")])
def test_crash_around_preemption(action: str, when: str, slurm: FakeSlurm,
                                 make_daemon: Callable[..., Daemon]) -> None:
    d = make_daemon()
    hog = slurm.submit("alice", "hog", 8, 5000.0, est_s=5000.0)
    d.cycle()
    slurm.advance(5)
    late = slurm.submit("bob", "late", 8, 40.0, est_s=40.0)
    getattr(slurm, when)[action] = Crash()
    crashed = False
    for _ in range(60):
        try:
            d.cycle()
        except Crash:
            crashed = True
            slurm.fail.clear()
            d = restart(d, make_daemon)
        slurm.advance(5)
        if late in slurm.completed:
            break
    assert crashed
    assert late in slurm.completed
    assert slurm.jobs[hog].restart_cnt == 1, "requeued exactly once"
    assert slurm.jobs[hog].warnings in (1, 2), "warned at least once (a lost SIGUSR1 is sent again)"
    assert slurm.jobs[hog].ckpt_s > 0


def test_random_crashes_lose_and_duplicate_nothing(tmp_path: Path, topo) -> None:
    """Three apps contend; the daemon dies at random points (store writes and Slurm actions) 20+ times."""
    rng = random.Random(7)
    slurm = FakeSlurm(topo, pick="high")
    cfg = daemon_config(tmp_path / "state")
    crashes = 0

    class CrashyStore(Store):
        armed = False

        def put_jobs(self, rows):  # type: ignore[no-untyped-def]
            if CrashyStore.armed and rng.random() < 0.03:
                raise Crash()  # inside a transaction: it rolls back, like a kill before COMMIT
            super().put_jobs(rows)

    def daemon() -> Daemon:
        return Daemon(cfg, slurm, CrashyStore(cfg.db_path))

    work: dict[str, float] = {}
    for _ in range(6):
        work[slurm.submit("alice", "array", 2, rng.uniform(100, 400), gpus_per_node=2, est_s=300.0)] = 0
    for _ in range(3):
        work[slurm.submit("alice", "gang", 4, rng.uniform(200, 500), gpus_per_node=4, est_s=400.0, profile="vgg16")] = 0
    d = daemon()
    CrashyStore.armed = True
    late_at = slurm.now + 300
    late_added = False
    for _ in range(2000):
        if not late_added and slurm.now >= late_at:
            for _ in range(4):
                work[slurm.submit("bob", "late", 1, rng.uniform(50, 150), est_s=100.0)] = 0
            late_added = True
        for action in ("start", "warn", "requeue", "hold"):
            if rng.random() < 0.01:
                (slurm.fail if rng.random() < 0.5 else slurm.fail_after)[action] = Crash()
        try:
            d.cycle()
        except Crash:
            crashes += 1
            slurm.fail.clear()
            slurm.fail_after.clear()
            d.store.close()
            d = daemon()
        slurm.advance(5)
        if late_added and not slurm.jobs:
            break
    CrashyStore.armed = False
    assert crashes >= 10, crashes
    assert sorted(slurm.completed) == sorted(work), "every job completed exactly once"
    assert len(set(slurm.completed)) == len(slurm.completed)
    d.cycle()
    assert d.store.jobs() == {}, "nothing left behind in the store"
    d.store.close()
