"""Metrics on a hand-computed scenario, and Jain's index."""

from __future__ import annotations

import pytest

from themis_slurm.core.topology import Topology
from themis_slurm.policies.base import ThemisPolicy
from themis_slurm.sim.engine import SimConfig, simulate
from themis_slurm.sim.metrics import SUMMARY_KEYS, compute, jain_index
from themis_slurm.sim.trace import TraceJob

from .sim_policies import FifoFirstFit

# 4 GPUs on one node; placement-insensitive jobs. App A: two 2-GPU jobs of 100 s at t=0 (work 400).
# App B: one 4-GPU job of 100 s at t=50 (work 400). A runs 0-100; B waits, then runs 100-200.
# Contention: 1 app on [0,50), 2 on [50,100), 1 on [100,200).
#   A: life [0,100], N = (50*1 + 50*2)/100 = 1.5, share = min(peak 4, 4/1.5) = 8/3, T_id = 400/(8/3) = 150,
#      T_sh = 100, rho = 2/3.
#   B: life [50,200], N = (50*2 + 100*1)/150 = 4/3, share = min(4, 3) = 3, T_id = 400/3, T_sh = 150,
#      rho = 1.125.
JOBS = [
    TraceJob("a1", "A", "u", 0.0, 2, 100.0),
    TraceJob("a2", "A", "u", 0.0, 2, 100.0),
    TraceJob("b1", "B", "v", 50.0, 4, 100.0),
]


@pytest.mark.parametrize("policy", [FifoFirstFit(), ThemisPolicy()], ids=["fifo", "themis"])
def test_hand_computed_rho(policy):
    res = simulate(JOBS, Topology.uniform(1, 1, 4), policy, SimConfig(restart_cost_s=0, default_profile="none"))
    m = compute(res)
    a, b = m.apps
    assert (a.app_id, b.app_id) == ("A", "B")
    assert a.contention == pytest.approx(1.5) and b.contention == pytest.approx(4 / 3)
    assert a.t_sh == pytest.approx(100) and b.t_sh == pytest.approx(150)
    assert a.t_id == pytest.approx(150) and b.t_id == pytest.approx(400 / 3)
    assert a.rho == pytest.approx(2 / 3) and b.rho == pytest.approx(1.125)
    s = m.summary
    assert s.max_rho == pytest.approx(1.125)
    assert s.median_rho == pytest.approx((2 / 3 + 1.125) / 2)
    assert s.frac_rho_le_1 == pytest.approx(0.5)
    x = [1.5, 1 / 1.125]  # Jain over T_id / T_sh
    assert s.jain == pytest.approx(sum(x) ** 2 / (2 * (x[0] ** 2 + x[1] ** 2)))
    assert s.gpu_hours == pytest.approx(800 / 3600) == s.ideal_gpu_hours
    assert s.makespan_s == pytest.approx(200) and s.utilization == pytest.approx(1.0)
    assert s.mean_app_completion_s == pytest.approx(125)
    assert s.mean_jct_s == pytest.approx((100 + 100 + 150) / 3)
    # JCTs 100, 100, 150 (b1 waits 50 s for a's GPUs); numpy's linear p95 of three: 100 + 0.9 x 50
    assert (s.median_jct_s, s.p95_jct_s) == (pytest.approx(100), pytest.approx(145))
    assert s.mean_slowdown == pytest.approx((1 + 1 + 1.5) / 3)  # each job's JCT over its 100 s alone
    assert sorted(m.jcts) == pytest.approx([100, 100, 150])
    assert s.preemptions == 0
    assert list(s.public()) == list(SUMMARY_KEYS)


def test_placement_factor_in_t_id_and_gpu_hours():
    """A 2-GPU VGG16 job on a cluster of 1-GPU nodes must cross machines: factor 0.72 in T_id and progress."""
    jobs = [TraceJob("v", "V", "u", 0.0, 2, 72.0, "vgg16")]
    m = compute(simulate(jobs, Topology.uniform(1, 2, 1), FifoFirstFit()))
    (app,) = m.apps
    assert app.t_sh == pytest.approx(100.0)  # 144 GPU-s at 2 x 0.72 per s
    assert app.t_id == pytest.approx(100.0) and app.rho == pytest.approx(1.0)
    assert m.summary.gpu_hours == pytest.approx(200 / 3600)


def test_jain_index():
    assert jain_index([1, 1, 1]) == pytest.approx(1.0)
    assert jain_index([1, 0, 0, 0]) == pytest.approx(0.25)
    assert jain_index([]) == 1.0
