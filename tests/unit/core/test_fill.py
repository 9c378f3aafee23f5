"""The tuned greedy fill (core/fill.py) against its plain reference (core/fill_reference.py).

The two must hand out exactly the same gangs (jobs, GPUs, levels, throughputs, in order) and leave the same
GPUs free, on generated rounds with gangs and node shapes, elastic jobs, jobs allowed on some nodes only,
lease holders whose home is free (some with work done since their last checkpoint), gangs held from
earlier in the round, placement-sensitive profiles, weights, caps, and twin apps whose priorities tie.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter

import pytest

from themis_slurm.core.agent import Agent, Gang
from themis_slurm.core.fairness import FairnessModel
from themis_slurm.core.fill import FILL_ORDERS, greedy_fill
from themis_slurm.core.fill_reference import plain_factors, reference_fill
from themis_slurm.core.placement import Pool
from themis_slurm.core.topology import Level, Topology
from themis_slurm.core.workload import App, Job

PROFILES = ["vgg16", "alexnet", "resnet50", "high", "medium", "none"]
NOW = 1000.0


@dataclasses.dataclass
class Instance:
    """One fill's input: agents, the pool, gangs already held, and the fill's keyword arguments."""

    agents: list[Agent]
    pool: Pool
    start: dict[str, list[Gang]]
    kwargs: dict


def _jobs(rng: random.Random, app_id: str, topo: Topology) -> tuple[Job, ...]:
    gpn = max(topo.node_gpus.values(), key=len).__len__()
    nodes = list(topo.node_gpus)
    jobs = []
    for k in range(rng.randint(1, 7)):
        g = rng.choice([1, 1, 1, 2, 2, 3, 4, 4, 8])
        shaped = g == 2 * gpn and rng.random() < 0.5
        allowed = None
        if rng.random() < 0.15:  # some nodes only, now and then every node (which restricts nothing)
            allowed = frozenset(
                nodes if rng.random() < 0.3 else rng.sample(nodes, rng.randint(1, len(nodes)))
            )
        jobs.append(Job(
            id=f"{app_id}j{k}", app_id=app_id, gpus=g, work=rng.choice([600.0, 1800.0, rng.uniform(100, 9000)]) * g,
            done=(done := rng.choice([0.0, rng.uniform(0, 50)])), unsaved=rng.choice([0.0, done]),
            profile=rng.choice(PROFILES),
            gpus_per_node=gpn if shaped else None, nodes=2 if shaped else None,
            elastic=not shaped and g > 1 and rng.random() < 0.2, submit=rng.uniform(0, NOW), allowed_nodes=allowed,
        ))  # fmt: skip
    return tuple(jobs)


def _apps(rng: random.Random, topo: Topology) -> list[App]:
    apps: list[App] = []
    for a in range(rng.randint(1, 6)):
        aid = f"a{a}"
        apps.append(
            App(aid, f"u{a % 3}", rng.uniform(0, NOW), _jobs(rng, aid, topo), contention=rng.uniform(1, 4))
        )
        if rng.random() < 0.3:  # a twin: the same jobs under another id, so every priority ties
            tid = f"a{a}t"
            jobs = tuple(
                dataclasses.replace(j, id=j.id.replace(aid, tid, 1), app_id=tid) for j in apps[-1].jobs
            )
            apps.append(dataclasses.replace(apps[-1], id=tid, jobs=jobs))
    return apps


def random_instance(rng: random.Random) -> Instance:
    """A random small round's fill (see the module docstring)."""
    topo = Topology.uniform(rng.randint(1, 3), rng.randint(1, 3), rng.choice([2, 4, 8]), rng.choice([1, 2]))
    model = FairnessModel(topo, topo.size, 0.1)
    pool = Pool(topo, [g for g in range(topo.size) if rng.random() < 0.85])
    agents: list[Agent] = []
    start: dict[str, list[Gang]] = {}
    unclaimed = pool.copy()  # homes are disjoint, as leases are
    for app in _apps(rng, topo):
        homes = {}
        for job in app.jobs:  # lease holders whose home is free (renewable in place)
            if rng.random() < 0.15:
                home = unclaimed.find(job.gpus, job.gpus_per_node, job.nodes)
                if home is not None and rng.random() < 0.7:
                    unclaimed.take(home)
                    homes[job.id] = home
        twin = app.id.endswith("t")
        ag = Agent(app, model, NOW, 0.0 if twin else rng.choice([0.0, 0.0, 1.0, 2.5]), app.jobs, homes,
                   start_cost=rng.choice([0.0, 0.05, 0.3]), weight=1.0 if twin else rng.choice([1.0, 1.0, 0.5, 2.0]))  # fmt: skip
        if twin:  # the same agent numbers as the app it copies
            first = agents[-1]
            ag = Agent(app, model, NOW, first.base, app.jobs, {}, 1.0 - first.start_keep, weight=first.weight)
        agents.append(ag)
    for ag in agents:  # gangs held from earlier in the round
        if rng.random() < 0.2 and ag.jobs:
            gang = ag.place(ag.jobs[-1], pool)
            if gang is not None and not (set(gang.gpus) & {g for h in ag.homes.values() for g in h}):
                pool.take(gang.gpus)
                start[ag.app_id] = [gang]
    kwargs: dict = {"by": rng.choice(FILL_ORDERS), "elastic_small": rng.random() < 0.8,
                    "restart_s": rng.choice([0.0, 30.0, 600.0])}  # fmt: skip
    cap = rng.random()
    if cap < 0.15:
        kwargs["limit"] = rng.randint(0, topo.size)
    elif cap < 0.3:
        kwargs["groups"] = [ag.app.owner for ag in agents]
        kwargs["limits"] = {f"u{u}": rng.randint(0, topo.size // 2) for u in range(2)}  # u2 uncapped
    return Instance(agents, pool, start, kwargs)


def _run(fill, inst: Instance, by: str) -> tuple[dict[str, list[Gang]], frozenset[int]]:
    pool = inst.pool.copy()
    got = fill(inst.agents, pool, {k: list(v) for k, v in inst.start.items()}, **{**inst.kwargs, "by": by})
    return got, pool.free_ids()


def test_the_tuned_fill_hands_out_exactly_what_the_reference_does() -> None:
    """600 generated rounds, each filled in every order: the same gangs and the same GPUs left free.

    Also counts what the rounds exercised, so that a generator that stopped making gangs, ties, caps or
    spread placements would fail here rather than pass on easy rounds."""
    rng = random.Random(2035)
    seen: Counter[str] = Counter()
    for _ in range(600):
        inst = random_instance(rng)
        for by in FILL_ORDERS:
            tuned = _run(greedy_fill, inst, by)
            assert tuned == _run(reference_fill, inst, by), (by, inst.kwargs)
            gangs = [g for gs in tuned[0].values() for g in gs]
            seen["gang of 2+ GPUs"] += any(len(g.gpus) > 1 for g in gangs)
            seen["spread past one node"] += any(g.level >= Level.RACK for g in gangs)
            seen["capped"] += "limit" in inst.kwargs or "limits" in inst.kwargs
            seen["twins both served"] += any(aid.endswith("t") and aid[:-1] in tuned[0] for aid in tuned[0])
            seen["held gangs"] += bool(inst.start)
            seen["renewed at home"] += any(ag.homes.get(g.job_id) == g.gpus for ag in inst.agents
                                           for g in tuned[0].get(ag.app_id, ()))  # fmt: skip
    assert min(seen.values()) >= 100 and len(seen) == 6, seen


def test_the_references_plain_jobs_are_the_agents() -> None:
    """The reference's plain_factors, read from the jobs' public facts, says what the agent's own list
    says (the one the tuned fill reads): the jobs the agent places by the pool's plain best fit."""
    rng = random.Random(11)
    checked: Counter[bool] = Counter()
    for _ in range(200):
        for ag in random_instance(rng).agents:
            for kind in ag.kinds:
                for job in kind:
                    mine = plain_factors(ag, kind)
                    assert mine == ag._plain.get(job.id), job
                    checked[mine is None] += 1
    assert checked[True] > 100 and checked[False] > 100


@pytest.mark.parametrize("fill", [greedy_fill, reference_fill])
def test_an_unknown_order_or_caps_without_groups_are_refused(fill) -> None:
    inst = random_instance(random.Random(3))
    with pytest.raises(ValueError, match="by must be one of density, gain, rho, deadline, got 'fifo'"):
        fill(inst.agents, inst.pool.copy(), by="fifo")
    with pytest.raises(ValueError, match=r"groups: one per agent"):
        fill(inst.agents, inst.pool.copy(), limits={"u0": 1})


@pytest.mark.parametrize("by", ["density", "gain"])
def test_a_renewal_in_place_gains_the_work_it_saves(by: str) -> None:
    """Two apps want the same two GPUs: one holds them with work done since its last checkpoint (Job.unsaved),
    the other waits. Renewing the holder in place saves that work, so its gain counts it: with enough unsaved
    work the holder keeps the GPUs where, counting throughput alone, the other app would take them."""
    topo = Topology.uniform(1, 1, 2, 1)
    model = FairnessModel(topo, topo.size, 0.1)
    waiting = App("w", "u1", 0.0, (Job("w0", "w", 2, 8000.0, profile="none", submit=0.0),), contention=2.0)
    home = frozenset({0, 1})
    found = []
    for unsaved in (0.0, 400.0, 800.0, 1600.0):
        holder_job = Job("h0", "h", 2, 4000.0, done=1600.0, unsaved=unsaved, profile="none", submit=0.0)
        holder = App("h", "u0", 0.0, (holder_job,), contention=2.0)
        ah = Agent(holder, model, NOW, 0.0, holder.jobs, {"h0": home})
        aw = Agent(waiting, model, NOW, 0.0, waiting.jobs)
        t = 2.0  # both gangs: 2 GPUs at factor 1 ("none")
        lost = ah.at_risk
        g_plain = math.log(ah.rho_of(0.0, lost)) - math.log(ah.rho_of(t, lost))  # throughput alone
        g_saved = math.log(ah.rho_of(0.0, lost)) - math.log(ah.rho_of(t, lost - unsaved))
        g_wait = math.log(aw.rho_of(0.0)) - math.log(aw.rho_of(t))
        got = greedy_fill([ah, aw], Pool(topo, [0, 1]), {}, by=by)
        assert got == reference_fill([ah, aw], Pool(topo, [0, 1]), {}, by=by)
        winner = next(iter(got))
        if g_plain < g_wait < g_saved:  # the case: only the saved work makes the renewal worth more
            found.append(unsaved)
            assert winner == "h" and got["h"][0].gpus == home, (unsaved, got)
        elif g_saved < g_wait:
            assert winner == "w", (unsaved, got)
    assert found, "no unsaved work in the list puts the saved work between the two gains"
