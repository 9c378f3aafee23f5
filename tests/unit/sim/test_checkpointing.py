"""Jobs that do not checkpoint (issue #34 item 2): what the simulator throws away at a preemption, what the
policies are shown (Job.unsaved), and that Themis, told, stops preempting them where it does not pay."""

from __future__ import annotations

import math

import pytest

from themis_slurm.core.arbiter import ArbiterConfig
from themis_slurm.core.topology import Topology
from themis_slurm.policies import make_policy
from themis_slurm.sim.engine import SimConfig, simulate
from themis_slurm.sim.trace import TraceJob

from .sim_policies import PreemptAll

ONE = Topology.uniform(1, 1, 1)


def test_hand_computed_losses_at_an_interval_and_at_the_warning() -> None:
    """1 GPU, leases of 50 s, every expiry preempts, restart 10 s; ``b`` (100 s) checkpoints every 30 s of
    progress, ``c`` (40 s) at the warning. b: 0-50 (50 done, saved at 30: 20 lost); c: 50-90 (done); b:
    90-140 (restart to 100, from 30 to 70, saved at 130 -> 60: 10 lost); b: 140-190 (restart to 150, 60 ->
    100: done)."""
    jobs = [TraceJob("b", "B", "u", 0, 1, 100.0, checkpoint_s=30.0), TraceJob("c", "C", "u", 0, 1, 40.0)]
    res = simulate(jobs, ONE, PreemptAll(lease_s=50), SimConfig(restart_cost_s=10.0))
    by = {j.job_id: j for j in res.jobs}
    assert by["c"].lost_work == 0.0 and by["c"].finish == pytest.approx(90.0)
    assert by["b"].lost_work == pytest.approx(30.0) and by["b"].finish == pytest.approx(190.0)
    assert res.lost_work == pytest.approx(30.0)
    with pytest.raises(ValueError, match="checkpoint_s must be > 0"):
        TraceJob("x", "X", "u", 0, 1, 10.0, checkpoint_s=0.0)


class PreemptOnce(PreemptAll):
    """Preempts the holders of the first expiry, then grants leases that never expire."""

    def schedule(self, ctx):  # noqa: ANN001, ANN202
        d = super().schedule(ctx)
        if d.preemptions:
            self.lease_s = math.inf
        return d


def test_a_job_that_never_checkpoints_restarts_from_zero() -> None:
    """1 GPU, restart 10 s: ``a`` (60 s, never checkpoints) 0-50, preempted: all 50 s lost; ``b`` (30 s)
    50-80; ``a`` again 80-150 (restart to 90, then all 60 s)."""
    jobs = [TraceJob("a", "A", "u", 0, 1, 60.0, checkpoint_s=math.inf), TraceJob("b", "B", "u", 0, 1, 30.0)]
    res = simulate(jobs, ONE, PreemptOnce(lease_s=50), SimConfig(restart_cost_s=10.0))
    by = {j.job_id: j for j in res.jobs}
    assert by["a"].lost_work == pytest.approx(50.0) and by["a"].finish == pytest.approx(150.0)
    assert by["b"].finish == pytest.approx(80.0) and res.preemptions == 1


def test_policies_see_the_unsaved_work_of_running_jobs() -> None:
    """Job.unsaved: all done work of a running never-checkpointing job, the work since the last checkpoint
    of one with an interval, 0 for one that saves at the warning and for every waiting job; and nothing with
    ``tell_unsaved=False``."""
    seen: list[tuple[float, dict[str, float]]] = []

    class Spy:
        name = "spy"
        grants_only_free_or_expired = False  # called at every arrival

        def __init__(self) -> None:
            self.inner = make_policy("fifo", ArbiterConfig(lease_s=1000.0))

        def schedule(self, ctx):  # noqa: ANN001, ANN202
            seen.append((ctx.state.now, {j.id: j.unsaved for a in ctx.state.apps for j in a.jobs}))
            return self.inner.schedule(ctx)

        def next_wakeup(self, t: float):  # noqa: ANN202
            return self.inner.next_wakeup(t)

    jobs = [TraceJob("a", "A", "u", 0, 1, 300.0, checkpoint_s=math.inf),
            TraceJob("b", "B", "u", 0, 1, 300.0, checkpoint_s=40.0),
            TraceJob("c", "C", "u", 0, 1, 300.0),
            TraceJob("d", "D", "u", 0, 1, 300.0, checkpoint_s=math.inf),  # waits: 3 GPUs
            TraceJob("late", "E", "u", 100.0, 1, 10.0)]
    simulate(jobs, Topology.uniform(1, 1, 3), Spy(), SimConfig(restart_cost_s=0.0))
    at_100 = dict(seen)[100.0]  # the call at the late arrival
    assert at_100["a"] == pytest.approx(100.0) and at_100["b"] == pytest.approx(20.0)
    assert at_100["c"] == 0.0 and at_100["d"] == 0.0
    seen.clear()
    simulate(jobs, Topology.uniform(1, 1, 3), Spy(), SimConfig(restart_cost_s=0.0, tell_unsaved=False))
    assert all(v == 0.0 for _, call in seen for v in call.values())


def test_themis_told_keeps_non_checkpointing_jobs_where_blind_it_never_finishes() -> None:
    """The issue's case (benchmarks/checkpoint_cost.py): 32 never-checkpointing 4-minute jobs estimated at 2
    minutes and 32 that checkpoint, on 16 GPUs with 45 s leases and 60 s restarts. Told their unsaved work,
    all 64 jobs finish within 25 minutes (16 minutes of work on 16 GPUs), the non-checkpointing jobs are
    preempted less than once each on average and less than a tenth of the work is thrown away (measured:
    22 preemptions, 990 of 15,360 GPU-s); blind, they were preempted at every lease they lost and, past the
    restart cost, never ran long enough to finish (the benchmark shows 0 of 64 finished after 4 hours)."""
    jobs = [TraceJob(f"{u}.{i}", f"{u}/job{i}", u, t0, 1, 240.0, estimate_s=est, checkpoint_s=ck)
            for u, est, ck, t0 in (("nockpt", 120.0, math.inf, 0.0), ("ckpt", 240.0, None, 1.0)) for i in range(32)]
    policy = make_policy("themis", ArbiterConfig(lease_s=45.0, restart_cost_s=60.0))
    res = simulate(jobs, Topology.uniform(2, 2, 4), policy, SimConfig(round_interval_s=5.0, restart_cost_s=60.0))
    assert max(j.finish for j in res.jobs) <= 25 * 60
    assert res.lost_work < 0.1 * sum(j.duration_s * j.gpus for j in jobs)
    assert sum(j.preemptions for j in res.jobs if j.job_id.startswith("nockpt")) < 32


def test_no_checkpoint_fraction_is_drawn_with_the_seed() -> None:
    """Which jobs never checkpoint is one draw per job with SimConfig.seed: the same seed, the same jobs (and
    so the same run); a trace's own checkpoint_s is kept."""
    marked: list[set[str]] = []

    class Spy:
        name = "spy"
        grants_only_free_or_expired = False  # called at every arrival

        def __init__(self) -> None:
            self.inner = make_policy("fifo", ArbiterConfig(lease_s=1000.0))
            marked.append(set())

        def schedule(self, ctx):  # noqa: ANN001, ANN202
            marked[-1].update(j.id for a in ctx.state.apps for j in a.jobs if j.unsaved > 0)
            return self.inner.schedule(ctx)

        def next_wakeup(self, t: float):  # noqa: ANN202
            return self.inner.next_wakeup(t)

    jobs = [TraceJob(f"j{i}", f"a{i}", "u", 0, 1, 100.0 + i) for i in range(40)]
    jobs[0] = TraceJob("j0", "a0", "u", 0, 1, 100.0, checkpoint_s=30.0)
    jobs.append(TraceJob("late", "late", "u", 50.0, 1, 10.0))  # a call at 50 s, every other job running
    for seed in (3, 3, 4):
        simulate(jobs, Topology.uniform(1, 1, 40), Spy(), SimConfig(no_checkpoint=0.5, seed=seed))
    assert marked[0] == marked[1] != marked[2]
    assert "j0" in marked[0] and "j0" in marked[2]  # its own interval: unsaved work past 30 s
    assert 10 <= len(marked[0]) <= 30
    with pytest.raises(ValueError, match="no_checkpoint must be a fraction"):
        SimConfig(no_checkpoint=1.5)
