"""A whole simulation with the agent's order inside an app (core/agent.py, pace_order) against longest
first throughout: the short jobs end sooner and no app ends later against its private share."""

from __future__ import annotations

import pytest

from themis_slurm.core import agent as agent_module
from themis_slurm.core.arbiter import ArbiterConfig
from themis_slurm.core.topology import Topology
from themis_slurm.policies import make_policy
from themis_slurm.sim.engine import SimConfig, Simulator
from themis_slurm.sim.metrics import compute
from themis_slurm.sim.trace import Trace, TraceJob

H = 3600.0


def _trace() -> Trace:
    """Two sweeps on 8 GPUs, arriving together: each one long job and six short ones (a private share of
    4 GPUs each: the long job must start at once, the short ones have room)."""
    jobs = []
    for app, t0 in (("a", 0.0), ("b", 0.0)):
        jobs.append(TraceJob(f"{app}-long", app, app, t0, 1, 6 * H))
        for k, d in enumerate((0.5, 1.0, 0.75, 1.5, 0.25, 1.25)):
            jobs.append(TraceJob(f"{app}-s{k}", app, app, t0, 1, d * H))
    return Trace(tuple(jobs), "two sweeps")


def _run():
    topo = Topology.uniform(1, 2, 4)
    result = Simulator(_trace(), topo, make_policy("themis", ArbiterConfig(seed=0)), SimConfig(seed=0)).run()
    return compute(result)


def test_pace_order_lowers_mean_jct_without_raising_any_apps_rho(monkeypatch: pytest.MonkeyPatch) -> None:
    pace = _run()
    # every job cannot wait: longest remaining run first throughout, the order before pace_order
    monkeypatch.setattr(agent_module, "cannot_wait", lambda facts, *_: tuple(range(len(facts) - 1, -1, -1)))
    longest = _run()
    assert pace.summary.mean_jct_s < longest.summary.mean_jct_s
    rho_pace = {a.app_id: a.rho for a in pace.apps}
    rho_longest = {a.app_id: a.rho for a in longest.apps}
    assert rho_pace.keys() == rho_longest.keys() == {"a", "b"}
    for app, rho in rho_pace.items():
        assert rho <= rho_longest[app] + 1e-9, (app, rho, rho_longest[app])
