"""A whole round: invariants on random rounds, sharing incentive, renewals, and a hand-computed example."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from themis_slurm.core.arbiter import ArbiterConfig, bidders_offered, run_round
from themis_slurm.core.decision import Decision
from themis_slurm.core.payments import lottery
from themis_slurm.core.placement import Pool, allowed_nodes_on
from themis_slurm.core.state import ClusterState
from themis_slurm.core.topology import Level, Topology
from themis_slurm.core.workload import App, Job, Lease

from .instances import random_state


def check_invariants(state: ClusterState, d: Decision) -> None:
    """No GPU twice, gangs whole and within demand, holders accounted for, work conservation; grants (new
    starts, migrations included) and reservations only on the job's allowed nodes (Job.allowed_nodes)."""
    jobs = {j.id: j for a in state.apps for j in a.jobs}
    running = {lease.job_id: lease.gpus for lease in state.leases if lease.expiry > state.now}
    running.update({lease.job_id: lease.gpus for lease in state.leases if not jobs[lease.job_id].preemptible})
    expiring = {lease.job_id: lease.gpus for lease in state.leases if lease.job_id not in running}
    offered = set(state.free).union(*expiring.values()) if expiring else set(state.free)
    used: dict[int, str] = {}
    for jid, gpus in running.items():
        for g in gpus:
            used[g] = jid
    for r in d.renewals:
        if r.job_id in expiring:
            assert r.gpus == expiring[r.job_id]
            for g in r.gpus:
                assert g not in used, f"GPU {g} renewed to {r.job_id} but used by {used[g]}"
                used[g] = r.job_id
    for gr in d.grants:
        job = jobs[gr.job_id]
        assert gr.job_id not in running, "a running job is never granted again"
        assert job.min_gpus <= len(gr.gpus) <= job.gpus, "gang whole and within demand"
        if job.nodes is not None:
            per = state.topology.nodes_of(gr.gpus)
            assert len(per) == job.nodes and set(per.values()) == {job.gpus_per_node}
        assert gr.gpus <= offered, "only free or expiring GPUs are granted"
        if job.allowed_nodes is not None:
            assert set(gr.nodes) <= job.allowed_nodes, f"{gr.job_id} granted {gr.nodes}, off {job.allowed_nodes}"
        for g in gr.gpus:
            assert g not in used, f"GPU {g} granted to {gr.job_id} but used by {used[g]}"
            used[g] = gr.job_id
    decided = {r.job_id for r in d.renewals} | {g.job_id for g in d.grants}
    for p in d.preemptions:
        assert p.job_id in expiring and jobs[p.job_id].preemptible
    for jid in expiring:
        assert jid in decided or any(p.job_id == jid for p in d.preemptions), f"holder {jid} vanished"
    assert not d.reserved_gpus & set(used), "a reserved GPU is not handed out"
    assert d.reserved_gpus <= offered, "only offered GPUs are reserved"
    for rec in d.apps.values():
        note = rec.reservation
        allowed = jobs[note.job_id].allowed_nodes if note is not None and not note.started else None
        if allowed is not None:
            assert set(state.topology.nodes_of(d.reserved_gpus)) <= allowed, "reserved off the allowed nodes"
    assert d.idle_gpus == frozenset(offered - set(used) - d.reserved_gpus), "idle = offered minus handed out, reserved"
    # work conservation: no waiting job fits in the idle GPUs of the nodes it may run on
    idle = Pool(state.topology, d.idle_gpus)
    for job in jobs.values():
        if job.id in running or job.id in decided:
            continue
        fits = idle.find(job.min_gpus, job.gpus_per_node, job.nodes, allowed_nodes_on(state.topology, job.allowed_nodes))
        assert fits is None, f"job {job.id} ({job.gpus} GPUs) waits while {sorted(d.idle_gpus)} idle"
    for rec in d.apps.values():
        assert math.isfinite(rec.rho_before) and math.isfinite(rec.rho_after)
        if rec.payment_fraction is not None:
            assert 0.0 <= rec.payment_fraction <= 1.0


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), solver=st.sampled_from(["exact", "fast"]), f=st.sampled_from([0.0, 0.5, 0.8]))
def test_round_invariants(seed: int, solver: str, f: float) -> None:
    state = random_state(random.Random(seed))
    d = run_round(state, ArbiterConfig(solver=solver, fairness_knob=f))
    check_invariants(state, d)


def test_unavailable_gpus_are_never_offered() -> None:
    topo = Topology.uniform(1, 2, 4)
    a = App("a", "u", 0.0, tuple(Job(f"j{k}", "a", 1, 100.0) for k in range(8)))
    st = ClusterState(topo, 0.0, frozenset(range(4)), (), (a,), unavailable=frozenset(range(4, 8)))
    d = run_round(st)
    assert set().union(*(g.gpus for g in d.grants)) == set(range(4))


def test_job_past_its_estimate_still_gets_gpus() -> None:
    topo = Topology.uniform(1, 1, 4)
    a = App("a", "u", 0.0, (Job("over", "a", 2, 100.0, done=250.0),))
    d = run_round(ClusterState(topo, 500.0, frozenset(range(4)), (), (a,)))
    assert [g.job_id for g in d.grants] == ["over"]
    assert math.isfinite(d.apps["a"].rho_after)


def test_same_app_job_never_displaces_a_holder_of_its_kind() -> None:
    """X landing on holder Y's GPUs (same app, same kind) while Y loses becomes Y's renewal instead."""
    from themis_slurm.core.agent import Gang
    from themis_slurm.core.keep_in_place import keep_holders_in_place as _keep_holders_in_place

    jobs = {
        "x": Job("x", "a", 2, 100.0),
        "y": Job("y", "a", 2, 100.0),
        "z": Job("z", "a", 2, 100.0),
    }
    homes = {"y": frozenset({0, 1}), "z": frozenset({2, 3})}
    got = {"a": [Gang("x", frozenset({0, 1}), Level.ISLAND, 2.0), Gang("z", frozenset({4, 5}), Level.ISLAND, 2.0)]}
    source = {"x": "auction", "z": "leftover"}
    out = _keep_holders_in_place(got, homes, jobs, source)
    assert [(g.job_id, sorted(g.gpus)) for g in out["a"]] == [("y", [0, 1]), ("z", [4, 5])]
    assert source["y"] == "auction" and "x" not in source
    got2 = {"a": [Gang("y", frozenset({6, 7}), Level.ISLAND, 2.0), Gang("x", frozenset({0, 1}), Level.ISLAND, 2.0)]}
    source2 = {"x": "leftover", "y": "auction"}
    out2 = _keep_holders_in_place(got2, {"y": frozenset({0, 1})}, jobs, source2)
    assert sorted((g.job_id, min(g.gpus)) for g in out2["a"]) == [("x", 6), ("y", 0)]
    assert source2 == {"x": "auction", "y": "leftover"}


def test_deterministic() -> None:
    state = random_state(random.Random(3))
    assert run_round(state) == run_round(state)


def _identical_apps(n: int, topo: Topology, gpus_each: int) -> tuple[App, ...]:
    return tuple(
        App(f"a{i}", "u", 0.0, tuple(Job(f"a{i}j{k}", f"a{i}", 1, 3600.0, profile="none") for k in range(gpus_each)),
            contention=n)  # fmt: skip
        for i in range(n)
    )


@pytest.mark.parametrize("solver", ["exact", "fast"])
def test_sharing_incentive_identical_apps_get_equal_shares(solver: str) -> None:
    topo = Topology.uniform(1, 2, 4)  # 8 GPUs, 4 apps -> 2 each
    apps = _identical_apps(4, topo, 6)
    d = run_round(ClusterState(topo, 0.0, frozenset(range(8)), (), apps), ArbiterConfig(fairness_knob=0.0, solver=solver))
    per_app = {a.id: 0 for a in apps}
    for g in d.grants:
        per_app[g.app_id] += len(g.gpus)
    assert per_app == {"a0": 2, "a1": 2, "a2": 2, "a3": 2}


def test_placement_sensitive_app_gets_one_node() -> None:
    topo = Topology.uniform(2, 2, 4)
    sens = App("vgg", "u", 0.0, (Job("v", "vgg", 4, 40000.0, profile="vgg16"),), contention=2)
    other = App("res", "u", 0.0, tuple(Job(f"r{k}", "res", 1, 4000.0, profile="resnet50") for k in range(3)), contention=2)
    free = frozenset(range(16)) - {0, 4, 8}  # every node but node4 has a hole
    d = run_round(ClusterState(topo, 0.0, free, (), (other, sens)), ArbiterConfig(fairness_knob=0.0))
    g = next(g for g in d.grants if g.job_id == "v")
    assert topo.level_of(g.gpus) == Level.ISLAND and g.nodes == {"node4": 4}


def test_worst_rho_served_first_when_f_near_one() -> None:
    topo = Topology.uniform(1, 1, 4)
    # both want all 4 GPUs; 'late' has waited longer relative to its size, so its rho is worse
    early = App("early", "u", 900.0, (Job("e", "early", 4, 4000.0),), contention=2)
    late = App("late", "u", 0.0, (Job("l", "late", 4, 4000.0),), contention=2)
    d = run_round(ClusterState(topo, 1000.0, frozenset(range(4)), (), (early, late)), ArbiterConfig(fairness_knob=0.99))
    assert d.apps["late"].rank == 1 and d.apps["late"].bid and not d.apps["early"].bid
    assert [g.job_id for g in d.grants] == ["l"]


def test_holder_that_wins_again_is_renewed_not_preempted() -> None:
    topo = Topology.uniform(1, 2, 4)
    a = App("a", "u", 0.0, (Job("a1", "a", 4, 40000.0, done=100.0),), contention=2)
    b = App("b", "u", 0.0, (Job("b1", "b", 4, 40000.0, done=100.0),), contention=2)
    leases = (Lease("a1", frozenset({0, 1, 2, 3}), 0.0, 600.0), Lease("b1", frozenset({4, 5, 6, 7}), 0.0, 600.0))
    d = run_round(ClusterState(topo, 600.0, frozenset(), leases, (a, b)), ArbiterConfig(lease_s=600.0))
    assert not d.preemptions and not d.grants
    assert {(r.job_id, r.lease_expiry) for r in d.renewals} == {("a1", 1200.0), ("b1", 1200.0)}


def test_loser_is_preempted_at_lease_expiry_and_non_preemptible_keeps_gpus() -> None:
    topo = Topology.uniform(1, 1, 4)
    holder = App("h", "u", 0.0, (Job("h1", "h", 4, 1e6, done=1e5),), contention=2)
    pinned = App("p", "u", 0.0, (Job("p1", "p", 4, 1e6, done=0.0, preemptible=False),), contention=2)
    waiting = App("w", "u", 0.0, (Job("w1", "w", 4, 4000.0),), contention=2)
    st = ClusterState(topo, 600.0, frozenset(), (Lease("h1", frozenset(range(4)), 0.0, 600.0),), (holder, waiting))
    d = run_round(st, ArbiterConfig(fairness_knob=0.5))
    assert [p.job_id for p in d.preemptions] == ["h1"] and [g.job_id for g in d.grants] == ["w1"]
    st2 = ClusterState(topo, 600.0, frozenset(), (Lease("p1", frozenset(range(4)), 0.0, 600.0),), (pinned, waiting))
    d2 = run_round(st2)
    assert not d2.preemptions and not d2.grants and [r.job_id for r in d2.renewals] == ["p1"]


def test_validation_errors_name_the_problem() -> None:
    topo = Topology.uniform(1, 1, 4)
    a = App("a", "u", 0.0, (Job("a1", "a", 1, 10.0),))
    with pytest.raises(ValueError, match="GPU 0 is both free and leased to job a1"):
        run_round(ClusterState(topo, 0.0, frozenset({0}), (Lease("a1", frozenset({0}), 0, 10),), (a,)))
    with pytest.raises(ValueError, match="lease for unknown job zz"):
        run_round(ClusterState(topo, 0.0, frozenset(), (Lease("zz", frozenset({0}), 0, 10),), (a,)))
    with pytest.raises(ValueError, match="GPU 1 is both unavailable and leased"):
        run_round(ClusterState(topo, 0.0, frozenset(), (Lease("a1", frozenset({1}), 0, 10),), (a,),
                               unavailable=frozenset({1})))  # fmt: skip
    with pytest.raises(ValueError, match="free GPU id 9"):
        run_round(ClusterState(topo, 0.0, frozenset({9}), (), (a,)))
    with pytest.raises(ValueError, match="fairness_knob must be in"):
        ArbiterConfig(fairness_knob=1.0)


def test_hand_computed_three_apps_eight_gpus() -> None:
    """docs/design.md works this example by hand; every number below is from there.

    1 rack, 2 nodes x 4 GPUs; N = 3, C = 8 (share 8/3); now = 100 s; all apps arrived at 0; f = 0; no
    restart cost in bids. No job is longer than its app's fluid T_id, so the critical-path floors do not bind.
      A: one 4-GPU vgg16 gang, 4000 GPU-s.  T_id = 4000 / (8/3) = 1500
      B: two 2-GPU gangs, 1200 GPU-s each.  T_id = 2400 / (8/3) = 900
      C: one 1-GPU job, 500 GPU-s (can use 1 GPU only). T_id = 500
    rho with nothing (10x one GPU: (elapsed + remaining) / 0.1): A 41000/1500, B 25000/900, C 6000/500.
    Winner determination: A 4 GPUs on one node (rho 1100/1500), B one gang (rho 1300/900), C (rho 600/500):
    sum of log gains 3.618 + 2.956 + 2.303 = 8.877, better than A+B(4) = 3.618 + 3.576 = 7.194. Hidden payments:
      c_A = exp(gains of B,C in x* - best of B,C without A) = exp(5.259 - 5.879) = 0.5385 -> A keeps nothing
      c_B = 1;  c_C = exp(6.574 - 7.194) = 0.5385 -> C's 1 GPU is withheld
    (c_i compare the others' rho under two allocations, so the no-allocation rho cancels out of them.)
    Gangs are kept by lottery (keep_fraction): A's and C's draws (lottery(0, 100.0, id) = 0.696 and 0.813)
    are above their c = 0.5385, so both single gangs are withheld.
    Leftover: no app is outside the auction (f = 0); B paid nothing and gets its second gang (rho 700/900);
    then work conservation. Earliest virtual deadline first (the default): C's job (lateness 100 - 500 =
    -400 s, A's 100 - 1500 = -1400 s) gets a GPU of the free node; A's 4-GPU gang does not fit in the other
    three, which stay idle (no waiting job fits them). Worst rho first (leftover_order "rho"): A (rho
    41000/1500, worse than C's 6000/500) gets its 4-GPU gang on the free node; nothing is left for C's
    job; no GPU idles.
    """
    topo = Topology.uniform(1, 2, 4)
    A = App("A", "u", 0.0, (Job("A1", "A", 4, 4000.0, profile="vgg16"),), contention=3)
    B = App("B", "u", 0.0, (Job("B1", "B", 2, 1200.0, profile="none"), Job("B2", "B", 2, 1200.0, profile="none")), contention=3)
    C = App("C", "u", 0.0, (Job("C1", "C", 1, 500.0, profile="none"),), contention=3)
    for solver, order in (("exact", "rho"), ("fast", "rho"), ("exact", "deadline"), ("fast", "deadline")):
        state = ClusterState(topo, 100.0, frozenset(range(8)), (), (A, B, C))
        d = run_round(state, ArbiterConfig(fairness_knob=0.0, solver=solver, restart_cost_s=0.0, leftover_order=order))
        check_invariants(state, d)
        r = d.apps
        assert r["A"].rho_before == pytest.approx(41000 / 1500)
        assert r["B"].rho_before == pytest.approx(25000 / 900)
        assert r["C"].rho_before == pytest.approx(6000 / 500)
        assert d.objective == pytest.approx(
            math.log((41000 / 1500) / (1100 / 1500)) + math.log((25000 / 900) / (1300 / 900)) + math.log(6000 / 600), rel=1e-9
        )
        assert d.objective == pytest.approx(8.877, abs=1e-3)
        assert lottery(0, 100.0, "A") == pytest.approx(0.696, abs=1e-3)
        assert lottery(0, 100.0, "C") == pytest.approx(0.813, abs=1e-3)
        assert r["A"].won_gpus == 4 and r["A"].kept_gpus == 0
        assert r["A"].payment_fraction == pytest.approx(math.exp(math.log(25000 / 1300) + math.log(6000 / 600)
                                                                 - math.log(25000 / 700) - math.log(6000 / 600)))  # fmt: skip
        assert r["A"].payment_fraction == pytest.approx(0.5385, abs=1e-4)
        assert r["B"].payment_fraction == pytest.approx(1.0)
        assert r["C"].payment_fraction == pytest.approx(0.5385, abs=1e-4)
        assert r["B"].rho_after == pytest.approx(700 / 900)
        if order == "deadline":
            assert sorted((g.job_id, g.source) for g in d.grants) == [("B1", "auction"), ("B2", "leftover"),
                                                                       ("C1", "leftover")]  # fmt: skip
            assert r["A"].rho_after == pytest.approx(41000 / 1500) and r["C"].rho_after == pytest.approx(600 / 500)
            assert len(d.idle_gpus) == 3
            continue
        assert sorted((g.job_id, g.source) for g in d.grants) == [("A1", "leftover"), ("B1", "auction"), ("B2", "leftover")]
        assert r["A"].rho_after == pytest.approx(1100 / 1500)
        assert r["C"].rho_after == pytest.approx(6000 / 500)
        assert len(d.idle_gpus) == 0


def test_bidders_offered_is_floor_of_one_minus_f_times_n_without_rounding_errors() -> None:
    assert [bidders_offered(0.8, n) for n in (0, 1, 4, 5, 9, 10, 20, 84)] == [0, 1, 1, 1, 1, 2, 4, 16]
    assert [bidders_offered(0.5, n) for n in (3, 4)] == [1, 2]
    assert bidders_offered(0.0, 3) == 3 and bidders_offered(0.95, 100) == 5


def test_the_round_ranks_an_app_whose_longest_job_waits_by_the_kept_gpu_floor() -> None:
    """The round passes each app when its first kept GPU frees up (core/bidding.py): A keeps GPUs 0-2 for
    jobs with 1 h left (leases to now + 600 s) while its 2-hour job waits, one hour after arrival. Its rho
    before the round is (1 h + 1 h + 2 h) / T_id 2 h = 2.0 (test_fairness has the arithmetic); the free
    GPU 3 goes to its waiting job, and after the round its rho is the path's, 1.5."""
    h = 3600.0
    topo = Topology.uniform(1, 1, 4)
    kept = tuple(Job(f"k{i}", "A", 1, h, profile="none") for i in range(3))
    app = App("A", "u", 0.0, (Job("long", "A", 1, 2 * h, profile="none"), *kept))
    leases = tuple(Lease(f"k{i}", frozenset({i}), 0.0, h + 600.0) for i in range(3))
    state = ClusterState(topo, h, frozenset({3}), leases, (app,))
    d = run_round(state, ArbiterConfig())
    assert d.apps["A"].rho_before == pytest.approx(2.0)
    assert [g.job_id for g in d.grants] == ["long"]
    assert d.apps["A"].rho_after == pytest.approx(1.5)
