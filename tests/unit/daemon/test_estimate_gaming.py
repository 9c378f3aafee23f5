"""Understated estimates in themisd (issue #33 item 6; core/calibration.py): a new user's claims are held to
their peers', running overruns raise a user's estimates at once, and the simulator applies the same rule
(the same numbers from the same situation)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from themis_slurm.core.calibration import FROM_PEERS, FROM_RUNNING, FROM_USER, CalibrationConfig
from themis_slurm.core.topology import Topology
from themis_slurm.daemon.config import EstimatesConfig
from themis_slurm.daemon.loop import Daemon
from themis_slurm.policies import make_policy
from themis_slurm.sim.engine import SimConfig, simulate
from themis_slurm.sim.trace import TraceJob
from themis_slurm.state.store import Store

from .conftest import daemon_config, run
from .fake_slurm import FakeSlurm

BEFORE = dict(calibration_running=False, calibration_peer_floor=False, calibration_prior_users=10**9)


def config(tmp_path: Path, **est: object):
    knobs = dict(default_s=600.0, min_s=10.0, max_s=1e6)
    knobs.update(est)
    return replace(daemon_config(tmp_path / "state"), estimates=EstimatesConfig(**knobs))  # type: ignore[arg-type]


def liar_case(slurm: FakeSlurm) -> tuple[list[str], list[str]]:
    """8 one-GPU jobs of 300 s each: an honest user's claiming 300 s, then a new user's claiming 60 s."""
    honest = [slurm.submit("honest", "array", 1, 300.0, est_s=300.0) for _ in range(8)]
    liar = [slurm.submit("liar", "array", 1, 300.0, est_s=60.0) for _ in range(8)]
    return honest, liar


def granted(d: Daemon, ids: list[str]) -> int:
    return sum(1 for j in ids if d.store.job(j).intent != "waiting")


def test_a_new_users_claims_count_for_no_less_than_their_peers(
    slurm: FakeSlurm, make_daemon: Callable[..., Daemon], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = make_daemon(config(tmp_path))
    honest, liar = liar_case(slurm)
    with caplog.at_level(logging.INFO, logger="themisd"):
        d.cycle()
    rows = {j: d.store.job(j) for j in honest + liar}
    assert {(rows[j].est_work, rows[j].est_factor, rows[j].work) for j in liar} == {(60.0, 5.0, 300.0)}
    assert {(rows[j].est_factor, rows[j].work) for j in honest} == {(1.0, 300.0)}
    assert d.calibration().source("liar") == FROM_PEERS
    assert "calibration user=liar: factor 5 from peers" in caplog.text
    # the first round: the liar no longer gets more than the honest user who asked first
    assert granted(d, liar) <= granted(d, honest)


def test_before_the_rules_the_liar_took_the_first_round(
    slurm: FakeSlurm, make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    """What the test above guards against (so that it can fail): with the old rules the liar's claims
    stand and its apps' virtual deadlines come first."""
    d = make_daemon(config(tmp_path, **BEFORE))
    honest, liar = liar_case(slurm)
    d.cycle()
    assert d.store.job(liar[0]).work == 60.0
    assert granted(d, liar) > granted(d, honest)


class Recorder:
    """Wraps a policy and keeps every state it was shown with the decision it made."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.calls = inner, inner.name, []
        self.grants_only_free_or_expired = inner.grants_only_free_or_expired

    def schedule(self, ctx):
        decision = self.inner.schedule(ctx)
        self.calls.append((ctx.state, decision))
        return decision

    def next_wakeup(self, now: float):
        return self.inner.next_wakeup(now)


def test_the_first_round_is_the_simulators(
    slurm: FakeSlurm, make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    """The same case in the simulator (same topology, same knobs, both users there at the first call) sees
    the same estimates and grants the same number of GPUs per user as themisd's first round."""
    d = make_daemon(config(tmp_path))
    honest, liar = liar_case(slurm)
    d.cycle()
    trace = [
        TraceJob(f"{u}{i}", f"{u}/array", u, 0.0, 1, 300.0, estimate_s=est)
        for u, est in (("honest", 300.0), ("liar", 60.0))
        for i in range(8)
    ]
    rec = Recorder(make_policy("themis", d.cfg.scheduler.arbiter()))
    simulate(trace, slurm.topo, rec, SimConfig(restart_cost_s=d.cfg.scheduler.restart_cost_s))
    state, decision = rec.calls[0]
    assert {j.work for a in state.apps if a.owner == "liar" for j in a.jobs} == {300.0}
    sim = {u: sum(1 for g in decision.grants if g.job_id.startswith(u)) for u in ("honest", "liar")}
    assert sim == {"honest": granted(d, honest), "liar": granted(d, liar)}


def test_running_overruns_raise_a_users_estimates_at_once_as_in_the_simulator(tmp_path: Path) -> None:
    """Three GPUs, four one-GPU jobs of 600 s claiming 60 s (min_jobs 3): while three run, themisd's factor
    follows their run time (ratio / 1.25) as the simulator's does, a poll interval behind at most."""
    slurm = FakeSlurm(Topology.uniform(1, 1, 3))
    cfg = config(tmp_path, calibration_min_jobs=3, calibration_window=10)
    store = Store(cfg.db_path)
    try:
        d = Daemon(cfg, slurm, store)
        ids = [slurm.submit("u", "sweep", 1, 600.0, est_s=60.0) for _ in range(4)]
        d.cycle()
        slurm.advance(5.0)
        started = slurm.now
        factors: dict[float, float] = {}
        while slurm.now - started < 300.0:
            d.cycle()
            factors[slurm.now - started] = d.calibration().factor("u")
            slurm.advance(5.0)
        assert d.calibration().source("u") == FROM_RUNNING
        waiting = [j for j in ids if d.store.job(j).intent == "waiting"]
        assert waiting and d.store.job(waiting[0]).work == pytest.approx(60.0 * factors[295.0])
    finally:
        store.close()
    jobs = [TraceJob(f"j{i}", "u/sweep", "u", 0.0, 1, 600.0, estimate_s=60.0) for i in range(4)]
    rec = Recorder(Ticking(make_policy("fifo")))
    simulate(
        jobs, Topology.uniform(1, 1, 3), rec, SimConfig(calibration=CalibrationConfig(min_jobs=3, window=10))
    )
    sim = {st.now: j.work / 60.0 for st, _ in rec.calls for a in st.apps for j in a.jobs if j.id == "j3"}
    for t in (150.0, 240.0):
        assert sim[t] == pytest.approx(t / 60.0 / 1.25)
        # themisd accounts run time at its polls and calibrates before this poll's accounting
        assert sim[t] - 10.0 / 60.0 / 1.25 <= factors[t] <= sim[t] + 1e-9, (t, factors[t], sim[t])


class Ticking(Recorder):
    """A policy called every 30 s as well (the calls show the estimates moving while jobs run)."""

    def next_wakeup(self, now: float) -> float | None:
        return now + 30.0


def test_a_history_its_running_jobs_contradict_no_longer_shields_a_liar(tmp_path: Path) -> None:
    """Three GPUs, min_jobs 3: user u first completes three 60 s jobs claiming 60 s (its own factor, 1),
    then claims 60 s for four 600 s jobs next to h's job claiming 300 s. Once u's running jobs have run far
    enough past 60 s to outweigh that history, it is contradicted and u's claims count as a newcomer's:
    at h's 300 s (factor 5), not at u's proven ratio / 1.25 as before (core/calibration.py)."""
    slurm = FakeSlurm(Topology.uniform(1, 1, 3))
    cfg = config(tmp_path, calibration_min_jobs=3, calibration_window=10)
    store = Store(cfg.db_path)
    try:
        d = Daemon(cfg, slurm, store)
        warmup = [slurm.submit("u", "warmup", 1, 60.0, est_s=60.0) for _ in range(3)]
        run(d, slurm, 120)
        assert all(j in slurm.completed for j in warmup)
        d.cycle()
        assert d.calibration().source("u") == FROM_USER and d.calibration().factor("u") == 1.0
        ids = [slurm.submit("u", "sweep", 1, 600.0, est_s=60.0) for _ in range(4)]
        slurm.submit("h", "a", 1, 300.0, est_s=300.0)
        seen: list[tuple[float, float, str]] = []  # (most run by a u job, u's factor, its source)
        for _ in range(60):
            d.cycle()
            done = max((slurm.jobs[j].done_s for j in ids if j in slurm.jobs), default=0.0)
            seen.append((done, d.calibration().factor("u"), d.calibration().source("u")))
            slurm.advance(5.0)
        assert all(f == 1.0 for done, f, _ in seen if done <= 75.0), "inside the claims x 1.25: its history"
        late = [(f, src) for done, f, src in seen if done >= 200.0]
        assert late and set(late) == {(5.0, FROM_PEERS)}, seen
        waiting = [j for j in ids if d.store.job(j) is not None and d.store.job(j).intent == "waiting"]
        assert waiting and {d.store.job(j).work for j in waiting} == {300.0}
    finally:
        store.close()
