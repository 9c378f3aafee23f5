"""Tests of the synthetic paper workload: published statistics, determinism, knobs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate

from themis_slurm.sim import workload_paper as wp
from themis_slurm.sim.loaders import load_hyperdrive
from themis_slurm.sim.trace import PROFILE_MODELS, SENSITIVE_MODELS

P = wp.PUBLISHED


def test_fitted_parameters_reproduce_published_moments() -> None:
    assert wp.jobs_per_app_quantile(0.0) == pytest.approx(1.0)
    assert wp.jobs_per_app_quantile(0.5) == pytest.approx(P.jobs_per_app_median)
    assert wp.jobs_per_app_quantile(1.0) == pytest.approx(P.jobs_per_app_max)
    mean, _ = integrate.quad(lambda u: float(wp.jobs_per_app_quantile(u)), 0, 1, points=[0.5])
    assert mean == pytest.approx(P.n_jobs / P.n_apps, rel=1e-6)
    assert math.exp(wp.DURATION_MU) == pytest.approx(P.duration_median_s)
    assert math.exp(wp.DURATION_MU + wp.DURATION_SIGMA**2 / 2) == pytest.approx(P.duration_mean_s)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sample_statistics_match_published(seed: int) -> None:
    stats = wp.paper_workload(seed).stats()
    assert stats.n_apps == 84
    assert stats.n_jobs == pytest.approx(P.n_jobs, rel=0.01)
    assert stats.jobs_per_app_median == pytest.approx(P.jobs_per_app_median, abs=3)
    assert stats.jobs_per_app_max == P.jobs_per_app_max
    assert stats.duration_median_s == pytest.approx(P.duration_median_s, rel=0.03)
    assert stats.duration_mean_s == pytest.approx(P.duration_mean_s, rel=0.03)
    assert stats.duration_max_s <= P.duration_max_s
    assert dict(stats.gpus) == {1: stats.n_jobs - 24, 4: 4, 8: 20}
    assert {m for m, _ in stats.models} <= set(PROFILE_MODELS)


def test_duration_distribution_on_a_large_sample() -> None:
    values = wp._durations(np.random.default_rng(7), 200_000)
    assert np.median(values) == pytest.approx(P.duration_median_s, rel=0.01)
    assert values.mean() == pytest.approx(P.duration_mean_s, rel=0.01)
    assert values.max() <= P.duration_max_s


def test_deterministic_for_a_seed() -> None:
    assert wp.paper_workload(3) == wp.paper_workload(3)
    assert wp.paper_workload(3) != wp.paper_workload(4)
    assert wp.scaled_workload(5) == wp.scaled_workload(5)


def test_structure_and_arrivals() -> None:
    trace = wp.paper_workload(0, app_interarrival_s=100.0)
    arrivals = trace.app_arrivals()
    assert list(arrivals.values()) == [100.0 * i for i in range(84)]
    for app, jobs in trace.by_app().items():
        assert {j.arrival_s for j in jobs} == {arrivals[app]}
        assert len({j.model for j in jobs}) == 1
        assert 1 <= len(jobs) <= 100
    assert wp.DEFAULT_APP_INTERARRIVAL_S == 6000.0


@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.5, 1.0])
def test_sensitive_fraction_honoured(fraction: float) -> None:
    trace = wp.paper_workload(1, sensitive_fraction=fraction)
    sensitive = sum(jobs[0].model in SENSITIVE_MODELS for jobs in trace.by_app().values())
    assert sensitive == round(fraction * 84)
    with pytest.raises(ValueError):
        wp.paper_workload(1, sensitive_fraction=1.5)


def test_sensitive_fraction_changes_only_models() -> None:
    base, forced = wp.paper_workload(2), wp.paper_workload(2, sensitive_fraction=1.0)
    assert [(j.job_id, j.duration_s, j.gpus, j.arrival_s) for j in base] == [
        (j.job_id, j.duration_s, j.gpus, j.arrival_s) for j in forced
    ]


def test_contention_scales_apps_and_density() -> None:
    one, two = wp.paper_workload(0), wp.paper_workload(0, contention=2.0)
    assert len(two.apps()) == 168
    assert two.app_arrivals()["app001"] == wp.DEFAULT_APP_INTERARRIVAL_S / 2
    window_one = len(one.apps()) * wp.DEFAULT_APP_INTERARRIVAL_S
    window_two = len(two.apps()) * wp.DEFAULT_APP_INTERARRIVAL_S / 2
    assert window_one == window_two
    assert two.stats().gpu_seconds / one.stats().gpu_seconds == pytest.approx(2.0, rel=0.1)
    with pytest.raises(ValueError):
        wp.paper_workload(0, contention=0.0)
    with pytest.raises(ValueError):
        wp.paper_workload(0, cluster_gpus=4)


def test_scaled_workload() -> None:
    trace = wp.scaled_workload(0, n_apps=8, jobs_per_app=10, duration_scale=0.01, gpus=2)
    stats = trace.stats()
    assert (stats.n_apps, stats.n_jobs, stats.jobs_per_app_max) == (8, 80, 10)
    assert stats.gpus == ((2, 80),)
    assert stats.duration_median_s < 1000
    assert trace.jobs[0].job_id == "app000/j000"


def test_assign_models_to_a_loaded_trace(tmp_path: Path) -> None:
    path = tmp_path / "h.csv"
    path.write_text("experiment-id,job-id,start-time,run-time,num-gpus\n1,a,0,10,1\n1,b,0,10,1\n2,c,5,10,1\n")
    trace = wp.assign_models(load_hyperdrive(path), seed=0, sensitive_fraction=0.5)
    models = {app: {j.model for j in jobs} for app, jobs in trace.by_app().items()}
    assert all(len(m) == 1 for m in models.values())
    assert sum(next(iter(m)) in SENSITIVE_MODELS for m in models.values()) == 1
