"""Understated estimates in the simulator (issue #33 item 6; core/calibration.py): the issue's liar case
gets no more than an equal share, a user's running overruns raise their waiting jobs at once, and the
bound holds with tenancy off (apps alone count)."""

from __future__ import annotations

import math

import pytest

from themis_slurm.core.arbiter import ArbiterConfig
from themis_slurm.core.calibration import CalibrationConfig
from themis_slurm.core.topology import Topology
from themis_slurm.policies import make_policy
from themis_slurm.sim.engine import SimConfig, SimResult, simulate
from themis_slurm.sim.trace import TraceJob

from .sim_policies import FifoFirstFit
from .test_engine import Spy

#: the rules before issue #33: finished jobs only, and a prior that never raises
BEFORE = CalibrationConfig(running=False, peer_floor=False, prior_users=10**9)


def case(packaging: str, waves: int, liar_claim_s: float) -> list[TraceJob]:
    """The issue's case: 16 one-GPU jobs of 5 minutes each for an honest user (est=5m, at t = 1 s) and a
    new user claiming `liar_claim_s` (at t = 2 s), `waves` times over; one app per user or per job."""
    jobs = []
    for user, claim, t0 in (("honest", 300.0, 1.0), ("second", liar_claim_s, 2.0)):
        for w in range(waves):
            for i in range(16):
                app = f"{user}/array" if packaging == "array" else f"{user}/job{i}"
                jobs.append(TraceJob(f"{user}.{w}.{i}", app, user, t0, 1, 300.0, estimate_s=claim))
    return jobs


def run(jobs: list[TraceJob], lease_s: float, cal: CalibrationConfig) -> SimResult:
    policy = make_policy("themis", ArbiterConfig(lease_s=lease_s, restart_cost_s=60.0))
    cfg = SimConfig(record_allocations=True, round_interval_s=5.0, restart_cost_s=60.0, calibration=cal)
    return simulate(jobs, Topology.uniform(2, 2, 4), policy, cfg)


def second_share(res: SimResult, end: float) -> float:
    """The second user's share of the GPU time held in [0, end]."""

    def held(prefix: str) -> float:
        return sum(
            len(g) * max(0.0, min(e, end) - s) for j, g, s, e in res.allocations if j.startswith(prefix)
        )

    return held("second.") / held("")


CASES = [
    (lease, packaging, waves)
    for lease in (45.0, 600.0)
    for packaging in ("array", "jobs")
    for waves in (1, 4)
]


@pytest.mark.parametrize("lease, packaging, waves", CASES)
def test_the_liar_gets_what_an_honest_second_user_gets(lease: float, packaging: str, waves: int) -> None:
    """The target: over the first 15 minutes the liar holds at most an equal share + 10% (55%); and in
    every window (1, 6, 15 minutes) within 5 points of what an honest user in its place gets (Themis is not
    indifferent to arrival order: that is the equal share a second user can expect)."""
    liar = run(case(packaging, waves, 60.0), lease, CalibrationConfig())
    honest = run(case(packaging, waves, 300.0), lease, CalibrationConfig())
    assert second_share(liar, 900.0) <= 0.55
    for end in (60.0, 360.0, 900.0):
        assert second_share(liar, end) <= second_share(honest, end) + 0.05, end


def test_before_the_rules_the_liar_won_the_first_minute() -> None:
    """The same case with the rules of before: the test above would fail (81% of the first minute against
    an honest second user's 44%), so it measures the rules, not the case."""
    liar = run(case("array", 1, 60.0), 45.0, BEFORE)
    honest = run(case("array", 1, 300.0), 45.0, BEFORE)
    assert second_share(liar, 60.0) > second_share(honest, 60.0) + 0.3


class Ticking(FifoFirstFit):
    """FIFO first-fit called every 30 s: the calls show the estimates as they move while jobs run."""

    def next_wakeup(self, now: float) -> float | None:
        return now + 30.0


def works(spy: Spy, job_id: str) -> dict[float, float]:
    return {c.state.now: j.work for c in spy.seen for a in c.state.apps for j in a.jobs if j.id == job_id}


def overrunning(cal: CalibrationConfig) -> dict[float, float]:
    """Three GPUs, four one-GPU jobs of 600 s claiming 60 s: three run, the fourth waits; its estimate at
    every call."""
    jobs = [TraceJob(f"j{i}", "u/sweep", "u", 0.0, 1, 600.0, estimate_s=60.0) for i in range(4)]
    spy = Spy(Ticking())
    simulate(jobs, Topology.uniform(1, 1, 3), spy, SimConfig(calibration=cal))
    return works(spy, "j3")


def test_running_jobs_past_their_estimates_raise_the_waiting_ones_at_once() -> None:
    seen = overrunning(CalibrationConfig(min_jobs=3, window=10))
    assert seen[0.0] == 60.0 and seen[60.0] == 60.0, "at 60 s the claim is met, not yet passed"
    # at 150 s the three running jobs prove a ratio of 2.5: 60 x 2.5 / 1.25 = 120; at 300 s, 60 x 5 / 1.25
    assert seen[150.0] == pytest.approx(120.0) and seen[300.0] == pytest.approx(240.0)
    assert seen[570.0] == pytest.approx(60.0 * 9.5 / 1.25)
    # before: nothing moved until jobs finished (none has at 570 s)
    before = overrunning(CalibrationConfig(min_jobs=3, window=10, running=False))
    assert {w for t, w in before.items() if t < 600.0} == {60.0}


def test_exact_estimates_still_change_nothing_with_many_users() -> None:
    """Honest users with equal claims: no overrun, no claim below another's: the new rules are silent."""
    jobs = [
        TraceJob(f"{u}{i}", f"{u}/a", u, float(k), 1, 100.0 + 10 * i, estimate_s=100.0 + 10 * i)
        for k, u in enumerate("abcd")
        for i in range(5)
    ]
    topo = Topology.uniform(1, 2, 4)
    on = simulate(jobs, topo, make_policy("themis"), SimConfig())
    off = simulate(jobs, topo, make_policy("themis"), SimConfig(calibration=BEFORE))
    assert [(j.job_id, j.first_start, j.finish) for j in on.jobs] == [
        (j.job_id, j.first_start, j.finish) for j in off.jobs
    ]
    assert not math.isnan(on.jobs[0].finish)
