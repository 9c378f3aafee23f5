"""Simulator invariants, restart accounting, estimate errors and the rejection of invalid decisions."""

from __future__ import annotations

import dataclasses
import math

import pytest

from themis_slurm.core.arbiter import ArbiterConfig
from themis_slurm.core.decision import Decision, Grant, GrantSource
from themis_slurm.core.placement import Pool, get_profile
from themis_slurm.core.state import ClusterState, check_state
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App, Job
from themis_slurm.policies import make_policy
from themis_slurm.policies.base import PolicyContext, ThemisPolicy
from themis_slurm.policies.tiresias import TiresiasPolicy
from themis_slurm.sim.engine import (
    InvalidDecision,
    SimConfig,
    SimResult,
    SimulationStalled,
    Simulator,
    simulate,
)
from themis_slurm.sim.estimate_error import EstimateError
from themis_slurm.sim.trace import TraceJob
from themis_slurm.sim.workload_paper import scaled_workload

from .sim_policies import Broken, FifoFirstFit, PreemptAll

TOPO16 = Topology.uniform(2, 2, 4)  # 2 racks x 2 nodes x 4 GPUs


def small_trace(seed: int = 1):
    """4 apps x 6 jobs, paper-like run times scaled down to minutes, a few 4- and 8-GPU gangs."""
    t = scaled_workload(seed, n_apps=4, jobs_per_app=6, duration_scale=0.05, app_interarrival_s=200)
    jobs = list(t.jobs)
    jobs[3] = dataclasses.replace(jobs[3], gpus=4)
    jobs[10] = dataclasses.replace(jobs[10], gpus=8)
    jobs[17] = dataclasses.replace(jobs[17], gpus=2)
    return jobs


def waiting_fit_check(topo: Topology):
    """An observer asserting work conservation: after a call no waiting job fits in the free GPUs (GPUs the
    decision reserved for a wide gang excepted)."""
    calls = []

    def observe(sim: Simulator, decision: Decision) -> None:
        pool = Pool(topo, set(sim.free_gpus()) - decision.reserved_gpus)
        for j in sim.waiting_jobs():
            need = 1 if j.elastic else j.gpus
            assert pool.find(need, j.gpus_per_node, j.nodes) is None, f"t={sim.now}: {j.id} fits but waits"
        calls.append(sim.now)

    return observe, calls


def check_allocations(res: SimResult, restart: float) -> None:
    """No GPU double-booked; GPU time and ideal progress recomputed from the intervals add up."""
    by_gpu: dict[int, list[tuple[float, float, str]]] = {}
    held: dict[str, float] = {}
    progress: dict[str, float] = {}
    seen_start: set[str] = set()
    prof = {j.job_id: get_profile(j.profile) for j in res.jobs}
    for jid, gpus, start, end in sorted(res.allocations, key=lambda a: a[2]):
        assert end >= start
        for g in gpus:
            by_gpu.setdefault(g, []).append((start, end, jid))
        held[jid] = held.get(jid, 0.0) + len(gpus) * (end - start)
        rate = len(gpus) * prof[jid].factor(res.topology.level_of(gpus))
        lost = restart if jid in seen_start else 0.0
        seen_start.add(jid)
        progress[jid] = progress.get(jid, 0.0) + rate * max(0.0, end - start - lost)
    for g, spans in by_gpu.items():
        spans.sort()
        for (_, e1, j1), (s2, _, j2) in zip(spans, spans[1:], strict=False):
            assert e1 <= s2 + 1e-6, f"GPU {g} double-booked: {j1} until {e1}, {j2} from {s2}"
    for j in res.jobs:
        assert held[j.job_id] == pytest.approx(j.gpu_seconds, rel=1e-9, abs=1e-6)
        assert progress[j.job_id] == pytest.approx(j.true_work, rel=1e-6)


def test_themis_invariants():
    jobs = small_trace()
    observe, calls = waiting_fit_check(TOPO16)
    cfg = SimConfig(restart_cost_s=20, record_allocations=True)
    policy = ThemisPolicy(ArbiterConfig(lease_s=120))
    res = Simulator(jobs, TOPO16, policy, cfg, observer=observe).run()
    assert calls and res.policy_calls == len(calls)
    ids = [j.job_id for j in res.jobs]
    assert sorted(ids) == sorted(j.job_id for j in jobs) and len(set(ids)) == len(ids)  # each exactly once
    for j in res.jobs:
        assert math.isfinite(j.finish) and j.finish > j.arrival and j.first_start >= j.arrival
    check_allocations(res, 20)
    assert sum(j.gpu_seconds for j in res.jobs) >= sum(j.true_work for j in res.jobs)
    assert res.preemptions == sum(j.preemptions for j in res.jobs) > 0
    # the utilization series integrates to the GPU time held
    t, b = res.util_times, res.util_busy
    area = sum(b[i] * (t[i + 1] - t[i]) for i in range(len(t) - 1))
    assert area == pytest.approx(sum(j.gpu_seconds for j in res.jobs))


def test_deterministic():
    jobs = small_trace(2)
    runs = [simulate(jobs, TOPO16, ThemisPolicy(ArbiterConfig(lease_s=120))) for _ in range(2)]
    assert runs[0].jobs == runs[1].jobs and runs[0].util_busy == runs[1].util_busy


def test_restart_cost_hand_computed():
    """1 GPU, 2 jobs of 100 s, leases of 50 s, every expiry preempts, restart costs 10 s (see the timeline)."""
    jobs = [TraceJob("a", "A", "u", 0, 1, 100.0), TraceJob("b", "B", "u", 0, 1, 100.0)]
    # a: 0-50 (50 done), 100-150 (restart to 110: 90 done), 200-220 (restart to 210: done)
    # b: 50-100 (50), 150-200 (restart to 160: 90), 220-240 (restart to 230: done)
    res = simulate(jobs, Topology.uniform(1, 1, 1), PreemptAll(lease_s=50), SimConfig(restart_cost_s=10))
    by = {j.job_id: j for j in res.jobs}
    assert by["a"].finish == pytest.approx(220) and by["b"].finish == pytest.approx(240)
    assert by["a"].gpu_seconds == pytest.approx(120) and by["b"].gpu_seconds == pytest.approx(120)
    assert res.preemptions == 4 and by["a"].starts == 3


def test_elastic_and_node_shaped_runs():
    jobs = small_trace(3)
    for cfg in (SimConfig(elastic=True, record_allocations=True), SimConfig(node_shaped=True, record_allocations=True)):
        res = simulate(jobs, TOPO16, ThemisPolicy(ArbiterConfig(lease_s=120)), cfg)
        assert all(math.isfinite(j.finish) for j in res.jobs)
        check_allocations(res, cfg.restart_cost_s)


class Spy:
    """Wraps a policy and records every state it is shown."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.seen = inner, inner.name, []
        self.grants_only_free_or_expired = inner.grants_only_free_or_expired

    def schedule(self, ctx: PolicyContext) -> Decision:
        self.seen.append(ctx)
        return self.inner.schedule(ctx)

    def next_wakeup(self, now: float):
        return self.inner.next_wakeup(now)


def test_estimate_errors_deterministic_and_bumped():
    jobs = small_trace(4)
    err = EstimateError.parse("lognormal:1.0")
    a = simulate(jobs, TOPO16, FifoFirstFit(), SimConfig(estimate_error=err, seed=7))
    b = simulate(jobs, TOPO16, FifoFirstFit(), SimConfig(estimate_error=err, seed=7))
    c = simulate(jobs, TOPO16, FifoFirstFit(), SimConfig(estimate_error=err, seed=8))
    est = [j.estimate for j in a.jobs]
    assert est == [j.estimate for j in b.jobs] and est != [j.estimate for j in c.jobs]
    assert any(e < j.true_work for e, j in zip(est, a.jobs, strict=True))  # some underestimates, so bumps happen
    spy = Spy(FifoFirstFit())
    simulate(jobs, TOPO16, spy, SimConfig(estimate_error=err, seed=7))
    for ctx in spy.seen:  # what policies see: remaining work never hits zero for an unfinished job
        assert all(j.work > j.done for app in ctx.state.apps for j in app.jobs)
    exact = simulate(jobs, TOPO16, FifoFirstFit())
    assert [j.estimate for j in exact.jobs] == [j.true_work for j in exact.jobs]
    u = EstimateError.parse("uniform:1:3").factors(1000, 0)
    assert u.min() >= 1 and u.max() <= 3
    for bad in ("uniform:3:1", "lognormal", "gauss:1", "uniform:a:b"):
        with pytest.raises(ValueError, match="estimate error"):
            EstimateError.parse(bad)


def test_state_holds_only_present_work_and_round_interval():
    jobs = small_trace(5)
    spy = Spy(ThemisPolicy(ArbiterConfig(lease_s=120)))
    simulate(jobs, TOPO16, spy, SimConfig(round_interval_s=30))
    assert spy.seen
    for ctx in spy.seen:
        assert ctx.state.now % 30 == pytest.approx(0, abs=1e-6) or ctx.state.now % 30 == pytest.approx(30)
        for app in ctx.state.apps:
            assert app.jobs and app.contention >= 1
        leased = {lease.job_id for lease in ctx.state.leases}
        assert leased <= {j.id for app in ctx.state.apps for j in app.jobs}


class IndexCheck(Spy):
    """Checks at each call (the index changes between calls) that the state's job_index is every app's
    jobs by id, the very objects, and that the policy's checked copy is a dictionary of its own."""

    def schedule(self, ctx: PolicyContext) -> Decision:
        s = ctx.state
        assert s.job_index is not None
        by_apps = {j.id: j for a in s.apps for j in a.jobs}
        assert by_apps.keys() == s.job_index.keys()
        assert all(s.job_index[jid] is j for jid, j in by_apps.items())
        checked = check_state(s)
        assert checked == by_apps and checked is not s.job_index
        self.seen.append(s.now)
        return self.inner.schedule(ctx)


@pytest.mark.parametrize("policy", ["themis", "maxmin", "gandiva", "tiresias"])
def test_the_job_index_is_the_apps_jobs_at_every_call(policy):
    """The simulator keeps ClusterState.job_index across calls (jobs come, start, are preempted, finish,
    and are re-estimated by calibration and progress reports); at every call it must be exactly the apps'
    jobs, and the results must not depend on it (the same as with the index built from the apps)."""
    jobs = small_trace(3)

    def make():  # Tiresias's queues at a minute and ten: the small trace's jobs run for minutes
        if policy == "themis":
            return ThemisPolicy(ArbiterConfig(lease_s=120))
        return TiresiasPolicy(thresholds=(60.0, 600.0)) if policy == "tiresias" else make_policy(policy)

    inner = make()
    cfg = SimConfig(restart_cost_s=20, progress_interval_s=300.0, estimate_error=EstimateError.parse("uniform:1:3"))
    spy = IndexCheck(inner)
    topo = Topology.uniform(1, 2, 4)  # 8 GPUs: contended, so every baseline here preempts
    res = simulate(jobs, topo, spy, cfg)
    assert len(spy.seen) == res.policy_calls > 20 and res.preemptions > 0

    class NoIndex(Spy):  # the same run, every state's index dropped: the apps' jobs build it
        def schedule(self, ctx: PolicyContext) -> Decision:
            state = dataclasses.replace(ctx.state, job_index=None)
            return self.inner.schedule(dataclasses.replace(ctx, state=state))

    res2 = simulate(jobs, topo, NoIndex(make()), cfg)
    assert res2.jobs == res.jobs and res2.apps == res.apps


def test_a_stale_job_index_is_refused():
    s = check_state_example()
    moved = dataclasses.replace(s.apps[0].jobs[-1], done=1.0)
    stale = dataclasses.replace(s, apps=(dataclasses.replace(s.apps[0], jobs=(*s.apps[0].jobs[:-1], moved)),
                                         *s.apps[1:]))  # fmt: skip
    with pytest.raises(ValueError, match="job_index must hold the apps' jobs"):
        check_state(stale)
    fewer = dataclasses.replace(s, apps=s.apps[1:])
    with pytest.raises(ValueError, match="job_index"):
        check_state(fewer)
    assert check_state(dataclasses.replace(stale, job_index=None))["a2"] is moved


def check_state_example() -> ClusterState:
    a = App("A", "u", 0.0, (Job("a1", "A", 1, 10.0), Job("a2", "A", 1, 10.0)))
    b = App("B", "u", 0.0, (Job("b1", "B", 2, 10.0),))
    index = {j.id: j for app in (b, a) for j in app.jobs}  # another order than the apps': allowed
    return ClusterState(TOPO16, 0.0, frozenset(range(16)), (), (a, b), job_index=index)


def _grant(ctx: PolicyContext, job_id: str, gpus) -> Grant:
    app = next(j.app_id for a in ctx.state.apps for j in a.jobs if j.id == job_id)
    return Grant(job_id, app, frozenset(gpus), {}, "", math.inf, "test")


def _double(ctx, d):
    if len(d.grants) < 2:
        return d
    g0, g1 = d.grants[0], d.grants[1]
    return dataclasses.replace(d, grants=(g0, dataclasses.replace(g1, gpus=g0.gpus)))


def _not_free(ctx, d):
    busy = {g for lease in ctx.state.leases for g in lease.gpus}
    if not busy or not d.grants:
        return d
    g0 = d.grants[0]
    return dataclasses.replace(d, grants=(dataclasses.replace(g0, gpus=frozenset({min(busy)})),))


def _partial(ctx, d):
    wide = [g for g in d.grants if len(g.gpus) > 1]
    if not wide:
        return d
    g0 = wide[0]
    return dataclasses.replace(d, grants=(dataclasses.replace(g0, gpus=frozenset(sorted(g0.gpus)[:1])),))


def _unknown(ctx, d):
    return dataclasses.replace(d, grants=(Grant("nope", "A", frozenset({0}), {}, "", math.inf, "x"),)) if d.grants else d


def _future(ctx, d):  # j7 arrives at t=4: at t=0 it is not waiting yet
    if ctx.state.now > 0 or not ctx.state.free:
        return d
    return dataclasses.replace(d, grants=(Grant("j7", "A1", frozenset({min(ctx.state.free)}), {}, "", math.inf,
                                                GrantSource.POLICY),))


def _running(ctx, d):
    if not ctx.state.leases or not ctx.state.free:
        return d
    lease = ctx.state.leases[0]
    return dataclasses.replace(d, grants=(_grant(ctx, lease.job_id, [min(ctx.state.free)]),))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_double, "twice"),
        (_not_free, "not free"),
        (_partial, "gangs are whole"),
        (_unknown, "not waiting"),
        (_future, "not waiting"),
        (_running, "which is running"),
    ],
)
def test_invalid_decisions_rejected(mutate, message):
    jobs = [TraceJob(f"j{i}", f"A{i % 2}", "u", float(max(0, i - 3)), 4 if i == 3 else 1, 100.0) for i in range(8)]
    with pytest.raises(InvalidDecision, match=message) as exc:
        simulate(jobs, Topology.uniform(1, 2, 4), Broken(mutate))
    assert "policy 'broken'" in str(exc.value)


def test_node_shape_enforced():
    jobs = [TraceJob("w", "A", "u", 0.0, 8, 100.0)]

    def split(ctx, d):  # 8 GPUs as 3+3+2 over three nodes instead of 4+4 on two
        return dataclasses.replace(d, grants=(_grant(ctx, "w", [0, 1, 2, 4, 5, 6, 8, 9]),))

    with pytest.raises(InvalidDecision, match="on each of 2 node"):
        simulate(jobs, Topology.uniform(1, 3, 4), Broken(split), SimConfig(node_shaped=True))


def test_stall_detected():
    class Never(FifoFirstFit):
        name = "never"

        def schedule(self, ctx):
            return Decision(now=ctx.state.now)

    with pytest.raises(SimulationStalled, match="never grants"):
        simulate([TraceJob("j", "A", "u", 0.0, 1, 10.0)], Topology.uniform(1, 1, 1), Never())


def test_job_wider_than_cluster_rejected():
    with pytest.raises(ValueError, match="cluster has 4"):
        Simulator([TraceJob("j", "A", "u", 0.0, 8, 10.0)], Topology.uniform(1, 1, 4), FifoFirstFit())


def test_policy_must_declare_whether_it_only_grants_free_or_expired():
    class Undeclared:
        name = "undeclared"

        def schedule(self, ctx):
            return Decision(now=ctx.state.now)

        def next_wakeup(self, now):
            return None

    with pytest.raises(TypeError, match="grants_only_free_or_expired"):
        Simulator([TraceJob("j", "A", "u", 0.0, 1, 10.0)], Topology.uniform(1, 1, 1), Undeclared())


def test_a_run_pauses_the_collector_and_collects_every_so_many_calls(monkeypatch):
    """The cyclic collector is off for the whole run (policy calls and the simulator's own work), back on
    afterwards; a full collection still runs every _COLLECT_EVERY_CALLS calls (here every 3)."""
    import gc

    from themis_slurm.sim import engine

    monkeypatch.setattr(engine, "_COLLECT_EVERY_CALLS", 3)
    collected, seen = [], []
    monkeypatch.setattr(engine.gc, "collect", lambda *a: collected.append(1) or 0)

    def observe(sim: Simulator, decision: Decision) -> None:
        seen.append(gc.isenabled())

    assert gc.isenabled()
    sim = Simulator(small_trace(), TOPO16, FifoFirstFit(), SimConfig(), observer=observe)
    res = sim.run()
    assert gc.isenabled() and seen and not any(seen)
    assert res.policy_calls >= 3 and len(collected) == res.policy_calls // 3
