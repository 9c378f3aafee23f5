"""A slow or stuck slurmctld (issue 38, items 1, 2 and 7): times are taken when an action happened, actions
are never taken from a stale read, and what could not be done is kept in the backlog until it is done.

Slowness is simulated: an action "takes" seconds by moving both the fake Slurm's clock and the daemon's
perf clock, as a blocking scancel would.
"""

from __future__ import annotations

from pathlib import Path

from themis_slurm.daemon.loop import Daemon
from themis_slurm.slurm.actions import ActionRefused
from themis_slurm.slurm.model import ManagedJob
from themis_slurm.state.store import Store

from .conftest import daemon_config, run
from .fake_slurm import FakeSlurm, SlurmError


class SlowSlurm(FakeSlurm):
    """FakeSlurm whose actions take `cost[action]` seconds of wall time (and a perf clock that sees it)."""

    def __init__(self, *a: object, **kw: object) -> None:
        super().__init__(*a, **kw)  # type: ignore[arg-type]
        self.cost: dict[str, float] = {}
        self.t0 = self.now

    def perf(self) -> float:
        return self.now - self.t0

    def _enter(self, action: str, job: ManagedJob):  # type: ignore[no-untyped-def]
        dt = self.cost.get(action, 0.0)
        if dt:
            self.now += dt
            for j in self.jobs.values():
                if j.state == "RUNNING":
                    j.done_s += dt
            if self.auto_schedule:
                self.schedule()
        return super()._enter(action, job)

    def hold(self, job: ManagedJob) -> None:  # the adapter's check: never hold what Slurm shows running
        j = self.jobs.get(job.job_id)
        if j is not None and j.state != "PENDING":
            self.calls.append(("hold-refused", job.job_id))
            raise ActionRefused(f"job {job.job_id} is {j.state} in Slurm now, not PENDING: not held")
        super().hold(job)


def make(tmp_path: Path, slurm: SlowSlurm, **sched: float) -> Daemon:
    cfg = daemon_config(tmp_path / "state", **sched)
    return Daemon(cfg, slurm, Store(cfg.db_path), perf=slurm.perf)


def losing_setup(tmp_path: Path, topo, **sched: float) -> tuple[SlowSlurm, Daemon, list[str], str]:  # type: ignore[no-untyped-def]
    slurm = SlowSlurm(topo)
    d = make(tmp_path, slurm, **sched)
    hog = [slurm.submit("alice", "hog", 4, 5000.0, gpus_per_node=4, est_s=5000.0) for _ in range(2)]
    run(d, slurm, 10)
    assert all(slurm.jobs[j].state == "RUNNING" for j in hog)
    late = slurm.submit("bob", "late", 4, 300.0, gpus_per_node=4, est_s=300.0)
    return slurm, d, hog, late


def test_grace_runs_from_when_the_warning_went_out(tmp_path: Path, topo) -> None:  # type: ignore[no-untyped-def]
    slurm, d, _, _ = losing_setup(tmp_path, topo, grace_s=20.0)
    slurm.cost["warn"] = 8.0  # slurmctld takes 8 s to answer the signal
    sent_at = None
    for _ in range(40):
        before = len(slurm.calls)
        d.cycle()
        warns = [c for c in slurm.calls[before:] if c[0] == "warn"]
        if warns and sent_at is None:
            sent_at = slurm.now  # the call returned: the signal went out no earlier than this
            victim = warns[0][1]
            assert d.store.job(victim).warn_time >= sent_at - 1e-6
        if any(c[0] == "requeue" for c in slurm.calls[before:]):
            assert sent_at is not None
            assert slurm.now - sent_at >= 20.0, "the requeue came before a full grace after the signal"
            return
        slurm.advance(5.0)
    raise AssertionError("no requeue")


def test_a_stuck_action_puts_off_the_rest_and_shows_in_the_backlog(tmp_path: Path, topo) -> None:  # type: ignore[no-untyped-def]
    slurm = SlowSlurm(topo)
    d = make(tmp_path, slurm)
    jobs = [slurm.submit("alice", f"a{i}", 1, 600.0, est_s=600.0) for i in range(6)]
    slurm.cost["start"] = 12.0  # each pin+release takes 12 s: act_within_s (15) allows one per cycle
    rep = d.cycle()
    assert rep.deferred > 0
    started = [c[1] for c in slurm.calls if c[0] == "start"]
    assert len(started) == 2  # at 0 s and at 12 s; the third would start 24 s after the read
    waiting = {j for j in jobs if j not in started}
    assert {p.job_id for p in d.backlog.values()} == {j for j in waiting if d.store.job(j).intent == "granted"}
    assert all(p.action == "start" and "put off" in p.error for p in d.backlog.values())
    for j in waiting:  # put-off starts go back to granted, not `starting` with a release that never happened
        assert d.store.job(j).intent in ("granted", "waiting")
    slurm.cost.clear()
    run(d, slurm, 20)
    assert all(slurm.jobs[j].state == "RUNNING" for j in jobs)
    assert d.backlog == {}


def test_a_failed_action_stays_in_the_backlog_until_it_is_done(tmp_path: Path, topo) -> None:  # type: ignore[no-untyped-def]
    slurm = SlowSlurm(topo)
    d = make(tmp_path, slurm)
    j = slurm.submit("alice", "a", 1, 600.0, est_s=600.0)
    slurm.fail["start"] = SlurmError("scontrol update JobId=x timed out: no answer within 10 s")
    run(d, slurm, 15)
    p = d.backlog[j]
    assert p.action == "start" and p.tries >= 2 and "timed out" in p.error
    del slurm.fail["start"]
    run(d, slurm, 10)
    assert slurm.jobs[j].state == "RUNNING" and j not in d.backlog


def test_release_timeout_counts_from_the_release_not_the_read(tmp_path: Path, topo) -> None:  # type: ignore[no-untyped-def]
    # issue 38 item 2: a release sent late in a slow cycle must get its full release_timeout_s
    slurm = SlowSlurm(topo, auto_schedule=False)
    d = make(tmp_path, slurm, release_timeout_s=20.0)
    slow = [slurm.submit("alice", "hog", 1, 5000.0, est_s=5000.0)]
    j = slurm.submit("bob", "b", 1, 600.0, est_s=600.0)
    slurm.cost["start"] = 7.0
    read_at = slurm.now
    d.cycle()
    assert [c[1] for c in slurm.calls if c[0] == "start"] == [*slow, j]
    row = d.store.job(j)
    assert row.intent == "starting" and row.release_time == read_at + 14.0  # its release returned at 14 s
    # Slurm starts it 15 s after the cycle's read, 8 s after its own release: not late
    slurm.advance(15.0)
    slurm.schedule()
    d.cycle()
    assert not [c for c in slurm.calls if c[0] in ("hold", "hold-refused")]
    assert d.store.job(j).intent == "running"


def test_a_job_that_started_is_never_held_by_a_release_timeout(tmp_path: Path, topo) -> None:  # type: ignore[no-untyped-def]
    slurm = SlowSlurm(topo, auto_schedule=False)
    d = make(tmp_path, slurm, release_timeout_s=20.0)
    j = slurm.submit("bob", "b", 1, 600.0, est_s=600.0)
    d.cycle()
    assert d.store.job(j).intent == "starting"
    slurm.advance(25.0)  # released 25 s ago, still pending in this read
    real_snapshot = slurm.snapshot

    def snapshot_then_start():  # type: ignore[no-untyped-def]
        snap = real_snapshot()
        slurm.schedule()  # Slurm starts it right after the read: the hold would land on a running job
        return snap

    slurm.snapshot = snapshot_then_start  # type: ignore[method-assign]
    d.cycle()
    assert ("hold-refused", j) in slurm.calls and slurm.jobs[j].state == "RUNNING" and not slurm.jobs[j].held
    assert d.store.job(j).intent == "starting"  # kept: the next read shows it started
    slurm.snapshot = real_snapshot  # type: ignore[method-assign]
    d.cycle()
    row = d.store.job(j)
    assert row.intent == "running" and not row.adopted

