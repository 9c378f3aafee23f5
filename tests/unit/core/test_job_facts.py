"""JobFactsCache: keeping per-job numbers and bidding orders across rounds changes no decision."""

from __future__ import annotations

import dataclasses

from themis_slurm.core.arbiter import ArbiterConfig, run_round
from themis_slurm.core.decision import Decision
from themis_slurm.core.job_facts import JobFactsCache
from themis_slurm.core.topology import Topology
from themis_slurm.policies.base import PolicyContext, ThemisPolicy
from themis_slurm.sim.engine import SimConfig, Simulator
from themis_slurm.sim.workload_paper import scaled_workload

from .test_golden_decisions import digest


class Both:
    """A policy that runs every round twice, with the kept cache and with a fresh one, and compares."""

    name = "themis-both"
    grants_only_free_or_expired = True

    def __init__(self, config: ArbiterConfig) -> None:
        self.config, self.cache, self.rounds, self.reused = config, JobFactsCache(), 0, 0

    def schedule(self, ctx: PolicyContext) -> Decision:
        kept = run_round(ctx.state, self.config, self.cache)
        fresh = run_round(ctx.state, self.config)
        assert digest(kept) == digest(fresh), f"round {self.rounds} at t={ctx.state.now}"
        self.rounds += 1
        self.reused += len(self.cache.orders)
        return kept

    def next_wakeup(self, now: float) -> float | None:
        return None


def test_a_kept_cache_decides_exactly_as_a_fresh_one() -> None:
    trace = scaled_workload(2, n_apps=6, jobs_per_app=10, duration_scale=0.05, app_interarrival_s=60)
    topo = Topology.uniform(2, 2, 4)
    for cfg in (ArbiterConfig(solver="fast"), ArbiterConfig(solver="fast", reserve_wide_gangs=True)):
        both = Both(cfg)
        Simulator(trace, topo, both, SimConfig(node_shaped=True)).run()
        assert both.rounds > 50 and both.reused > 0


def test_changed_jobs_are_recomputed_not_reused() -> None:
    """The same job ids with new numbers (a new snapshot) must not get last round's order or facts."""
    from themis_slurm.core.state import ClusterState
    from themis_slurm.core.workload import App, Job

    topo = Topology.uniform(1, 1, 4)
    jobs = (Job("a1", "a", 1, 100.0), Job("a2", "a", 1, 900.0), Job("b1", "b", 1, 500.0))
    cache = JobFactsCache()

    def state(js: tuple[Job, ...]) -> ClusterState:
        apps = (App("a", "u", 0.0, tuple(j for j in js if j.app_id == "a")),
                App("b", "v", 0.0, tuple(j for j in js if j.app_id == "b")))  # fmt: skip
        return ClusterState(topo, 10.0, frozenset({0}), (), apps)

    first = run_round(state(jobs), ArbiterConfig(), cache)
    assert len(first.grants) == 1  # one free GPU
    # a2 is now nearly done: app a's shortest job (and a1 has room to wait), so a2 must be the one it bids
    # with, and as the new snapshot, not last round's
    later = (jobs[0], dataclasses.replace(jobs[1], done=899.0), jobs[2])
    assert digest(run_round(state(later), ArbiterConfig(), cache)) == digest(run_round(state(later), ArbiterConfig()))
    order = cache.orders["a"][1].last[1][0]
    assert [j.id for j in order] == ["a2", "a1"] and order[0].done == 899.0


def test_models_without_a_cache_share_one_and_still_agree_with_a_fresh_one() -> None:
    """FairnessModel() with no cache uses job_facts.SHARED; its facts equal a fresh cache's, round after round,
    while jobs change, come and go (prefix reuse of the running sums included)."""
    import random

    from themis_slurm.core.fairness import FairnessModel
    from themis_slurm.core.job_facts import SHARED
    from themis_slurm.core.workload import App, Job

    topo = Topology.uniform(2, 2, 4)
    rng = random.Random(3)
    jobs = [Job(f"j{i}", "a", rng.choice([1, 2, 4]), rng.uniform(10, 1000), profile=rng.choice(["vgg16", "low"]),
                submit=rng.uniform(0, 50)) for i in range(30)]  # fmt: skip
    for step in range(40):
        if step % 3 == 0 and jobs:
            jobs.pop(rng.randrange(len(jobs)))  # one leaves
        k = rng.randrange(len(jobs))
        jobs[k] = dataclasses.replace(jobs[k], done=min(jobs[k].work, jobs[k].done + rng.uniform(0, 50)))  # runs
        jobs = jobs[k:] + jobs[:k] if step % 7 == 0 else jobs  # reordered now and then
        app = App("a", "u", 5.0, tuple(jobs), contention=1.0 + step / 10)
        shared = FairnessModel(topo, 16)
        fresh = FairnessModel(topo, 16, job_facts=JobFactsCache())
        fresh.job_facts.use(topo, 0)
        assert shared.job_facts is SHARED
        assert shared.facts(app) == fresh.facts(app), step


def test_a_one_round_cache_keeps_no_sums_and_gives_the_same_facts() -> None:
    """A cold round's cache (RoundState.start without one) lives one round: the per-app running sums,
    kept only for a next round, are not stored, and the facts are the very floats a kept cache gives."""
    from themis_slurm.core.fairness import FairnessModel
    from themis_slurm.core.round_state import RoundState
    from themis_slurm.core.state import ClusterState
    from themis_slurm.core.workload import App, Job

    topo = Topology.uniform(1, 2, 4)
    app = App("a", "u", 0.0, tuple(Job(f"a{i}", "a", 1 + i % 2, 100.0 * (i + 1), submit=float(i)) for i in range(5)))
    once = FairnessModel(topo, 8, job_facts=JobFactsCache(across_rounds=False))
    kept = FairnessModel(topo, 8, job_facts=JobFactsCache())
    for model in (once, kept):
        model.job_facts.use(topo, 5)
    assert once.facts(app) == kept.facts(app)
    assert once.job_facts.sums == {} and list(kept.job_facts.sums) == ["a"]
    rs = RoundState.start(ClusterState(topo, 10.0, frozenset(range(8)), (), (app,)), ArbiterConfig())
    assert rs.model.job_facts.across_rounds is False


def test_throughput_on_a_lease_is_job_throughput() -> None:
    """The kept per-(profile, GPU set) throughput of a lease equals job_throughput, on every level."""
    from themis_slurm.core.fairness import job_throughput
    from themis_slurm.core.workload import Job

    topo = Topology.uniform(2, 2, 4, islands_per_node=2)
    cache = JobFactsCache()
    cache.use(topo, 0)
    for profile in ("vgg16", "resnet50", "low"):
        for gpus in ({0}, {0, 1}, {0, 2}, {0, 4}, {0, 8}, set(range(16)), set()):
            job = Job("j", "a", max(1, len(gpus)), 100.0, profile=profile)
            want = job_throughput(job, gpus, topo)
            assert cache.throughput_on(job, frozenset(gpus)) == want
            assert cache.throughput_on(job, frozenset(gpus)) == want  # kept


def test_the_simulator_lists_waiting_jobs_first_and_keeps_their_snapshots() -> None:
    """Waiting jobs first (the same snapshot objects call after call), then running ones: the core's running
    sums then keep the waiting jobs as a prefix (FairnessModel.facts)."""
    trace = scaled_workload(1, n_apps=3, jobs_per_app=12, duration_scale=0.05, app_interarrival_s=30)
    seen: dict[str, tuple] = {}
    kept = [0]

    class Look:
        name = "look"
        grants_only_free_or_expired = True

        def __init__(self) -> None:
            self.inner = ThemisPolicy(ArbiterConfig(solver="fast"))

        def schedule(self, ctx: PolicyContext) -> Decision:
            held = {lease.job_id for lease in ctx.state.leases}
            for app in ctx.state.apps:
                flags = [j.id in held for j in app.jobs]
                assert flags == sorted(flags), f"running job before a waiting one in {app.id}"
                waiting = tuple(j for j in app.jobs if j.id not in held)
                before = seen.get(app.id)
                if before is not None and [j.id for j in before] == [j.id for j in waiting]:
                    kept[0] += all(a is b for a, b in zip(before, waiting, strict=True))
                seen[app.id] = waiting
            return self.inner.schedule(ctx)

        def next_wakeup(self, now: float) -> float | None:
            return None

    Simulator(trace, Topology.uniform(1, 2, 4), Look(), SimConfig()).run()
    assert kept[0] > 10
