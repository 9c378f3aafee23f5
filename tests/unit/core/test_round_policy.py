"""Round policy details: ranking without expiring leases, urgency hysteresis, the visibility stop (_up_to),
worst-first leftover, renewals paid in lease time, LPT bidding order and config validation.

All apps use profile "none" (placement factor 1 everywhere) unless said otherwise, so that every rho below
is computed by hand from T_sh = elapsed + max(remaining / X, path) (no allocation: (elapsed +
max(remaining, path)) / 0.1) and T_id = max(total_work / min(max_parallelism, C / N), path).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from themis_slurm.core.agent import Agent
from themis_slurm.core.arbiter import ArbiterConfig, bidders_offered, run_round
from themis_slurm.core.auction import greedy_fill
from themis_slurm.core.fairness import FairnessModel
from themis_slurm.core.payments import MIN_CUT, lottery
from themis_slurm.core.placement import Pool
from themis_slurm.core.state import ClusterState
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App, Job, Lease

from .instances import said
from .test_arbiter import check_invariants

ONE_NODE = Topology.uniform(1, 1, 4)  # 4 GPUs on one node


def _holder_and_waiter() -> tuple[App, App]:
    """Two apps with one 4-GPU job each on a 4-GPU node, N = 2, now = 1000 s.

    T_id = 4000 / min(4, 4 / 2) = 2000 for both (the path floor 4000 / 4 = 1000 does not bind).
      B: arrived at 0, ran 1000 GPU-s: rho(nothing) = (1000 + 3000) / 0.1 / 2000 = 20,
         rho(4 GPUs) = (1000 + 3000 / 4) / 2000 = 0.875.
      A: arrived at 900, nothing done: rho(nothing) = (100 + 4000) / 0.1 / 2000 = 20.5.
    """
    b = App("B", "u", 0.0, (Job("b1", "B", 4, 4000.0, done=1000.0, profile="none"),), contention=2)
    a = App("A", "u", 900.0, (Job("a1", "A", 4, 4000.0, profile="none", submit=900.0),), contention=2)
    return a, b


# ------------------------------------------------------------------------------------------- 1. ranking
@pytest.mark.parametrize("expiry", [1000.0, 990.0])
def test_expiring_lease_holder_ranks_as_an_app_with_nothing(expiry: float) -> None:
    """A lease expiring now (expiry == now, or overdue) is back in the pool: B's rho_before is its rho at
    zero throughput, 20, not its rho on the 4 GPUs it holds, 0.875 (see _holder_and_waiter)."""
    a, b = _holder_and_waiter()
    model = FairnessModel(ONE_NODE, 4)
    state = ClusterState(ONE_NODE, 1000.0, frozenset(), (Lease("b1", frozenset(range(4)), 400.0, expiry),), (a, b))
    d = run_round(state, ArbiterConfig(restart_cost_s=0.0))
    check_invariants(state, d)
    assert d.apps["B"].rho_before == pytest.approx(model.rho(b, 1000.0, 0.0))
    assert d.apps["B"].rho_before == pytest.approx(20.0)
    assert d.apps["B"].rank is not None  # it wants GPUs: it competes for its own
    assert model.rho(b, 1000.0, 4.0) == pytest.approx(0.875)


def test_running_lease_counts_in_rho_and_holder_does_not_rank() -> None:
    """Contrast: the same lease expiring later keeps B's 4 GPUs: rho_before = rho(4 GPUs) = 0.875, and B,
    with nothing waiting, is not ranked; A gets nothing (no GPU is free)."""
    a, b = _holder_and_waiter()
    state = ClusterState(ONE_NODE, 1000.0, frozenset(), (Lease("b1", frozenset(range(4)), 400.0, 1600.0),), (a, b))
    d = run_round(state)
    check_invariants(state, d)
    assert d.apps["B"].rho_before == pytest.approx(0.875)
    assert d.apps["B"].rank is None and said(d.apps["B"]) == "nothing waiting"
    assert d.apps["A"].rank == 1 and d.empty


# ------------------------------------------------------------------------------------------- 2. hysteresis
@pytest.mark.parametrize("solver", ["exact", "fast"])
def test_urgency_hysteresis_keeps_the_holder_within_the_restart_discount(solver: str) -> None:
    """f = 0.8 and 2 apps with waiting work: 1 bidder, the one with the highest urgency.

    restart_cost_s = 30, lease_s = 600: start_cost = min(0.5, 30 / 600) = 0.05. B's lease expires now, so
    its key is its rho without GPUs, 20; A has no expiring lease, so its key is 20.5 * 0.95 = 19.475 < 20:
    B ranks first, bids alone, wins its own 4 GPUs back: a renewal in place, no preemption, no grant.
    """
    a, b = _holder_and_waiter()
    state = ClusterState(ONE_NODE, 1000.0, frozenset(), (Lease("b1", frozenset(range(4)), 400.0, 1000.0),), (a, b))
    assert bidders_offered(0.8, 2) == 1
    assert 20.5 * (1 - min(0.5, 30.0 / 600.0)) == pytest.approx(19.475)
    d = run_round(state, ArbiterConfig(restart_cost_s=30.0, lease_s=600.0, solver=solver))
    check_invariants(state, d)
    assert [(r.job_id, r.lease_expiry) for r in d.renewals] == [("b1", 1600.0)]
    assert not d.preemptions and not d.grants
    assert d.apps["B"].rank == 1 and d.apps["B"].bid
    assert d.apps["A"].rank == 2 and not d.apps["A"].bid
    assert d.apps["A"].rho_before == pytest.approx(20.5) and d.apps["B"].rho_before == pytest.approx(20.0)


@pytest.mark.parametrize("solver", ["exact", "fast"])
def test_without_restart_cost_the_worse_waiter_wins_and_the_holder_is_preempted(solver: str) -> None:
    """Same round with restart_cost_s = 0: no discount, A's 20.5 > B's 20, A bids alone and takes the 4
    GPUs (rho 0.55 = (100 + 4000 / 4) / 2000); B is preempted."""
    a, b = _holder_and_waiter()
    state = ClusterState(ONE_NODE, 1000.0, frozenset(), (Lease("b1", frozenset(range(4)), 400.0, 1000.0),), (a, b))
    d = run_round(state, ArbiterConfig(restart_cost_s=0.0, lease_s=600.0, solver=solver))
    check_invariants(state, d)
    assert [(g.job_id, sorted(g.gpus), g.source, g.lease_expiry) for g in d.grants] == [
        ("a1", [0, 1, 2, 3], "auction", 1600.0)
    ]
    assert [(p.job_id, said(p)) for p in d.preemptions] == [("b1", "lease expired and lost the auction")]
    assert not d.renewals
    assert d.apps["A"].rank == 1 and d.apps["B"].rank == 2
    assert d.apps["A"].rho_after == pytest.approx(0.55)


def test_start_cost_is_capped_at_one_half() -> None:
    """restart_cost_s = 10 lease lengths: start_cost = min(0.5, 6000 / 600) = 0.5 (an Agent refuses >= 1).

    A' arrived at 0 with one 4-GPU job of 800 GPU-s: T_id = 800 / 2 = 400, rho(nothing) = (1000 + 800) / 0.1
    / 400 = 45, key 45 * 0.5 = 22.5 > B's 20: A' ranks first and takes the GPUs (an uncapped discount would
    leave it 45 * (1 - 10) < 0, a larger cap such as 0.99 would give 0.45 < 20: B renewed).
    """
    _, b = _holder_and_waiter()
    a = App("A", "u", 0.0, (Job("a1", "A", 4, 800.0, profile="none"),), contention=2)
    state = ClusterState(ONE_NODE, 1000.0, frozenset(), (Lease("b1", frozenset(range(4)), 400.0, 1000.0),), (a, b))
    d = run_round(state, ArbiterConfig(restart_cost_s=6000.0, lease_s=600.0))
    check_invariants(state, d)
    assert d.apps["A"].rho_before == pytest.approx(45.0)
    assert d.apps["A"].rank == 1 and d.apps["B"].rank == 2
    assert [g.job_id for g in d.grants] == ["a1"] and [p.job_id for p in d.preemptions] == ["b1"]


# ------------------------------------------------------------------------------------------- 3. visibility stop
@pytest.mark.parametrize("order", ["rho", "deadline"])
@pytest.mark.parametrize("solver", ["exact", "fast"])
def test_bidder_stops_keeping_gpus_at_the_worst_rho_outside_the_auction(solver: str, order: str) -> None:
    """8 GPUs (2 nodes x 4), N = 3, C = 8 (share 8/3), now = 270000 s, restart_cost 0, f = 0.8.

    3 apps with waiting work -> floor(0.2 * 3) = 0 -> 1 bidder (max(1, .)), the worst rho:
      X: arrived at 0, eight 1-GPU jobs of 3600 GPU-s. T_id = 28800 / (8/3) = 10800 (path 3600).
         rho(x) = (270000 + 28800 / x) / 10800: rho(0) = 298800 / 0.1 / 10800 = 276.67,
         rho(1) = 27.667, rho(2) = 26.333.
      Y, Z: arrived now, three 1-GPU jobs of 3600 GPU-s each. T_id = 10800 / (8/3) = 4050 (path 3600).
         rho(0) = 10800 / 0.1 / 4050 = 26.667 = the level (worst rho outside the auction).
    X wins all 8 GPUs (alone, c = 1) but keeps gangs only while its rho is above 26.667: after 1 gang
    27.667 > level, after 2 gangs 26.333 <= level -> kept 2. The 6 other GPUs go to the leftover, where
    X (cut short by the stop) rejoins Y and Z as an equal, worst rho first: Y and Z (26.667) get one GPU
    each (rho (0 + 10800) / 4050 = 2.667), then X (26.333, then 25.889, 25.667, 25.667) takes the last
    four. On six GPUs two of X's eight one-hour jobs run one after the other, so its T_sh is floored by the
    pair 3600 + 3600 (fairness.pair_floor; the fluid 28800 / 6 = 4800 would be sooner): rho
    (270000 + 7200) / 10800 = 25.667. Nothing idles. That is the leftover worst rho first (leftover_order
    "rho"); earliest virtual deadline first (the default) gives X all six: its jobs are some 259,000 s
    past its private-share pace (270000 - 10800 + ...), Y's and Z's first jobs 1350 s ahead of theirs
    (0 - 4050 + 4050 x 7200 / 10800), so X runs all eight jobs at once: rho (270000 + 3600) / 10800.
    """
    topo = Topology.uniform(1, 2, 4)
    now = 270000.0
    x = App("X", "u", 0.0, tuple(Job(f"x{k}", "X", 1, 3600.0, profile="none") for k in range(8)), contention=3)
    y, z = (
        App(n, "u", now, tuple(Job(f"{n}{k}", n, 1, 3600.0, profile="none", submit=now) for k in range(3)), contention=3)
        for n in ("Y", "Z")
    )
    state = ClusterState(topo, now, frozenset(range(8)), (), (x, y, z))
    d = run_round(state, ArbiterConfig(fairness_knob=0.8, restart_cost_s=0.0, solver=solver, leftover_order=order))
    check_invariants(state, d)
    assert len(d.idle_gpus) == 0
    rx, ry, rz = d.apps["X"], d.apps["Y"], d.apps["Z"]
    assert rx.rank == 1 and rx.bid and not ry.bid and not rz.bid
    assert rx.rho_before == pytest.approx(298800 / 0.1 / 10800)
    assert ry.rho_before == pytest.approx(26.0 + 2 / 3) and rz.rho_before == pytest.approx(26.0 + 2 / 3)
    assert "kept 2" in said(rx) and "worst outside the auction" in said(rx)
    if order == "deadline":
        assert rx.won_gpus == 8 and rx.kept_gpus == 2 and rx.leftover_gpus == 6
        assert rx.rho_after == pytest.approx((270000 + 3600) / 10800)
        assert {g.app_id for g in d.grants} == {"X"} and ry.leftover_gpus == rz.leftover_gpus == 0
        return
    assert rx.won_gpus == 8 and rx.kept_gpus == 2 and rx.leftover_gpus == 4
    assert rx.rho_after == pytest.approx((270000 + 7200) / 10800)
    per_app = {aid: sorted(g.source for g in d.grants if g.app_id == aid) for aid in ("X", "Y", "Z")}
    assert per_app == {"X": ["auction"] * 2 + ["leftover"] * 4, "Y": ["leftover"], "Z": ["leftover"]}
    assert ry.leftover_gpus == 1 and rz.leftover_gpus == 1
    assert ry.rho_after == pytest.approx(10800 / 4050)


# ------------------------------------------------------------------------------------------- 4. leftover
def _water_fill_agents() -> tuple[Agent, Agent]:
    """One 4-GPU node, C = 4, N = 1, now = 3600 s; both apps have four 1-GPU jobs of 3600 GPU-s, so
    T_id = 14400 / min(4, 4) = 3600 (path 3600, no floor beyond it).
      X arrived at 0:    rho(0) = (3600 + 14400) / 0.1 / 3600 = 50, rho(1) = 5, rho(2) = 3.
      Y arrived at 3600: rho(0) = 14400 / 0.1 / 3600 = 40,          rho(1) = 4, rho(2) = 2.
    Worst first: X (50), then Y (40), then X (5 > 4), then Y (4 > 3).
    """
    model = FairnessModel(ONE_NODE, 4)
    now = 3600.0
    x = App("X", "u", 0.0, tuple(Job(f"x{k}", "X", 1, 3600.0, profile="none") for k in range(4)))
    y = App("Y", "u", now, tuple(Job(f"y{k}", "Y", 1, 3600.0, profile="none", submit=now) for k in range(4)))
    ax, ay = (Agent(app, model, now, 0.0, app.jobs) for app in (x, y))
    assert [ax.rho_of(t) for t in (0, 1, 2)] == pytest.approx([50, 5, 3])
    assert [ay.rho_of(t) for t in (0, 1, 2)] == pytest.approx([40, 4, 2])
    return ax, ay


@pytest.mark.parametrize(("free", "expected"), [(1, {"X": 1}), (2, {"X": 1, "Y": 1}), (3, {"X": 2, "Y": 1}),
                                                 (4, {"X": 2, "Y": 2})])  # fmt: skip
def test_greedy_fill_by_rho_serves_the_worst_app_first(free: int, expected: dict[str, int]) -> None:
    """The gangs handed out from a pool of 1..4 GPUs follow the worst-first order X, Y, X, Y; with 2
    GPUs X does not take both although its first gang is worth more (log 10) than anything Y gets."""
    ax, ay = _water_fill_agents()
    pool = Pool(ONE_NODE, range(free))
    got = greedy_fill([ax, ay], pool, by="rho")
    assert {aid: len(gs) for aid, gs in got.items()} == expected
    assert pool.size == 0  # the fill takes what it hands out from the caller's pool


def test_greedy_fill_order_of_agents_does_not_matter_when_rho_differs() -> None:
    ax, ay = _water_fill_agents()
    got = greedy_fill([ay, ax], Pool(ONE_NODE, range(3)), by="rho")
    assert {aid: len(gs) for aid, gs in got.items()} == {"X": 2, "Y": 1}


def test_greedy_fill_rejects_an_unknown_order() -> None:
    ax, ay = _water_fill_agents()
    with pytest.raises(ValueError, match="by must be one of density, gain, rho, deadline, got 'bogus'"):
        greedy_fill([ax, ay], Pool(ONE_NODE, range(4)), by="bogus")


# ------------------------------------------------------------------------------------------- 5. renewal cut
def _seed_where(now: float, app_id: str, withheld: bool, c: float) -> int:
    """The first seed in 0..200 whose lottery draw withholds (draw >= c) or keeps (draw < c) the gang."""
    for seed in range(201):
        if (lottery(seed, now, app_id) >= c) == withheld:
            return seed
    raise AssertionError(f"no seed in 0..200 with draw {'>=' if withheld else '<'} {c}")


def _half_payment_round() -> ClusterState:
    """1 node x 4 GPUs, N = 2, now = 1800 s, restart_cost 30 of a 600 s lease (start_keep 0.95).

    H holds GPUs {0, 1} (lease expiring now) with one 2-GPU job; {2, 3} are free. W arrived now with two
    2-GPU jobs of 3600 GPU-s (remaining R = 7200, path 1800). W's gangs must (re)start: 0.95 GPU each.
    x*: H renews in place and W takes {2, 3} (two first gangs, each worth >= log 10, beat W's 4 GPUs alone,
    worth log(10 * 7200 / (7200 / 3.8)) = log 38). Without H, W would get all 4 GPUs. So
      c_H = rho_W(x*) / rho_W(x*_-H) = (0 + 7200 / 3.8) / (0 + 7200 / 1.9) = 1 / 2
    (elapsed 0, and 7200 / 3.8 = 1894.7 > the path 1800). c_W = 1: H gets its home either way.
    H's only gang is worth more than c_H of its win: it is kept iff the draw is below 0.5.
    """
    now = 1800.0
    h = App("H", "u", 0.0, (Job("h1", "H", 2, 7200.0, done=1800.0, profile="none"),), contention=2)
    w = App("W", "u", now, tuple(Job(f"w{k}", "W", 2, 3600.0, profile="none", submit=now) for k in (1, 2)),
            contention=2)  # fmt: skip
    return ClusterState(ONE_NODE, now, frozenset({2, 3}), (Lease("h1", frozenset({0, 1}), 1200.0, now),), (h, w))


#: the auction alone: with the reservation phase H's gang, the only wide gang of a bidder that has waited a
#: lease, would keep its GPUs outside the auction (core/reservation.py) and pay nothing
PAYING = ArbiterConfig(solver="exact", fairness_knob=0.0, lease_s=600.0, reserve_wide_gangs=False)


def test_withheld_renewal_is_paid_in_lease_time_not_preempted() -> None:
    """Draw >= c_H = 0.5: the withheld gang is H's own renewal, so H keeps its GPUs on a lease cut to
    max(0.5, MIN_CUT) * 600 = 300 s (expiry 2100), and W's grant keeps the full lease (2400)."""
    state = _half_payment_round()
    seed = _seed_where(state.now, "H", withheld=True, c=0.5)
    d = run_round(state, replace(PAYING, seed=seed))
    check_invariants(state, d)
    assert d.apps["H"].payment_fraction == pytest.approx(0.5)
    assert d.apps["W"].payment_fraction == pytest.approx(1.0)
    assert not d.preemptions
    (ren,) = d.renewals
    assert (ren.job_id, sorted(ren.gpus)) == ("h1", [0, 1])
    assert ren.lease_expiry == pytest.approx(state.now + max(0.5, MIN_CUT) * 600.0)
    assert ren.lease_expiry == pytest.approx(2100.0)
    assert "hidden payment" in said(ren) and "300 s" in said(ren)
    assert d.apps["H"].kept_gpus == 2 and "after hidden payment c=0.500" in said(d.apps["H"])
    assert [(g.job_id, sorted(g.gpus), g.lease_expiry) for g in d.grants] == [("w1", [2, 3], 2400.0)]


def test_kept_renewal_gets_the_full_lease() -> None:
    """Draw < c_H = 0.5: the lottery keeps H's gang: an ordinary renewal to now + 600 = 2400."""
    state = _half_payment_round()
    seed = _seed_where(state.now, "H", withheld=False, c=0.5)
    d = run_round(state, replace(PAYING, seed=seed))
    check_invariants(state, d)
    assert [(r.job_id, r.lease_expiry, said(r)) for r in d.renewals] == [
        ("h1", 2400.0, "won its GPUs back in the auction")
    ]
    assert not d.preemptions


def test_tiny_payment_cuts_the_lease_to_min_cut() -> None:
    """c_H < MIN_CUT: the renewal keeps MIN_CUT of a lease.

    1 node x 4 GPUs, N = 2, now = 600 s. H (arrived 0) holds all 4 GPUs on a lease expiring now, one 4-GPU
    job with remaining 144000 GPU-s; W arrived now with one 4-GPU job of 3600 GPU-s, at 0.95 per GPU.
      gain_H = log(10 * (600 + 144000) / (600 + 36000)) = log 39.5 > gain_W = log(10 * 3600 / (3600 / 3.8))
      = log 38, so x* gives H its home and W nothing; without H, W gets the 4 GPUs:
      c_H = rho_W(nothing) -> rho_W(3.8): (3600 / 3.8) / (3600 / 0.1) = 1 / 38 = 0.0263 < MIN_CUT = 0.05.
    Lease cut to 0.05 * 600 = 30 s.
    """
    now = 600.0
    h = App("H", "u", 0.0, (Job("h1", "H", 4, 146400.0, done=2400.0, profile="none"),), contention=2)
    w = App("W", "u", now, (Job("w1", "W", 4, 3600.0, profile="none", submit=now),), contention=2)
    state = ClusterState(ONE_NODE, now, frozenset(), (Lease("h1", frozenset(range(4)), 0.0, now),), (h, w))
    seed = _seed_where(now, "H", withheld=True, c=1 / 38)
    d = run_round(state, replace(PAYING, seed=seed))
    check_invariants(state, d)
    assert d.apps["H"].payment_fraction == pytest.approx(1 / 38)
    assert d.apps["H"].payment_fraction < MIN_CUT
    (ren,) = d.renewals
    assert ren.job_id == "h1" and ren.lease_expiry == pytest.approx(now + MIN_CUT * 600.0)
    assert ren.lease_expiry == pytest.approx(630.0)
    assert "lease cut to 30 s: hidden payment" in said(ren)
    assert not d.preemptions and not d.grants
    assert said(d.apps["W"]) == "bid (rank 2) but won nothing"


# ------------------------------------------------------------------------------------------- 7. LPT order
def test_agent_orders_homes_then_shortest_remaining_run_then_submit() -> None:
    """Remaining run: a 4000/4 = 1000, b 2000/1 = 2000, c 2000/1 = 2000 (submitted before b),
    d 1000/2 = 500, e (10000 - 9200)/1 = 800 (its work is large, its remaining is not); h holds a lease
    expiring now (remaining 100): first whatever its length. T_id is e's whole run (10,000 s) and the app's
    share all 8 GPUs, so every waiting job ends in time behind the others: shortest remaining run first
    (core/agent.py pace_order; tests/unit/core/test_job_order.py has the jobs that cannot wait)."""
    topo = Topology.uniform(1, 2, 4)
    jobs = (
        Job("a", "A", 4, 4000.0, submit=5.0),
        Job("b", "A", 1, 2000.0, submit=20.0),
        Job("c", "A", 1, 2000.0, submit=10.0),
        Job("d", "A", 2, 1000.0, submit=0.0),
        Job("e", "A", 1, 10000.0, done=9200.0, submit=0.0),
        Job("h", "A", 1, 100.0, submit=30.0),
    )
    app = App("A", "u", 0.0, jobs)
    agent = Agent(app, FairnessModel(topo, 8), 100.0, 0.0, jobs, {"h": frozenset({7})})
    assert [j.id for j in agent.jobs] == ["h", "d", "e", "a", "c", "b"]
    assert agent.kinds[0] == (jobs[5],)  # the home is its own kind, first
    bundles = agent.valuations(Pool(topo, range(8)))
    # packed in that order: h, d, e, a use 1 + 2 + 1 + 4 = 8 GPUs; c and b no longer fit
    assert [g.job_id for g in bundles[-1].gangs] == ["h", "d", "e", "a"]
    assert sorted(bundles[0].gangs[0].gpus) == [7]  # the home is kept in place


# ------------------------------------------------------------------------------------------- 8. validation
def test_restart_cost_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="restart_cost_s must be >= 0 seconds, got -1"):
        ArbiterConfig(restart_cost_s=-1)
    assert ArbiterConfig(restart_cost_s=0.0).restart_cost_s == 0.0


@pytest.mark.parametrize("bad", [1.0, 1.5, -0.1])
def test_agent_start_cost_must_be_below_one(bad: float) -> None:
    app = App("A", "u", 0.0, (Job("a", "A", 1, 100.0),))
    model = FairnessModel(ONE_NODE, 4)
    with pytest.raises(ValueError, match="start_cost must be in"):
        Agent(app, model, 0.0, 0.0, app.jobs, start_cost=bad)
    assert Agent(app, model, 0.0, 0.0, app.jobs, start_cost=0.5).start_keep == 0.5


@pytest.mark.parametrize("rank_at_share, e_service, first", [(0.0, 500.0, "E"), (1.0, 500.0, "H"), (1.0, 0.0, "E")])
def test_rank_at_share_ranks_by_how_far_behind_an_app_is(rank_at_share: float, e_service: float, first: str) -> None:
    """4 GPUs, two apps (N = 2), now = 20,000 s, one bidder (f = 0.8 of 2 apps); the fair share is 4 / 2 = 2.

    H: arrived at 0, holds 1 GPU for h1 (1 GPU, 20,000 GPU-s, 9,000 done) and waits with h2 (1 GPU,
       10,000 GPU-s). T_id = max(30,000 / 2, path 20,000) = 20,000; remaining 21,000, path 11,000.
       rho under what it keeps (1 GPU): (20,000 + 21,000) / 20,000 = 2.05;
       at its fair share (2 GPUs): (20,000 + max(10,500, 11,000)) / 20,000 = 1.55.
    E: arrived at 19,000 with e1 (1 GPU, 4,000 GPU-s), which ran before (500 GPU-s of service, no work
       counted done) or never ran. T_id = 4,000.
       rho under what it keeps (nothing: the idle throughput 0.1): (1,000 + 4,000) / 0.1 / 4,000 = 12.5;
       at its fair share (its demand, 1 GPU): (1,000 + 4,000) / 4,000 = 1.25.
    By rho under what they keep (the paper) the app with nothing bids; at a fair share H, which fell
    behind, does, unless E has not had a GPU yet (then it keeps the paper's rank). The records' rho before
    the round is the rho under what each keeps either way.
    """
    h = App("H", "u", 0.0, (Job("h1", "H", 1, 20000.0, done=9000.0, profile="none"),
                            Job("h2", "H", 1, 10000.0, profile="none")), contention=2)  # fmt: skip
    e = App("E", "u", 19000.0, (Job("e1", "E", 1, 4000.0, profile="none", submit=19000.0, service=e_service),),
            contention=2)  # fmt: skip
    state = ClusterState(ONE_NODE, 20000.0, frozenset({1, 2, 3}), (Lease("h1", frozenset({0}), 0.0, 20600.0),),
                         (h, e))  # fmt: skip
    d = run_round(state, ArbiterConfig(restart_cost_s=0.0, rank_at_share=rank_at_share))
    check_invariants(state, d)
    assert d.apps[first].rank == 1 and d.apps[first].bid
    assert [d.apps[a].bid for a in ("H", "E")].count(True) == 1
    assert d.apps["H"].rho_before == pytest.approx(2.05) and d.apps["E"].rho_before == pytest.approx(12.5)
    assert {g.job_id for g in d.grants} == {"h2", "e1"}  # the other gets a GPU from the leftover


def test_rank_at_share_must_be_a_number_at_least_zero() -> None:
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="rank_at_share"):
            ArbiterConfig(rank_at_share=bad)
