"""Step 2b of a round: the reservation for the worst bidder's long-waiting wide gang (arbiter._reservation).

Every round below is on 1 rack x 2 nodes x 4 GPUs (node1 = GPUs 0-3, node2 = GPUs 4-7), now = 10000 s,
lease 600 s, no restart cost, N = 3 for every app, C = 8 (share 8/3), profile "none" (factor 1 everywhere):

  W: arrived at 0, one 4-GPU gang w1 of 40000 GPU-s submitted at 0 (waited 10000 s >= a lease).
     T_id = max(40000 / (8/3), path 40000 / 4) = 15000; rho(nothing) = (10000 + 40000) / 0.1 / 15000 = 33.33.
  O: arrived now, two 1-GPU jobs o1, o2 of 3600 GPU-s submitted now.
     T_id = max(7200 / min(2, 8/3), path 3600) = 3600; rho(nothing) = 7200 / 0.1 / 3600 = 20.
  H: the lease holders: a 1-GPU job h<g> of 1e6 GPU-s on each leased GPU g; nothing waiting, so H is not
     ranked unless one of its leases expires now.

So W (33.33) ranks 1 and O (20) ranks 2: with f = 0 both bid, with f = 0.8 only W does (max(1, floor(0.2 x
2)) = 1), and W is the worst bidder either way.
"""

from __future__ import annotations

import pytest

from themis_slurm.core.arbiter import ArbiterConfig, bidders_offered, run_round
from themis_slurm.core.decision import Decision, RenewalCause
from themis_slurm.core.fairness import FairnessModel
from themis_slurm.core.placement import Pool
from themis_slurm.core.state import ClusterState
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App, Job, Lease

from .instances import said
from .test_arbiter import check_invariants

TOPO = Topology.uniform(1, 2, 4)
NODE1, NODE2 = frozenset(range(4)), frozenset(range(4, 8))
NOW = 10000.0
LEASE = 600.0
SOLVERS = ["exact", "fast"]
#: node1: GPUs 0, 1 free, GPU 2 leased until now + 100, GPU 3 until now + 200; node2 leased until now + 500
BUSY = {2: 100.0, 3: 200.0, 4: 500.0, 5: 500.0, 6: 500.0, 7: 500.0}


def _wide(jid: str = "w1", app: str = "W", submit: float = 0.0, **kw) -> Job:
    return Job(jid, app, kw.pop("gpus", 4), 40000.0, profile="none", submit=submit, **kw)


def _state(
    free: set[int],
    leases: dict[int, float],
    w_jobs: tuple[Job, ...] | None = None,
    *,
    pinned: frozenset[int] = frozenset(),
    extra: tuple[App, ...] = (),
) -> ClusterState:
    """W, H, O (module docstring) plus `extra`. `leases` maps a GPU to its lease's expiry minus now (0: it
    expires this round); H's jobs on the GPUs in `pinned` are not preemptible."""
    w = App("W", "u", 0.0, w_jobs if w_jobs is not None else (_wide(),), contention=3)
    h = App("H", "u", 0.0, tuple(Job(f"h{g}", "H", 1, 1e6, profile="none", preemptible=g not in pinned)
                                 for g in sorted(leases)), contention=3)  # fmt: skip
    o = App("O", "u", NOW, tuple(Job(f"o{k}", "O", 1, 3600.0, profile="none", submit=NOW) for k in (1, 2)),
            contention=3)  # fmt: skip
    held = tuple(Lease(f"h{g}", frozenset({g}), NOW - 100.0, NOW + dt) for g, dt in sorted(leases.items()))
    return ClusterState(TOPO, NOW, frozenset(free), held, (w, h, o, *extra))


def _run(state: ClusterState, solver: str = "exact", f: float = 0.0) -> Decision:
    d = run_round(state, ArbiterConfig(reserve_wide_gangs=True, restart_cost_s=0.0, fairness_knob=f, lease_s=LEASE, solver=solver))
    check_invariants(state, d)
    return d


def _grants(d: Decision) -> list[tuple[str, list[int], str]]:
    return sorted((g.job_id, sorted(g.gpus), g.source) for g in d.grants)


def test_setup_ranks_w_worst() -> None:
    """The hand-computed rhos of the module docstring, and the bidder counts they lead to."""
    state = _state({0, 1}, BUSY)
    d = _run(state)
    assert d.apps["W"].rho_before == pytest.approx(50000 / 0.1 / 15000)
    assert d.apps["O"].rho_before == pytest.approx(20.0)
    assert (d.apps["W"].rank, d.apps["O"].rank, d.apps["H"].rank) == (1, 2, None)
    assert bidders_offered(0.0, 2) == 2 and bidders_offered(0.8, 2) == 1


# ------------------------------------------------------------------------------- 1. the reservation holds GPUs
@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("f", [0.0, 0.8])
@pytest.mark.parametrize("shaped", [False, True])
def test_reservation_holds_the_free_gpus_of_the_soonest_placement(
    solver: str, f: float, shaped: bool
) -> None:
    """GPUs 0, 1 are free now, 2 at now + 100, 3 at now + 200, node2 at now + 500.

    Free by t: now {0, 1}, +100 {0, 1, 2}, +200 {0..3} = node1 (a 4-GPU gang fits), +500 all. The soonest
    placement is node1, complete in 200 s; its pool GPUs {0, 1} are held out of the round. O's 1-GPU jobs
    would fit on them, yet wait: nothing is granted, nothing idles (reserved is not idle).
    """
    w1 = _wide(gpus_per_node=4, nodes=1) if shaped else _wide()
    state = _state({0, 1}, BUSY, (w1,))
    d = _run(state, solver, f)
    assert d.reserved_gpus == {0, 1}
    assert Pool(TOPO, d.reserved_gpus).find(1) is not None  # an O job would fit there
    assert not d.grants and not d.preemptions and not d.renewals
    assert d.idle_gpus == frozenset()
    w = d.apps["W"]
    assert w.rank == 1 and w.bid
    assert "2 of 4 GPU(s) reserved for job w1" in said(w) and "complete in 200 s" in said(w)
    assert "reserv" not in said(d.apps["O"])
    assert w.rho_after == pytest.approx(w.rho_before)  # it got nothing yet


@pytest.mark.parametrize("solver", SOLVERS)
def test_reservation_stays_on_the_node_with_most_gpus_free_now(solver: str) -> None:
    """Node2 frees at now + 300, before node1's GPU 3 (now + 400), but node1 has 2 GPUs free now and node2
    none: nodes are ranked by GPUs free now first, so a reservation made in an earlier round (whose GPUs
    are free, held) stays where it is instead of hopping to whichever node looks soonest. Reserved {0, 1},
    complete in 400 s; O's 1-GPU jobs get nothing."""
    leases = {2: 100.0, 3: 400.0, 4: 300.0, 5: 300.0, 6: 300.0, 7: 300.0}
    d = _run(_state({0, 1}, leases), solver)
    assert d.reserved_gpus == frozenset({0, 1})
    assert _grants(d) == []
    assert "2 of 4 GPU(s) reserved for job w1, complete in 400 s" in said(d.apps["W"])


@pytest.mark.parametrize("solver", SOLVERS)
def test_reservation_on_leased_gpus_only_holds_nothing(solver: str) -> None:
    """Nothing free: node2 frees at now + 300 and node1 at now + 400: the gang will start on node2, nothing
    is held idle, and the reason says so."""
    leases = {0: 400.0, 1: 400.0, 2: 100.0, 3: 400.0, 4: 300.0, 5: 300.0, 6: 300.0, 7: 300.0}
    d = _run(_state(set(), leases), solver)
    assert d.reserved_gpus == frozenset()
    assert "job w1 starts on 4 GPU(s) whose leases end in 300 s (none held idle meanwhile)" in said(d.apps["W"])


def test_reservations_are_on_by_default_and_can_be_switched_off() -> None:
    """The 2-free-GPU case of the test above with reserve_wide_gangs off: no reservation, O gets the GPUs."""
    assert ArbiterConfig().reserve_wide_gangs
    leases = {2: 100.0, 3: 400.0, 4: 300.0, 5: 300.0, 6: 300.0, 7: 300.0}
    state = _state({0, 1}, leases)
    on = run_round(state, ArbiterConfig(restart_cost_s=0.0, fairness_knob=0.0, lease_s=LEASE))
    assert on.reserved_gpus == frozenset({0, 1})
    d = run_round(state, ArbiterConfig(restart_cost_s=0.0, fairness_knob=0.0, lease_s=LEASE, reserve_wide_gangs=False))
    check_invariants(state, d)
    assert d.reserved_gpus == frozenset() and sorted(g.job_id for g in d.grants) == ["o1", "o2"]


# ------------------------------------------------------------------------------- 2. the reservation is fulfilled
@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize(("f", "o_source"), [(0.0, "auction"), (0.8, "leftover")])
def test_reservation_starts_the_gang_when_it_fits_now(solver: str, f: float, o_source: str) -> None:
    """Node1 and GPU 4 free, GPUs 5-7 busy until now + 500: the gang fits now on node1 (best fit: the
    island with exactly 4 free), so it starts there before the auction, source "reservation". GPU 4 is
    what is left: O gets it for o1 (its bidding order is by id among equals), in the auction when O bids
    (f = 0) or as leftover when it is outside it (f = 0.8)."""
    state = _state({0, 1, 2, 3, 4}, {5: 500.0, 6: 500.0, 7: 500.0})
    d = _run(state, solver, f)
    assert _grants(d) == [("o1", [4], o_source), ("w1", [0, 1, 2, 3], "reservation")]
    assert d.reserved_gpus == frozenset() and d.idle_gpus == frozenset()
    (wg,) = [g for g in d.grants if g.job_id == "w1"]
    assert wg.nodes == {"node1": 4} and wg.level == "island" and wg.lease_expiry == NOW + LEASE
    w = d.apps["W"]
    assert "job w1 started on its reservation (4 GPUs)" in said(w)
    assert w.leftover_gpus == 0 and w.kept_gpus == 0  # reservation GPUs are neither auction nor leftover
    # rho at 4 GPUs: (10000 + max(40000 / 4, path 10000)) / 15000
    assert w.rho_after == pytest.approx(20000 / 15000)


def test_rho_after_counts_a_started_reservation_once() -> None:
    """W gets a second job w2 (1 GPU, 1000 GPU-s, submitted at 0) that stays waiting: node1 is all that is
    free. T_id = max(41000 / (8/3), 10000) = 15375, remaining path 10000.
    W on its 4 reserved GPUs: rho = (10000 + max(41000 / 4, 10000)) / 15375 = 20250 / 15375 = 1.3171.
    Counting the gang twice (8 GPUs) gives (10000 + max(5125, 10000)) / 15375 = 1.3008."""
    w2 = Job("w2", "W", 1, 1000.0, profile="none", submit=0.0)
    state = _state(set(NODE1), {4: 500.0, 5: 500.0, 6: 500.0, 7: 500.0}, (_wide(), w2))
    d = _run(state)
    assert _grants(d) == [("w1", [0, 1, 2, 3], "reservation")]
    model = FairnessModel(TOPO, 8)
    app_w = next(a for a in state.apps if a.id == "W")
    assert model.rho(app_w, NOW, 4.0) == pytest.approx(20250 / 15375)
    assert d.apps["W"].rho_after == pytest.approx(20250 / 15375)


# ------------------------------------------------------------------------------- 3. not before a lease of waiting
@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize(("waited", "reserved"), [(599.0, False), (600.0, True)])
def test_no_reservation_before_the_gang_has_waited_a_lease(
    solver: str, waited: float, reserved: bool
) -> None:
    """w1 submitted `waited` s ago (now - submit >= lease_s is the test). Its rho is lower (T_id floored by
    its path: submit + 10000 = 19401 or 19400 s) but still the worst: 500000 / 19401 = 25.77 > 20.
    Below a lease nothing is held and work conservation hands GPUs 0, 1 to O's jobs."""
    state = _state({0, 1}, BUSY, (_wide(submit=NOW - waited),))
    d = _run(state, solver)
    assert d.apps["W"].rank == 1
    assert d.apps["W"].rho_before == pytest.approx(500000 / (NOW - waited + 10000))
    if reserved:
        assert d.reserved_gpus == {0, 1} and not d.grants
        assert "reserved for job w1" in said(d.apps["W"])
    else:
        assert d.reserved_gpus == frozenset()
        assert "reserv" not in said(d.apps["W"])
        assert sorted(g.job_id for g in d.grants) == ["o1", "o2"]
        assert set().union(*(g.gpus for g in d.grants)) == {0, 1} and d.idle_gpus == frozenset()


# ------------------------------------------------------------------------------- 4. ineligible gangs
@pytest.mark.parametrize("solver", SOLVERS)
def test_no_reservation_for_an_elastic_job(solver: str) -> None:
    """An elastic 4-GPU job can start on fewer GPUs: no reservation; GPUs 0, 1 are handed out (to W's elastic
    job or to O's 1-GPU jobs, as the auction and its hidden payments go), none held or idle."""
    d = _run(_state({0, 1}, BUSY, (_wide(elastic=True),)), solver)
    assert d.reserved_gpus == frozenset() and "reserv" not in said(d.apps["W"])
    assert set().union(*(g.gpus for g in d.grants)) == {0, 1} and d.idle_gpus == frozenset()


@pytest.mark.parametrize("solver", SOLVERS)
def test_no_reservation_for_a_gang_larger_than_the_cluster(solver: str) -> None:
    """12 GPUs on an 8-GPU cluster never fit, even when every lease has expired: nothing is held, O's jobs
    take GPUs 0, 1. (W stays the worst: T_id = max(40000 / (8/3), 40000 / 12) = 15000, rho 33.33.)"""
    d = _run(_state({0, 1}, BUSY, (_wide(gpus=12),)), solver)
    assert d.apps["W"].rank == 1
    assert d.reserved_gpus == frozenset() and "reserv" not in said(d.apps["W"])
    assert sorted(g.job_id for g in d.grants) == ["o1", "o2"]


@pytest.mark.parametrize("solver", SOLVERS)
def test_no_reservation_when_only_non_preemptible_leases_block_the_gang(solver: str) -> None:
    """Same leases as BUSY but none preemptible: they never count as becoming free, so the gang never fits
    (2 GPUs at most) and GPUs 0, 1 go to O."""
    d = _run(_state({0, 1}, BUSY, pinned=frozenset(BUSY)), solver)
    assert d.reserved_gpus == frozenset() and "reserv" not in said(d.apps["W"])
    assert sorted(g.job_id for g in d.grants) == ["o1", "o2"]


@pytest.mark.parametrize("solver", SOLVERS)
def test_the_reserved_gang_keeps_its_gpus_when_its_lease_expires(solver: str) -> None:
    """w1 holds node2 on a lease expiring now and node1 is free: w1 is the gang the phase would reserve for
    (W ranks 1 with its rho without the lease, 33.33), and it already runs, so it keeps node2 outside the
    auction (a renewal, cause "reservation"), not moved to node1 (the tightest placement, first of two
    equal islands) and not re-reserved. O's jobs take node1's GPUs; nothing is held idle."""
    state = _state(set(NODE1), {})
    state = ClusterState(TOPO, NOW, NODE1, (Lease("w1", NODE2, NOW - LEASE, NOW),), state.apps)
    d = _run(state, solver)
    assert d.apps["W"].rank == 1 and d.apps["W"].rho_before == pytest.approx(50000 / 0.1 / 15000)
    assert d.reserved_gpus == frozenset() and "reserv" not in said(d.apps["W"])
    assert [(r.job_id, r.gpus, r.cause) for r in d.renewals] == [("w1", NODE2, RenewalCause.RESERVATION)]
    assert "reservation's wide gang keeps its GPUs" in said(d.renewals[0]) and not d.preemptions
    assert all(g.app_id == "O" and g.gpus <= NODE1 for g in d.grants)
    # the app then holds its gang: its rho after the round counts it once, at full speed (a renewal)
    assert d.apps["W"].rho_after == pytest.approx((10000 + 40000 / 4) / 15000)


def _gang_and_four_singles() -> ClusterState:
    """node1: w1 (W's 4-GPU gang, 2400 of its 40000 GPU-s done) on a lease expiring now; node2 leased to H
    until now + 500. P1..P4 arrived now, each with one 1-GPU job of 3600 GPU-s: T_id = 3600, rho without a
    GPU (3600 / 0.1) / 3600 = 10, with one 1.0 (no restart cost), a gain of log 10 each. W: rho without
    its gang (10000 + 37600) / 0.1 / 15000 = 31.7, with it (10000 + 37600 / 4) / 15000 = 1.293, a gain of
    log 24.5 = 3.2 < 4 log 10 = 9.2: the auction gives node1 to the four singles."""
    w = App("W", "u", 0.0, (Job("w1", "W", 4, 40000.0, done=2400.0, profile="none", submit=0.0),), contention=3)
    h = App("H", "u", 0.0, tuple(Job(f"h{g}", "H", 1, 1e6, profile="none") for g in NODE2), contention=3)
    ps = tuple(App(f"P{k}", "u", NOW, (Job(f"p{k}", f"P{k}", 1, 3600.0, profile="none", submit=NOW),), contention=3)
               for k in range(1, 5))  # fmt: skip
    leases = (Lease("w1", NODE1, NOW - LEASE, NOW),
              *(Lease(f"h{g}", frozenset({g}), NOW - 100.0, NOW + 500.0) for g in sorted(NODE2)))  # fmt: skip
    return ClusterState(TOPO, NOW, frozenset(), leases, (w, h, *ps))


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_wide_gang_that_would_lose_its_gpus_one_by_one_keeps_them(solver: str) -> None:
    """Without the reservation phase the auction hands node1 to P1..P4, one GPU each (module docstring of
    _gang_and_four_singles), and w1 is preempted: to start again it needs four GPUs free in one round.
    With it, w1 (the worst bidder's wide gang) keeps node1 and the singles wait for node2."""
    state = _gang_and_four_singles()
    off = run_round(state, ArbiterConfig(reserve_wide_gangs=False, restart_cost_s=0.0, fairness_knob=0.0,
                                         lease_s=LEASE, solver=solver))  # fmt: skip
    check_invariants(state, off)
    assert off.apps["W"].rank == 1 and off.apps["W"].rho_before == pytest.approx(47600 / 0.1 / 15000)
    assert [(p.job_id, p.gpus) for p in off.preemptions] == [("w1", NODE1)]
    assert sorted(g.job_id for g in off.grants) == ["p1", "p2", "p3", "p4"]
    on = _run(state, solver)
    assert [(r.job_id, r.gpus, r.cause) for r in on.renewals] == [("w1", NODE1, RenewalCause.RESERVATION)]
    assert not on.preemptions and not on.grants and not on.idle_gpus


@pytest.mark.parametrize("solver", SOLVERS)
def test_only_a_bidder_keeps_its_wide_gang(solver: str) -> None:
    """The same round with f = 0.8: one bidder of the five apps ranked (W first, then the four singles):
    W, whose gang is kept. With W's rho lowered below the singles' (almost all its work done, rank 5) it
    no longer bids and the phase leaves its gang alone: the bidder P1 wins one GPU of node1, and the
    leftover gives the other three to P2..P4, later against their pace than w1 (which has 10 GPU-s left)."""
    state = _gang_and_four_singles()
    d = _run(state, solver, f=0.8)
    assert bidders_offered(0.8, 5) == 1
    assert [r.cause for r in d.renewals] == [RenewalCause.RESERVATION]
    w = App("W", "u", 0.0, (Job("w1", "W", 4, 40000.0, done=39990.0, profile="none", submit=0.0),), contention=3)
    state = ClusterState(TOPO, NOW, state.free, state.leases, (w, *state.apps[1:]))
    d = _run(state, solver, f=0.8)
    assert d.apps["W"].rank == 5 and not d.renewals
    assert [(p.job_id, p.gpus) for p in d.preemptions] == [("w1", NODE1)]
    assert sorted((g.job_id, g.source) for g in d.grants) == [("p1", "auction"), ("p2", "leftover"),
                                                              ("p3", "leftover"), ("p4", "leftover")]  # fmt: skip


@pytest.mark.parametrize("solver", SOLVERS)
def test_no_reservation_for_a_one_gpu_job(solver: str) -> None:
    """W's only job needs 1 GPU (4000 GPU-s, submitted at 0): T_id = max(4000 / min(1, 8/3), 4000) = 4000,
    rho = (10000 + 4000) / 0.1 / 4000 = 35, the worst. It is no wide gang: it competes in the auction like
    any job; no grant comes from a reservation and no reason mentions one."""
    state = _state({0, 1}, BUSY, (Job("w1", "W", 1, 4000.0, profile="none", submit=0.0),))
    d = _run(state, solver)
    assert d.apps["W"].rank == 1 and d.apps["W"].rho_before == pytest.approx(35.0)
    assert d.reserved_gpus == frozenset()
    assert all(g.source != "reservation" for g in d.grants) and len(d.grants) == 2
    assert all("reserv" not in said(r) for r in d.apps.values())


# ------------------------------------------------------------------------------- 5. expiring leases count now
@pytest.mark.parametrize("solver", SOLVERS)
def test_expiring_holder_counts_as_free_and_is_preempted(solver: str) -> None:
    """H's leases on GPUs 2, 3 expire now (node2 busy until +500): node1 is all in the pool, the gang starts
    on it now and the holders h2, h3 lose their GPUs. H is ranked (its leases expire) but is no worse
    than W: base 4 GPUs (node2), T_id = max(6e6 / (8/3), 1e6) = 2.25e6; on 4 GPUs two of its six 1e6-s
    jobs run one after the other (fairness.pair_floor), rho = (10000 + max(6e6 / 4, 1e6, 2e6)) / 2.25e6
    = 0.893."""
    state = _state({0, 1}, {2: 0.0, 3: 0.0, 4: 500.0, 5: 500.0, 6: 500.0, 7: 500.0})
    d = _run(state, solver)
    assert (d.apps["W"].rank, d.apps["O"].rank, d.apps["H"].rank) == (1, 2, 3)
    assert d.apps["H"].rho_before == pytest.approx(2.01e6 / 2.25e6)
    assert _grants(d) == [("w1", [0, 1, 2, 3], "reservation")]
    assert sorted((p.job_id, sorted(p.gpus)) for p in d.preemptions) == [("h2", [2]), ("h3", [3])]
    assert not d.renewals and d.reserved_gpus == frozenset()


@pytest.mark.parametrize("solver", SOLVERS)
def test_non_preemptible_expiring_holder_is_never_counted(solver: str) -> None:
    """The same round with h2, h3 not preemptible: they are renewed, and their GPUs never count. The
    soonest placement is node2 at now + 500 (free by then: 0, 1 and node2), none of it in the pool, so
    nothing is held and O's jobs take GPUs 0, 1. (Counting the pinned GPUs as free now would have held
    {0, 1} for a placement on node1 "complete in 0 s".)"""
    state = _state({0, 1}, {2: 0.0, 3: 0.0, 4: 500.0, 5: 500.0, 6: 500.0, 7: 500.0}, pinned=frozenset({2, 3}))
    d = _run(state, solver)
    assert sorted(r.job_id for r in d.renewals) == ["h2", "h3"] and not d.preemptions
    assert d.reserved_gpus == frozenset()
    assert "leases end in 500 s" in said(d.apps["W"])
    assert sorted(g.job_id for g in d.grants) == ["o1", "o2"]
    assert set().union(*(g.gpus for g in d.grants)) == {0, 1}


# ------------------------------------------------------------------------------- 6. one reservation per round
def _second_wide_app() -> tuple[App, ...]:
    """V: arrived at 2000, one 4-GPU gang v1 of 40000 GPU-s submitted at 2000 (waited 8000 s).
    T_id = max(40000 / (8/3), path 0 + 10000) = 15000; rho = (8000 + 40000) / 0.1 / 15000 = 32 < W's 33.33."""
    return (App("V", "u", 2000.0, (_wide("v1", "V", submit=2000.0),), contention=3),)


@pytest.mark.parametrize("solver", SOLVERS)
def test_only_the_worst_eligible_bidder_gets_the_reservation(solver: str) -> None:
    """W (rank 1) and V (rank 2) both have an eligible 4-GPU gang; f = 0, all three apps bid. W's gang gets
    the reservation (GPUs 0, 1 held, complete in 200 s); V's reason names none."""
    state = _state({0, 1}, BUSY, extra=_second_wide_app())
    d = _run(state, solver)
    assert (d.apps["W"].rank, d.apps["V"].rank, d.apps["O"].rank) == (1, 2, 3)
    assert d.apps["V"].rho_before == pytest.approx(32.0)
    with_res = [aid for aid, r in d.apps.items() if "reserv" in said(r)]
    assert with_res == ["W"] and d.apps["W"].rank == 1
    assert d.reserved_gpus == {0, 1} and not d.grants


@pytest.mark.parametrize("solver", SOLVERS)
def test_reservation_goes_to_the_next_bidder_when_the_worst_has_no_eligible_gang(solver: str) -> None:
    """W's gang is elastic (rank 1 still: the same rho), V's is rigid: V gets the reservation, GPUs 0, 1
    are held for v1 and W's elastic job, which would fit on them, gets nothing."""
    state = _state({0, 1}, BUSY, (_wide(elastic=True),), extra=_second_wide_app())
    d = _run(state, solver)
    assert d.apps["W"].rank == 1 and d.apps["V"].rank == 2
    assert "2 of 4 GPU(s) reserved for job v1, complete in 200 s" in said(d.apps["V"])
    assert "reserv" not in said(d.apps["W"])
    assert d.reserved_gpus == {0, 1} and not d.grants


@pytest.mark.parametrize("solver", SOLVERS)
def test_only_bidders_get_a_reservation(solver: str) -> None:
    """The same apps with f = 0.8: 3 apps want GPUs, max(1, floor(0.2 x 3)) = 1 bidder, W, whose gang is
    elastic. V is eligible but not a bidder: no reservation, and W's elastic job takes GPUs 0, 1."""
    state = _state({0, 1}, BUSY, (_wide(elastic=True),), extra=_second_wide_app())
    d = _run(state, solver, f=0.8)
    assert d.apps["W"].bid and not d.apps["V"].bid
    assert d.reserved_gpus == frozenset()
    assert all("reserv" not in said(r) for r in d.apps.values())
    assert [(g.job_id, sorted(g.gpus)) for g in d.grants] == [("w1", [0, 1])]


# ------------------------------------------------------------------------------- 7. determinism
@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("free", [frozenset({0, 1}), frozenset({0, 1, 2, 3, 4})])
def test_reservation_is_deterministic(solver: str, free: frozenset[int]) -> None:
    """The same state twice (and with the apps listed in reverse) gives the same Decision."""
    leases = {g: dt for g, dt in BUSY.items() if g not in free}
    state = _state(set(free), leases, extra=_second_wide_app())
    cfg = ArbiterConfig(reserve_wide_gangs=True, restart_cost_s=0.0, fairness_knob=0.0, lease_s=LEASE, solver=solver)
    d1, d2 = run_round(state, cfg), run_round(state, cfg)
    assert d1 == d2
    assert d1.reserved_gpus or any(g.source == "reservation" for g in d1.grants)
    rev = ClusterState(TOPO, NOW, state.free, state.leases, tuple(reversed(state.apps)))
    d3 = run_round(rev, cfg)
    assert (_grants(d3), d3.reserved_gpus, d3.preemptions) == (_grants(d1), d1.reserved_gpus, d1.preemptions)


def test_an_agent_with_a_started_job_equals_one_built_without_it() -> None:
    """reservation.reserve_for_wide_gang derives the agent (Agent.with_started) instead of rebuilding it."""
    import random

    from themis_slurm.core.agent import Agent
    from themis_slurm.core.fairness import FairnessModel
    from themis_slurm.core.topology import Topology
    from themis_slurm.core.workload import App, Job

    rng = random.Random(5)
    topo = Topology.uniform(2, 2, 4)
    jobs = tuple(Job(f"j{i}", "a", rng.choice([1, 2, 4]), rng.uniform(10, 900), submit=float(i),
                     profile=rng.choice(["vgg16", "low"])) for i in range(12))  # fmt: skip
    app = App("a", "u", 0.0, jobs)
    model = FairnessModel(topo, 16)
    homes = {"j3": frozenset({0})}
    whole = Agent(app, model, 50.0, 1.0, jobs, homes, 0.05)
    for job in jobs:
        if job.id in homes:
            continue
        derived = whole.with_started(job.id, 2.0)
        built = Agent(app, model, 50.0, 3.0, [j for j in jobs if j.id != job.id], homes, 0.05)
        assert derived.jobs == built.jobs and derived.kinds == built.kinds and derived._after == built._after
        assert derived._plain == built._plain and derived.homes == built.homes
        assert derived.rho_base == built.rho_base and derived.base == built.base
    assert whole.base == 1.0 and len(whole.jobs) == 12  # the original is left as it was


# ------------------------------------------------------------------------------- 8. which nodes the gang gets
@pytest.mark.parametrize("solver", SOLVERS)
def test_a_free_node_is_preferred_to_a_holders_home(solver: str) -> None:
    """H's leases on node1 expire now and node2 is free: both nodes are all in the pool, and the gang fits
    on either. It starts on node2: on node1 it would have preempted four jobs for nothing (a placement no
    better than node2's). The holders keep node1 but for what O's jobs (bidders too at f = 0) take there."""
    state = _state(set(NODE2), {0: 0.0, 1: 0.0, 2: 0.0, 3: 0.0})
    d = _run(state, solver)
    w1 = [g for g in d.grants if g.job_id == "w1"]
    assert [(sorted(g.gpus), g.source) for g in w1] == [([4, 5, 6, 7], "reservation")]
    o_jobs = [g for g in d.grants if g.app_id == "O"]
    assert len(d.preemptions) == len(o_jobs) and len(d.renewals) == 4 - len(o_jobs)


def _two_racks(profile: str) -> ClusterState:
    """2 racks x 2 nodes x 4 GPUs (rack1 = node1, node2 = GPUs 0-7; rack2 = node3, node4 = GPUs 8-15).
    node1 and node3 are free now, node2 frees at now + 100 and node4 at now + 500. W's 2 x 4 gang has
    waited more than a lease."""
    topo = Topology.uniform(2, 2, 4)
    w = App("W", "u", 0.0, (Job("w1", "W", 8, 80000.0, profile=profile, submit=0.0, gpus_per_node=4, nodes=2),),
            contention=2)  # fmt: skip
    busy = {g: 100.0 for g in range(4, 8)} | {g: 500.0 for g in range(12, 16)}
    h = App("H", "u", 0.0, tuple(Job(f"h{g}", "H", 1, 1e6, profile="none") for g in sorted(busy)), contention=2)
    held = tuple(Lease(f"h{g}", frozenset({g}), NOW - 100.0, NOW + dt) for g, dt in sorted(busy.items()))
    return ClusterState(topo, NOW, frozenset(range(4)) | frozenset(range(8, 12)), held, (w, h))


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_sensitive_multi_node_gang_is_reserved_within_one_rack(solver: str) -> None:
    """vgg16 runs at 0.72 of its speed within a rack and 0.52 across racks (placement.py): node1 + node3
    (free now, across racks) would start it now at the slower speed for its whole run, so it waits for
    node2 instead (at most a lease): node1 is held, complete in 100 s."""
    d = _run(_two_racks("vgg16"), solver)
    assert d.reserved_gpus == frozenset(range(4))
    assert not d.grants or all(g.job_id != "w1" for g in d.grants)
    assert "4 of 8 GPU(s) reserved for job w1, complete in 100 s" in said(d.apps["W"])


@pytest.mark.parametrize("solver", SOLVERS)
def test_an_insensitive_multi_node_gang_starts_across_racks(solver: str) -> None:
    """The same round for a model that runs as fast anywhere: node1 + node3 are free now, so it starts."""
    d = _run(_two_racks("none"), solver)
    assert _grants(d) == [("w1", [0, 1, 2, 3, 8, 9, 10, 11], "reservation")]
    assert d.reserved_gpus == frozenset()
