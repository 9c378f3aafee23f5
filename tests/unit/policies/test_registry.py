"""The registry: names, factories with keyword options, clear errors."""

from __future__ import annotations

from dataclasses import replace

import pytest

from themis_slurm.core.arbiter import ArbiterConfig
from themis_slurm.policies import NAMES, POLICIES, ThemisPolicy, make_policy, policy_options

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


def test_every_policy_declares_whether_it_only_grants_free_or_expired() -> None:
    passive = {}
    for name in NAMES:
        cls = type(make_policy(name))
        assert isinstance(vars(cls).get("grants_only_free_or_expired"), bool), name
        passive[name] = cls.grants_only_free_or_expired
    assert passive == {"themis": True, "fifo": True, "optimus": True, "slurm": True, "gandiva": False,
                       "maxmin": False, "fairshare": False, "ftf": False, "slaq": False, "srtf": False, "tiresias": False}  # fmt: skip
