"""Heterogeneity-aware finish-time fairness (issue #37 part 2): GPU types in the topology, a job's speed on
each, T_id over the private share of every type, effective throughput in T_sh, bids and the leftover.

Most cases are on 1 rack x 2 nodes x 4 GPUs: node1 (GPUs 0-3) an h100 node, node2 (GPUs 4-7) an a100 node at
half the h100's speed (``type_speeds``), now = 10000 s.
"""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from themis_slurm.core.agent import Agent
from themis_slurm.core.arbiter import ArbiterConfig, run_round
from themis_slurm.core.fairness import FairnessModel, job_throughput
from themis_slurm.core.gpu_types import (
    best_speed,
    class_speeds,
    gang_speed,
    job_speed,
    job_types,
    parse_gpu_types,
    spanning_nodes,
)
from themis_slurm.core.placement import Pool
from themis_slurm.core.state import ClusterState
from themis_slurm.core.topology import Level, Topology
from themis_slurm.core.workload import App, Job, Lease
from themis_slurm.policies.fit import shape_fit

from .instances import random_state
from .test_arbiter import check_invariants
from .test_golden_decisions import digest

SPEC = {"rack1": {"node1": [[0, 1, 2, 3]], "node2": [[0, 1, 2, 3]]}}
TOPO = Topology.from_spec(SPEC, {"node1": "h100", "node2": "a100"}, {"a100": 0.5})
H100, A100 = frozenset(range(4)), frozenset(range(4, 8))
NOW = 10000.0


def _model(topo: Topology = TOPO) -> FairnessModel:
    return FairnessModel(topo, topo.size)


# ------------------------------------------------------------------------------------------- the topology
def test_the_topology_knows_each_gpus_type() -> None:
    assert TOPO.heterogeneous
    assert dict(TOPO.type_nodes) == {"h100": ("node1",), "a100": ("node2",)}
    assert dict(TOPO.type_gpus) == {"h100": 4, "a100": 4}
    assert TOPO.node_type["node2"] == "a100" and TOPO.gpus[5].gpu_type == "a100"
    plain = Topology.uniform(1, 2, 4)
    assert not plain.heterogeneous and dict(plain.type_gpus) == {"": 8}
    one_type = Topology.from_spec(SPEC, {"node1": "a100", "node2": "a100"}, {"a100": 0.5})
    assert not one_type.heterogeneous  # one type: speeds change nothing (module docstring of gpu_types)


def test_bad_types_and_speeds_are_refused_with_the_field() -> None:
    with pytest.raises(ValueError, match=r"type_speeds\['a100'\] must be a number >= 0, got -1"):
        Topology.from_spec(SPEC, {"node2": "a100"}, {"a100": -1})
    with pytest.raises(ValueError, match="speed on GPU type 'h100' must be a number >= 0"):
        Job("j", "a", 1, 10.0, speeds=(("h100", -2.0),))


# ------------------------------------------------------------------------------------------- speeds
def test_a_jobs_speed_is_its_own_else_the_types_else_one() -> None:
    plain = Job("j", "a", 1, 10.0)
    own = Job("k", "a", 1, 10.0, speeds=(("a100", 0.8),))
    assert job_speed(TOPO, plain, "a100") == 0.5 and job_speed(TOPO, plain, "h100") == 1.0
    assert job_speed(TOPO, own, "a100") == 0.8
    assert gang_speed(TOPO, plain, {3, 4}) == 0.5  # as slow as its slowest GPU
    assert gang_speed(Topology.uniform(1, 2, 4), own, {0}) == 1.0  # one type: no speeds at all
    assert own.kind != plain.kind  # different speeds: not interchangeable
    assert Job("d", "a", 1, 10.0, speeds={"a100": 0.8}).speeds == (("a100", 0.8),)


def test_job_types_are_fastest_first_on_the_allowed_nodes_only() -> None:
    assert [t for t, _, _ in job_types(TOPO, Job("j", "a", 1, 10.0))] == ["h100", "a100"]
    fond = Job("k", "a", 1, 10.0, speeds=(("a100", 1.5),))
    assert [t for t, _, _ in job_types(TOPO, fond)] == ["a100", "h100"]
    pinned = Job("p", "a", 1, 10.0, allowed_nodes={"node2"})
    assert job_types(TOPO, pinned) == (("a100", 0.5, ("node2",)),)
    never = Job("n", "a", 1, 10.0, speeds=(("h100", 0.0),), allowed_nodes={"node1"})
    assert job_types(TOPO, never) == () and best_speed(TOPO, never) == 0.0


def test_themis_yaml_gpu_types_flat_and_per_class() -> None:
    assert parse_gpu_types({"H100": 1, "a100": 0.6}) == ({"h100": 1.0, "a100": 0.6}, {})
    defaults, by_class = parse_gpu_types({"a100": {"default": 0.6, "transformer-dp": 0.5}, "h100": 1.0})
    assert defaults == {"a100": 0.6, "h100": 1.0} and by_class == {"transformer-dp": {"a100": 0.5}}
    assert class_speeds(by_class, "Transformer-DP") == (("a100", 0.5),) and class_speeds(by_class, "x") == ()
    with pytest.raises(ValueError, match=r"gpu_types.a100 must be a number >= 0, got 'fast'"):
        parse_gpu_types({"a100": "fast"})
    with pytest.raises(ValueError, match=r"gpu_types.a100.moe must be a number >= 0, got True"):
        parse_gpu_types({"a100": {"moe": True}})
    with pytest.raises(ValueError, match="gpu_types must be a mapping"):
        parse_gpu_types([1.0])


# ------------------------------------------------------------------------------------------- T_id and T_sh
def test_t_id_is_the_private_share_of_each_type() -> None:
    """N = 2: 2 h100 (speed 1) + 2 a100 (speed 0.5) = 3 work/s for an untyped 8-GPU job; one pinned to h100
    gets only its h100 share, 2 work/s: the user who accepts any type has the faster private share, so the
    same allocation gives it a higher rho (a stronger claim), never a lower one."""
    anywhere = App("A", "u", 0.0, (Job("a", "A", 8, 6000.0, profile="none"),), contention=2)
    pinned = App(
        "P", "u", 0.0, (Job("p", "P", 8, 6000.0, profile="none", allowed_nodes={"node1"}),), contention=2
    )
    m = _model()
    assert m.t_id(anywhere) == pytest.approx(6000.0 / 3.0)
    assert m.t_id(pinned) == pytest.approx(6000.0 / 2.0)
    assert m.rho(anywhere, 0.0, 1.0) > m.rho(pinned, 0.0, 1.0)


def test_t_id_of_an_app_that_cannot_use_its_share_counts_its_fastest_gpus() -> None:
    """One 1-GPU job alone (N = 1, share 4 of each type): its private cluster runs it on an h100; a job that
    runs twice as fast on a100 (speed 1.0 there) gets a100, and h100 at its own 0.25."""
    m = _model()
    one = App("A", "u", 0.0, (Job("a", "A", 1, 1000.0, profile="none"),))
    assert m.t_id(one) == pytest.approx(1000.0)
    fond = App(
        "B", "u", 0.0, (Job("b", "B", 1, 1000.0, profile="none", speeds=(("h100", 0.25), ("a100", 1.0))),)
    )
    assert m.t_id(fond) == pytest.approx(1000.0)
    slow = App("C", "u", 0.0, (Job("c", "C", 1, 1000.0, profile="none", allowed_nodes={"node2"}),))
    assert m.t_id(slow) == pytest.approx(2000.0)


def test_t_sh_counts_effective_throughput() -> None:
    job = Job("a", "A", 2, 1000.0, profile="none")
    assert job_throughput(job, {0, 1}, TOPO) == 2.0 and job_throughput(job, {4, 5}, TOPO) == 1.0
    app = App("A", "u", 0.0, (job,))
    m = _model()
    assert m.t_sh(app, 0.0, job_throughput(job, {4, 5}, TOPO)) == pytest.approx(1000.0)
    assert m.t_sh(app, 0.0, job_throughput(job, {0, 1}, TOPO)) == pytest.approx(500.0)


# ------------------------------------------------------------------------------------------- placement
def test_the_agent_places_a_job_on_the_type_it_gains_most_on() -> None:
    m = _model()
    m.job_facts.use(TOPO)
    plain = Job("a", "A", 2, 1000.0, profile="none")
    fond = Job("b", "A", 2, 1000.0, profile="none", speeds=(("a100", 1.0), ("h100", 0.5)))
    app = App("A", "u", 0.0, (plain, fond))
    agent = Agent(app, m, NOW, 0.0, [plain, fond])
    pool = Pool(TOPO, frozenset(range(8)))
    g = agent.place(plain, pool)
    assert g is not None and g.gpus <= H100 and g.throughput == 2.0
    g = agent.place(fond, pool)
    assert g is not None and g.gpus <= A100 and g.throughput == 2.0
    only_a100 = Pool(TOPO, A100)
    g = agent.place(plain, only_a100)
    assert g is not None and g.throughput == 1.0  # valued at its effective throughput there
    rows = agent.valuations(pool)
    assert rows and all(
        len({TOPO.node_type[TOPO.gpus[i].node] for i in g.gpus}) == 1 for r in rows for g in r.gangs
    )


def test_only_a_gang_no_one_type_can_ever_hold_goes_over_several_at_the_slowest_speed() -> None:
    """An untyped gang wider than any one type (Slurm starts ``--gres=gpu:4 -N2`` over any types) is placed
    over both, valued at the slower type's speed. One that fits a type when it is free waits for it, even
    with the other type free now; one the job may not run on somewhere (speed 0 there, or a typed
    request) never spans."""
    m = _model()
    m.job_facts.use(TOPO)
    wide = Job("w", "A", 6, 1000.0, profile="none")
    app = App("A", "u", 0.0, (wide,))
    agent = Agent(app, m, NOW, 0.0, [wide])
    g = agent.place(wide, Pool(TOPO, frozenset(range(8))))
    assert g is not None and len(g.gpus) == 6 and g.gpus & H100 and g.gpus & A100
    assert g.throughput == pytest.approx(6 * 0.5)  # the gang runs at the a100's pace
    assert shape_fit(wide, Pool(TOPO, frozenset(range(8)))) is not None
    four = Job("f", "A", 4, 1000.0, profile="none")
    g = agent.place(four, Pool(TOPO, frozenset({1, 2, 3, 4, 5, 6, 7})))
    assert g is not None and g.gpus == A100  # one type holds it: not spread, though the h100s are faster
    assert agent.place(four, Pool(TOPO, frozenset({1, 2, 3, 5, 6, 7}))) is None  # it waits for one type
    assert shape_fit(four, Pool(TOPO, frozenset({1, 2, 3, 5, 6, 7}))) is None
    shaped = Job("s", "A", 4, 1000.0, profile="none", gpus_per_node=2, nodes=2)  # 2 nodes: no type has 2
    assert spanning_nodes(TOPO, shaped, job_types(TOPO, shaped)) == ("node1", "node2")
    never_a100 = Job("n", "A", 6, 1000.0, profile="none", speeds=(("a100", 0.0),))
    assert agent.place(never_a100, Pool(TOPO, frozenset(range(8)))) is None
    assert shape_fit(never_a100, Pool(TOPO, frozenset(range(8)))) is None
    typed = Job("t", "A", 6, 1000.0, profile="none", allowed_nodes=frozenset({"node1"}))
    assert agent.place(typed, Pool(TOPO, frozenset(range(8)))) is None
    assert spanning_nodes(TOPO, four, job_types(TOPO, four)) is None
    assert spanning_nodes(TOPO, wide, job_types(TOPO, wide)) == ("node1", "node2")


@pytest.mark.parametrize("solver", ["exact", "fast"])
def test_a_round_starts_a_gang_wider_than_any_type(solver: str) -> None:
    """The local cluster's case (tests/slurm/test_training_e2e.py): an app holding nothing wants a 16-GPU
    gang on a cluster of 8 a100s and 8 h100s, every GPU free: it is granted all 16."""
    spec = {"rack1": {f"node{i}": [[0, 1, 2, 3]] for i in range(1, 5)}}
    topo = Topology.from_spec(spec, {"node1": "a100", "node2": "a100", "node3": "h100", "node4": "h100"})
    gang = App("G", "u", NOW - 100.0, (Job("g", "G", 16, 400.0, gpus_per_node=4, nodes=4),))
    state = ClusterState(topo, NOW, frozenset(range(16)), (), (gang,))
    d = run_round(state, ArbiterConfig(solver=solver, lease_s=20.0))
    check_invariants(state, d)
    assert [(g.job_id, len(g.gpus)) for g in d.grants] == [("g", 16)]


@pytest.mark.parametrize("solver", ["exact", "fast"])
def test_a_round_gives_each_app_the_type_it_gains_most_on(solver: str) -> None:
    """Two apps, each with one 4-GPU job: one runs 4x faster on h100 than on a100, the other the same on
    both. Both fit; the round gives the h100 node to the first (its rho falls most there), with every GPU
    used; on a single-type cluster nothing of this applies."""
    keen = App("K", "u", NOW - 100.0, (Job("k", "K", 4, 40000.0, profile="none", speeds=(("a100", 0.25),)),),
               contention=2)  # fmt: skip
    flat = App("F", "u", NOW - 100.0, (Job("f", "F", 4, 40000.0, profile="none", speeds=(("a100", 1.0),)),),
               contention=2)  # fmt: skip
    state = ClusterState(TOPO, NOW, frozenset(range(8)), (), (keen, flat))
    d = run_round(state, ArbiterConfig(solver=solver, fairness_knob=0.0, lease_s=600.0, restart_cost_s=0.0))
    check_invariants(state, d)
    got = {g.job_id: g.gpus for g in d.grants}
    assert got == {"k": H100, "f": A100}


def test_a_single_type_cluster_values_as_before() -> None:
    """Speeds on a one-type cluster change no throughput and no T_id (the golden decisions hold)."""
    one = Topology.from_spec(SPEC, {"node1": "a100", "node2": "a100"}, {"a100": 0.5})
    plain = Topology.from_spec(SPEC)
    job = Job("a", "A", 2, 1000.0, profile="high", speeds=(("a100", 0.3),))
    app = App("A", "u", 0.0, (job,), contention=3)
    assert job_throughput(job, {0, 4}, one) == job_throughput(job, {0, 4}, plain)
    assert FairnessModel(one, 8).t_id(app) == FairnessModel(plain, 8).t_id(app)
    assert not math.isnan(FairnessModel(one, 8).t_id(app)) and one.level_of({0, 4}) == Level.RACK


def _typed(state: ClusterState, rng: random.Random) -> ClusterState:
    """`state` on the same shape with its nodes alternately of type x (default speed 1) and y (0.5), each
    waiting job given random speeds (sometimes 0 on one type: it never runs there)."""
    nodes = list(state.topology.node_gpus)
    kind = {n: "xy"[i % 2] for i, n in enumerate(nodes)}
    topo = Topology(
        tuple(dataclasses.replace(g, gpu_type=kind[g.node]) for g in state.topology.gpus), {"y": 0.5}
    )
    held = {ls.job_id for ls in state.leases}

    def typed(j: Job) -> Job:
        if j.id in held or rng.random() < 0.3:
            return j
        sx, sy = rng.choice([0.0, 0.3, 1.0, 2.0]), rng.choice([0.25, 1.0])
        return dataclasses.replace(j, speeds=(("x", sx), ("y", sy)))

    apps = tuple(dataclasses.replace(a, jobs=tuple(map(typed, a.jobs))) for a in state.apps)
    return dataclasses.replace(state, topology=topo, apps=apps, job_index=None)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1), solver=st.sampled_from(["exact", "fast"]), f=st.sampled_from([0.0, 0.8])
)
@example(seed=19248, solver="exact", f=0.8)  # keep-in-place swapped a gang onto a type it cannot run on
def test_random_rounds_never_start_a_gang_where_it_cannot_run(seed: int, solver: str, f: float) -> None:
    """Random rounds on a two-type cluster: every grant lies on types where the job's speed is > 0, and over
    two types only whole; no GPU is handed out twice; the same state, the same Decision."""
    rng = random.Random(seed)
    state = _typed(random_state(rng), rng)
    if not state.topology.heterogeneous:
        return  # one node: one type
    cfg = ArbiterConfig(solver=solver, fairness_knob=f)
    d = run_round(state, cfg)
    jobs = {j.id: j for a in state.apps for j in a.jobs}
    topo = state.topology
    seen: set[int] = set()
    for g in d.grants:
        assert not (g.gpus & seen)
        seen |= g.gpus
        types = {topo.gpus[i].gpu_type for i in g.gpus}
        assert all(job_speed(topo, jobs[g.job_id], t) > 0 for t in types), (g.job_id, types)
        if len(types) > 1:  # over two types only a whole gang that no one type can ever hold
            assert spanning_nodes(topo, jobs[g.job_id], job_types(topo, jobs[g.job_id])) is not None
            assert len(g.gpus) == jobs[g.job_id].gpus, (g.job_id, types)
    assert digest(run_round(state, cfg)) == digest(d)


def test_a_holder_on_a_slow_type_moves_when_a_faster_one_is_worth_the_restart() -> None:
    """A lease holder on the a100 node (half speed) with the h100 node free: its agent offers the h100 gang
    (4 x 0.9 after a 10 % restart, more than 4 x 0.5 at home); a job as fast on both stays at home."""
    m = _model()
    m.job_facts.use(TOPO)
    slow = Job("s", "A", 4, 40000.0, profile="none")
    even = Job("e", "B", 4, 40000.0, profile="none", speeds=(("a100", 1.0),))
    pool = Pool(TOPO, frozenset(range(8)))
    a = Agent(App("A", "u", 0.0, (slow,)), m, NOW, 0.0, [slow], homes={"s": A100}, start_cost=0.1)
    g = a.place(slow, pool)
    assert g is not None and g.gpus == H100 and g.throughput == pytest.approx(3.6)
    b = Agent(App("B", "u", 0.0, (even,)), m, NOW, 0.0, [even], homes={"e": A100}, start_cost=0.1)
    g = b.place(even, pool)
    assert g is not None and g.gpus == A100 and g.throughput == 4.0


SLOW = Topology.from_spec(SPEC, {"node1": "h100", "node2": "a100"}, {"a100": 0.25})


def _holder_on_a100(busy_until: tuple[float, ...]) -> ClusterState:
    """App A's 4-GPU job holds the a100 node (a quarter of its h100 speed), its lease ending now; the h100
    node's GPUs 1.. are held by app H's one-GPU jobs until `busy_until` (GPU 0 and the rest free)."""
    w = Job("w", "A", 4, 400000.0, done=1000.0, profile="none")
    hs = tuple(Job(f"h{i}", "H", 1, 1e6, profile="none") for i in range(len(busy_until)))
    leases = (Lease("w", A100, NOW - 600.0, NOW),
              *(Lease(f"h{i}", frozenset({i + 1}), NOW - 100.0, t) for i, t in enumerate(busy_until)))  # fmt: skip
    apps = (App("A", "u", 0.0, (w,), contention=2), App("H", "u", 0.0, hs, contention=2))
    held = frozenset().union(*(ls.gpus for ls in leases[1:])) if busy_until else frozenset()
    return ClusterState(SLOW, NOW, frozenset(range(8)) - held - A100, leases, apps)


@pytest.mark.parametrize("solver", ["exact", "fast"])
def test_a_holder_on_a_slow_type_gets_faster_gpus_reserved(solver: str) -> None:
    """The h100 node is busy for 300 s more: the holder keeps the a100 node until then (its lease cut there,
    so it bids again when they are free) and the h100 GPU free now is held for it, not handed out; once the
    h100 node is free it moves there (a migration)."""
    cfg = ArbiterConfig(solver=solver, fairness_knob=0.0, lease_s=600.0, restart_cost_s=30.0)
    state = _holder_on_a100((NOW + 100.0, NOW + 200.0, NOW + 300.0))
    d = run_round(state, cfg)
    ren = {r.job_id: r for r in d.renewals}
    assert ren["w"].gpus == A100 and ren["w"].lease_expiry == NOW + 300.0
    assert all(0 not in g.gpus for g in d.grants)  # the free h100 GPU waits for it
    moved = run_round(_holder_on_a100(()), cfg)
    g = next(g for g in moved.grants if g.job_id == "w")
    assert g.gpus == H100 and g.migrated


def _narrow_holder_on_a100() -> ClusterState:
    """App A's one-GPU job holds GPU 4 (an a100, a quarter of its h100 speed), its lease ending now; app B's
    one-GPU job, as long, waits; GPU 0 (an h100) is free; the other GPUs are held by app H for a while."""
    w = Job("w", "A", 1, 100000.0, done=20000.0, profile="none")
    b = Job("b", "B", 1, 100000.0, submit=NOW - 3000.0, profile="none")
    busy = [g for g in range(8) if g not in (0, 4)]
    hs = tuple(Job(f"h{g}", "H", 1, 1e6, profile="none") for g in busy)
    leases = (Lease("w", frozenset({4}), NOW - 600.0, NOW),
              *(Lease(f"h{g}", frozenset({g}), NOW - 100.0, NOW + 500.0) for g in busy))  # fmt: skip
    apps = (App("A", "u", 0.0, (w,), contention=2), App("B", "v", NOW - 3000.0, (b,), contention=2),
            App("H", "x", 0.0, hs, contention=2))  # fmt: skip
    return ClusterState(SLOW, NOW, frozenset({0}), leases, apps)


@pytest.mark.parametrize("solver", ["exact", "fast"])
def test_a_one_gpu_holder_on_a_slow_type_moves_to_a_free_faster_gpu(solver: str) -> None:
    """The worst-off holder on the a100 gets the free h100 GPU (a migration) and B the a100 it leaves. In
    the auction alone the h100 went to B, whose longer remaining run gains more from it, and A stayed on the
    a100 for its whole run (the paper workload over v100 + k80: max rho 2.78 there, docs/eval/discussion.md)."""
    cfg = ArbiterConfig(solver=solver, fairness_knob=0.0, lease_s=600.0, restart_cost_s=30.0)
    d = run_round(_narrow_holder_on_a100(), cfg)
    got = {g.job_id: g for g in d.grants}
    assert got["w"].gpus == frozenset({0}) and got["w"].migrated
    assert got["b"].gpus == frozenset({4})
