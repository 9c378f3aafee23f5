"""Grant only what Slurm can start (issue #37): a job restricted to some nodes (Job.allowed_nodes) is never
offered, granted, moved, reserved or leftover-filled onto GPUs elsewhere; a lease holder still renews where it
runs; an empty set is nowhere; and jobs without a set are decided exactly as before.

Most rounds below are on 1 rack x 2 nodes x 4 GPUs (node1 = GPUs 0-3, node2 = GPUs 4-7), now = 10000 s, a
lease of 600 s. "Busy" GPUs are held by app H's 1-GPU jobs on leases that do not expire this round.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from themis_slurm.core.agent import Agent, Gang
from themis_slurm.core.arbiter import ArbiterConfig, run_round
from themis_slurm.core.auction import FILL_ORDERS, ExactSolver, FastSolver, greedy_fill
from themis_slurm.core.decision import Decision, GrantSource, PreemptionCause, RenewalCause
from themis_slurm.core.fairness import FairnessModel
from themis_slurm.core.keep_in_place import keep_holders_in_place, no_pointless_moves
from themis_slurm.core.placement import Pool, allowed_nodes_on, get_profile, throughput
from themis_slurm.core.state import ClusterState
from themis_slurm.core.topology import Level, Topology
from themis_slurm.core.workload import App, Job, Lease

from .instances import random_state
from .test_arbiter import check_invariants
from .test_golden_decisions import digest

TOPO = Topology.uniform(1, 2, 4)
NODE1, NODE2 = frozenset(range(4)), frozenset(range(4, 8))
NOW = 10000.0
LEASE = 600.0
SOLVERS = ["exact", "fast"]


def _busy(gpus: set[int]) -> tuple[App, tuple[Lease, ...]]:
    """App H holding each of `gpus` with a 1-GPU job whose lease runs past this round."""
    jobs = tuple(Job(f"h{g}", "H", 1, 1e6, profile="none") for g in sorted(gpus))
    leases = tuple(Lease(f"h{g}", frozenset({g}), NOW - 100.0, NOW + 5000.0) for g in sorted(gpus))
    return App("H", "u", 0.0, jobs, contention=3), leases


def _state(apps: tuple[App, ...], busy: set[int] = frozenset(), topo: Topology = TOPO,
           leases: tuple[Lease, ...] = ()) -> ClusterState:  # fmt: skip
    """`apps` (and H on the `busy` GPUs) on `topo`; every other GPU not leased is free."""
    if busy:
        h, held = _busy(set(busy))
        apps, leases = (*apps, h), (*leases, *held)
    used = frozenset().union(*(ls.gpus for ls in leases)) if leases else frozenset()
    return ClusterState(topo, NOW, frozenset(range(topo.size)) - used, leases, apps)


def _run(state: ClusterState, solver: str = "exact", f: float = 0.0, **knobs) -> Decision:
    cfg = ArbiterConfig(solver=solver, fairness_knob=f, lease_s=LEASE, restart_cost_s=0.0, **knobs)
    d = run_round(state, cfg)
    check_invariants(state, d)  # allowed nodes, no GPU twice, work conservation on the allowed nodes
    return d


def _granted(d: Decision) -> dict[str, frozenset[int]]:
    return {g.job_id: g.gpus for g in d.grants}


def _app(aid: str, *jobs: Job, arrival: float = 0.0) -> App:
    return App(aid, "u", arrival, jobs, contention=3)


# ------------------------------------------------------------------------------------------- the field
def test_the_field_is_a_frozenset_last_and_part_of_the_kind() -> None:
    """Given as any set of names it is kept as a frozenset (hashable, so a Job stays a dictionary key); a
    single name is refused (it would become a set of letters); positional constructions of the other
    fields are unchanged (it comes last but for unsaved and speeds, added after it); two jobs that differ only by it are not of one kind."""
    j = Job("j", "a", 1, 100.0, allowed_nodes={"node2"})
    assert j.allowed_nodes == frozenset({"node2"}) and type(j.allowed_nodes) is frozenset
    assert hash(j) == hash(Job("j", "a", 1, 100.0, allowed_nodes=frozenset({"node2"})))
    with pytest.raises(TypeError, match="set of node names"):
        Job("j", "a", 1, 100.0, allowed_nodes="node2")  # type: ignore[arg-type]
    assert [f.name for f in dataclasses.fields(Job)][-3:] == ["allowed_nodes", "unsaved", "speeds"]
    assert Job("j", "a", 2, 100.0, 5.0, "high", 1, 2, False, True, 3.0, 7.0).allowed_nodes is None
    anywhere = Job("k", "a", 1, 100.0)
    assert anywhere.kind != j.kind and anywhere.kind == Job("k2", "a", 1, 100.0).kind
    assert Job("e", "a", 1, 100.0, allowed_nodes=()).allowed_nodes == frozenset()  # nowhere


def test_allowed_nodes_on_the_topology() -> None:
    """In topology order whatever the set's order; every node is no restriction (None); names the topology
    does not know are ignored, and none left is nowhere (an empty tuple, not None)."""
    topo = Topology.uniform(1, 3, 2)
    assert allowed_nodes_on(topo, None) is None
    assert allowed_nodes_on(topo, frozenset({"node3", "node1"})) == ("node1", "node3")
    assert allowed_nodes_on(topo, frozenset({"node1", "node2", "node3", "login"})) is None
    assert allowed_nodes_on(topo, frozenset({"login"})) == ()
    assert allowed_nodes_on(topo, frozenset()) == ()


def test_place_among_takes_the_best_fit_island_of_the_allowed_nodes() -> None:
    """node1 has 2 GPUs free on two islands, node2 3 free, 2 of them on one island. `within` alone takes the
    best-fit node (node1) and splits the gang over its islands; place_among first looks for one island that
    holds it (node2's), as the pool's plain best fit does."""
    topo = Topology.uniform(1, 2, 4, islands_per_node=2)
    pool = Pool(topo, {0, 2, 4, 5, 6})
    nodes = ["node1", "node2"]
    assert pool.place(2, within=nodes) == (frozenset({0, 2}), Level.NODE)
    assert pool.place_among(2, None, None, nodes) == (frozenset({4, 5}), Level.ISLAND)
    assert pool.place_among(2, None, None, ["node1"]) == (frozenset({0, 2}), Level.NODE)
    assert pool.place_among(1, None, None, []) is None  # nowhere
    assert pool.place_among(2, 1, 2, nodes) == pool.place(2, 1, 2, nodes)  # shaped: as `within` places it


def test_place_among_is_the_fewest_free_island_first_then_within() -> None:
    """On random pools and node lists: the island of the listed nodes with the fewest free GPUs that holds
    the gang (the first listed on a tie), else what ``place(within=...)`` finds; never a GPU elsewhere."""
    rng = random.Random(3)
    for _ in range(400):
        topo = Topology.uniform(rng.randint(1, 2), rng.randint(1, 3), 4, rng.choice([1, 2]))
        pool = Pool(topo, [g for g in range(topo.size) if rng.random() < 0.6])
        among = rng.sample(list(topo.nodes), rng.randint(0, len(topo.nodes)))
        gpus = rng.randint(1, 5)
        fits = [(len(pool._isl_free[i]), k, i) for k, n in enumerate(among) for i in topo.node_islands[n]
                if len(pool._isl_free[i]) >= gpus]  # fmt: skip
        island = (frozenset(sorted(pool._isl_free[min(fits)[2]])[:gpus]), Level.ISLAND) if fits else None
        want = island or pool.place(gpus, within=among)
        got = pool.place_among(gpus, None, None, among)
        assert got == want
        assert got is None or set(topo.nodes_of(got[0])) <= set(among)


# ------------------------------------------------------------------------------------------- (a) placement
@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("f", [0.0, 0.8])
def test_a_job_restricted_to_node2_gets_node2_even_when_node1_fits_tighter(solver: str, f: float) -> None:
    """GPUs 0-2 are busy: GPU 3 is the tightest fit for a 1-GPU job (best fit: the island with the fewest
    free GPUs), and an unrestricted job gets it. Restricted to node2, the job gets a GPU of node2, whether it
    wins it in the auction or, behind a worse-off app (f = 0.8: one bidder), in the leftover."""
    plain = _run(_state((_app("A", Job("a1", "A", 1, 3600.0, profile="high")),), busy={0, 1, 2}), solver, f)
    assert _granted(plain) == {"a1": frozenset({3})}
    a1 = Job("a1", "A", 1, 3600.0, profile="high", allowed_nodes={"node2"})
    d = _run(_state((_app("A", a1),), busy={0, 1, 2}), solver, f)
    assert _granted(d)["a1"] <= NODE2
    # behind a worse-off app that bids (it arrived long before and has more to do): a1 is leftover
    w = _app("W", Job("w1", "W", 1, 36000.0, profile="none"), arrival=0.0)
    d = _run(_state((_app("A", a1, arrival=NOW), w), busy={0, 1, 2}), solver, f)
    assert _granted(d)["a1"] <= NODE2 and len(_granted(d)) == 2
    if f == 0.8:
        assert d.apps["A"].leftover_gpus == 1


def test_every_search_of_the_agent_stays_on_the_allowed_nodes() -> None:
    """Agent.place (with and without a caller's `within`: the intersection), the elastic job's one-GPU
    option, a shaped gang, and the greedy fill in every order."""
    topo = Topology.uniform(1, 3, 4)
    model = FairnessModel(topo, topo.size)
    jobs = (Job("r", "A", 1, 3600.0, allowed_nodes={"node2"}),
            Job("e", "A", 4, 9000.0, elastic=True, profile="vgg16", allowed_nodes={"node3"}),
            Job("s", "A", 4, 9000.0, gpus_per_node=2, nodes=2, allowed_nodes={"node1", "node3"}))  # fmt: skip
    agent = Agent(_app("A", *jobs), model, NOW, 0.0, jobs)
    pool = Pool(topo, {3, 4, 5, 6, 7, 8, 9, 10, 11})  # node1: GPU 3 only (the tightest fit for one GPU)
    r, e, s = jobs
    assert agent.place(r, pool).gpus <= {4, 5, 6, 7}
    assert agent.place(r, pool, within=["node1"]) is None
    assert agent.place(r, pool, within=["node1", "node2"]).gpus <= {4, 5, 6, 7}
    assert [g.gpus <= {8, 9, 10, 11} for g in agent.options(e, pool)] == [True, True]  # whole node3, one GPU
    assert agent.place(s, pool) is None  # 2 x 2 on node1 and node3: node1 has one GPU free
    pool.give({0})
    assert topo.nodes_of(agent.place(s, pool).gpus) == {"node1": 2, "node3": 2}
    for by in FILL_ORDERS:
        got = greedy_fill([agent], pool.copy(), by=by)
        placed = {g.job_id: topo.nodes_of(g.gpus) for g in got["A"]}
        assert set(placed["r"]) == {"node2"} and set(placed["e"]) == {"node3"}, by
        assert "s" not in placed or set(placed["s"]) == {"node1", "node3"}, by


def test_the_solvers_offer_no_bundle_off_the_allowed_nodes() -> None:
    """Every candidate of the exact solver (packed anywhere, within each rack, within each node) and the
    fast solver's allocation keep each gang on its job's allowed nodes."""
    topo = Topology.uniform(2, 2, 2)
    model = FairnessModel(topo, topo.size)
    allowed = {"a1": {"node4"}, "a2": {"node1", "node2"}, "b1": {"node3"}, "b2": set()}
    a = _app("A", Job("a1", "A", 2, 7200.0, allowed_nodes=allowed["a1"]),
             Job("a2", "A", 2, 3600.0, allowed_nodes=allowed["a2"]))  # fmt: skip
    b = _app("B", Job("b1", "B", 1, 3600.0, allowed_nodes=allowed["b1"]),
             Job("b2", "B", 1, 3600.0, allowed_nodes=allowed["b2"]), Job("b3", "B", 1, 3600.0))  # fmt: skip
    agents = [Agent(x, model, NOW, 0.0, x.jobs) for x in (a, b)]
    pool = Pool(topo, range(topo.size))
    gangs = [g for bundle in ExactSolver().candidates(agents, pool) for g in bundle.gangs]
    gangs += [g for bundle in FastSolver().solve(agents, pool).bundles.values() for g in bundle.gangs]
    assert {g.job_id for g in gangs} == {"a1", "a2", "b1", "b3"}  # b2 is allowed nowhere
    for g in gangs:
        if g.job_id in allowed:
            assert set(topo.nodes_of(g.gpus)) <= allowed[g.job_id], g


# ------------------------------------------------------------------------------------------- (b) busy nodes
@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("f", [0.0, 0.8])
def test_a_job_whose_nodes_are_busy_waits_while_others_use_the_free_gpus(solver: str, f: float) -> None:
    """node1 is busy, node2 free. A's first job (the longest) may only run on node1: it waits. Its second
    job, of the same shape and profile but allowed anywhere, is another kind (the failed kind is dropped
    alone), and it and B's jobs take node2 whole: no GPU idles while a job that may use it waits."""
    a = _app("A", Job("a1", "A", 1, 72000.0, allowed_nodes={"node1"}), Job("a2", "A", 1, 3600.0))
    b = _app("B", *(Job(f"b{k}", "B", 1, 3600.0) for k in (1, 2, 3)))
    d = _run(_state((a, b), busy=set(NODE1)), solver, f)
    got = _granted(d)
    assert "a1" not in got and "a2" in got
    assert frozenset().union(*got.values()) == NODE2 and d.idle_gpus == frozenset()


@pytest.mark.parametrize("solver", SOLVERS)
def test_free_gpus_no_restricted_job_may_use_go_to_those_that_may(solver: str) -> None:
    """The worst-off app's jobs may only run on node1, which is busy; node2's GPUs go to the other app
    (through the leftover when it is not offered the pool)."""
    a = _app("A", *(Job(f"a{k}", "A", 1, 3600.0, allowed_nodes={"node1"}) for k in (1, 2)))  # waited 10000 s
    b = _app("B", *(Job(f"b{k}", "B", 1, 3600.0) for k in (1, 2, 3, 4)), arrival=NOW)
    d = _run(_state((a, b), busy=set(NODE1)), solver, 0.8)
    assert d.apps["A"].rank == 1 and d.apps["A"].bid
    assert set(_granted(d)) == {"b1", "b2", "b3", "b4"} and d.idle_gpus == frozenset()


# ------------------------------------------------------------------------------------------- (c) nowhere
@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("f", [0.0, 0.8])
@pytest.mark.parametrize("nowhere", [frozenset(), frozenset({"login"})])
def test_a_job_allowed_nowhere_never_gets_gpus(solver: str, f: float, nowhere: frozenset[str]) -> None:
    """An empty set (or one of nodes without GPUs) is nowhere: neither the auction, nor the leftover, nor a
    reservation (its wide gang has waited far longer than a lease) places it, on an idle cluster; another
    app's job gets what it wants."""
    e = _app("E", *(Job(jid, "E", g, 9000.0 * g, allowed_nodes=nowhere) for jid, g in (("e1", 1), ("e2", 4))))
    d = _run(_state((e,)), solver, f)
    assert d.grants == () and d.reserved_gpus == frozenset() and d.idle_gpus == frozenset(range(8))
    assert d.apps["E"].reservation is None
    other = _app("O", Job("o1", "O", 2, 3600.0), arrival=NOW)
    d = _run(_state((e, other)), solver, f)
    assert set(_granted(d)) == {"o1"} and d.reserved_gpus == frozenset()


# ------------------------------------------------------------------------------------------- (d) properties
def _restrict(state: ClusterState, rng: random.Random) -> ClusterState:
    """`state` with each job allowed anywhere, on a random part of the nodes (unknown names mixed in), on
    none, or on every node."""
    nodes = list(state.topology.nodes)

    def pick() -> frozenset[str] | None:
        r = rng.random()
        if r < 0.35:
            return None
        if r < 0.45:
            return frozenset()
        if r < 0.55:
            return frozenset(nodes)
        some = frozenset(rng.sample(nodes, rng.randint(1, len(nodes))))
        return some | {"login"} if rng.random() < 0.2 else some

    return _with_allowed(state, lambda _: pick())


def _with_allowed(state: ClusterState, allowed: Callable[[Job], frozenset[str] | None]) -> ClusterState:
    """`state` with each job's allowed nodes set to ``allowed(job)`` (and no job index: other jobs)."""
    def restricted(j: Job) -> Job:
        return dataclasses.replace(j, allowed_nodes=allowed(j))

    apps = tuple(dataclasses.replace(a, jobs=tuple(map(restricted, a.jobs))) for a in state.apps)
    return dataclasses.replace(state, apps=apps, job_index=None)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), solver=st.sampled_from(SOLVERS), f=st.sampled_from([0.0, 0.5, 0.8]))
def test_random_rounds_grant_only_on_allowed_nodes(seed: int, solver: str, f: float) -> None:
    """Random rounds with random allowed sets: no grant (migrations included) or reservation off a job's
    allowed nodes, no GPU handed out twice, holders accounted for, and no job waits while idle GPUs of its
    allowed nodes would fit it (check_invariants); the same state gives the same Decision."""
    rng = random.Random(seed)
    state = _restrict(random_state(rng), rng)
    cfg = ArbiterConfig(solver=solver, fairness_knob=f)
    d = run_round(state, cfg)
    check_invariants(state, d)
    assert digest(run_round(state, cfg)) == digest(d)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), solver=st.sampled_from(SOLVERS), f=st.sampled_from([0.0, 0.5, 0.8]))
def test_every_node_allowed_decides_as_no_set(seed: int, solver: str, f: float) -> None:
    """A set of every node restricts nothing: the same Decision as without one (so a caller that lists every
    node for an unconstrained job changes nothing). That no set decides as before the field existed is what
    the golden decisions (test_golden_decisions.py) check."""
    state = random_state(random.Random(seed))
    every = frozenset(state.topology.nodes)
    cfg = ArbiterConfig(solver=solver, fairness_knob=f)
    assert digest(run_round(_with_allowed(state, lambda _: every), cfg)) == digest(run_round(state, cfg))


# ------------------------------------------------------------------------------------------- (e) phases
def _gang(jid: str, gpus: frozenset[int], topo: Topology = TOPO) -> Gang:
    lvl = topo.level_of(gpus)
    return Gang(jid, gpus, lvl, throughput(len(gpus), lvl, get_profile("low")) * 0.95)


@pytest.mark.parametrize("x_allowed", [None, frozenset({"node1"})])
def test_a_stand_in_restricted_otherwise_does_not_take_the_holders_other_spot(x_allowed) -> None:
    """X landed on holder Y's home (node1) while Y was sent to node2. Of one kind, they swap: Y renews, X
    takes node2. X restricted to node1 is not of Y's kind: it keeps node1 (node2 is not X's to take)."""
    jobs = {"y": Job("y", "a", 4, 100.0), "x": Job("x", "a", 4, 100.0, allowed_nodes=x_allowed)}
    got = {"a": [_gang("x", NODE1), _gang("y", NODE2)]}
    out = keep_holders_in_place(got, {"y": NODE1}, jobs, {"x": "leftover", "y": "auction"})
    placed = {g.job_id: g.gpus for g in out["a"]}
    assert placed == ({"y": NODE1, "x": NODE2} if x_allowed is None else {"x": NODE1, "y": NODE2})


@pytest.mark.parametrize("k_allowed", [None, frozenset({"node1"})])
def test_a_gang_is_not_moved_off_its_allowed_nodes_to_renew_a_holder(k_allowed) -> None:
    """K landed on holder Y's home (node1), Y was sent to node2: swapping them saves Y's restart when K may
    run on node2; when K may only run on node1, the move stands."""
    jobs = {"y": Job("y", "a", 4, 100.0), "k": Job("k", "b", 4, 100.0, allowed_nodes=k_allowed)}
    got = {"a": [_gang("y", NODE2)], "b": [_gang("k", NODE1)]}
    out = no_pointless_moves(got, {"y": NODE1}, jobs, {"y": "leftover", "k": "auction"}, TOPO, 0.95)
    placed = {g.job_id: g.gpus for gs in out.values() for g in gs}
    assert placed == ({"y": NODE1, "k": NODE2} if k_allowed is None else {"y": NODE2, "k": NODE1})


def _holder_and_waiter(b_allowed: frozenset[str] | None) -> ClusterState:
    """A's 4-GPU job holds node1 on a lease that expires now; B's 4-GPU job (worse off) waits; node2 free
    (the case of test_no_pointless_moves.py)."""
    a = _app("a", Job("a1", "a", 4, 1e5, done=5e4, profile="none"))
    b = _app("b", Job("b1", "b", 4, 1e5, profile="none", allowed_nodes=b_allowed))
    return _state((a, b), leases=(Lease("a1", NODE1, 0.0, NOW),))


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("f", [0.0, 0.8])
def test_keep_in_place_with_a_restricted_waiter(solver: str, f: float) -> None:
    """Without a set, B starts on node2 and A renews in place. B restricted to node2: the same. B restricted
    to node1: it may start nowhere else, so A is moved to node2 (a restart worth its cost: B runs)."""
    for allowed in (None, frozenset({"node2"})):
        d = _run(_holder_and_waiter(allowed), solver, f, reserve_wide_gangs=False)
        assert _granted(d) == {"b1": NODE2} and [(r.job_id, r.gpus) for r in d.renewals] == [("a1", NODE1)]
    d = _run(_holder_and_waiter(frozenset({"node1"})), solver, f, reserve_wide_gangs=False)
    assert _granted(d) == {"b1": NODE1, "a1": NODE2}
    assert [(p.job_id, p.cause) for p in d.preemptions] == [("a1", PreemptionCause.MOVED)]


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_holder_renews_in_place_off_its_allowed_nodes(solver: str) -> None:
    """A lease holder whose home is not among its allowed nodes (Slurm would not start it there now: its
    own CPUs, say) still renews there: it runs, so Slurm has started it. Were it preempted, it could
    restart only on node2."""
    a1 = Job("a1", "a", 1, 1e5, profile="none", allowed_nodes={"node2"})
    d = _run(_state((_app("a", a1),), leases=(Lease("a1", frozenset({0}), 0.0, NOW),)), solver)
    assert d.grants == () and d.preemptions == ()
    assert [(r.job_id, r.gpus) for r in d.renewals] == [("a1", frozenset({0}))]


def test_a_wide_gang_off_its_allowed_nodes_is_still_kept() -> None:
    """The wide-gangs phase renews running gangs only: one allowed nowhere now keeps its GPUs all the same."""
    b = _app("B", Job("b1", "B", 4, 4000.0, done=1000.0, profile="none", allowed_nodes=frozenset()))
    a = _app("A", Job("a1", "A", 4, 4000.0, profile="none", submit=9900.0), arrival=9900.0)
    held = (Lease("b1", frozenset(range(4)), 9400.0, NOW),)
    state = ClusterState(Topology.uniform(1, 1, 4), NOW, frozenset(), held, (a, b))
    d = _run(state, keep_wide_gangs=True)
    assert [(r.job_id, r.cause) for r in d.renewals] == [("b1", RenewalCause.WIDE_GANG)] and d.grants == ()


def _reservation_state(w1: Job) -> ClusterState:
    """W's 4-GPU gang w1 has waited 10000 s; GPUs 0, 1 are free, GPU 2 frees at +100, 3 at +200, node2 at
    +500 (the case of test_reservation.py); O's two 1-GPU jobs arrived now."""
    expiry = {2: 100.0, 3: 200.0, 4: 500.0, 5: 500.0, 6: 500.0, 7: 500.0}
    h = _app("H", *(Job(f"h{g}", "H", 1, 1e6, profile="none") for g in sorted(expiry)))
    leases = tuple(Lease(f"h{g}", frozenset({g}), NOW - 100.0, NOW + dt) for g, dt in sorted(expiry.items()))
    o = _app("O", *(Job(f"o{k}", "O", 1, 3600.0, profile="none", submit=NOW) for k in (1, 2)), arrival=NOW)
    return _state((_app("W", w1), h, o), leases=leases)


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_reservation_is_only_on_the_allowed_nodes(solver: str) -> None:
    """Without a set the gang is reserved node1, complete in 200 s, holding GPUs 0 and 1 idle. Allowed only
    on node2 it will start there when node2's leases end (500 s): no GPU of node1 is held for it, and O's
    jobs take GPUs 0 and 1."""
    anywhere = _run(_reservation_state(Job("w1", "W", 4, 40000.0, profile="none")), solver)
    assert anywhere.reserved_gpus == {0, 1} and anywhere.grants == ()
    w1 = Job("w1", "W", 4, 40000.0, profile="none", allowed_nodes={"node2"})
    d = _run(_reservation_state(w1), solver)
    note = d.apps["W"].reservation
    assert note is not None and (note.job_id, note.held, note.start_in_s) == ("w1", 0, 500.0)
    assert d.reserved_gpus == frozenset() and set(_granted(d)) == {"o1", "o2"}


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_reservation_splits_a_gang_by_its_widest_allowed_node(solver: str) -> None:
    """One 8-GPU node and two 4-GPU ones, all free. An 8-GPU gang that has waited starts on its reservation:
    the big node when it may, else whole 4-GPU nodes (by the widest node it may use, not the widest of all:
    then no node would hold it, and it would get no reservation)."""
    topo = Topology.from_spec({"rack1": {"big": [list(range(8))], "s1": [list(range(4))], "s2": [list(range(4))]}})
    for allowed, gpus in ((None, frozenset(range(8))), (frozenset({"s1", "s2"}), frozenset(range(8, 16)))):
        w1 = Job("w1", "W", 8, 80000.0, profile="none", allowed_nodes=allowed)
        d = _run(_state((_app("W", w1),), topo=topo), solver)
        assert [(g.job_id, g.gpus, g.source) for g in d.grants] == [("w1", gpus, GrantSource.RESERVATION)]
