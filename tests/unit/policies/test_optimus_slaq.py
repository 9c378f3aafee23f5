"""Optimus: admission by model GPU-time, elastic growth by marginal completion-time gain.
SLAQ: GPUs to the largest predicted loss reduction per GPU, favouring jobs early in training."""

from __future__ import annotations

import pytest

from themis_slurm.core.topology import Level, Topology
from themis_slurm.policies import OptimusPolicy, SlaqPolicy

from .helpers import app, check, ctx, granted, job, preempted, state, step

TOPO = Topology.uniform(1, 1, 4)


def test_optimus_speed_model_is_sublinear() -> None:
    p = OptimusPolicy(alpha=0.1)
    assert p.speedup(1) == 1.0
    assert p.speedup(8) == pytest.approx(8 / 1.7)
    j = job("x", "a", work=1000)
    assert p.completion_time(j, 2, Level.ISLAND) < p.completion_time(j, 1, Level.ISLAND)


def test_optimus_admits_least_gpu_time_first() -> None:
    s = state(
        TOPO,
        [app("a", [job("big", "a", gpus=4, work=1000)]), app("b", [job("small", "b", gpus=2, work=100)])],
    )
    d = OptimusPolicy().schedule(ctx(s))
    check(s, d)
    assert granted(d) == {"small"}  # big would fit only alone; small needs far less GPU-time


def test_optimus_grows_elastic_jobs_by_marginal_gain() -> None:
    """Two elastic jobs share 4 free GPUs; the one with more remaining work gains more from extra GPUs."""
    long = job("long", "a", gpus=4, work=10000, elastic=True)
    short = job("short", "b", gpus=4, work=500, elastic=True)
    s = state(TOPO, [app("a", [long]), app("b", [short])])
    d = OptimusPolicy(alpha=0.1).schedule(ctx(s))
    check(s, d)
    sizes = {g.job_id: len(g.gpus) for g in d.grants}
    assert sum(sizes.values()) == 4 and sizes["long"] > sizes["short"] >= 1


def test_optimus_does_not_preempt_running_jobs() -> None:
    s = state(
        TOPO,
        [app("a", [job("r", "a", gpus=4, work=10**6)]), app("b", [job("n", "b", work=1)])],
        running={"r": {0, 1, 2, 3}},
    )
    d = OptimusPolicy().schedule(ctx(s))
    check(s, d)
    assert not d.preemptions and not d.grants


def test_slaq_loss_curve_favours_jobs_early_in_training() -> None:
    p = SlaqPolicy()
    fresh, old = job("f", "a", work=10**5), job("o", "a", work=10**5, done=50000)
    assert p.reduction(fresh, 1, Level.ISLAND) > p.reduction(old, 1, Level.ISLAND) > 0
    assert p.loss(0) == 1.0


def test_slaq_starts_the_fresh_job_first() -> None:
    topo = Topology.uniform(1, 1, 1)
    s = state(
        topo,
        [
            app("a", [job("old", "a", work=10**5, done=40000, submit=0)]),
            app("b", [job("new", "b", work=10**5, submit=5)]),
        ],
    )
    d = SlaqPolicy().schedule(ctx(s))
    check(s, d)
    assert granted(d) == {"new"}


def test_slaq_reallocates_at_epoch_boundaries_with_hysteresis() -> None:
    topo = Topology.uniform(1, 1, 1)
    runner = job("old", "a", work=10**6, done=40000)
    s = state(
        topo, [app("a", [runner]), app("b", [job("new", "b", work=10**6)])], running={"old": {0}}, now=50
    )
    p = SlaqPolicy(epoch_s=100)
    d = p.schedule(ctx(s))
    check(s, d)
    assert not d.preemptions  # mid-epoch: free GPUs only
    assert p.next_wakeup(50) == 100
    s = step(s, d, 50)
    d = p.schedule(ctx(s))
    check(s, d)
    assert preempted(d) == {"old"} and granted(d) == {"new"}
    # a job only marginally better does not displace a runner (10% hysteresis)
    a = job("a0", "a", work=10**6, done=1000.0)
    b = job("b0", "b", work=10**6, done=1050.0)
    s = state(topo, [app("a", [a]), app("b", [b])], running={"b0": {0}}, now=200)
    d = SlaqPolicy(epoch_s=100).schedule(ctx(s))
    check(s, d)
    assert not d.preemptions
