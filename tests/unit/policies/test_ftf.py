"""Finish-time fairness (Gavel-style): a hand-computed round, and the rounds that realise it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from themis_slurm.core.fairness import FairnessModel
from themis_slurm.core.topology import Topology
from themis_slurm.policies import FtfPolicy
from themis_slurm.policies.ftf import ftf_shares

from .helpers import app, check, ctx, job, state, step

TOPO4 = Topology.uniform(1, 1, 4)


def test_hand_computed_round() -> None:
    """4 GPUs, two apps contending all along (N = 2), each one 4-GPU job at t = 0, profile none:
    a: 4 GPU-hours -> T_id = 4 h / 2 GPUs = 7200 s; rho_a(g) = (14400 / g) / 7200 = 2 / g.
    b: 2 GPU-hours -> T_id = 3600 s;                 rho_b(g) = (7200 / g) / 3600 = 2 / g.
    min max rho s.t. g_a + g_b <= 4: g_a = g_b = 2, max rho 1.0.
    At t = 1800 s with a having had nothing: rho_a(g) = (1800 + 14400/g) / 7200 and b has run 1800 s on
    all 4 GPUs (1 GPU-hour left): rho_b(g) = (1800 + 3600/g) / 3600. Equal at r: g_a = 14400/(7200r - 1800),
    g_b = 3600/(3600r - 1800), g_a + g_b = 4 -> r ~ 1.1036 (quadratic in r), g_a ~ 2.343."""
    a = replace(app("a", [job("a0", "a", gpus=4, work=3600.0)]), contention=2.0)
    b = replace(app("b", [job("b0", "b", gpus=4, work=1800.0)]), contention=2.0)
    model = FairnessModel(TOPO4, 4)
    shares, r = ftf_shares([a, b], model, 0.0, 4)
    assert shares == pytest.approx({"a": 2.0, "b": 2.0}, rel=1e-5) and r == pytest.approx(1.0, rel=1e-5)

    b_later = replace(b, jobs=(replace(b.jobs[0], done=3600.0 * 2 - 3600.0),))  # 1 of 2 GPU-hours left
    shares, r = ftf_shares([a, b_later], model, 1800.0, 4)
    assert r == pytest.approx(1.1035534, rel=1e-5) and shares["a"] == pytest.approx(2.3431458, rel=1e-4)
    # the same root by an independent bisection of 14400/(7200r - 1800) + 3600/(3600r - 1800) = 4
    lo, hi = 0.6, 2.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 14400 / (7200 * mid - 1800) + 3600 / (3600 * mid - 1800) > 4 else (lo, mid)
    assert r == pytest.approx(hi, rel=1e-5)
    assert shares["a"] + shares["b"] == pytest.approx(4.0, rel=1e-6)
    assert shares["a"] == pytest.approx(14400 / (7200 * hi - 1800), rel=1e-4)
    # both apps end at the same rho: that is what minimising the maximum gives here
    assert model.rho(a, 1800.0, shares["a"]) == pytest.approx(model.rho(b_later, 1800.0, shares["b"]), rel=1e-4)


def test_slack_goes_to_remaining_demand() -> None:
    """One small app cannot use more than its demand; the GPUs the optimum does not need are not idled."""
    a = app("a", [job("a0", "a", gpus=1, work=3600.0)])
    b = app("b", [job("b0", "b", gpus=4, work=3600.0)])
    shares, _ = ftf_shares([a, b], FairnessModel(TOPO4, 4), 0.0, 4)
    assert shares["a"] <= 1.0 + 1e-9 and sum(shares.values()) == pytest.approx(4.0)


def test_rounds_favour_the_app_further_behind() -> None:
    """Two whole-cluster gangs, b much shorter: FTF gives b more rounds than max-min's even split would."""
    apps = [replace(app("a", [job("a0", "a", gpus=4, work=10**5)]), contention=2.0),
            replace(app("b", [job("b0", "b", gpus=4, work=2000.0)]), contention=2.0)]
    s = state(TOPO4, apps)
    p = FtfPolicy(quantum_s=100.0)
    rounds = {"a": 0, "b": 0}
    for _ in range(10):
        d = p.schedule(ctx(s))
        check(s, d)
        for g in d.grants:
            rounds[g.app_id] += 1
        for r in d.renewals:
            rounds[r.app_id] += 1
        s = step(s, d, 100.0)
        if not any(a.id == "b" for a in s.apps):
            break
    assert rounds["b"] >= rounds["a"]
