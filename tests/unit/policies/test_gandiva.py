"""Gandiva: round-robin time-slicing over aligned quanta, affinity placement."""

from __future__ import annotations

from collections import Counter

from themis_slurm.core.topology import Topology
from themis_slurm.policies import GandivaPolicy

from .helpers import app, check, ctx, granted, job, preempted, running_jobs, state, step


def test_jobs_rotate_across_quanta() -> None:
    topo = Topology.uniform(1, 1, 2)
    jobs = [job(f"j{i}", "a" if i < 2 else "b", work=10**6, submit=i) for i in range(4)]
    s = state(topo, [app("a", jobs[:2]), app("b", jobs[2:])])
    p = GandivaPolicy(quantum_s=100)
    held: list[set[str]] = []
    for _ in range(4):
        d = p.schedule(ctx(s))
        check(s, d)
        wake = p.next_wakeup(s.now)
        assert wake is not None and abs(wake - (s.now + 100)) < 1e-6
        assert all(g.lease_expiry == wake for g in d.grants)
        s = step(s, d, wake - s.now)
        held.append(running_jobs(s))
    assert held == [{"j0", "j1"}, {"j2", "j3"}, {"j0", "j1"}, {"j2", "j3"}]
    assert "time-sliced" in d.apps["a"].note or "quantum" in d.apps["a"].note


def test_no_slicing_when_everything_fits() -> None:
    topo = Topology.uniform(1, 1, 4)
    s = state(topo, [app("a", [job("j0", "a"), job("j1", "a")])])
    p = GandivaPolicy(quantum_s=100)
    d = p.schedule(ctx(s))
    check(s, d)
    assert granted(d) == {"j0", "j1"} and all(g.lease_expiry == float("inf") for g in d.grants)
    assert p.next_wakeup(0.0) is None


def test_arrival_mid_quantum_waits_for_the_boundary() -> None:
    topo = Topology.uniform(1, 1, 1)
    s = state(
        topo, [app("a", [job("r", "a", work=10**6)]), app("b", [job("n", "b")])], running={"r": {0}}, now=130
    )
    p = GandivaPolicy(quantum_s=100)
    d = p.schedule(ctx(s))
    check(s, d)
    assert not d.preemptions and not d.grants
    assert p.next_wakeup(130) == 200
    s = step(s, d, 70)
    d = p.schedule(ctx(s))
    check(s, d)
    assert preempted(d) == {"r"} and granted(d) == {"n"}


def test_wide_gang_gets_its_turn() -> None:
    """A 2-GPU job queued behind 1-GPU jobs is not starved by staggered slices."""
    topo = Topology.uniform(1, 1, 2)
    jobs = [
        job("s0", "a", work=10**6, submit=0),
        job("s1", "a", work=10**6, submit=0),
        job("w", "b", gpus=2, work=10**6, submit=1),
    ]
    s = state(topo, [app("a", jobs[:2]), app("b", jobs[2:])])
    p = GandivaPolicy(quantum_s=100)
    seen: Counter[str] = Counter()
    for _ in range(4):
        d = p.schedule(ctx(s))
        s = step(s, d, p.next_wakeup(s.now) - s.now)
        seen.update(running_jobs(s))
    assert seen["w"] == 2 and seen["s0"] == 2 and seen["s1"] == 2


def test_affinity_prefers_nodes_running_same_size_jobs() -> None:
    topo = Topology.uniform(1, 2, 4)
    a = app("a", [job("two", "a", gpus=2), job("one", "a", gpus=1)])
    b = app("b", [job("new", "b", gpus=1)])
    s = state(topo, [a, b], running={"two": {0, 1}, "one": {4}})
    d = GandivaPolicy().schedule(ctx(s))
    check(s, d)
    assert dict(d.grants[0].nodes) == {"node2": 1}  # with the other 1-GPU job, not best-fit node1
    d2 = GandivaPolicy(affinity=False).schedule(ctx(s))
    assert dict(d2.grants[0].nodes) == {"node1": 1}
