"""FIFO: strict arrival order with head-of-line blocking. SRTF: shortest remaining time, preemptive."""

from __future__ import annotations

from themis_slurm.core.topology import Topology
from themis_slurm.policies import FifoPolicy, SrtfPolicy

from .helpers import app, check, ctx, granted, job, preempted, state

TOPO = Topology.uniform(1, 1, 4)  # one node, 4 GPUs


def test_fifo_serves_apps_by_arrival_then_jobs_by_submit() -> None:
    a = app("a", [job("a1", "a", submit=5), job("a0", "a", submit=1)], arrival=10)
    b = app("b", [job("b0", "b", gpus=2, submit=0)], arrival=0)
    s = state(TOPO, [a, b])
    d = FifoPolicy().schedule(ctx(s))
    check(s, d)
    assert granted(d) == {"b0", "a0", "a1"}
    assert d.apps["b"].rank == 1 and d.apps["a"].rank == 2


def test_fifo_head_of_line_blocks_without_backfill() -> None:
    a = app("a", [job("a0", "a", gpus=3, submit=0)], arrival=0)
    b = app("b", [job("b0", "b", gpus=1, submit=1)], arrival=1)
    s = state(TOPO, [app("r", [job("r0", "r", gpus=2)]), a, b], running={"r0": {0, 1}})
    d = FifoPolicy().schedule(ctx(s))
    check(s, d)
    assert not d.grants  # a0 needs 3, only 2 free; b0 would fit but must not jump the queue
    assert "no backfill" in d.apps["b"].note
    assert not d.preemptions


def test_srtf_starts_shortest_first() -> None:
    jobs = [
        job("long", "a", work=9000),
        job("mid", "a", work=5000, gpus=2),
        job("short", "b", work=100, gpus=2),
    ]
    s = state(TOPO, [app("a", jobs[:2]), app("b", jobs[2:])])
    d = SrtfPolicy().schedule(ctx(s))
    check(s, d)
    assert granted(d) == {"short", "mid"}


def test_srtf_preempts_longest_running_for_a_shorter_job() -> None:
    r = [job("r_long", "a", gpus=2, work=10000), job("r_short", "a", gpus=2, work=50)]
    new = job("new", "b", gpus=2, work=500)
    s = state(TOPO, [app("a", r), app("b", [new])], running={"r_long": {0, 1}, "r_short": {2, 3}})
    d = SrtfPolicy().schedule(ctx(s))
    check(s, d)
    assert preempted(d) == {"r_long"} and granted(d) == {"new"}
    assert "less remaining time" in d.apps["a"].note


def test_srtf_does_not_preempt_shorter_or_unpreemptible_jobs() -> None:
    r = [job("r0", "a", gpus=4, work=10000, preemptible=False)]
    s = state(TOPO, [app("a", r), app("b", [job("new", "b", work=1)])], running={"r0": {0, 1, 2, 3}})
    d = SrtfPolicy().schedule(ctx(s))
    check(s, d)
    assert not d.preemptions and not d.grants
