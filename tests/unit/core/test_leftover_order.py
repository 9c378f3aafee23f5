"""The leftover's default order: earliest virtual deadline first (Agent.lateness, fairness.virtual_lateness).

An app's private-share run does its whole work W in T_id; a waiting job's virtual finish time is when that
run would have done everything but the waiting work after the job (in the agent's bidding order). The
leftover serves the job latest against it first. Profile "none" everywhere (placement factor 1), one 4-GPU
node, so every number below is computed by hand.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from themis_slurm.core.agent import Agent
from themis_slurm.core.arbiter import ArbiterConfig
from themis_slurm.core.auction import greedy_fill
from themis_slurm.core.fairness import FairnessModel, virtual_lateness
from themis_slurm.core.placement import Pool
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App, Job

ONE_NODE = Topology.uniform(1, 1, 4)  # 4 GPUs on one node


def test_virtual_lateness_by_hand() -> None:
    """W = 14400 GPU-s in T_id = 7200 s: with 3600 GPU-s of waiting work after the job, the private-share
    run finishes it at 7200 x (1 - 3600 / 14400) = 5400 s; at 3600 s the job is 1800 s early (-1800).
    No work to estimate: never late."""
    assert virtual_lateness(3600.0, 7200.0, 14400.0, 3600.0) == pytest.approx(-1800.0)
    assert virtual_lateness(7200.0, 7200.0, 14400.0, 0.0) == pytest.approx(0.0)  # the last job, due now
    assert virtual_lateness(3600.0, 7200.0, 0.0, 0.0) == -math.inf


def _two_sweeps(now: float = 1800.0) -> tuple[Agent, Agent]:
    """X (arrived at 0) and Y (at 600) with four 1-GPU jobs of 3600 GPU-s each; C = 4, N = 1:
    T_id = 14400 / min(4, 4) = 3600 and W = 14400 for both, so lateness = elapsed - 3600 + after / 4.
      X, elapsed 1800: after = 10800, 7200, 3600, 0 -> 900, 0, -900, -1800.
      Y, elapsed 1200:                                 300, -600, -1500, -2400.
    """
    model = FairnessModel(ONE_NODE, 4)
    x = App("X", "u", 0.0, tuple(Job(f"x{k}", "X", 1, 3600.0, profile="none") for k in range(4)))
    y = App("Y", "u", 600.0, tuple(Job(f"y{k}", "Y", 1, 3600.0, profile="none", submit=600.0) for k in range(4)))
    return Agent(x, model, now, 0.0, x.jobs), Agent(y, model, now, 0.0, y.jobs)


def test_agent_lateness_by_hand() -> None:
    ax, ay = _two_sweeps()
    assert [ax.lateness(j) for j in ax.jobs] == pytest.approx([900.0, 0.0, -900.0, -1800.0])
    assert [ay.lateness(j) for j in ay.jobs] == pytest.approx([300.0, -600.0, -1500.0, -2400.0])


@pytest.mark.parametrize(("free", "expected"), [(1, {"X": 1}), (2, {"X": 1, "Y": 1}), (3, {"X": 2, "Y": 1}),
                                                 (4, {"X": 2, "Y": 2})])  # fmt: skip
def test_greedy_fill_by_deadline_serves_the_latest_job_first(free: int, expected: dict[str, int]) -> None:
    """Latest first: x0 (900), y0 (300), x1 (0), y1 (-600), whatever order the agents come in."""
    ax, ay = _two_sweeps()
    for agents in ([ax, ay], [ay, ax]):
        pool = Pool(ONE_NODE, range(free))
        got = greedy_fill(agents, pool, by="deadline")
        assert {aid: len(gs) for aid, gs in got.items()} == expected
        assert pool.size == 0


def _holder_and_waiter(holder_arrival: float) -> tuple[Agent, Agent]:
    """B holds a 4-GPU job on GPUs 0-3 (its lease expires now, 1000 s; 1000 of its 4000 GPU-s done); A waits
    with the same job, arrived at 0. N = 2: T_id = 4000 / min(4, 4 / 2) = 2000 for both; one job each, so
    lateness = elapsed - T_id: A 1000 - 2000 = -1000, B 1000 - holder_arrival - 2000."""
    model = FairnessModel(ONE_NODE, 4)
    b = App("B", "u", holder_arrival, (Job("b1", "B", 4, 4000.0, done=1000.0, profile="none",
                                            submit=holder_arrival),), contention=2)  # fmt: skip
    a = App("A", "u", 0.0, (Job("a1", "A", 4, 4000.0, profile="none"),), contention=2)
    home = {"b1": frozenset(range(4))}
    return Agent(a, model, 1000.0, 0.0, a.jobs), Agent(b, model, 1000.0, 0.0, b.jobs, home, 0.05)


@pytest.mark.parametrize(("holder_arrival", "restart_s", "winner"), [
    (100.0, 30.0, "A"),    # B -1100, A -1000: A is 100 s later against its pace, more than a restart
    (100.0, 200.0, "B"),   # ... but not more than a 200 s restart: B keeps its GPUs
    (0.0, 30.0, "B"),      # equally late: the holder keeps its GPUs (a start pays the restart)
    (-500.0, 0.0, "B"),    # B arrived first (-500): B is the later one
])  # fmt: skip
def test_a_holder_gives_way_only_to_a_job_later_by_more_than_the_restart(holder_arrival: float, restart_s: float,
                                                                         winner: str) -> None:  # fmt: skip
    aa, ab = _holder_and_waiter(holder_arrival)
    assert aa.lateness(aa.jobs[0]) == pytest.approx(-1000.0)
    assert ab.lateness(ab.jobs[0]) == pytest.approx(1000.0 - holder_arrival - 2000.0)
    got = greedy_fill([aa, ab], Pool(ONE_NODE, range(4)), by="deadline", restart_s=restart_s)
    assert list(got) == [winner] and sorted(got[winner][0].gpus) == [0, 1, 2, 3]


def test_the_deadline_order_does_not_change_as_jobs_run_or_wait() -> None:
    """The reason for the order: between two single-job apps the earlier virtual deadline (arrival + T_id)
    keeps first place at every later round, whoever holds the GPUs, so they do not take turns (worst rho
    first swaps them as soon as the waiter's rho passes the holder's). A 10 minutes later: still -1000 -
    (-1100) = 100 s ahead of B."""
    for now in (1000.0, 1600.0, 2200.0):
        model = FairnessModel(ONE_NODE, 4)
        a = App("A", "u", 0.0, (Job("a1", "A", 4, 4000.0, profile="none"),), contention=2)
        b = App("B", "u", 100.0, (Job("b1", "B", 4, 4000.0, done=now - 100.0 - 900.0 + 1000.0, profile="none",
                                        submit=100.0),), contention=2)  # fmt: skip
        la = Agent(a, model, now, 0.0, a.jobs).lateness(a.jobs[0])
        lb = Agent(b, model, now, 0.0, b.jobs).lateness(b.jobs[0])
        assert la - lb == pytest.approx(100.0)


def test_the_config_names_the_bad_leftover_order() -> None:
    assert ArbiterConfig().leftover_order == "deadline"
    with pytest.raises(ValueError, match="leftover_order must be one of deadline, rho, got 'fifo'"):
        ArbiterConfig(leftover_order="fifo")


@settings(max_examples=200, deadline=None)
@given(
    works=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    dones=st.lists(st.integers(0, 39), min_size=6, max_size=6),
    which=st.integers(0, 5),
    report=st.integers(0, 39),
    elapsed=st.integers(0, 20000),
)
def test_a_progress_report_never_makes_an_app_more_urgent(works: list[int], dones: list[int], which: int,
                                                         report: int, elapsed: int) -> None:  # fmt: skip
    """A report only moves a job's done forward (core.workload.refine_by_progress: work, hence T_id and W,
    unchanged). Then no position in the app's list of latenesses, latest first, gets later: the remaining
    work after the k-th position is the sum of the largest remaining works (core/agent.py _derive), which a
    smaller value can only lower, even when the report changes which jobs cannot wait and so the bidding
    order. So a report cannot buy a user an earlier place in the leftover."""
    def app(jobs: tuple[Job, ...]) -> list[float]:
        a = App("S", "u", 0.0, jobs)
        ag = Agent(a, FairnessModel(ONE_NODE, 4), float(elapsed), 0.0, a.jobs)
        return sorted((ag.lateness(j) for j in ag.jobs), reverse=True)

    jobs = tuple(Job(f"s{k}", "S", 1, 600.0 * w, done=600.0 * min(d, w - 1) / 2, profile="none")
                 for k, (w, d) in enumerate(zip(works, dones, strict=False)))  # fmt: skip
    k = which % len(jobs)
    j = jobs[k]
    moved = Job(j.id, "S", 1, j.work, done=max(j.done, min(600.0 * report, j.work * 0.95)), profile="none")
    before, after = app(jobs), app(jobs[:k] + (moved,) + jobs[k + 1:])
    assert all(b2 <= b1 + 1e-6 for b1, b2 in zip(before, after, strict=True))
