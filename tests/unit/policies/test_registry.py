"""The registry: names, factories with keyword options, clear errors."""

from __future__ import annotations

import pytest

from themis_slurm.policies import POLICIES, ThemisPolicy, make_policy, policy_options

ALL = ["themis", "fifo", "gandiva", "maxmin", "optimus", "slaq", "slurm", "srtf", "tiresias"]


def test_every_policy_is_registered_and_named() -> None:
    assert sorted(POLICIES) == sorted(ALL)
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
    with pytest.raises(ValueError, match="known: themis, fifo"):
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
