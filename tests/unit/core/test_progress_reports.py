"""refine_by_progress: what a progress report does to a job's estimate (daemon and simulator alike)."""

from __future__ import annotations

import random

import pytest

from themis_slurm.core.workload import REPORT_MIN_REMAINING, refine_by_progress


def test_a_report_is_read_against_the_estimate() -> None:
    # true work 100, estimated 300 (a time limit 3x too long); after 40 GPU-s the job reports 40 %
    done, work = refine_by_progress(300.0, 40.0, 0.4)
    assert (done, work) == (120.0, 300.0)  # 40 % of the estimate; the estimate (and so T_id) stays
    # remaining / estimate is now the true 60 %: both are 3x too large, which rho = T_sh / T_id divides out
    assert (work - done) / work == pytest.approx(0.6)


def test_exact_estimates_are_unchanged_by_exact_reports() -> None:
    done, work = refine_by_progress(200.0, 50.0, 0.25)
    assert (done, work) == pytest.approx((50.0, 200.0))


def test_no_progress_yet_keeps_the_estimate() -> None:
    assert refine_by_progress(100.0, 30.0, 0.0) == (30.0, 100.0)


def test_a_report_never_adds_remaining_work_and_never_finishes_a_running_job() -> None:
    rng = random.Random(7)
    for _ in range(5000):
        work = rng.uniform(1.0, 1e6)
        service = rng.uniform(0.0, 2.0) * work
        p = rng.choice([0.0, 1.0, rng.random(), rng.random() * 1e-6, 1.0 - rng.random() * 1e-6])
        done, refined = refine_by_progress(work, service, p)
        remaining = refined - done
        unreported = max(work - service, REPORT_MIN_REMAINING * work)
        assert remaining <= unreported * (1 + 1e-12), (work, service, p)
        assert remaining >= REPORT_MIN_REMAINING * work * (1 - 1e-12), (work, service, p)
        assert done >= min(service, work * (1 - REPORT_MIN_REMAINING)) * (1 - 1e-12)
        assert refined == work


def test_a_report_never_raises_an_apps_rho() -> None:
    """Whatever a job reports, its app's rho (at any allocation) is no higher than without the report:
    a made-up report cannot buy GPUs (T_id is unchanged, only remaining work can shrink)."""
    from themis_slurm.core.fairness import FairnessModel
    from themis_slurm.core.topology import Topology
    from themis_slurm.core.workload import App, Job

    topo = Topology.uniform(1, 2, 4)
    model = FairnessModel(topo, 8)
    rng = random.Random(11)
    for _ in range(2000):
        work, service = rng.uniform(100, 1e5), rng.uniform(0, 1e5)
        other = Job("o", "a", 1, rng.uniform(100, 1e5))
        p = rng.choice([rng.random(), 1.0, 1e-9])
        elapsed = rng.uniform(0, 1e6)
        done_plain = min(service, 0.99 * work)
        plain = App("a", "u", 0.0, (Job("j", "a", 2, work, done_plain), other), contention=rng.uniform(1, 4))
        done, w = refine_by_progress(work, done_plain, p)
        told = App("a", "u", 0.0, (Job("j", "a", 2, w, done), other), contention=plain.contention)
        for x in (0.0, 1.0, 3.0):
            assert model.rho(told, elapsed, x) <= model.rho(plain, elapsed, x) * (1 + 1e-12)
