"""Gavel's round mechanism in maxmin and ftf (policies/maxmin.py, RoundBook): rounds, resets, deficits."""

from __future__ import annotations

from dataclasses import replace

import pytest

from themis_slurm.core.topology import Topology
from themis_slurm.policies import MaxMinPolicy

from .helpers import app, check, ctx, granted, job, preempted, state, step

TOPO1 = Topology.uniform(1, 1, 1)
TOPO4 = Topology.uniform(1, 1, 4)


def test_priorities_time_received_and_deficits() -> None:
    """One GPU, a and b (X = 1/2 each). t=0: new jobs, a reset: both have received half a quantum (50), equal
    priority and deficit: a, first to arrive, runs. t=100: a has received 150, b 50: b runs. t=200: equal
    again: a. c arrives at 250, mid-round: it waits. t=300: a reset (c arrived): the deficits add what each
    was owed since t=0 (X x 300 = 150) minus what it got (a 200, b 100, c nothing yet), X becomes 1/3 each;
    all equal in priority, so the largest deficit runs: b (+50) before c (0) and a (-50)."""
    a, b = (
        app("a", [job("a0", "a", work=10**5)]),
        app("b", [job("b0", "b", work=10**5, submit=1.0)], arrival=1.0),
    )
    p = MaxMinPolicy(quantum_s=100.0)
    s = state(TOPO1, [a, b])
    ran = []
    for dt in (100.0, 100.0, 50.0):  # calls at t = 0, 100, 200; then on to 250
        d = p.schedule(ctx(s))
        check(s, d)
        ran.append(sorted(granted(d) | ({lease.job_id for lease in s.leases} - preempted(d))))
        s = step(s, d, dt)
    assert ran == [["a0"], ["b0"], ["a0"]]
    assert p.book.received == {"a0": 150.0, "b0": 150.0}  # a0's third round is not over yet
    c = app("c", [job("c0", "c", work=10**5, submit=250.0)], arrival=250.0)
    mid = replace(s, apps=(*s.apps, c))
    d = p.schedule(ctx(mid))
    check(mid, d)
    assert not d.grants and not d.preemptions and p.next_wakeup(250.0) == 300.0
    end = step(mid, d, 50.0)
    d = p.schedule(ctx(end))
    check(end, d)
    assert p.book.deficit == pytest.approx({"a0": -50.0, "b0": 50.0, "c0": 0.0})
    assert p.book.x == pytest.approx({"a0": 1 / 3, "b0": 1 / 3, "c0": 1 / 3})
    assert granted(d) == {"b0"} and preempted(d) == {"a0"}


def test_nothing_starts_mid_round_and_a_round_ends_when_its_jobs_are_done() -> None:
    """4 GPUs: a's 4-GPU gang for the round, b waits. At t=30 a 1-GPU job arrives to 0 free GPUs: nothing.
    Once a finishes (t=60) none of the round's jobs runs: the next call starts a round at once."""
    a = app("a", [job("a0", "a", gpus=4, work=60.0)])
    b = app("b", [job("b0", "b", gpus=4, work=10**4)], arrival=0.0)
    p = MaxMinPolicy(quantum_s=100.0)
    s = state(TOPO4, [a, b])
    d = p.schedule(ctx(s))
    assert granted(d) == {"a0"} and p.next_wakeup(0.0) == 100.0
    s = step(s, d, 30.0)
    late = app("c", [job("c0", "c", work=10**4, submit=30.0)], arrival=30.0)
    s2 = state(TOPO4, [*s.apps, late], running={"a0": {0, 1, 2, 3}}, now=30.0, expiry=100.0)
    d = p.schedule(ctx(s2))
    check(s2, d)
    assert not d.grants and not d.preemptions
    s3 = step(s2, d, 30.0)  # a0 finishes at t=60
    assert {j.id for ap in s3.apps for j in ap.jobs} == {"b0", "c0"}
    d = p.schedule(ctx(s3))
    check(s3, d)
    # the narrow job has the larger X (1 against 3/4) and goes first; the gang does not fit beside it
    assert granted(d) == {"c0"} and p.book.round_start == 60.0 and p.next_wakeup(60.0) == 160.0
