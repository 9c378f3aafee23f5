"""Estimate calibration in the simulator (SimConfig.calibration): what policies see, and when."""

from __future__ import annotations

import pytest

from themis_slurm.core.calibration import CalibrationConfig
from themis_slurm.core.topology import Topology
from themis_slurm.policies import make_policy
from themis_slurm.sim.engine import SimConfig, simulate
from themis_slurm.sim.estimate_error import EstimateError
from themis_slurm.sim.metrics import compute
from themis_slurm.sim.trace import TraceJob
from themis_slurm.sim.workload_paper import scaled_workload

from .sim_policies import FifoFirstFit
from .test_engine import Spy

ONE_GPU = Topology.uniform(1, 1, 1)
CAL3 = CalibrationConfig(min_jobs=3, window=10)


def works(spy: Spy, job_id: str) -> dict[float, float]:
    """The estimate (Job.work) of `job_id` at every call that showed it."""
    return {c.state.now: j.work for c in spy.seen for a in c.state.apps for j in a.jobs if j.id == job_id}


def sequential(user: str, app: str, n: int, start: float = 0.0, limit: float = 200.0) -> list[TraceJob]:
    """n one-GPU jobs of 100 s submitted with a time limit of `limit` s (2x too long by default)."""
    return [TraceJob(f"{app}{i}", app, user, start, 1, 100.0, None, estimate_s=limit) for i in range(n)]


def test_a_users_estimates_shrink_once_enough_of_their_jobs_finished() -> None:
    spy = Spy(FifoFirstFit())
    simulate(sequential("u", "a", 6), ONE_GPU, spy, SimConfig(calibration=CAL3))
    seen = works(spy, "a5")
    assert seen[0.0] == seen[200.0] == 200.0, "two finished jobs are not enough"
    # the third finished at t = 300: the median ratio 100/200 = 0.5 halves every later estimate
    assert seen[300.0] == pytest.approx(100.0) and seen[400.0] == pytest.approx(100.0)


def test_without_calibration_estimates_stay_as_submitted() -> None:
    spy = Spy(FifoFirstFit())
    simulate(sequential("u", "a", 6), ONE_GPU, spy, SimConfig(calibration=CalibrationConfig(enabled=False)))
    assert set(works(spy, "a5").values()) == {200.0}


def test_a_new_user_gets_the_cluster_factor_and_its_own_running_job_is_scaled_too() -> None:
    # bob arrives after alice's three jobs finished; his own limit is 4x too long, but he has no history
    jobs = sequential("alice", "a", 3) + sequential("bob", "b", 4, start=350.0, limit=400.0)
    spy = Spy(FifoFirstFit())
    simulate(jobs, ONE_GPU, spy, SimConfig(calibration=CAL3))
    assert works(spy, "b3")[350.0] == pytest.approx(200.0), "alice's median 0.5 is the cluster's"
    # after bob's own three jobs, his median (0.25) replaces it, also for the job already running
    assert works(spy, "b3")[650.0] == pytest.approx(100.0)


def test_exact_estimates_change_nothing() -> None:
    """With exact estimates every ratio is 1: calibration changes nothing, decision for decision."""
    trace = scaled_workload(3, n_apps=4, jobs_per_app=6, duration_scale=0.05, app_interarrival_s=200)
    topo = Topology.uniform(2, 2, 4)
    on = simulate(trace, topo, make_policy("themis"), SimConfig(calibration=CalibrationConfig(min_jobs=1)))
    off = simulate(trace, topo, make_policy("themis"), SimConfig(calibration=CalibrationConfig(enabled=False)))
    assert [(j.job_id, j.first_start, j.finish) for j in on.jobs] == [(j.job_id, j.first_start, j.finish) for j in off.jobs]


def test_calibration_undoes_most_of_a_shared_over_estimate_for_themis() -> None:
    """Every estimate 3x too long: calibrated, Themis's max rho comes back close to the exact-estimate run."""
    trace = scaled_workload(5, n_apps=8, jobs_per_app=12, duration_scale=0.05, app_interarrival_s=100)
    topo = Topology.uniform(2, 2, 4)
    err = EstimateError.parse("uniform:3:3")

    def max_rho(cfg: SimConfig) -> float:
        return compute(simulate(trace, topo, make_policy("themis", solver="fast"), cfg)).summary.max_rho

    exact = max_rho(SimConfig(calibration=CalibrationConfig(enabled=False)))
    raw = max_rho(SimConfig(estimate_error=err, calibration=CalibrationConfig(enabled=False)))
    calibrated = max_rho(SimConfig(estimate_error=err, calibration=CalibrationConfig(min_jobs=3)))
    assert abs(calibrated - exact) < abs(raw - exact), (exact, raw, calibrated)


def test_a_user_who_under_estimates_gets_estimates_raised_to_the_tolerance() -> None:
    # a limit of 10 s for jobs of 100 s: ratio 10, raised by 10 / 1.25 = 8 once three jobs finished
    spy = Spy(FifoFirstFit())
    simulate(sequential("u", "a", 6, limit=10.0), ONE_GPU, spy, SimConfig(calibration=CAL3))
    seen = works(spy, "a5")
    assert seen[0.0] == 10.0
    assert seen[300.0] == pytest.approx(80.0)
