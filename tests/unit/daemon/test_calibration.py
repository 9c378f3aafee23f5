"""Estimate calibration in themisd: completed jobs teach each user's factor; the factor shrinks later estimates."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from themis_slurm.core.calibration import MIN_FACTOR
from themis_slurm.daemon.config import EstimatesConfig
from themis_slurm.daemon.loop import Daemon

from .conftest import daemon_config, run
from .fake_slurm import FakeSlurm


def config(tmp_path: Path, **est: object):
    knobs = dict(default_s=600.0, min_s=10.0, max_s=1e6, calibration_min_jobs=3, calibration_window=10)
    knobs.update(est)
    return replace(daemon_config(tmp_path / "state"), estimates=EstimatesConfig(**knobs))  # type: ignore[arg-type]


def finish(d: Daemon, slurm: FakeSlurm, user: str, n: int, est_s: float, work_s: float) -> list[str]:
    """`n` one-GPU jobs of `user` that run `work_s` s against an estimate of `est_s`, run to the end."""
    ids = [slurm.submit(user, f"sweep-{user}", 1, work_s, est_s=est_s) for _ in range(n)]
    run(d, slurm, work_s + 60)
    assert all(j in slurm.completed for j in ids)
    d.cycle()  # the cycle that sees them gone
    return ids


def test_completed_jobs_shrink_their_users_later_estimates(slurm: FakeSlurm,
                                                           make_daemon: Callable[..., Daemon],
                                                           tmp_path: Path) -> None:
    d = make_daemon(config(tmp_path))
    finish(d, slurm, "alice", 3, est_s=1000.0, work_s=500.0)
    rows = d.store.query("SELECT user, estimate, work FROM finished_jobs")
    assert len(rows) == 3 and {r["user"] for r in rows} == {"alice"}
    assert all(0.45 <= r["work"] / r["estimate"] <= 0.5 for r in rows)
    later = slurm.submit("alice", "next", 2, 100.0, est_s=1000.0)
    d.cycle()
    row = d.store.job(later)
    assert row.est_work == 2000.0 and 0.45 <= row.est_factor <= 0.5
    assert row.work == pytest.approx(2000.0 * row.est_factor)
    m = d.metrics
    assert m.value("themis_calibration_samples_total") == 3 and m.value("themis_calibration_users") == 1
    assert m.value("themis_calibration_cluster_factor") == pytest.approx(row.est_factor)
    # bob has no history of his own: the cluster's factor (alice's, the only user with some) applies
    bob = slurm.submit("bob", "b", 1, 100.0, est_s=1000.0)
    d.cycle()
    assert d.store.job(bob).est_factor == pytest.approx(row.est_factor)


def test_jobs_that_did_not_complete_teach_nothing(slurm: FakeSlurm, make_daemon: Callable[..., Daemon],
                                                  tmp_path: Path) -> None:
    d = make_daemon(config(tmp_path))
    ids = [slurm.submit("alice", "a", 1, 500.0, est_s=1000.0) for _ in range(4)]
    run(d, slurm, 100)
    slurm.cancel(ids[0])
    slurm.cancel(ids[1], "FAILED")
    slurm.cancel(ids[2], "TIMEOUT")
    d.cycle()
    slurm.forget()  # the fourth leaves while the daemon is not looking: its ending is unknown
    slurm.cancel(ids[3], "COMPLETED")
    slurm.forget()
    d.cycle()
    assert all(d.store.job(j) is None for j in ids), "all four left Themis"
    assert d.store.query("SELECT count(*) FROM finished_jobs")[0][0] == 0
    later = slurm.submit("alice", "b", 1, 100.0, est_s=1000.0)
    d.cycle()
    assert d.store.job(later).est_factor == 1.0 and d.store.job(later).work == 1000.0


def test_calibration_never_goes_below_the_minimum_estimate(slurm: FakeSlurm, make_daemon: Callable[..., Daemon],
                                                           tmp_path: Path) -> None:
    """A user who makes jobs exit at once gets no estimate shorter than what --themis-est could ask for."""
    d = make_daemon(config(tmp_path, min_s=5000.0))
    finish(d, slurm, "mallory", 3, est_s=900_000.0, work_s=10.0)
    assert d.calibration().factor("mallory") == MIN_FACTOR
    big = slurm.submit("mallory", "big", 4, 1e6, est_s=900_000.0)
    d.cycle()
    row = d.store.job(big)
    assert row.work == pytest.approx(4 * 9000.0), "900,000 s x 0.01"
    small = slurm.submit("mallory", "small", 2, 1e6, est_s=100_000.0)
    d.cycle()
    assert d.store.job(small).work == 2 * 5000.0, "100,000 s x 0.01 = 1,000 s is below min_s: floored"


def test_history_survives_a_restart_and_calibration_can_be_turned_off(
        slurm: FakeSlurm, make_daemon: Callable[..., Daemon], tmp_path: Path) -> None:
    d = make_daemon(config(tmp_path))
    finish(d, slurm, "alice", 3, est_s=1000.0, work_s=250.0)
    factor = d.calibration().factor("alice")
    assert 0.2 <= factor <= 0.25
    d.store.close()
    again = make_daemon(config(tmp_path))
    assert again.calibration().factor("alice") == factor
    job = slurm.submit("alice", "x", 1, 100.0, est_s=1000.0)
    again.reload(config(tmp_path, calibrate=False))
    again.cycle()
    row = again.store.job(job)
    assert row.est_factor == 1.0 and row.work == 1000.0


def test_a_user_whose_jobs_outrun_their_estimates_gets_them_raised_up_to_the_time_limit(
        slurm: FakeSlurm, make_daemon: Callable[..., Daemon], tmp_path: Path) -> None:
    """est=1m for jobs that run 10 minutes would make mallory's waiting apps look hundreds of times worse
    off than they are; her history raises her estimates (to the 1.25 tolerance), never past a job's time
    limit nor estimates.max_s, and never anybody else's."""
    d = make_daemon(config(tmp_path, max_s=50_000.0))
    finish(d, slurm, "mallory", 3, est_s=60.0, work_s=600.0)
    factor = d.calibration().factor("mallory")
    assert 7.0 <= factor <= 8.0, "a median near 10, down to the 1.25 tolerance"
    assert d.calibration().cluster == 1.0
    free = slurm.submit("mallory", "a", 1, 1e6, est_s=60.0)
    limited = slurm.submit("mallory", "b", 2, 1e6, est_s=60.0, time_limit_s=300.0)
    huge = slurm.submit("mallory", "c", 1, 1e6, est_s=10_000.0)
    bob = slurm.submit("bob", "d", 1, 1e6, est_s=60.0)
    d.cycle()
    assert d.store.job(free).work == pytest.approx(60.0 * factor)
    assert d.store.job(limited).work == 2 * 300.0, "Slurm ends it at its time limit"
    assert d.store.job(huge).work == 50_000.0, "estimates.max_s"
    assert d.store.job(bob).work == 60.0 and d.store.job(bob).est_factor == 1.0


def test_run_time_is_slurms_not_when_themisd_looked(slurm: FakeSlurm, make_daemon: Callable[..., Daemon],
                                                   tmp_path: Path) -> None:
    # issue 38 item 12: jobs that ran on while cycles were late were booked with the service seen at polls
    d = make_daemon(config(tmp_path))
    a = slurm.submit("alice", "a", 1, 47.0, est_s=300.0)  # ends 2 s after a poll
    b = slurm.submit("alice", "b", 2, 242.0, est_s=300.0)  # runs 4:02 while themisd does not cycle
    d.cycle()
    slurm.advance(1.0)  # both start a second after the release
    d.cycle()
    slurm.advance(300.0)  # one blocked stretch: both finish unseen
    assert {a, b} <= set(slurm.completed)
    d.cycle()
    work = {r["job_id"]: r["work"] for r in d.store.query("SELECT job_id, work FROM finished_jobs")}
    assert work == {a: pytest.approx(47.0), b: pytest.approx(2 * 242.0)}


def test_service_counted_past_slurms_end_time_is_taken_back() -> None:
    from themis_slurm.daemon.planning import settled
    from themis_slurm.state.rows import JobRow

    row = JobRow(job_id="1", slurm_id=1, app_key="u/a", intent="running", gpus=2, work=100.0, first_seen=0.0,
                 service_s=2 * 134.0, done_service=2 * 134.0 * 0.9, accounted_until=1134.0)
    late = settled(row, 1000.0, 1060.0)  # a poll after an outage still saw it running 74 s past its end
    assert late.service_s == pytest.approx(120.0) and late.done_service == pytest.approx(108.0)
    assert settled(row, None, 1060.0) == row and settled(row, 1000.0, None) == row
