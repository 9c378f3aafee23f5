"""Random small Themis rounds for property tests (hypothesis strategies and a seeded generator)."""

from __future__ import annotations

import random

from themis_slurm import reasons
from themis_slurm.core.agent import Agent
from themis_slurm.core.decision import AppRecord, Preemption, Renewal
from themis_slurm.core.fairness import FairnessModel, job_throughput
from themis_slurm.core.placement import Pool
from themis_slurm.core.state import ClusterState
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App, Job, Lease

PROFILES = ["vgg16", "alexnet", "resnet50", "high", "none"]


def random_state(rng: random.Random, max_gpus: int = 16) -> ClusterState:
    """A random cluster, some leases (some expiring now), and apps with random gangs."""
    while True:
        racks = rng.randint(1, 2)
        npr = rng.randint(1, 2)
        gpn = rng.choice([2, 4])
        isl = rng.choice([1, 2]) if gpn >= 2 else 1
        if racks * npr * gpn <= max_gpus:
            break
    topo = Topology.uniform(racks, npr, gpn, isl)
    now = 1000.0
    apps: list[App] = []
    for a in range(rng.randint(1, 5)):
        jobs = []
        for k in range(rng.randint(1, 4)):
            g = rng.choice([1, 1, 2, 2, 3, 4])
            shaped = g == gpn * 2 and rng.random() < 0.5
            jobs.append(
                Job(
                    id=f"a{a}j{k}",
                    app_id=f"a{a}",
                    gpus=g,
                    work=rng.uniform(100, 5000) * g,
                    done=rng.uniform(0, 50),
                    profile=rng.choice(PROFILES),
                    gpus_per_node=gpn if shaped else None,
                    nodes=2 if shaped else None,
                    elastic=not shaped and rng.random() < 0.15,
                    preemptible=rng.random() < 0.9,
                    submit=rng.uniform(0, now),
                )
            )
        apps.append(App(f"a{a}", f"u{a % 2}", rng.uniform(0, now), tuple(jobs), contention=rng.uniform(1, 4)))
    # some jobs hold leases on disjoint GPUs
    pool = Pool(topo, range(topo.size))
    leases: list[Lease] = []
    for app in apps:
        for job in app.jobs:
            if rng.random() < 0.3:
                gpus = pool.find(job.gpus, job.gpus_per_node, job.nodes)
                if gpus is not None:
                    pool.take(gpus)
                    expiry = now if rng.random() < 0.5 else now + rng.uniform(1, 600)
                    leases.append(Lease(job.id, gpus, now - 600, expiry))
    free = frozenset(g for g in pool.free_ids() if rng.random() < 0.9)
    return ClusterState(topo, now, free, tuple(leases), tuple(apps))


def agents_for(state: ClusterState, idle_throughput: float = 0.1) -> tuple[list[Agent], Pool]:
    """Every app with waiting work as a bidder over the free GPUs (no leases expire)."""
    model = FairnessModel(state.topology, state.topology.size, idle_throughput)
    held = {lease.job_id: lease.gpus for lease in state.leases}
    agents = []
    for app in state.apps:
        base = sum(job_throughput(j, held[j.id], state.topology) for j in app.jobs if j.id in held)
        waiting = [j for j in app.jobs if j.id not in held]
        if waiting:
            agents.append(Agent(app, model, state.now, base, waiting))
    return agents, Pool(state.topology, state.free)


def said(x: object) -> str:
    """The sentence the edges (daemon log, `themis explain`) make from a record's typed fields."""
    if isinstance(x, AppRecord):
        return reasons.app_record(x, 0.8)
    if isinstance(x, Renewal):
        return reasons.renewal(x)
    assert isinstance(x, Preemption)
    return reasons.preemption_cause(x.cause)


def random_one_gpu_round(rng: random.Random) -> tuple[list[Agent], Pool]:
    """2 to 6 bidders whose waiting jobs are all one-GPU gangs, some of them lease holders whose home GPU
    is in the pool, on a small random cluster: the shape of most rounds of a paper-size simulation."""
    while True:
        topo = Topology.uniform(rng.randint(1, 2), rng.randint(1, 2), rng.choice([2, 4]), 1)
        free = [g for g in range(topo.size) if rng.random() < 0.7]
        if free:
            break
    rng.shuffle(free)
    model = FairnessModel(topo, topo.size, 0.1)
    agents = []
    homed = 0
    for a in range(rng.randint(2, 6)):
        jobs = tuple(
            Job(id=f"a{a}j{k}", app_id=f"a{a}", gpus=1, work=rng.uniform(100, 5000), done=rng.uniform(0, 50),
                profile=rng.choice(PROFILES), elastic=rng.random() < 0.2, submit=rng.uniform(0, 900))
            for k in range(rng.randint(1, 6))
        )  # fmt: skip
        app = App(f"a{a}", f"u{a}", rng.uniform(0, 900), jobs, contention=rng.uniform(1, 4))
        homes = {}
        for j in jobs:
            if homed < len(free) and rng.random() < 0.4:
                homes[j.id] = frozenset([free[homed]])
                homed += 1
        base = rng.choice([0.0, 0.0, 1.0, 2.0])
        agents.append(Agent(app, model, 1000.0, base, list(jobs), homes, rng.choice([0.05, 0.05, 0.3])))
    return agents, Pool(topo, free)
