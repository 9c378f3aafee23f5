"""What a preemption costs a job that does not save at Themis's warning (issue #34 item 2, the Slurm side).

themisd counts each run of a job (state/jobs.py, "checkpoints"): while it runs, the work its next preemption
would throw away goes to the core as Job.unsaved; when the run ends in a requeue, that work is taken back
from the job's done work. The owner says how the job saves (--themis-ckpt, in the trusted record); where
they did not, a report after a requeue that restarts below the last one teaches themisd that it does not.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from themis_slurm.daemon.planning import build_round, runs_settled
from themis_slurm.slurm.model import ManagedJob
from themis_slurm.state.intents import Intent
from themis_slurm.state.jobs import effective_ckpt, kept_after, saved_fraction, unsaved_work
from themis_slurm.state.rows import JobRow

from .conftest import run
from .fake_slurm import FakeSlurm


@pytest.mark.parametrize(("run_s", "ckpt", "kept"), [
    (100.0, None, 1.0), (100.0, math.inf, 0.0), (0.0, 30.0, 0.0), (100.0, 30.0, 0.9), (29.0, 30.0, 0.0),
    (100.0, 200.0, 0.0), (90.0, 30.0, 1.0),
])
def test_saved_fraction(run_s: float, ckpt: float | None, kept: float) -> None:
    assert saved_fraction(run_s, ckpt) == pytest.approx(kept)


def row(**kw: object) -> JobRow:
    base = dict(job_id="1", slurm_id=1, app_key="alice/a", intent=Intent.RUNNING, gpus=4, work=4000.0,
                first_seen=0.0)
    base.update(kw)
    return JobRow(**base)  # type: ignore[arg-type]


def managed(slurm: FakeSlurm, **kw: object) -> ManagedJob:
    jid = slurm.submit("alice", "a", 4, 1000.0, **kw)  # type: ignore[arg-type]
    return next(m for m in slurm.snapshot().managed if m.job_id == jid)


def test_unsaved_work_is_the_run_since_its_last_save() -> None:
    r = row(run_start=100.0, run_base=400.0, done_service=800.0, accounted_until=200.0)
    assert unsaved_work(r, None, 200.0, 800.0) == 0.0
    assert unsaved_work(r, math.inf, 200.0, 800.0) == 400.0           # the whole run
    assert unsaved_work(r, 30.0, 200.0, 800.0) == pytest.approx(40.0)  # 10 s of 100, at 4 GPU-s a second
    assert unsaved_work(r, math.inf, 200.0, 100.0) == 100.0            # never above the done work
    assert unsaved_work(row(done_service=800.0), math.inf, 200.0, 800.0) == 0.0  # no run counted
    assert kept_after(r, math.inf, 200.0) == 400.0


def test_the_owners_word_first_then_what_was_learned(slurm: FakeSlurm) -> None:
    assert effective_ckpt(managed(slurm), row()) is None
    assert effective_ckpt(managed(slurm), row(ckpt_learned="no")) == math.inf
    assert effective_ckpt(managed(slurm, saves=600.0, declared=True), row(ckpt_learned="no")) == 600.0
    assert effective_ckpt(managed(slurm, saves=None, declared=True), row(ckpt_learned="no")) is None


def test_a_requeue_takes_back_what_the_run_did_not_save(slurm: FakeSlurm) -> None:
    mj = managed(slurm, saves=math.inf, declared=True, progress=0.4)
    ran = row(run_start=100.0, run_base=0.0, done_service=400.0, accounted_until=200.0, progress=0.4)
    after, _, notes = runs_settled(ran, replace(mj, state="PENDING", start_time=None), None)
    assert (after.done_service, after.run_start, after.progress) == (0.0, None, None)
    assert len(notes) == 1 and "400 GPU-s of work since its last save lost" in notes[0]
    assert "does not checkpoint" in notes[0]
    # saved every 30 s: of a 100 s run, 90 s are kept
    mj30 = replace(mj, ckpt_s=30.0)
    after, _, _ = runs_settled(ran, replace(mj30, state="PENDING", start_time=None), None)
    assert after.done_service == pytest.approx(360.0) and after.run_base == after.done_service
    # a job that saves at the warning loses nothing and keeps its report
    plain = replace(mj, ckpt_s=None, ckpt_given=False)
    after, _, notes = runs_settled(ran, replace(plain, state="PENDING", start_time=None), None)
    assert (after.done_service, after.progress, after.resumed_from, notes) == (400.0, 0.4, 0.4, [])
    # a later run seen without the pending in between settles the first, then counts from its start
    after, _, _ = runs_settled(ran, replace(mj, state="RUNNING", start_time=300.0), None)
    assert (after.done_service, after.run_start, after.run_base) == (0.0, 300.0, 0.0)


def core_view(d, slurm: FakeSlurm, jid: str):  # type: ignore[no-untyped-def]
    """The core's Job for `jid` in the round themisd would build now."""
    ri = build_round(slurm.snapshot(), d.store.jobs(), d.store.apps(), d.cfg, slurm.now)
    return next(j for a in ri.state.apps for j in a.jobs if j.id == jid)


@pytest.mark.parametrize(("saves", "kept"), [(math.inf, 0.0), (30.0, 90.0), (None, 100.0)])
def test_a_run_is_charged_while_it_holds_its_gpus_and_settled_at_its_requeue(
        slurm: FakeSlurm, make_daemon, saves: float | None, kept: float) -> None:  # type: ignore[no-untyped-def]
    d = make_daemon()
    jid = slurm.submit("alice", "a", 4, 10_000.0, est_s=10_000.0, saves=saves, declared=True)
    run(d, slurm, 5)
    start = slurm.jobs[jid].start_time
    assert start is not None
    while slurm.now < start + 100.0:
        run(d, slurm, 5)
    d.cycle()  # accounted up to start + 100 s: 400 GPU-s done (sensitivity "low" on one node: factor 1)
    r = d.store.job(jid)
    assert (r.run_start, r.run_base, r.done_service) == (start, 0.0, pytest.approx(400.0))
    job = core_view(d, slurm, jid)
    assert job.done == pytest.approx(400.0) and job.unsaved == pytest.approx(400.0 - 4 * kept)
    slurm.node_down(next(iter(slurm.jobs[jid].node_gpus)))  # Slurm requeues it: it resumes from its last save
    d.cycle()
    r = d.store.job(jid)
    assert r.done_service == pytest.approx(4 * kept) and r.run_start is None
    if saves is not None:  # (a node failure warns nobody: only Themis's requeues come after a warning)
        assert slurm.jobs[jid].done_s == pytest.approx(kept)  # the fake job's truth agrees
    assert core_view(d, slurm, jid).unsaved == 0.0


def test_a_job_that_restarts_lower_after_a_requeue_is_learned_not_to_checkpoint(slurm: FakeSlurm, make_daemon) -> None:  # type: ignore[no-untyped-def]
    d = make_daemon()
    jid = slurm.submit("alice", "a", 4, 10_000.0, est_s=10_000.0, saves=math.inf)  # it says nothing
    run(d, slurm, 60)
    slurm.jobs[jid].progress = 0.5
    run(d, slurm, 10)
    assert d.store.job(jid).progress == 0.5
    slurm.user_requeue(jid)
    for _ in range(40):
        run(d, slurm, 5)
        if slurm.jobs[jid].state == "RUNNING":
            break
    assert slurm.jobs[jid].state == "RUNNING"
    run(d, slurm, 10)
    r = d.store.job(jid)
    assert r.resumed_from == 0.5 and r.ckpt_learned == "" and r.progress == 0.5  # the stale report proves nothing
    slurm.jobs[jid].progress = 0.05  # its first report of the new run: it started again from zero
    run(d, slurm, 5)
    r = d.store.job(jid)
    assert r.ckpt_learned == "no" and r.progress == 0.05 and r.resumed_from is None
    assert r.run_base == 0.0


def test_a_job_that_resumes_is_not_learned_and_the_owners_word_is_never_overridden(slurm: FakeSlurm, make_daemon) -> None:  # type: ignore[no-untyped-def]
    d = make_daemon()
    resumes = slurm.submit("alice", "a", 4, 10_000.0, est_s=10_000.0)
    declared = slurm.submit("bob", "b", 4, 10_000.0, est_s=10_000.0, saves=None, declared=True)
    run(d, slurm, 60)
    for jid in (resumes, declared):
        slurm.jobs[jid].progress = 0.5
    run(d, slurm, 10)
    for jid in (resumes, declared):
        slurm.user_requeue(jid)
    for _ in range(40):
        run(d, slurm, 5)
        if all(slurm.jobs[j].state == "RUNNING" for j in (resumes, declared)):
            break
    slurm.jobs[resumes].progress = 0.55
    slurm.jobs[declared].progress = 0.05  # its owner said it saves: a lower report is ignored, as ever
    run(d, slurm, 10)
    a, b = d.store.job(resumes), d.store.job(declared)
    assert (a.ckpt_learned, a.progress, a.resumed_from) == ("", 0.55, None)
    assert (b.ckpt_learned, b.progress) == ("", 0.5) and "below the last accepted" in b.progress_note


def test_a_claim_never_to_save_is_set_aside_when_the_job_goes_on_after_a_requeue(slurm: FakeSlurm, make_daemon) -> None:  # type: ignore[no-untyped-def]
    """--themis-ckpt=no makes every requeue look like the loss of a whole run (the job further behind than it
    is, its renewals favoured): a job that says so but resumes where it was loses the claim."""
    d = make_daemon()
    jid = slurm.submit("alice", "a", 4, 10_000.0, est_s=10_000.0, saves=None, declared=True, says=math.inf)
    run(d, slurm, 60)
    slurm.jobs[jid].progress = 0.5
    run(d, slurm, 10)
    assert effective_ckpt(next(m for m in slurm.snapshot().managed if m.job_id == jid), d.store.job(jid)) == math.inf
    slurm.user_requeue(jid)
    for _ in range(40):
        run(d, slurm, 5)
        if slurm.jobs[jid].state == "RUNNING":
            break
    r = d.store.job(jid)
    assert r.done_service < 100.0 and r.progress is None and r.resumed_from == 0.5  # taken at its word, for now
    slurm.jobs[jid].progress = 0.52  # it went on from where it was: it saved
    run(d, slurm, 5)
    r = d.store.job(jid)
    mj = next(m for m in slurm.snapshot().managed if m.job_id == jid)
    assert r.ckpt_learned == "yes" and effective_ckpt(mj, r) is None and r.progress == 0.52
    assert core_view(d, slurm, jid).unsaved == 0.0
