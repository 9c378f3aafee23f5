"""Every registered policy grants a job GPUs only on the nodes Slurm could start it on (Job.allowed_nodes).

The simulator runs the baselines on the same states as Themis; they all place through
:func:`themis_slurm.policies.fit.shape_fit` (BaselineScratchpad.fit), which restricts each search to the
job's allowed nodes, so none may grant a job where Slurm would refuse it, start a job allowed nowhere, or
preempt a running job for a start that cannot happen.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from themis_slurm.core.decision import Decision
from themis_slurm.core.placement import Pool
from themis_slurm.core.state import ClusterState
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import Job
from themis_slurm.policies import POLICIES, make_policy
from themis_slurm.policies.fit import shape_fit

from .helpers import app, check, ctx, job, state, step
from .test_properties import OPTIONS, random_state

TOPO = Topology.uniform(1, 3, 4)  # node1 = GPUs 0-3, node2 = 4-7, node3 = 8-11


def _off_allowed(s: ClusterState, d: Decision) -> list[str]:
    """The grants of `d` on a node their job may not use (empty: none)."""
    allowed = {j.id: j.allowed_nodes for a in s.apps for j in a.jobs}
    return [f"{g.job_id} on {dict(g.nodes)}, allowed {sorted(allowed[g.job_id] or ())}" for g in d.grants
            if allowed[g.job_id] is not None and not set(g.nodes) <= allowed[g.job_id]]  # fmt: skip


def _constrained() -> ClusterState:
    """node2 and half of node3 are held by B's long jobs; A's jobs may only use node3, node2 (busy) or
    node1 and node3 (an elastic job); C's job may run nowhere; D's jobs anywhere."""
    a = app("A", [job("a1", "A", 1, allowed_nodes={"node3"}), job("a2", "A", 4, allowed_nodes={"node2"}),
                  job("a3", "A", 4, elastic=True, allowed_nodes={"node1", "node3"})])  # fmt: skip
    b = app("B", [job("b1", "B", 4, work=1e6), job("b2", "B", 2, work=1e6)])
    c = app("C", [job("c1", "C", 1, allowed_nodes=frozenset())])
    d = app("D", [job(f"d{k}", "D", 1, submit=float(k)) for k in range(4)])
    return state(TOPO, [a, b, c, d], running={"b1": range(4, 8), "b2": (8, 9)}, now=1000.0, expiry=5000.0)


@pytest.mark.parametrize("name", list(POLICIES))
def test_every_policy_grants_only_on_allowed_nodes(name: str) -> None:
    """A few calls of each policy (at its wake-ups, or every 70 s): no grant off a job's allowed nodes, none
    to the job allowed nowhere; the decisions keep the usual invariants (check)."""
    p = make_policy(name, **OPTIONS.get(name, {}))
    s = _constrained()
    ever: set[str] = set()
    for _ in range(6):
        d = p.schedule(ctx(s))
        check(s, d)
        assert _off_allowed(s, d) == [], name
        ever |= {g.job_id for g in d.grants}
        wake = p.next_wakeup(s.now)
        s = step(s, d, min(70.0, wake - s.now) if wake is not None else 70.0)
    assert "c1" not in ever, name
    assert ever & {"a1", "a3"}, f"{name} starts some restricted job that fits"


def test_shape_fit_restricts_to_the_allowed_nodes_and_the_callers_within() -> None:
    pool = Pool(TOPO, {3, 4, 5, 6, 7})  # node1: GPU 3 only, the tightest fit for one GPU
    assert shape_fit(job("x", "X", 1), pool) == frozenset({3})
    assert shape_fit(job("x", "X", 1, allowed_nodes={"node2"}), pool) <= frozenset(range(4, 8))
    assert shape_fit(job("x", "X", 1, allowed_nodes={"node2"}), pool, within=["node1"]) is None
    assert shape_fit(job("x", "X", 2, allowed_nodes=frozenset()), pool) is None
    elastic = job("e", "E", 4, elastic=True, allowed_nodes={"node1"})
    assert shape_fit(elastic, pool, gpus=1) == frozenset({3}) and shape_fit(elastic, pool) is None


def _restrict(s: ClusterState, rng: random.Random) -> ClusterState:
    """`s` with random allowed sets: none, a random part of the nodes, nowhere."""
    nodes = list(s.topology.nodes)

    def pick() -> frozenset[str] | None:
        r = rng.random()
        if r < 0.4:
            return None
        return frozenset() if r < 0.5 else frozenset(rng.sample(nodes, rng.randint(1, len(nodes))))

    def restricted(j: Job) -> Job:
        return dataclasses.replace(j, allowed_nodes=pick())

    apps = tuple(dataclasses.replace(a, jobs=tuple(map(restricted, a.jobs))) for a in s.apps)
    return dataclasses.replace(s, apps=apps)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_random_runs_grant_only_on_allowed_nodes(seed: int) -> None:
    """Random small states with random allowed sets, a few calls of every policy: no grant off the allowed
    nodes, and the usual invariants."""
    rng = random.Random(seed)
    start = _restrict(random_state(rng), rng)
    for name in POLICIES:
        p = make_policy(name, **OPTIONS.get(name, {}))
        s = start
        for _ in range(4):
            d = p.schedule(ctx(s))
            check(s, d)
            assert _off_allowed(s, d) == [], name
            wake = p.next_wakeup(s.now)
            s = step(s, d, min(70.0, wake - s.now) if wake is not None else 70.0)
            if not s.apps:
                break


@pytest.mark.parametrize("x1_allowed", [None, frozenset()])
def test_fairshare_a_restricted_job_that_cannot_preempt_does_not_bar_a_wider_one(x1_allowed) -> None:
    """Y holds all 4 GPUs, twice its share of 2; X holds none. X's first job (1 GPU) preempts one of Y's
    jobs when it may run anywhere; allowed nowhere, it cannot start, and that must not stop X's 2-GPU job,
    which may run anywhere, from preempting for its share (a failure for lack of allowed nodes says
    nothing about a wider job's chances, unlike a failure for lack of GPUs)."""
    topo = Topology.uniform(1, 2, 2)
    x = app("X", [job("x1", "X", 1, submit=0.0, allowed_nodes=x1_allowed), job("x2", "X", 2, submit=1.0)])
    y = app("Y", [job(f"y{g}", "Y", 1, work=1e6) for g in range(4)])
    s = state(topo, [x, y], running={f"y{g}": (g,) for g in range(4)}, now=1000.0)
    d = make_policy("fairshare").schedule(ctx(s))
    check(s, d)
    assert {g.job_id for g in d.grants} == ({"x1"} if x1_allowed is None else {"x2"})
