"""Instantaneous fair share per app (policy fairshare): water-filling, equal GPUs, preemption with hysteresis."""

from __future__ import annotations

import pytest

from themis_slurm.core.topology import Topology
from themis_slurm.policies import FairSharePolicy
from themis_slurm.policies.fairshare import water_fill

from .helpers import app, check, ctx, job, state, step

TOPO = Topology.uniform(1, 2, 4)  # 8 GPUs


def test_water_fill() -> None:
    assert water_fill(8, {"a": 10, "b": 10}) == {"a": 4, "b": 4}
    assert water_fill(8, {"a": 1, "b": 10, "c": 10}) == {"a": 1, "b": 3.5, "c": 3.5}
    assert water_fill(8, {"a": 0, "b": 2}) == {"a": 0, "b": 2}


def _held(s, d) -> dict[str, int]:
    out: dict[str, int] = {}
    jobs = {j.id: j.app_id for a in s.apps for j in a.jobs}
    for g in d.grants:
        out[jobs[g.job_id]] = out.get(jobs[g.job_id], 0) + len(g.gpus)
    return out


def test_equal_gpus_per_app_when_all_want_more() -> None:
    apps = [app(a, [job(f"{a}{i}", a, submit=i) for i in range(8)], arrival=k) for k, a in enumerate("abc")]
    s = state(TOPO, apps)
    d = FairSharePolicy().schedule(ctx(s))
    check(s, d)
    held = _held(s, d)
    assert sum(held.values()) == 8 and max(held.values()) - min(held.values()) <= 1
    assert "fair share 2.7" in d.apps["a"].note


def test_work_conserving_beyond_share() -> None:
    s = state(TOPO, [app("a", [job(f"a{i}", "a") for i in range(8)]), app("b", [job("b0", "b")])])
    d = FairSharePolicy().schedule(ctx(s))
    check(s, d)
    assert _held(s, d) == {"a": 7, "b": 1}


def test_newcomer_preempts_back_to_equal_shares_and_no_thrash() -> None:
    a = app("a", [job(f"a{i}", "a", work=10**6) for i in range(8)])
    running = {f"a{i}": {i} for i in range(8)}
    s = state(
        TOPO, [a, app("b", [job(f"b{i}", "b", work=10**6) for i in range(8)])], running=running, now=1000
    )
    p = FairSharePolicy(min_run_s=300)
    d = p.schedule(ctx(s))
    check(s, d)
    assert len(d.preemptions) == 4 and _held(s, d) == {"b": 4}
    s = step(s, d, 10)
    for _ in range(3):  # stable: nobody takes GPUs back
        d = p.schedule(ctx(s))
        check(s, d)
        assert not d.preemptions and not d.grants
        s = step(s, d, 500)


def test_recently_started_jobs_are_protected_until_min_run() -> None:
    a = app("a", [job(f"a{i}", "a", work=10**6) for i in range(8)])
    running = {f"a{i}": {i} for i in range(8)}
    s = state(
        TOPO,
        [a, app("b", [job("b0", "b", work=10**6)])],
        running=running,
        now=100,
        starts={f"a{i}": 0 for i in range(8)},
    )
    p = FairSharePolicy(min_run_s=300)
    d = p.schedule(ctx(s))
    check(s, d)
    assert not d.preemptions
    assert p.next_wakeup(100) == pytest.approx(300)
    s = step(s, d, 200)
    d = p.schedule(ctx(s))
    check(s, d)
    assert len(d.preemptions) == 1 and _held(s, d) == {"b": 1}
