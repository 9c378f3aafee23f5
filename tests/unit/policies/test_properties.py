"""Invariants every policy keeps on random small states, single calls and short runs of calls.

Never a GPU granted twice; only free GPUs (or GPUs freed by the same decision's preemptions) granted;
gangs whole (elastic: 1..max); node shapes respected; no grant to a running job unless it is migrated
(preempted and re-granted in the same decision); only running preemptible jobs preempted; an AppRecord
with a reason for every app; deterministic (same state, fresh policy -> same decision).
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from themis_slurm.core.placement import Pool
from themis_slurm.core.state import ClusterState
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App, Job, Lease
from themis_slurm.policies import POLICIES, make_policy

from .helpers import check, ctx, step

PROFILES = ["vgg16", "alexnet", "resnet50", "high", "none"]
# short quanta so boundaries occur in the runs
OPTIONS = {"gandiva": {"quantum_s": 100.0}, "slaq": {"epoch_s": 100.0}, "maxmin": {"quantum_s": 100.0}, "ftf": {"quantum_s": 100.0}, "fairshare": {"min_run_s": 50.0}}


def random_state(rng: random.Random) -> ClusterState:
    racks, npr, gpn = rng.randint(1, 2), rng.randint(1, 2), rng.choice([2, 4])
    topo = Topology.uniform(racks, npr, gpn, rng.choice([1, 2]))
    now = rng.choice([1000.0, 1037.5, 1100.0])
    apps: list[App] = []
    for a in range(rng.randint(1, 4)):
        jobs = []
        for k in range(rng.randint(1, 4)):
            g = rng.choice([1, 1, 2, 3, 4])
            shaped = g == gpn * 2 and rng.random() < 0.5
            work = rng.uniform(50, 5000) * g
            jobs.append(
                Job(
                    id=f"a{a}j{k}", app_id=f"a{a}", gpus=g, work=work, done=rng.uniform(0, work * 1.2),
                    profile=rng.choice(PROFILES),
                    gpus_per_node=gpn if shaped else None, nodes=2 if shaped else None,
                    elastic=not shaped and rng.random() < 0.2, preemptible=rng.random() < 0.85,
                    submit=rng.uniform(0, now), service=rng.choice([0.0, rng.uniform(0, 50000)]),
                )
            )  # fmt: skip
        apps.append(App(f"a{a}", f"u{a % 2}", rng.uniform(0, now), tuple(jobs), contention=rng.uniform(1, 3)))
    pool = Pool(topo, range(topo.size))
    leases: list[Lease] = []
    for app in apps:
        for job in app.jobs:
            if rng.random() < 0.4:
                size = rng.randint(1, job.gpus) if job.elastic else job.gpus
                gpus = pool.find(size, job.gpus_per_node, job.nodes)
                if gpus is not None:
                    pool.take(gpus)
                    expiry = rng.choice([now, now + 300.0, float("inf")])
                    leases.append(Lease(job.id, gpus, now - rng.choice([0.0, 40.0, 600.0]), expiry))
    free = frozenset(g for g in pool.free_ids() if rng.random() < 0.9)  # some GPUs unmanaged
    return ClusterState(topo, now, free, tuple(leases), tuple(apps))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_single_call_invariants_and_determinism(seed: int) -> None:
    s = random_state(random.Random(seed))
    for name in POLICIES:
        d = make_policy(name, **OPTIONS.get(name, {})).schedule(ctx(s))
        check(s, d)
        again = make_policy(name, **OPTIONS.get(name, {})).schedule(ctx(s))
        assert again.grants == d.grants and again.preemptions == d.preemptions, name


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_runs_of_calls_keep_invariants(seed: int) -> None:
    """Each policy drives a few steps of the test stepper, called at its own wake-ups or every 70 s."""
    start = random_state(random.Random(seed))
    for name in POLICIES:
        p = make_policy(name, **OPTIONS.get(name, {}))
        s = start
        for _ in range(8):
            d = p.schedule(ctx(s))
            check(s, d)
            wake = p.next_wakeup(s.now)
            assert wake is None or wake > s.now, name
            dt = min(70.0, wake - s.now) if wake is not None else 70.0
            s = step(s, d, dt)
            if not s.apps:
                break


def test_work_conserving_policies_leave_no_fitting_job_waiting() -> None:
    """Except strict fifo, slurm (reservation) and tiresias (consolidation), no job that fits the idle
    GPUs waits after a call."""
    rng = random.Random(7)
    for _ in range(150):
        s = random_state(rng)
        for name in ("srtf", "gandiva", "optimus", "slaq", "maxmin", "fairshare", "ftf"):
            d = make_policy(name, **OPTIONS.get(name, {})).schedule(ctx(s))
            idle = Pool(s.topology, d.idle_gpus)
            active = {g.job_id for g in d.grants} | (
                {lease.job_id for lease in s.leases} - {p.job_id for p in d.preemptions}
            )
            for app in s.apps:
                for job in app.jobs:
                    if job.id not in active:
                        # optimus and slaq start elastic jobs on 1 GPU; the others treat them as rigid
                        need = job.min_gpus if name in ("optimus", "slaq") else job.gpus
                        fits = idle.find(need, job.gpus_per_node, job.nodes)
                        assert fits is None, f"{name}: {job.id} waits but fits {sorted(fits)}"
