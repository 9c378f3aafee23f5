"""Finish-time fairness as Gavel computes it: hand-computed rounds, the isolated time, the optimum's centre."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from themis_slurm.core.topology import Topology
from themis_slurm.policies import FtfPolicy
from themis_slurm.policies.ftf import FtfRow, centre, min_max_rho

from .helpers import app, check, ctx, job, state, step

TOPO4 = Topology.uniform(1, 1, 4)


def test_hand_computed_round() -> None:
    """4 GPUs, two apps each one 4-GPU job at t = 0: a 4 GPU-hours, b 2 GPU-hours. The isolated share is
    an equal 4/2 = 2 GPUs; nothing done yet, so rho_a(G) = (14400 / G) / (14400 / 2) = 2 / G, and the same
    for b: min max rho s.t. G_a + G_b <= 4 gives 2 and 2, rho 1.

    At t = 1800 b has done 1 GPU-hour (3600 GPU-s), which at its isolated 2 GPUs took C_b = 1800 s:
    rho_b(G) = (1800 + 3600 / G) / (1800 + 3600 / 2); a has done nothing: rho_a(G) = (1800 + 14400 / G) / 7200.
    Equal at r with G_a + G_b = 4: 14400 / (7200 r - 1800) + 3600 / (3600 r - 1800) = 4, r ~ 1.1036."""
    a = app("a", [job("a0", "a", gpus=4, work=3600.0)])
    b = app("b", [job("b0", "b", gpus=4, work=1800.0)])
    p = FtfPolicy()
    rows = p.rows(ctx(state(TOPO4, [a, b])), 4.0)
    least, r = min_max_rho(rows, 4.0)
    assert least == pytest.approx({"a": 2.0, "b": 2.0}, rel=1e-5) and r == pytest.approx(1.0, rel=1e-5)

    b_later = replace(b, jobs=(replace(b.jobs[0], done=3600.0),))
    rows = p.rows(ctx(state(TOPO4, [a, b_later], now=1800.0)), 4.0)
    by = {row.app_id: row for row in rows}
    assert by["b"].isolated == pytest.approx(1800.0 + 3600.0 / 2) and by["a"].isolated == pytest.approx(
        7200.0
    )
    least, r = min_max_rho(rows, 4.0)
    lo, hi = 0.6, 2.0  # the same root by an independent bisection
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 14400 / (7200 * mid - 1800) + 3600 / (3600 * mid - 1800) > 4 else (lo, mid)
    assert r == pytest.approx(hi, rel=1e-5) and r == pytest.approx(1.1035534, rel=1e-5)
    assert least["a"] + least["b"] == pytest.approx(4.0, rel=1e-6)
    assert by["a"].rho(least["a"]) == pytest.approx(by["b"].rho(least["b"]), rel=1e-4)


def test_isolated_time_counts_work_at_the_isolated_share_of_its_time() -> None:
    """C grows at each recomputation by the work done since the previous one over the isolated share at that
    previous one (Gavel's ``_isolated_throughputs_prev_iteration``): 4 one-GPU apps on 2 GPUs have 0.5 GPU
    each, so 600 GPU-s done is 1200 s; two apps left at the next recomputation (share 1 GPU from then),
    yet the 600 GPU-s done before it still count at 0.5; the 600 after it at 1. A gone app is forgotten."""
    topo = Topology.uniform(1, 1, 2)
    apps = [app(f"a{i}", [job(f"j{i}", f"a{i}", work=7200.0)]) for i in range(4)]
    p = FtfPolicy()

    def rows_at(now: float, done: float, n: int) -> dict[str, FtfRow]:
        those = [replace(a, jobs=(replace(a.jobs[0], done=done),)) for a in apps[:n]]
        return {r.app_id: r for r in p.rows(ctx(state(topo, those, now=now)), 2.0)}

    rows_at(0.0, 0.0, 4)
    assert rows_at(1200.0, 600.0, 4)["a0"].isolated == pytest.approx(1200.0 + 6600.0 / 0.5)
    rows = rows_at(1800.0, 1200.0, 2)
    assert rows["a0"].isolated == pytest.approx(2400.0 + 6000.0 / 1.0) and rows["a0"].elapsed == 1800.0
    assert set(p._iso_time) == {"a0", "a1"}
    assert rows_at(2400.0, 1800.0, 2)["a0"].isolated == pytest.approx(3000.0 + 5400.0 / 1.0)


def test_an_app_that_cannot_catch_up_gets_its_demand_water_filled() -> None:
    row = FtfRow("a", isolated=10.0, remaining=100.0, path=100.0, elapsed=1e9, demand=1.0)
    least, r = min_max_rho([row, replace(row, app_id="b")], 1.0)
    assert math.isinf(r) and least == {"a": 0.5, "b": 0.5}


def test_centre_is_the_stationary_point_of_its_barrier() -> None:
    """Each app's G solves 2 / (G - least) - 1 / (demand - G) = lam, with lam (capacity - sum G) = 1: the
    gradient of sum 2 log(G - least) + log(demand - G) + log(capacity - sum G) is zero."""
    least = {"a": 0.5, "b": 1.0, "c": 0.2, "full": 2.0}
    demand = {"a": 1.0, "b": 4.0, "c": 4.0, "full": 2.0}
    g = centre(least, demand, 8.0)
    assert g["full"] == 2.0
    lam = 1.0 / (8.0 - sum(g.values()))
    for a in "abc":
        assert least[a] < g[a] < demand[a]
        assert 2.0 / (g[a] - least[a]) - 1.0 / (demand[a] - g[a]) == pytest.approx(lam, rel=1e-6)
    # symmetric apps get the same, and no spare GPUs leaves every app at its least
    same = centre({"x": 1.0, "y": 1.0}, {"x": 4.0, "y": 4.0}, 5.0)
    assert same["x"] == pytest.approx(same["y"])
    assert centre({"x": 2.0, "y": 2.0}, {"x": 4.0, "y": 4.0}, 4.0) == {"x": 2.0, "y": 2.0}


def test_rounds_favour_the_app_further_behind() -> None:
    """Two whole-cluster gangs, b much shorter: FTF gives b more rounds than max-min's even split would."""
    apps = [app("a", [job("a0", "a", gpus=4, work=10**5)]), app("b", [job("b0", "b", gpus=4, work=2000.0)])]
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
