"""Estimates are untrusted: clamped and explained; progress reports are checked, never fatal."""

from __future__ import annotations

from themis_slurm.daemon.config import EstimatesConfig
from themis_slurm.daemon.estimates import checked_progress, estimate
from themis_slurm.state.jobs import core_job, done_and_work, shape_of

from .fake_slurm import FakeSlurm

CFG = EstimatesConfig(default_s=600.0, min_s=60.0, max_s=3600.0)


def mj(slurm: FakeSlurm, **kw: object):
    jid = slurm.submit("alice", "a", kw.pop("gpus", 2), 100.0, **kw)  # type: ignore[arg-type]
    return next(m for m in slurm.snapshot().managed if m.job_id == jid)


def test_estimate_sources_and_clamps(slurm: FakeSlurm) -> None:
    assert estimate(mj(slurm, est_s=600.0, time_limit_s=3000.0), CFG).source == "est="
    e = estimate(mj(slurm, time_limit_s=1200.0), CFG)
    assert (e.est_s, e.source, e.note) == (1200.0, "time limit", "")
    e = estimate(mj(slurm), CFG)
    assert (e.est_s, e.source) == (600.0, "default")
    e = estimate(mj(slurm, est_s=1.0), CFG)
    assert e.est_s == 60.0 and "raised to the minimum 60s" in e.note
    e = estimate(mj(slurm, est_s=1e9), CFG)
    assert e.est_s == 3600.0 and "lowered to the maximum 3600s" in e.note
    e = estimate(mj(slurm, est_s=float("nan"), time_limit_s=-5.0), CFG)
    assert e.source == "default"
    assert e.work(4) == 2400.0


def test_malformed_progress_is_ignored_with_a_reason(slurm: FakeSlurm) -> None:
    assert checked_progress(mj(slurm, progress=0.5)) == (0.5, "")
    assert checked_progress(mj(slurm)) == (None, "")
    p, why = checked_progress(mj(slurm, progress_error="'abc' is not a number"))
    assert p is None and "ignored" in why and "abc" in why
    p, why = checked_progress(mj(slurm, progress=1.5))
    assert p is None and "not a number in [0, 1]" in why
    p, why = checked_progress(mj(slurm, progress=float("nan")))
    assert p is None


def test_done_and_work() -> None:
    assert done_and_work(100.0, 30.0, None) == (30.0, 100.0, "")
    # half done after 30 GPU-s: half of the estimate is done; the estimate itself (and so T_id) stays
    assert done_and_work(100.0, 30.0, 0.5) == (50.0, 100.0, "")
    done, work, _ = done_and_work(100.0, 30.0, 1.0)
    assert work - done > 0, "a running job is never treated as finished"
    done, work, note = done_and_work(100.0, 150.0, None)
    assert work > done and "stretched" in note


def test_shape_and_core_job(slurm: FakeSlurm) -> None:
    assert shape_of(mj(slurm, gpus=4, gpus_per_node=4)) == (4, 1)
    assert shape_of(mj(slurm, gpus=8, gpus_per_node=4, nodes=2)) == (4, 2)
    assert shape_of(mj(slurm, gpus=3, gpus_per_node=2)) == (None, None)
    j = core_job(mj(slurm, gpus=2, profile="VGG16"), 200.0, 20.0, True, 10.0, 5.0)
    assert (j.work, j.done, j.profile, j.preemptible) == (200.0, 20.0, "vgg16", True)
    assert core_job(mj(slurm, profile="gpt9"), 200.0, 0.0, True, 0.0, 0.0).profile == "low"


def test_progress_never_makes_a_job_look_less_done_than_its_service() -> None:
    # reported 0 % after 30 GPU-s of service on a 100 GPU-s estimate: still 30 done, 70 remaining at most
    assert done_and_work(100.0, 30.0, 0.0) == (30.0, 100.0, "")
    assert done_and_work(100.0, 30.0, 0.1) == (30.0, 100.0, "")
    # a report further along than the service is believed (it knows about slow steps)
    assert done_and_work(100.0, 30.0, 0.8) == (80.0, 100.0, "")
    # past its estimate with a report: stretched first (as without a report), then the report can only
    # shorten what is left; still running, so never done
    done, work, note = done_and_work(100.0, 150.0, 0.2)
    plain_done, plain_work, _ = done_and_work(100.0, 150.0, None)
    assert 0 < work - done <= plain_work - plain_done and "stretched" in note
    done, work, _ = done_and_work(100.0, 150.0, 0.99)
    assert 0 < work - done <= 0.99 * (plain_work - plain_done)


def test_progress_only_moves_forward(slurm: FakeSlurm, make_daemon) -> None:  # type: ignore[no-untyped-def]
    """Reporting progress=0 on one's own job raised its app's rho (1.0 -> 1.31) and won the next auction."""
    from .conftest import run

    d = make_daemon()
    jid = slurm.submit("alice", "a", 2, 2000.0, est_s=2000.0)
    run(d, slurm, 30)
    slurm.jobs[jid].progress = 0.5
    run(d, slurm, 10)
    assert d.store.job(jid).progress == 0.5
    before = d.store.job(jid)
    slurm.jobs[jid].progress = 0.0  # the owner lies
    run(d, slurm, 10)
    row = d.store.job(jid)
    assert row.progress == 0.5, "a lower report is ignored"
    assert "below the last accepted 0.5" in row.progress_note
    slurm.jobs[jid].progress = 0.6
    run(d, slurm, 10)
    assert d.store.job(jid).progress == 0.6 and d.store.job(jid).progress_note == ""
    assert before.service_s < d.store.job(jid).service_s
