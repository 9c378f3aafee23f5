"""Tiresias: 2D-LAS queues, preemption of lower queues, starvation promotion, consolidation."""

from __future__ import annotations

from themis_slurm.core.topology import Topology
from themis_slurm.policies import TiresiasPolicy

from .helpers import app, check, ctx, granted, job, preempted, state, step

TOPO = Topology.uniform(1, 1, 4)


def test_queues_follow_attained_service() -> None:
    p = TiresiasPolicy(thresholds=(100.0, 1000.0))
    assert [p.queue_of(job("x", "a", service=s)) for s in (0, 99, 100, 999, 5000)] == [0, 0, 1, 1, 2]


def test_new_short_job_preempts_long_running_one() -> None:
    long = job("long", "a", gpus=4, work=100000, service=50000)
    new = job("new", "b", gpus=2, work=100)
    s = state(TOPO, [app("a", [long]), app("b", [new])], running={"long": {0, 1, 2, 3}}, now=20000)
    d = TiresiasPolicy().schedule(ctx(s))
    check(s, d)
    assert preempted(d) == {"long"} and granted(d) == {"new"}
    assert "lower queue" in d.apps["a"].note


def test_no_preemption_within_a_queue() -> None:
    r = job("r", "a", gpus=4, work=100000, service=10)
    s = state(TOPO, [app("a", [r]), app("b", [job("new", "b")])], running={"r": {0, 1, 2, 3}}, now=10)
    d = TiresiasPolicy().schedule(ctx(s))
    check(s, d)
    assert not d.preemptions and not d.grants


def test_starved_job_is_promoted_and_runs() -> None:
    """b0 ran 100 s on 4 GPUs (queue 1), then waits; after 8 x 100 s it is promoted above a queue-1 runner."""
    p = TiresiasPolicy(thresholds=(300.0,), promote_knob=8.0)
    runner = job("r", "a", gpus=4, work=10**6, service=1000)
    starved = job("b0", "b", gpus=4, work=10**6, service=400)  # executed 100 s on 4 GPUs
    s = state(TOPO, [app("a", [runner]), app("b", [starved])], running={"r": {0, 1, 2, 3}}, now=1000)
    d = p.schedule(ctx(s))
    check(s, d)
    assert not d.grants  # both in queue 1: b0 waits (first seen waiting now)
    wake = p.next_wakeup(1000)
    assert wake is not None and abs(wake - 1800) < 1e-6  # 1000 + 8 x 100 s
    s = step(s, d, wake - 1000)
    d = p.schedule(ctx(s))
    check(s, d)
    assert preempted(d) == {"r"} and granted(d) == {"b0"}
    assert "promoted" in d.apps["b"].note


def test_demotion_wakeup_then_preemption() -> None:
    """A running queue-0 job crosses the threshold between events; the policy asks to be woken then."""
    p = TiresiasPolicy(thresholds=(1000.0,), promote_knob=0)
    r = job("r", "a", gpus=4, work=10**6, service=600)
    w = job("w", "b", gpus=4, work=10**6, service=0, submit=0)
    s = state(TOPO, [app("a", [r]), app("b", [w])], running={"r": {0, 1, 2, 3}}, now=150)
    d = p.schedule(ctx(s))
    assert not d.grants  # same queue: FIFO, no preemption
    wake = p.next_wakeup(150)
    assert wake is not None and abs(wake - 250) < 1e-6  # 400 GPU-s left at 4 GPUs
    s = step(s, d, wake - 150)
    d = p.schedule(ctx(s))
    check(s, d)
    assert preempted(d) == {"r"} and granted(d) == {"w"}


def test_sensitive_job_waits_for_a_consolidated_placement() -> None:
    topo = Topology.uniform(1, 2, 4)  # two nodes of 4
    blockers = [
        job("x1", "x", gpus=2, service=10**6),
        job("x2", "x", gpus=2, service=10**6, preemptible=False),
    ]
    vgg = job("vgg", "v", gpus=4, profile="vgg16", submit=1)
    s = state(topo, [app("x", blockers), app("v", [vgg])], running={"x1": {0, 1}, "x2": {4, 5}}, now=5)
    p = TiresiasPolicy(promote_knob=0)
    d = p.schedule(ctx(s))
    check(s, d)
    # 4 GPUs are free but split 2+2 across nodes: vgg preempts x1 (lower queue) to get a whole node,
    # and x1 restarts on the 2 GPUs left on node2 (a migration, work conservation)
    assert preempted(d) == {"x1"} and granted(d) == {"vgg", "x1"}
    grants = {g.job_id: g for g in d.grants}
    assert set(grants["vgg"].nodes) == {"node1"}
    assert grants["x1"].migrated and set(grants["x1"].nodes) == {"node2"}
    insensitive = job("res", "v", gpus=4, profile="resnet50", submit=1)
    s2 = state(
        topo, [app("x", blockers), app("v", [insensitive])], running={"x1": {0, 1}, "x2": {4, 5}}, now=5
    )
    d2 = p.schedule(ctx(s2))
    check(s2, d2)
    assert not d2.preemptions and granted(d2) == {"res"}  # relaxed: spreads over the free GPUs
