"""The simulator calls every policy with the cyclic collector paused (themis_slurm/gc_pause.py)."""

from __future__ import annotations

import gc

from themis_slurm.core.arbiter import ArbiterConfig
from themis_slurm.core.topology import Topology
from themis_slurm.policies.base import ThemisPolicy
from themis_slurm.sim.engine import simulate
from themis_slurm.sim.trace import TraceJob


class _Watch(ThemisPolicy):
    """Themis, noting whether the collector ran during each call."""

    def __init__(self) -> None:
        super().__init__(ArbiterConfig(lease_s=300))
        self.enabled: list[bool] = []

    def schedule(self, ctx):
        self.enabled.append(gc.isenabled())
        return super().schedule(ctx)


def test_simulator_calls_policies_with_the_collector_paused() -> None:
    jobs = [TraceJob(f"j{i}", f"app{i % 3}", "u", 60.0 * i, 1 + i % 2, 900.0, "resnet50") for i in range(8)]
    policy = _Watch()
    res = simulate(jobs, Topology.uniform(1, 2, 4), policy)
    assert policy.enabled and not any(policy.enabled)
    assert len(res.jobs) == 8 and gc.isenabled()
