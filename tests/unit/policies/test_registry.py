"""The registry: names, factories with keyword options, clear errors."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from themis_slurm.core.arbiter import ArbiterConfig
from themis_slurm.core.calibration import CalibrationConfig
from themis_slurm.core.topology import Topology
from themis_slurm.policies import NAMES, POLICIES, ThemisPolicy, make_policy, policy_options
from themis_slurm.sim.engine import SimConfig, Simulator
from themis_slurm.sim.estimate_error import EstimateError
from themis_slurm.sim.trace import PROFILE_MODELS, TraceJob

ALL = ["themis", "fairshare", "fifo", "ftf", "gandiva", "maxmin", "optimus", "slaq", "slurm", "srtf", "tiresias"]


def test_every_policy_is_registered_and_named() -> None:
    assert sorted(POLICIES) == sorted(ALL)
    assert list(NAMES) == list(POLICIES) == ["themis", *sorted(ALL[1:])]
    for name in ALL:
        p = make_policy(name)
        assert p.name == name
        assert callable(p.schedule) and callable(p.next_wakeup)


def test_themis_options_reach_the_arbiter_config() -> None:
    p = POLICIES["themis"](lease_s=1200, fairness_knob=0.5)
    assert isinstance(p, ThemisPolicy)
    assert p.config.lease_s == 1200 and p.config.fairness_knob == 0.5


def test_options_meant_for_other_policies_are_ignored() -> None:
    p = make_policy("tiresias", lease_s=600, fairness_knob=0.8, promote_knob=2.0)
    assert p.promote_knob == 2.0
    g = make_policy("gandiva", quantum_s=60, weight_age=5)
    assert g.quantum == 60


def test_typo_fails_loudly_with_the_accepted_options() -> None:
    with pytest.raises(ValueError, match="quantum_s"):
        make_policy("gandiva", quantum=60)


def test_unknown_name_lists_known_ones() -> None:
    with pytest.raises(ValueError, match="known: themis, fairshare, fifo"):
        make_policy("drf")
    assert make_policy(" SRTF ").name == "srtf"


def test_policy_options_lists_constructor_arguments() -> None:
    assert "thresholds" in policy_options("tiresias")
    assert "decay_half_life_s" in policy_options("slurm")
    assert "fairness_knob" in policy_options("themis")


def test_bad_option_values_are_rejected() -> None:
    with pytest.raises(ValueError):
        make_policy("tiresias", thresholds=(100.0, 50.0))
    with pytest.raises(ValueError):
        make_policy("gandiva", quantum_s=0)


def test_config_builds_themis_and_options_override_it() -> None:
    cfg = ArbiterConfig(lease_s=900.0, seed=3, restart_cost_s=12.0)
    p = make_policy("themis", cfg, fairness_knob=0.5)
    assert isinstance(p, ThemisPolicy) and p.config == replace(cfg, fairness_knob=0.5)
    assert make_policy("themis").config == ArbiterConfig()
    assert POLICIES["themis"](cfg).config == cfg
    assert make_policy("gandiva", cfg, quantum_s=60).quantum == 60  # baselines have no Themis knob
    with pytest.raises(TypeError, match="ArbiterConfig"):
        make_policy("themis", {"lease_s": 900.0})


def _declared(attribute: str) -> dict[str, bool]:
    """Each registered policy's class-level declaration of `attribute` (a bool on the class itself)."""
    out = {}
    for name in NAMES:
        cls = type(make_policy(name))
        assert isinstance(vars(cls).get(attribute), bool), f"{name} does not declare {attribute}"
        out[name] = getattr(cls, attribute)
    return out


def test_every_policy_declares_whether_it_only_grants_free_or_expired() -> None:
    passive = _declared("grants_only_free_or_expired")
    assert passive == {"themis": True, "fifo": True, "optimus": True, "slurm": True, "gandiva": False,
                       "maxmin": False, "fairshare": False, "ftf": False, "slaq": False, "srtf": False, "tiresias": False}  # fmt: skip


def _job_outcomes(name: str, cfg: SimConfig) -> list[tuple]:
    """Every job's first start, finish, starts and preemptions when `name` runs 60 jobs of 1-4 GPUs (5 apps,
    3 users, a mix of placement profiles) on 8 GPUs."""
    topo = Topology.uniform(2, 2, 2)
    rng = np.random.default_rng(5)
    trace = [TraceJob(f"j{i}", f"a{i % 5}", f"u{i % 3}", float(rng.uniform(0, 20_000)), int(rng.choice([1, 1, 2, 4])),
                      float(rng.lognormal(np.log(3600.0), 0.8)), PROFILE_MODELS[i % len(PROFILE_MODELS)])
             for i in range(60)]  # fmt: skip
    res = Simulator(trace, topo, make_policy(name), cfg).run()
    return [(j.job_id, j.first_start, j.finish, j.starts, j.preemptions) for j in res.jobs]


def test_every_policy_declares_whether_it_reads_estimates_and_false_means_estimates_change_nothing() -> None:
    """A policy that declares reads_estimates = False is run once for all the evaluation's estimate
    experiments (benchmarks/paper_eval.py): with estimate errors, calibration and progress reports its
    every job starts and ends exactly as with exact estimates. The policies that read estimates show
    that the same workload is sensitive to them."""
    declared = _declared("reads_estimates")
    assert declared == {"themis": True, "fairshare": False, "fifo": False, "ftf": True, "gandiva": False,
                        "maxmin": False, "optimus": True, "slaq": True, "slurm": True, "srtf": True,
                        "tiresias": False}  # fmt: skip
    exact = SimConfig(round_interval_s=120.0)
    wrong = replace(exact, estimate_error=EstimateError.parse("uniform:1:3"), progress_interval_s=600.0,
                    calibration=CalibrationConfig(min_jobs=2))  # fmt: skip
    changed = set()
    for name, reads in declared.items():
        if reads and name not in ("srtf", "ftf"):
            continue  # two that read estimates are enough to show the workload is sensitive to them
        same = _job_outcomes(name, exact) == _job_outcomes(name, wrong)
        assert same or reads, f"{name} declares reads_estimates = False, yet estimate errors changed its schedule"
        if not same:
            changed.add(name)
    assert changed == {"srtf", "ftf"}
