"""Max-min fairness of GPU time across apps, time-sliced over rounds (Gavel-style), on small cases."""

from __future__ import annotations

import pytest

from themis_slurm.core.topology import Topology
from themis_slurm.policies import MaxMinPolicy
from themis_slurm.policies.fairshare import job_time_fractions, water_fill
from themis_slurm.policies.maxmin import time_fractions

from .helpers import app, check, ctx, job, state, step

TOPO4 = Topology.uniform(1, 1, 4)  # 4 GPUs on one node


def test_time_fractions_are_max_min_over_apps_then_jobs() -> None:
    a = [job("a0", "a", gpus=4), job("a1", "a", gpus=4)]
    b = [job("b0", "b", gpus=1)]
    x = time_fractions({"a": a, "b": b}, 4)
    # b wants 1 GPU (< the 2 of an equal split) and gets it; a gets 3 of 4 GPUs, 1.5 per 4-GPU job
    assert x == {"b0": 1.0, "a0": pytest.approx(1.5 / 4), "a1": pytest.approx(1.5 / 4)}


def _by_water_fill(share: float, jobs) -> dict[str, float]:
    """The definition: water-fill the app's share over its jobs' widths, X_j = min(1, s_j / width_j)."""
    per_job = water_fill(share, {j.id: float(j.gpus) for j in jobs})
    return {j.id: min(1.0, per_job[j.id] / j.gpus) for j in jobs}


def test_job_time_fractions_are_exactly_the_water_fill() -> None:
    """The fast path gives the very floats of the definition, for shares below, at and above the demand."""
    import random

    rng = random.Random(5)
    for case in range(400):
        widths = [rng.choice([1, 1, 1, 2, 2, 3, 4, 8]) for _ in range(rng.randint(1, 30))]
        if case % 3 == 0:  # one width for all (a sweep of one-GPU jobs): the path without a sort
            widths = [widths[0]] * len(widths)
        jobs = [job(f"j{case}_{k:02d}", "a", gpus=w) for k, w in enumerate(widths)]
        total = sum(widths)
        for share in (0.0, 1e-12, rng.uniform(0, total), rng.uniform(0, 3), float(total), total + 0.5,
                      total / 3.0, 0.1 * rng.randint(1, 10 * total)):  # fmt: skip
            out: dict[str, float] = {}
            job_time_fractions(share, jobs, out)
            assert out == _by_water_fill(share, jobs), (widths, share)


def _run(apps, rounds: int, quantum: float = 100.0) -> dict[str, float]:
    """GPU-seconds each app attained over `rounds` quanta (policy called at every boundary)."""
    s = state(TOPO4, apps)
    p = MaxMinPolicy(quantum_s=quantum)
    service = dict.fromkeys((a.id for a in apps), 0.0)
    for _ in range(rounds):
        d = p.schedule(ctx(s))
        check(s, d)
        assert p.next_wakeup(s.now) == pytest.approx(s.now + quantum)
        s = step(s, d, quantum)
        for a in s.apps:
            service[a.id] = sum(j.service for j in a.jobs)
    return service


def test_two_whole_cluster_gangs_share_time_equally() -> None:
    """4 GPUs, two apps each with a 4-GPU gang: equal shares (2 GPUs) are below a gang, so only time-slicing
    can be fair. Instantaneous fair share would run one gang to the end; max-min alternates rounds."""
    apps = [app(a, [job(f"{a}0", a, gpus=4, work=10**7)], arrival=0.0) for a in "ab"]
    service = _run(apps, rounds=10)
    assert service["a"] == service["b"] == 5 * 4 * 100.0


def test_unequal_demands_get_water_filled_time() -> None:
    """a: one 4-GPU gang (X = 3/4); b: one 1-GPU job (X = 1: its demand is below an equal split). They cannot
    run together on 4 GPUs, so the rounds split between them by priority X / received."""
    apps = [app("a", [job("a0", "a", gpus=4, work=10**7)]), app("b", [job("b0", "b", gpus=1, work=10**7)])]
    service = _run(apps, rounds=12)
    assert service["a"] > 0 and service["b"] > 0
    total_rounds = 12
    a_rounds = service["a"] / (4 * 100.0)
    b_rounds = service["b"] / (1 * 100.0)
    assert a_rounds + b_rounds == pytest.approx(total_rounds)
    assert a_rounds >= 0.4 * total_rounds   # far from FIFO-like starvation of the wide gang


def test_no_preemption_between_boundaries() -> None:
    apps = [app("a", [job("a0", "a", gpus=4, work=10**7)])]
    s = state(TOPO4, apps, running={"a0": {0, 1, 2, 3}}, now=150.0)
    s2 = state(TOPO4, [*apps, app("b", [job("b0", "b", gpus=4, work=10**7, submit=150.0)])],
               running={"a0": {0, 1, 2, 3}}, now=150.0)
    for st in (s, s2):
        d = MaxMinPolicy(quantum_s=100.0).schedule(ctx(st))
        check(st, d)
        assert not d.preemptions   # a newcomer mid-round waits for the boundary


def test_each_app_reports_why_its_first_waiting_job_waits() -> None:
    """The AppRecord of an app with waiting jobs names the reason of its first job that holds no GPUs
    (BaselineScratchpad.explain_waiting): its time-share priority and the next round boundary."""
    apps = [app("a", [job("a0", "a", gpus=4, work=10**6), job("a1", "a", gpus=4, work=10**6)]),
            app("b", [job("b0", "b", gpus=4, work=10**6)])]  # fmt: skip
    s = state(TOPO4, apps)
    d = MaxMinPolicy(quantum_s=100.0).schedule(ctx(s))
    check(s, d)
    started = {g.job_id for g in d.grants}
    assert len(started) == 1
    waits = 0
    for a in apps:
        waiting = [j for j in a.jobs if j.id not in started]
        note = d.apps[a.id].note
        if waiting:
            waits += 1
            assert f"{len(waiting)} waiting (priority " in note and "next round at t=100)" in note, note
        else:
            assert "waiting" not in note, note
    assert waits >= 1
