"""A lease holder keeps its GPUs unless moving it changes some job's placement (issue #10, item 3).

A migration costs a restart; it is only worth one when it buys a better placement for some job. The
reported case: a 4-GPU job moved from node1 to node2 (same rack, identical nodes) so that another app's
4-GPU job could start on node1, when that job could as well have started on node2.
"""

from __future__ import annotations

import random

import pytest

from themis_slurm.core.agent import Gang
from themis_slurm.core.arbiter import ArbiterConfig, run_round
from themis_slurm.core.keep_in_place import no_pointless_moves as _no_pointless_moves
from themis_slurm.core.placement import get_profile, throughput
from themis_slurm.core.state import ClusterState
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App, Job, Lease

from .instances import random_state, said
from .test_arbiter import check_invariants

NODE1, NODE2 = frozenset(range(4)), frozenset(range(4, 8))


def _reported(profile: str) -> ClusterState:
    """Two identical nodes in one rack; A's 4-GPU job holds node1 (lease expiring now), B's 4-GPU job waits.

    A has done more work than B, so B ranks worse and is the only bidder at f >= 0.5: its gang is
    placed first and lands on node1 (best fit among two equal nodes), and A went to node2 as leftover.
    """
    topo = Topology.uniform(1, 2, 4)
    a = App("a", "u", 0.0, (Job("a1", "a", 4, 1e5, done=5e4, profile=profile),), contention=2)
    b = App("b", "u", 0.0, (Job("b1", "b", 4, 1e5, profile=profile),), contention=2)
    return ClusterState(topo, 600.0, NODE2, (Lease("a1", NODE1, 0.0, 600.0),), (a, b))


@pytest.mark.parametrize("solver", ["exact", "fast"])
@pytest.mark.parametrize("f", [0.0, 0.5, 0.8])
@pytest.mark.parametrize("profile", ["vgg16", "none"])
def test_holder_on_an_equivalent_node_is_renewed_not_moved(solver: str, f: float, profile: str) -> None:
    st = _reported(profile)
    cfg = ArbiterConfig(solver=solver, fairness_knob=f)
    d = run_round(st, cfg)
    check_invariants(st, d)
    assert d.preemptions == ()
    assert [(r.job_id, r.gpus) for r in d.renewals] == [("a1", NODE1)]
    assert [(g.job_id, g.gpus, g.migrated) for g in d.grants] == [("b1", NODE2, False)]
    # rho_after reflects the final placements: A runs in place at full throughput, as if B were absent
    alone = run_round(ClusterState(st.topology, st.now, NODE2, st.leases, st.apps[:1]), cfg)
    assert d.apps["a"].rho_after == pytest.approx(alone.apps["a"].rho_after)
    assert d.apps["b"].rho_after < d.apps["b"].rho_before


def test_the_keep_in_place_phase_can_be_switched_off() -> None:
    """ArbiterConfig.keep_in_place=False skips the phase: the reported case then moves A off node1 (one
    restart for nothing), which the phase (on by default) undoes. Without reservations: with them B's gang
    (which has waited a lease) is reserved on the free node2 before the auction, and nothing moves."""
    st = _reported("none")
    off = run_round(st, ArbiterConfig(solver="fast", keep_in_place=False, reserve_wide_gangs=False))
    check_invariants(st, off)
    assert [(p.job_id, p.gpus) for p in off.preemptions] == [("a1", NODE1)]
    assert {(g.job_id, g.gpus) for g in off.grants} == {("b1", NODE1), ("a1", NODE2)}
    on = run_round(st, ArbiterConfig(solver="fast", reserve_wide_gangs=False))
    assert on.preemptions == () and [r.job_id for r in on.renewals] == ["a1"]
    reserved = run_round(st, ArbiterConfig(solver="fast", keep_in_place=False))
    assert reserved.preemptions == () and [r.job_id for r in reserved.renewals] == ["a1"]


@pytest.mark.parametrize("solver", ["exact", "fast"])
@pytest.mark.parametrize("f", [0.0, 0.8])
def test_move_that_gives_a_wide_gang_one_rack_still_happens(solver: str, f: float) -> None:
    """2 racks x 2 nodes x 4 GPUs. A holds node2; node4 is busy. G's 2x4 gang fits one rack only on
    node1 + node2 (else node1 + node3, across racks: 0.52 vs 0.72 for vgg16). Moving A to node3 changes
    G's level (rack instead of cluster), so the restart is worth it."""
    topo = Topology.uniform(2, 2, 4)
    a = App("a", "u", 0.0, (Job("a1", "a", 4, 1e5, done=5e4, profile="none"),), contention=3)
    g = App("g", "u", 0.0, (Job("g1", "g", 8, 4e5, profile="vgg16", gpus_per_node=4, nodes=2),), contention=3)
    c = App("c", "u", 0.0, (Job("c1", "c", 4, 1e6, done=1e5),), contention=3)
    leases = (Lease("a1", frozenset(range(4, 8)), 0.0, 600.0), Lease("c1", frozenset(range(12, 16)), 0.0, 5000.0))
    st = ClusterState(topo, 600.0, frozenset(range(4)) | frozenset(range(8, 12)), leases, (a, g, c))
    d = run_round(st, ArbiterConfig(solver=solver, fairness_knob=f))
    check_invariants(st, d)
    grants = {gr.job_id: gr for gr in d.grants}
    assert grants["g1"].gpus == frozenset(range(8)) and grants["g1"].level == "rack"
    assert grants["a1"].gpus == frozenset(range(8, 12)) and grants["a1"].migrated
    assert [(p.job_id, said(p)) for p in d.preemptions] == [("a1", "lease expired; moved to other GPUs")]


@pytest.mark.parametrize("solver", ["exact", "fast"])
def test_move_that_gives_a_sensitive_job_one_node_still_happens(solver: str) -> None:
    """1 rack x 3 nodes x 4 GPUs. A (placement-insensitive) holds node1; the only other free GPUs are 2 on
    node2 and 2 on node3. K (vgg16) needs exactly node1 for one machine; A runs as fast across two."""
    topo = Topology.uniform(1, 3, 4)
    a = App("a", "u", 0.0, (Job("a1", "a", 4, 1e5, done=5e4, profile="none"),), contention=3)
    k = App("k", "u", 0.0, (Job("k1", "k", 4, 1e5, profile="vgg16"),), contention=3)
    c = App("c", "u", 0.0, (Job("c1", "c", 2, 1e6, done=1e5), Job("c2", "c", 2, 1e6, done=1e5)), contention=3)
    leases = (Lease("a1", NODE1, 0.0, 600.0), Lease("c1", frozenset({4, 5}), 0.0, 5000.0),
              Lease("c2", frozenset({8, 9}), 0.0, 5000.0))  # fmt: skip
    st = ClusterState(topo, 600.0, frozenset({6, 7, 10, 11}), leases, (a, k, c))
    d = run_round(st, ArbiterConfig(solver=solver, fairness_knob=0.8))
    check_invariants(st, d)
    grants = {gr.job_id: gr for gr in d.grants}
    assert grants["k1"].gpus == NODE1 and grants["k1"].level == "island"
    assert grants["a1"].gpus == frozenset({6, 7, 10, 11}) and grants["a1"].migrated
    assert [p.job_id for p in d.preemptions] == ["a1"]


def _g(jid: str, gpus: set[int], topo: Topology, profile: str = "low", keep: float = 0.95) -> Gang:
    lvl = topo.level_of(gpus)
    return Gang(jid, frozenset(gpus), lvl, throughput(len(gpus), lvl, get_profile(profile)) * keep)


def test_stand_in_of_the_same_kind_gives_way_to_the_holder() -> None:
    """X (same app and kind as holder Y) got node2 while Y lost and K got Y's node1: Y renews on node1,
    K starts on node2, X keeps waiting (one start instead of a preemption and two starts)."""
    topo = Topology.uniform(1, 2, 4)
    jobs = {"y": Job("y", "a", 4, 100.0), "x": Job("x", "a", 4, 100.0), "k": Job("k", "b", 4, 100.0)}
    got = {"a": [_g("x", set(NODE2), topo)], "b": [_g("k", set(NODE1), topo)]}
    source = {"x": "leftover", "k": "auction"}
    out = _no_pointless_moves(got, {"y": NODE1}, jobs, source, topo, 0.95)
    assert [(g.job_id, g.gpus, g.throughput) for g in out["a"]] == [("y", NODE1, 4.0)]  # in place: no restart
    assert [(g.job_id, g.gpus) for g in out["b"]] == [("k", NODE2)]
    assert source == {"y": "leftover", "k": "auction"}
    assert got["a"][0].job_id == "x", "the input is not mutated"


def test_several_gangs_on_the_home_move_together_and_a_holder_goes_home() -> None:
    """Y moved node1 -> node2 while two 2-GPU gangs took node1; one of them (z) holds half of node2: both
    fit on node2 at the same level, z renews at home, Y renews on node1: two restarts saved."""
    topo = Topology.uniform(1, 2, 4, islands_per_node=2)
    jobs = {"y": Job("y", "a", 4, 100.0), "k": Job("k", "b", 2, 100.0), "z": Job("z", "c", 2, 100.0)}
    homes = {"y": NODE1, "z": frozenset({4, 5})}
    got = {"a": [_g("y", set(NODE2), topo)], "b": [_g("k", {0, 1}, topo)], "c": [_g("z", {2, 3}, topo)]}
    source = {"y": "leftover", "k": "auction", "z": "auction"}
    out = _no_pointless_moves(got, homes, jobs, source, topo, 0.95)
    assert {g.job_id: g.gpus for gs in out.values() for g in gs} == {
        "y": NODE1, "k": frozenset({6, 7}), "z": frozenset({4, 5})}  # fmt: skip
    assert out["c"][0].throughput == 2.0 and out["b"][0].throughput == pytest.approx(1.9)


def test_no_swap_when_a_gang_of_the_home_would_lose_its_level_or_y_gains_one() -> None:
    topo = Topology.uniform(1, 3, 4)
    jobs = {"y": Job("y", "a", 4, 100.0, profile="none"), "k": Job("k", "b", 4, 100.0, profile="vgg16")}
    split = {6, 7, 10, 11}  # node2 + node3: rack level
    got = {"a": [_g("y", split, topo, "none")], "b": [_g("k", set(NODE1), topo, "vgg16")]}
    assert _no_pointless_moves(got, {"y": NODE1}, jobs, {"y": "leftover", "k": "auction"}, topo, 0.95) == got
    # reversed: y (vgg16) holds the split GPUs and is moved to a whole node: a better level for y
    jobs2 = {"y": Job("y", "a", 4, 100.0, profile="vgg16"), "k": Job("k", "b", 4, 100.0, profile="none")}
    got2 = {"a": [_g("y", set(NODE1), topo, "vgg16")], "b": [_g("k", split, topo, "none")]}
    homes2 = {"y": frozenset(split)}
    assert _no_pointless_moves(got2, homes2, jobs2, {"y": "auction", "k": "auction"}, topo, 0.95) == got2


def test_shaped_gang_keeps_its_shape_or_there_is_no_swap() -> None:
    """Y's home is 2 GPUs on each of node1 and node2; K (2 nodes x 2) took them and Y was sent to node3
    (one node, 4 GPUs): K cannot be 2 x 2 on one node, so the decision stands."""
    topo = Topology.uniform(1, 3, 4)
    jobs = {"y": Job("y", "a", 4, 100.0, profile="none"),
            "k": Job("k", "b", 4, 100.0, profile="none", gpus_per_node=2, nodes=2)}  # fmt: skip
    home = frozenset({0, 1, 4, 5})
    got = {"a": [_g("y", {8, 9, 10, 11}, topo, "none")], "b": [_g("k", set(home), topo, "none")]}
    assert _no_pointless_moves(got, {"y": home}, jobs, {"y": "leftover", "k": "auction"}, topo, 0.95) == got


def test_random_rounds_spend_no_restart_on_an_equivalent_spot() -> None:
    """On random rounds the decision is a fixpoint of the swap: no migration is left that a swap would
    undo without making some job's placement factor worse."""
    moves = 0
    for seed in range(300):
        st = random_state(random.Random(seed))
        jobs = {j.id: j for a in st.apps for j in a.jobs}
        homes = {ls.job_id: ls.gpus for ls in st.leases if ls.expiry <= st.now and jobs[ls.job_id].preemptible}
        for solver in ("exact", "fast"):
            d = run_round(st, ArbiterConfig(solver=solver, fairness_knob=0.5))
            check_invariants(st, d)
            got: dict[str, list[Gang]] = {}
            source: dict[str, str] = {}
            for gr in d.grants:
                got.setdefault(gr.app_id, []).append(_g(gr.job_id, set(gr.gpus), st.topology, jobs[gr.job_id].profile))
                source[gr.job_id] = gr.source
                moves += gr.migrated
            for r in d.renewals:
                if r.job_id in homes:
                    got.setdefault(r.app_id, []).append(_g(r.job_id, set(r.gpus), st.topology, keep=1.0))
                    source[r.job_id] = "auction"
            out = _no_pointless_moves(got, homes, jobs, dict(source), st.topology, 0.95)
            placed = {g.job_id: g.gpus for gs in got.values() for g in gs}
            assert {g.job_id: g.gpus for gs in out.values() for g in gs} == placed, f"seed {seed} {solver}"
    assert moves > 0, "the random rounds do contain migrations (justified ones)"
