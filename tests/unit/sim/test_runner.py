"""Running experiments: policies come from the one registry, Themis's knobs from one ArbiterConfig."""

from __future__ import annotations

import dataclasses

from themis_slurm.core.arbiter import ArbiterConfig
from themis_slurm.core.topology import Topology
from themis_slurm.policies import NAMES, ThemisPolicy, make_policy
from themis_slurm.sim import runner
from themis_slurm.sim.engine import SimConfig
from themis_slurm.sim.trace import TraceJob


def test_themis_gets_every_knob() -> None:
    knobs = ArbiterConfig(fairness_knob=0.5, lease_s=1200.0, seed=7, restart_cost_s=12.0, solver="fast",
                          reserve_wide_gangs=True)  # fmt: skip
    policy = make_policy("themis", knobs)
    assert isinstance(policy, ThemisPolicy)
    assert policy.config == knobs


def test_baselines_ignore_themis_knobs() -> None:
    knobs = ArbiterConfig(restart_cost_s=12.0, solver="exact")
    for name in NAMES:
        assert make_policy(name, knobs).name == name


def test_run_policies_builds_through_the_registry(monkeypatch) -> None:
    built: list[tuple[str, ArbiterConfig]] = []

    def spy(name: str, config: ArbiterConfig | None = None, **options):
        built.append((name, config))
        return make_policy(name, config, **options)

    monkeypatch.setattr(runner, "make_policy", spy)
    jobs = [TraceJob(f"j{k}", f"a{k % 2}", "u", 10.0 * k, 1, 100.0) for k in range(4)]
    knobs = ArbiterConfig(lease_s=120.0)
    out = runner.run_policies(jobs, Topology.uniform(1, 1, 2), ["themis", "fifo"], knobs, SimConfig())
    assert list(out) == ["themis", "fifo"]
    assert built == [("themis", knobs), ("fifo", knobs)]


def test_world_restart_cost_defaults_to_what_themis_assumes() -> None:
    assert SimConfig().restart_cost_s == ArbiterConfig().restart_cost_s
    assert "restart_cost_s" not in {f.name for f in dataclasses.fields(runner.WorkloadSpec)}
