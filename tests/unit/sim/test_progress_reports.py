"""Progress reports in the simulator (SimConfig.progress_interval_s): what policies see, and what it buys."""

from __future__ import annotations

import math

import pytest

from themis_slurm.core.topology import Topology
from themis_slurm.policies import make_policy
from themis_slurm.sim.engine import SimConfig, simulate
from themis_slurm.sim.estimate_error import EstimateError
from themis_slurm.sim.metrics import compute
from themis_slurm.sim.trace import TraceJob
from themis_slurm.sim.workload_paper import scaled_workload

from .sim_policies import FifoFirstFit
from .test_engine import Spy

TOPO4 = Topology.uniform(1, 1, 4)


def seen(spy: Spy, job_id: str) -> list[tuple[float, float, float]]:
    """(time, done, work) of `job_id` in every state the policy was shown."""
    return [(c.state.now, j.done, j.work) for c in spy.seen for a in c.state.apps for j in a.jobs if j.id == job_id]


def test_a_running_job_reports_every_interval() -> None:
    # one 1-GPU job of 1,000 s whose estimate is 3x too long; a second job arrives at t = 250 and 650 so
    # that the policy is called while the first runs
    jobs = [TraceJob("a", "app", "u", 0.0, 1, 1000.0, None),
            TraceJob("b", "app2", "u", 250.0, 4, 10.0, None),
            TraceJob("c", "app3", "u", 650.0, 4, 10.0, None)]  # fmt: skip
    err = EstimateError("uniform", 3.0, 3.0)
    spy = Spy(FifoFirstFit())
    simulate(jobs, TOPO4, spy, SimConfig(estimate_error=err, progress_interval_s=200.0))
    views = {t: (done, work) for t, done, work in seen(spy, "a")}
    assert views[0.0] == (0.0, 3000.0)  # nothing reported yet: the estimate as given
    # at t = 250 the last report was at t = 200: 20 % of the 3,000 estimate is done
    assert views[250.0] == (pytest.approx(600.0), 3000.0)
    # at t = 650 the report of t = 600 (60 %): 40 % of the estimate left, the true fraction
    assert views[650.0] == (pytest.approx(1800.0), 3000.0)
    without = Spy(FifoFirstFit())
    simulate(jobs, TOPO4, without, SimConfig(estimate_error=err))
    assert {t: (d, w) for t, d, w in seen(without, "a")}[650.0] == (650.0, 3000.0)  # service only


def test_reports_change_nothing_when_estimates_are_exact() -> None:
    trace = scaled_workload(3, n_apps=4, jobs_per_app=6, duration_scale=0.05, app_interarrival_s=200)
    topo = Topology.uniform(2, 2, 4)
    plain = compute(simulate(trace, topo, make_policy("themis")))
    reported = compute(simulate(trace, topo, make_policy("themis"), SimConfig(progress_interval_s=60.0)))
    assert reported.summary.max_rho == pytest.approx(plain.summary.max_rho, rel=1e-6)


def test_reports_undo_most_of_what_over_estimates_cost_srtf() -> None:
    """Shortest-remaining-first ranks by the estimate: 1-3x over-estimates misorder it; reports fix that."""
    trace = scaled_workload(5, n_apps=6, jobs_per_app=8, duration_scale=0.05, app_interarrival_s=100)
    topo = Topology.uniform(2, 2, 4)
    err = EstimateError.parse("uniform:1:3")

    def mean_jct(cfg: SimConfig) -> float:
        return compute(simulate(trace, topo, make_policy("srtf"), cfg)).summary.mean_jct_s

    exact, wrong = mean_jct(SimConfig()), mean_jct(SimConfig(estimate_error=err))
    fixed = mean_jct(SimConfig(estimate_error=err, progress_interval_s=30.0))
    assert wrong > exact  # the errors cost something here
    assert abs(fixed - exact) < abs(wrong - exact)


def test_bad_interval_is_refused() -> None:
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="progress_interval_s"):
            SimConfig(progress_interval_s=bad)


def test_a_traces_own_estimate_is_what_policies_see() -> None:
    """A replayed Slurm job's time limit (TraceJob.estimate_s) is its estimate, not its true run time."""
    jobs = [TraceJob("a", "app", "u", 0.0, 2, 100.0, None, estimate_s=400.0),
            TraceJob("b", "app", "u", 0.0, 2, 100.0, None)]  # fmt: skip
    spy = Spy(FifoFirstFit())
    res = simulate(jobs, TOPO4, spy, SimConfig())
    first = {j.id: j.work for a in spy.seen[0].state.apps for j in a.jobs}
    assert first == {"a": 800.0, "b": 200.0}  # ideal GPU-seconds: estimate x GPUs
    assert {j.job_id: j.estimate for j in res.jobs} == {"a": 800.0, "b": 200.0}
    assert {j.job_id: j.finish for j in res.jobs} == {"a": 100.0, "b": 100.0}  # true run times drive completion
