"""The agent's order inside an app (core/agent.py, pace_order): the jobs that cannot wait longest first,
then the others shortest first, consistently in the bids and in the leftover's virtual deadlines."""

from __future__ import annotations

import random

import pytest

from themis_slurm.core import agent as agent_module
from themis_slurm.core.agent import Agent, cannot_wait, pace_order
from themis_slurm.core.auction import greedy_fill
from themis_slurm.core.fairness import FairnessModel
from themis_slurm.core.job_facts import JobFactsCache
from themis_slurm.core.placement import Pool
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App, Job

H = 3600.0
TOPO = Topology.uniform(1, 2, 4)


def _cache() -> JobFactsCache:
    cache = JobFactsCache()
    cache.use(TOPO)
    return cache


def _ids(jobs: list[Job]) -> list[str]:
    return [j.id for j in jobs]


# one long job and three short ones, 1 GPU each: 13.5 h of work, run on a private share of 2 GPUs
LONG = Job("L", "a", 1, 10 * H)
SHORT = (Job("s1", "a", 1, 1 * H), Job("s2", "a", 1, 2 * H), Job("s3", "a", 1, 0.5 * H))
JOBS = [LONG, *SHORT]
PACE = 2.0  # the private share's work per second (2 GPUs)
REMAINING = 13.5 * H  # all of it waits


def test_a_long_job_that_would_end_late_behind_the_short_ones_goes_first() -> None:
    """T_id 10 h (the long job's run): behind the 3.5 h of short work at 2 GPUs (1.75 h) it would end at
    11.75 h, so it starts first; the short ones then go shortest first (2 h job: 10 h + 1.5 h ahead, at 2
    GPUs 5.75 h, + 2 h = 7.75 h: in time)."""
    order = pace_order(JOBS, _cache(), 0.0, 10 * H, PACE, REMAINING)
    assert _ids(order) == ["L", "s3", "s1", "s2"]


def test_with_room_every_job_goes_shortest_first() -> None:
    """With a private-share finish far enough (20 h), even the long job ends in time behind all the others."""
    order = pace_order(JOBS, _cache(), 0.0, 20 * H, PACE, REMAINING)
    assert _ids(order) == ["s3", "s1", "s2", "L"]


def test_an_app_behind_its_pace_keeps_its_fluid_finish_with_an_allowance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past its private-share finish every job is late against T_id; the finish kept is then the fluid one
    (13.5 h of work at 2 GPUs: 6.75 h) plus BEHIND_ALLOWANCE of the longest run. Without an allowance every
    job would end after 6.75 h behind the others, so the order is longest first (LPT); with half of it
    (6.75 + 5 = 11.75 h) the long job fits last, and the order is shortest first."""
    monkeypatch.setattr(agent_module, "BEHIND_ALLOWANCE", 0.0)
    assert _ids(pace_order(JOBS, _cache(), 12 * H, 10 * H, PACE, REMAINING)) == ["L", "s2", "s1", "s3"]
    monkeypatch.setattr(agent_module, "BEHIND_ALLOWANCE", 0.5)
    assert _ids(pace_order(JOBS, _cache(), 12 * H, 10 * H, PACE, REMAINING)) == ["s3", "s1", "s2", "L"]


def test_an_app_with_only_long_jobs_left_and_no_room_is_served_longest_first() -> None:
    """Behind its pace with three long jobs on a share of 3 GPUs: fluid finish 9 h, plus half the longest
    run 14 h; each job, behind the others, would end after that (the 8 h job at 19 / 3 + 8 = 14.3 h), so
    the order is longest remaining run first (LPT), the order that keeps the app's finish time. On one GPU
    the order cannot change the finish, and it is shortest first."""
    jobs = [Job("x", "a", 1, 9 * H), Job("y", "a", 1, 10 * H), Job("z", "a", 1, 8 * H)]
    assert _ids(pace_order(jobs, _cache(), 12 * H, 10 * H, 3.0, 27 * H)) == ["y", "x", "z"]
    assert _ids(pace_order(jobs, _cache(), 12 * H, 10 * H, 1.0, 27 * H)) == ["z", "x", "y"]


def test_running_work_delays_the_waiting_jobs() -> None:
    """Work the app's running jobs still have is done first at the same pace: 20 h of it at 2 GPUs takes 10 h,
    so with a 20 h finish the long job no longer fits behind the short ones and goes first."""
    order = pace_order(JOBS, _cache(), 0.0, 20 * H, PACE, REMAINING + 20 * H)
    assert _ids(order) == ["L", "s3", "s1", "s2"]


def test_ties_go_by_submit_time_then_id() -> None:
    """Equal remaining runs: earlier submit first, then the smaller id, in both parts of the order."""
    same = [Job("b", "a", 1, H, submit=5.0), Job("a", "a", 1, H, submit=5.0), Job("c", "a", 1, H, submit=1.0)]
    assert _ids(pace_order(same, _cache(), 0.0, 100 * H, PACE, 3 * H)) == ["c", "a", "b"]
    assert _ids(pace_order(same, _cache(), 100 * H, 1 * H, PACE, 3 * H)) == ["c", "a", "b"]


def test_no_work_to_pace_is_shortest_first() -> None:
    assert _ids(pace_order(JOBS, _cache(), 0.0, 0.0, 0.0, REMAINING)) == ["s3", "s1", "s2", "L"]


@pytest.mark.parametrize("seed", range(40))
def test_the_jobs_that_cannot_wait_are_exactly_those_that_would_end_late(seed: int) -> None:
    """cannot_wait against its definition, on random apps (wide gangs included, where a longer job is not
    always more urgent): a job goes first iff, behind every shorter job and every longer job that goes first,
    it would end after the room left; and in the resulting order every other job ends in time."""
    rng = random.Random(seed)
    cache = _cache()
    jobs = [Job(f"j{i}", "a", rng.choice([1, 1, 1, 2, 4]), rng.uniform(0.1, 10) * H, submit=float(rng.randrange(3)))
            for i in range(rng.randrange(1, 12))]  # fmt: skip
    facts = sorted(map(cache.get, jobs), key=lambda f: f.order)
    ahead = [sum(f.remaining for f in facts[:i]) for i in range(len(facts))]
    room, pace = rng.uniform(0, 30) * H, rng.uniform(0.5, 6)
    urgent = cannot_wait(facts, ahead, room, pace)
    assert list(urgent) == sorted(urgent, reverse=True)  # longest first
    for i, f in enumerate(facts):
        before = sum(facts[k].remaining for k in urgent if k > i)
        assert (i in urgent) == ((ahead[i] + before) / pace + f.run_left > room)
    order = [facts[k] for k in urgent] + [f for k, f in enumerate(facts) if k not in urgent]
    done = 0.0
    for f in order:
        if order.index(f) >= len(urgent):
            assert done / pace + f.run_left <= room + 1e-6
        done += f.remaining


def _agent(jobs: list[Job], now: float, homes: dict[str, frozenset[int]] | None = None) -> Agent:
    app = App("a", "u", 0.0, tuple(jobs), contention=4.0)  # a share of 2 of the 8 GPUs
    model = FairnessModel(TOPO, TOPO.size, job_facts=_cache())
    return Agent(app, model, now, 0.0, jobs, homes)


def test_the_agent_bids_and_the_leftover_serves_in_the_same_order() -> None:
    """The agent's bidding order is pace_order's; its virtual deadlines (Agent.lateness) follow that order,
    each job later than the one before; and the leftover's fill of one app hands out its GPUs in it."""
    agent = _agent(JOBS, 0.0)
    model = agent.model
    expect = pace_order(JOBS, _cache(), 0.0, model.t_id(agent.app), model.share_rate(agent.app), REMAINING)
    assert _ids(list(agent.jobs)) == _ids(expect) == ["L", "s3", "s1", "s2"]
    late = [agent.lateness(j) for j in agent.jobs]
    assert late == sorted(late, reverse=True) and len(set(late)) == len(late)
    pool = Pool(TOPO, frozenset(range(3)))
    got = greedy_fill([agent], pool, by="deadline")["a"]
    assert [g.job_id for g in got] == ["L", "s3", "s1"]


def test_lease_holders_stay_in_front_and_their_deadlines_follow_the_order() -> None:
    """A lease holder is renewed first (winning again means staying in place), then the others in pace
    order; the virtual deadlines still run along the whole order."""
    agent = _agent(JOBS, 0.0, {"s2": frozenset({0})})
    assert _ids(list(agent.jobs)) == ["s2", "L", "s3", "s1"]
    late = [agent.lateness(j) for j in agent.jobs]
    assert late == sorted(late, reverse=True)


def test_an_app_below_the_worst_may_finish_later_and_serve_its_short_jobs_first() -> None:
    """finish_rho 1.2 (T_id 10 h: finish by 12 h): the long job behind the 3.5 h of short work at 2 GPUs ends at
    11.75 h, in time, so the short jobs go first; at 1.0 it cannot wait (the first test)."""
    assert _ids(pace_order(JOBS, _cache(), 0.0, 10 * H, PACE, REMAINING, 1.2)) == ["s3", "s1", "s2", "L"]
    assert _ids(pace_order(JOBS, _cache(), 0.0, 10 * H, PACE, REMAINING, 1.0)) == ["L", "s3", "s1", "s2"]


def _round_orders(slack: float) -> tuple[float, dict[str, list[str]]]:
    """The finish rho and the bidding orders of a round with two apps on 8 GPUs: W, far behind (one 1-GPU
    job of 40 h waiting 20 h already), and A (the long and short jobs above, just arrived)."""
    from themis_slurm.core.arbiter import ArbiterConfig
    from themis_slurm.core.bidding import collect_pool, rank_by_rho
    from themis_slurm.core.round_state import RoundState
    from themis_slurm.core.state import ClusterState

    now = 20 * H
    worst = App("W", "u", 0.0, (Job("w", "W", 1, 40 * H),))
    mine = App("A", "u", now, tuple(Job(j.id, "A", 1, j.work, submit=now) for j in JOBS))
    state = ClusterState(TOPO, now, frozenset(range(8)), (), (worst, mine))
    rs = RoundState.start(state, ArbiterConfig(order_slack=slack), None)
    collect_pool(rs)
    rank_by_rho(rs)
    return rs.agents["A"]._finish_rho, {a: _ids(list(ag.jobs)) for a, ag in rs.agents.items()}


def test_the_round_gives_the_apps_below_its_worst_a_share_of_the_gap() -> None:
    """W's fluid rho: (20 h + 40 h at 1 GPU) / T_id 40 h = 1.5. With order_slack 0.5 every app may finish at
    1 + 0.5 x 0.5 = 1.25 x its T_id. A (share 4 GPUs: T_id 10 h, its long job's run) with its long job
    behind the 3.5 h of short work at 4 GPUs ends at 10.875 h: late against 10 h, in time against 12.5 h, so
    A serves its short jobs first; with order_slack 0 its long job goes first."""
    rho, orders = _round_orders(0.5)
    assert rho == pytest.approx(1.25)
    assert orders["A"] == ["s3", "s1", "s2", "L"]
    rho, orders = _round_orders(0.0)
    assert rho == 1.0 and orders["A"] == ["L", "s3", "s1", "s2"]
