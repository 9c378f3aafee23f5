"""rho = T_sh / T_id and the contention clock."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from themis_slurm.core.fairness import ContentionClock, FairnessModel, job_throughput, shared_finish
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App, Job, job_path


def model(gpus: int = 8, islands: int = 1) -> FairnessModel:
    topo = Topology.uniform(1, gpus // 4, 4, islands)
    return FairnessModel(topo, topo.size)


def test_t_id_uses_the_share_or_max_parallelism() -> None:
    m = model(8)
    big = App("a", "u", 0.0, (Job("j", "a", gpus=8, work=8000.0, profile="none"),), contention=4)
    assert m.t_id(big) == pytest.approx(8000 / 2)  # share 8/4 = 2 GPUs
    small = App("b", "u", 0.0, (Job("k", "b", gpus=1, work=1000.0, profile="none"),), contention=2)
    assert m.t_id(small) == pytest.approx(1000 / 1)  # cannot use its 4-GPU share


def test_t_id_uses_the_best_placement_the_hardware_allows() -> None:
    m = model(8)
    app = App("a", "u", 0.0, (Job("j", "a", gpus=8, work=8000.0, profile="vgg16"),), contention=1)
    # an 8-GPU gang on 4-GPU nodes spans machines: factor 0.72 even on a private cluster
    assert m.t_id(app) == pytest.approx(8000 / (8 * 0.72))


def test_rho_under_allocations_and_with_none() -> None:
    m = model(8)
    app = App("a", "u", 0.0, (Job("j", "a", gpus=4, work=4000.0, done=1000.0, profile="none"),), contention=2)
    tid = 4000 / 4
    assert m.rho(app, 500.0, 4.0) == pytest.approx((500 + 3000 / 4) / tid)
    none = m.rho(app, 500.0, 0.0)
    assert math.isfinite(none) and none == pytest.approx((500 + 3000) / 0.1 / tid)
    assert none == pytest.approx(10 * m.rho(app, 500.0, 1.0))  # exactly 10x one GPU, whatever the elapsed time
    assert m.rho(app, 500.0, 0.05) == pytest.approx(none)  # below the floor counts as nothing
    assert none >= m.rho(app, 500.0, 0.1) >= m.rho(app, 500.0, 1.0)  # T_sh never rises with throughput


def test_long_wait_keeps_the_first_gpu_worth_log_10() -> None:
    """The starvation spiral: a small app that waited long must still value its first GPU highly.

    A 1-GPU job of 4 h that has waited 100 h: flooring the throughput alone gave rho(nothing) =
    (100 + 40) h / T_id against (100 + 4) h / T_id with a GPU, a gain of only log(140/104) = 0.30, less
    than the first GPU of any app with nothing whose remaining work dominates (about log 10 = 2.30).
    """
    m = model(8)
    small = App("s", "u", 0.0, (Job("j", "s", gpus=1, work=4 * 3600.0, profile="none"),), contention=8)
    big = App("b", "u", 0.0, tuple(Job(f"k{i}", "b", 1, 100 * 3600.0, profile="none") for i in range(4)), contention=8)
    now = 100 * 3600.0
    gain_small = math.log(m.rho(small, now, 0.0) / m.rho(small, now, 1.0))
    gain_big = math.log(m.rho(big, now, 0.0) / m.rho(big, now, 1.0))
    assert gain_small == pytest.approx(math.log(10))
    assert gain_big == pytest.approx(math.log(10))
    assert m.rho(App("e", "u", 0.0), 10.0, 0.0) == 1.0


def test_finished_work_keeps_t_id_stable() -> None:
    m = model(8)
    a1 = App("a", "u", 0.0, (Job("j1", "a", 2, 2000.0), Job("j2", "a", 2, 2000.0)), contention=2)
    a2 = App("a", "u", 0.0, (Job("j2", "a", 2, 2000.0),), contention=2, finished_work=2000.0, peak_gpus=4)
    assert m.t_id(a1) == pytest.approx(m.t_id(a2))


def test_job_throughput_follows_placement() -> None:
    topo = Topology.uniform(2, 1, 4)
    job = Job("j", "a", 4, 100.0, profile="vgg16")
    assert job_throughput(job, [0, 1, 2, 3], topo) == 4.0
    assert job_throughput(job, [0, 1, 4, 5], topo) == pytest.approx(4 * 0.52)


def test_contention_clock_time_average() -> None:
    c = ContentionClock.start(0.0, 2)
    c = c.advance(10.0, 4)  # N=2 for 10 s
    c = c.advance(20.0, 1)  # N=4 for 10 s
    assert c.average == pytest.approx(3.0)
    assert ContentionClock.start(5.0, 0).average == 1.0


@given(
    work=st.floats(1, 1e6),
    done=st.floats(0, 1e6),
    x1=st.floats(0, 64),
    x2=st.floats(0, 64),
    elapsed=st.floats(0, 1e5),
)
def test_rho_decreases_with_throughput(work: float, done: float, x1: float, x2: float, elapsed: float) -> None:
    m = model(8)
    app = App("a", "u", 0.0, (Job("j", "a", 8, work, done=min(done, work)),), contention=3)
    lo, hi = sorted((x1, x2))
    assert m.rho(app, elapsed, hi) <= m.rho(app, elapsed, lo) + 1e-12
    assert math.isfinite(m.rho(app, elapsed, 0.0))


def test_job_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="gpus must be >= 1"):
        Job("j", "a", 0, 1.0)
    with pytest.raises(ValueError, match="work must be > 0"):
        Job("j", "a", 1, 0.0)
    with pytest.raises(ValueError, match="must equal gpus"):
        Job("j", "a", 8, 1.0, gpus_per_node=4, nodes=3)
    with pytest.raises(ValueError, match="belongs to app"):
        App("b", "u", 0.0, (Job("j", "a", 1, 1.0),))


H = 3600.0  # one hour, in seconds


def test_t_id_is_floored_by_the_longest_job() -> None:
    """64 GPUs, N = 1: jobs of 5 h and 1 h on 1 GPU each. Fluid time 6 h / min(2, 64) = 3 h, but the 5-hour
    job alone needs 5 h on its own GPU: T_id = 5 h."""
    m = model(64)
    app = App("a", "u", 0.0, (Job("long", "a", 1, 5 * H, profile="none"), Job("short", "a", 1, H, profile="none")))
    assert m.t_id(app) == pytest.approx(5 * H)
    no_floor = App("b", "u", 0.0, (Job("x", "b", 2, 6 * H, profile="none"),))  # one 2-GPU gang: 6 h / 2
    assert m.t_id(no_floor) == pytest.approx(3 * H)


def test_job_path_counts_the_submit_offset() -> None:
    """Submitted 1 h after the app's arrival, 2 h of work on 1 GPU: the job cannot end before 3 h. As the
    app's only job, fluid T_id is 2 h, so the path sets T_id = 3 h."""
    job = Job("j", "a", 1, 2 * H, profile="none", submit=100.0 + H)
    assert job_path(job, 100.0) == pytest.approx(3 * H)
    assert job_path(Job("k", "a", 2, 2 * H), 100.0, factor=0.5) == pytest.approx(2 * H)  # 2 h / (2 GPUs x 0.5)
    assert job_path(Job("early", "a", 1, H, submit=0.0), 100.0) == pytest.approx(H)  # no negative offset
    assert model(64).t_id(App("a", "u", 100.0, (job,))) == pytest.approx(3 * H)


def test_finished_path_keeps_t_id_after_the_long_job_leaves() -> None:
    """The 5-hour job has finished: only the 1-hour job is left. finished_work = 5 h and peak_gpus = 2
    keep the fluid time at 6 h / 2 = 3 h; finished_path = 5 h keeps the floor: T_id stays 5 h."""
    m = model(64)
    short = (Job("short", "a", 1, H, profile="none"),)
    kept = App("a", "u", 0.0, short, finished_work=5 * H, peak_gpus=2, finished_path=5 * H)
    assert m.t_id(kept) == pytest.approx(5 * H)
    forgot = App("a", "u", 0.0, short, finished_work=5 * H, peak_gpus=2)
    assert m.t_id(forgot) == pytest.approx(3 * H)


def test_shared_finish_is_floored_by_the_remaining_path() -> None:
    """T_sh = elapsed + max(remaining / X, path): 100 + max(1000 / 10, 500) = 600 = 100 + max(1000 / 2, 500);
    X = 1: 100 + 1000 = 1100. No allocation: (100 + max(1000, 500)) / 0.1 = 11000."""
    assert shared_finish(100.0, 1000.0, 10.0, 0.1, path=500.0) == pytest.approx(600.0)
    assert shared_finish(100.0, 1000.0, 2.0, 0.1, path=500.0) == pytest.approx(600.0)
    assert shared_finish(100.0, 1000.0, 1.0, 0.1, path=500.0) == pytest.approx(1100.0)
    assert shared_finish(100.0, 1000.0, 0.0, 0.1, path=500.0) == pytest.approx(11000.0)
    assert shared_finish(100.0, 1000.0, 0.0, 0.1, path=2000.0) == pytest.approx(21000.0)  # path > remaining


def test_throughput_beyond_remaining_over_path_does_not_lower_rho() -> None:
    """The 5 h + 1 h app (T_id = 5 h) one hour after arrival: remaining 6 h, path 5 h, so X = 6/5 = 1.2
    already finishes at the path: rho = (1 h + 5 h) / 5 h = 1.2 for X = 1.2, 2 or 64; X = 1:
    (1 h + 6 h) / 5 h = 1.4; nothing: (1 h + 6 h) / 0.1 / 5 h = 14."""
    m = model(64)
    app = App("a", "u", 0.0, (Job("long", "a", 1, 5 * H, profile="none"), Job("short", "a", 1, H, profile="none")))
    assert app.remaining_path == pytest.approx(5 * H)
    assert [m.rho(app, H, x) for x in (1.2, 2.0, 64.0)] == pytest.approx([1.2, 1.2, 1.2])
    assert m.rho(app, H, 1.0) == pytest.approx(1.4)
    assert m.rho(app, H, 0.0) == pytest.approx(14.0)
    done = App("a", "u", 0.0, (Job("long", "a", 1, 5 * H, done=4 * H, profile="none"),
                               Job("short", "a", 1, H, profile="none")))  # fmt: skip
    assert done.remaining_path == pytest.approx(H)  # remaining / gpus of the longest remaining job


def test_pair_floor_hand_computed() -> None:
    """Five one-GPU jobs of 3, 3, 2, 2, 1 h left (work 11 h, path 3 h), one hour after arrival:
    X = 4: fluid 11/4 = 2.75 h, but two of the five share a GPU: floor times[3] + times[4] = 2 + 1 = 3 h
    (= the path here); X = 3: fluid 3.67 h, pair 2 + 2 = 4 h -> T_sh 1 + 4 = 5 h; X = 2.5 rounds up to
    3 GPUs (the same); X = 2: fluid 5.5 h > pair 3 + 2; X = 5: every job its own GPU, the path 3 h."""
    from themis_slurm.core.fairness import pair_floor

    times = (3 * H, 3 * H, 2 * H, 2 * H, 1 * H)
    assert pair_floor(times, 4.0) == pytest.approx(3 * H)
    assert pair_floor(times, 3.0) == pair_floor(times, 2.5) == pytest.approx(4 * H)
    assert pair_floor(times, 5.0) == pair_floor(times, 64.0) == 0.0
    assert pair_floor(times, 0.5) == pytest.approx(6 * H)  # one GPU: never above the remaining work
    assert shared_finish(H, 11 * H, 3.0, 0.1, 3 * H, times) == pytest.approx(5 * H)
    assert shared_finish(H, 11 * H, 3.0, 0.1, 3 * H) == pytest.approx(H + 11 * H / 3)  # without: fluid
    assert shared_finish(H, 11 * H, 2.0, 0.1, 3 * H, times) == pytest.approx(H + 5.5 * H)
    m = model(64)
    jobs = tuple(Job(f"j{k}", "a", 1, t, profile="none") for k, t in enumerate(times))
    app = App("a", "u", 0.0, jobs)
    assert m.one_gpu_times(app) == times
    assert m.t_sh(app, H, 3.0) == pytest.approx(5 * H)
    assert m.rho(app, H, 0.0) == pytest.approx(10 * m.rho(app, H, 1.0))  # nothing: still 10x one GPU


@given(
    runs=st.lists(st.floats(1.0, 1e5), min_size=1, max_size=12),
    wide=st.integers(0, 2),
    x1=st.floats(0, 20),
    x2=st.floats(0, 20),
    elapsed=st.floats(0, 1e5),
)
def test_rho_with_pair_floor_never_rises_with_throughput(
    runs: list[float], wide: int, x1: float, x2: float, elapsed: float
) -> None:
    """With one-GPU jobs (and some 2-GPU gangs, which the floor leaves out) T_sh never rises with X, and
    the agent's inlined rho is the model's rho."""
    from themis_slurm.core.agent import Agent

    m = FairnessModel(Topology.uniform(1, 4, 4), 16, 0.1)
    jobs = [Job(f"j{k}", "a", 1, r, profile="none") for k, r in enumerate(runs)]
    jobs += [Job(f"w{k}", "a", 2, 2 * runs[0], profile="none") for k in range(wide)]
    app = App("a", "u", 0.0, tuple(jobs), contention=2)
    lo, hi = sorted((x1, x2))
    assert m.rho(app, elapsed, hi) <= m.rho(app, elapsed, lo) + 1e-12
    agent = Agent(app, m, elapsed, lo, jobs)
    assert agent.rho_base == m.rho(app, elapsed, lo)
    assert agent.rho_of(hi - lo) == pytest.approx(m.rho(app, elapsed, hi), rel=1e-12)


def test_kept_gpu_floor_when_the_longest_job_waits() -> None:
    """An app keeps three GPUs whose jobs have 1 h left each; its 2-hour job waits. Fluid: (3 + 2) h / 3 =
    1.67 h; path 2 h; pair floor (times 2, 1, 1, 1 on 3 GPUs) 1 + 1 = 2 h. But under what it keeps the
    2-hour job starts only when a kept GPU frees up, after 1 h: T_sh >= 1 + 2 = 3 h. With one GPU more it
    starts now: 2 h (the path). T_id = max(5 h / min(4, 64 / 1), 2 h) = 2 h, one hour after arrival:
    rho 2.0 under what it keeps, 1.5 with one GPU; the model (which does not know which jobs wait) 1.5."""
    from themis_slurm.core.agent import Agent

    m = model(64)
    kept = tuple(Job(f"k{i}", "a", 1, H, profile="none") for i in range(3))
    long = Job("long", "a", 1, 2 * H, profile="none")
    app = App("a", "u", 0.0, (long, *kept))
    assert m.t_id(app) == pytest.approx(2 * H)
    agent = Agent(app, m, H, 3.0, [long], kept_free_s=H)
    assert agent.rho_base == pytest.approx((H + 3 * H) / (2 * H))
    assert agent.rho_of(1.0) == pytest.approx((H + 2 * H) / (2 * H))
    assert m.rho(app, H, 3.0) == pytest.approx((H + 2 * H) / (2 * H))
    assert Agent(app, m, H, 3.0, [long]).rho_base == pytest.approx(1.5)  # nothing kept: no floor
    # the model applies it when told which jobs hold the GPUs (the daemon's T_sh estimate does)
    assert m.t_sh(app, H, 3.0, kept={"k0", "k1", "k2"}) == pytest.approx(H + 3 * H)
    assert m.t_sh(app, H, 3.0, kept={"k0", "k1", "k2"}) / m.t_id(app) == pytest.approx(agent.rho_base)
    assert m.t_sh(app, H, 4.0, kept={"k0", "k1", "k2", "long"}) == pytest.approx(H + 2 * H)  # nothing waits
