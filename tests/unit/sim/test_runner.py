"""Building policies from the knobs the CLI and the evaluation set."""

from __future__ import annotations

from themis_slurm.policies.base import ThemisPolicy
from themis_slurm.sim.runner import PolicyKnobs, make_policy, registry


def test_themis_gets_every_knob() -> None:
    knobs = PolicyKnobs(fairness_knob=0.5, lease_s=1200.0, seed=7, restart_cost_s=12.0, solver="fast",
                        reserve_wide_gangs=True)  # fmt: skip
    policy = make_policy("themis", knobs)
    assert isinstance(policy, ThemisPolicy)
    cfg = policy.config
    assert (cfg.fairness_knob, cfg.lease_s, cfg.seed, cfg.restart_cost_s, cfg.solver) == (0.5, 1200.0, 7, 12.0, "fast")
    assert cfg.reserve_wide_gangs


def test_baselines_ignore_themis_only_knobs() -> None:
    knobs = PolicyKnobs(restart_cost_s=12.0, solver="exact")
    for name in registry():
        assert make_policy(name, knobs).name == name
