"""A synthetic stand-in for the Themis paper's Philly hyperparameter-tuning workload.

The authors' trace (84 apps, 4,697 jobs) is not shipped with this project, but its summary statistics are
published (docs: themis-facts.md, "Workload used by the authors"; Mahajan et al., NSDI 2020). This module
draws workloads with the same statistics, deterministically for a seed, so simulations can be run and
compared without the trace. How each statistic is matched:

- Jobs per app (published: median 78.5, max 100, mean 4,697/84 = 55.9). The mean far below the median says
  the distribution is skewed towards small apps, with a bulk of large sweeps capped at 100. We use the
  quantile function Q(u) = 1 + (m-1)(2u)^k for u < 1/2 and m + (M-m)(2u-1) for u >= 1/2 (m = median,
  M = max): the upper half is uniform between median and max (nothing else is known about it), the lower
  half a power curve from 1 to the median whose exponent k (about 2.59) is solved in closed form so that
  the mean is 55.9. Apps draw u by stratified sampling (one u per 1/n slice, shuffled), so every workload
  hits the median, max and mean closely instead of only in expectation.
- Job run time (published: median 13,497 s, mean 14,843 s, max 95,456 s): a lognormal with mu = ln(median)
  and sigma = sqrt(2 ln(mean/median)) = 0.436 (so that median and mean match), drawn i.i.d. per job and
  truncated at the published max by redrawing. Deviation: such a lognormal rarely goes beyond about
  5 x median, so a 4,697-job sample has a max near 60,000 s, not 95,456 s; the max is an outlier that two
  moments cannot reproduce. Durations are run times on the job's GPUs with ideal placement.
- GPUs per job (published: 1 for 4,673 jobs, 4 for 4, 8 for 20): each workload gets the proportional
  numbers of 4- and 8-GPU jobs (rounded; exactly 4 and 20 at 4,697 jobs), placed on random jobs.
- Models: each app gets one model drawn uniformly from the 10 placement profiles, as the authors did
  (kshiteejm/mltiply, scripts/generate_themis_workload.py). ``sensitive_fraction`` instead gives exactly
  round(f * apps) apps a placement-sensitive model (VGG11/16/19, AlexNet) and the rest an insensitive one.
- Arrivals: app i arrives at i * interval; all its jobs arrive with it. The paper spaces apps "100 time
  units" apart. The authors' simulator counts time in minutes (generate_themis_workload.py divides the
  per-iteration time in seconds by 60; traces/processed_data.csv holds run times in minutes), so we read
  that as 100 minutes: DEFAULT_APP_INTERARRIVAL_S = 6,000 s. This reading is ours (unconfirmed).
- Contention c: c times as many apps (round(c * n_apps)) arriving c times as densely (interval / c). The
  arrival window n_apps x interval and the per-app statistics stay the same, while the number of apps that
  compete at any moment and the offered load scale by c. (Only adding apps at the same spacing would
  lengthen the window without raising the load; only compressing arrivals would shorten the experiment.)

Independent random streams (numpy SeedSequence children) are used for jobs per app, durations, GPU counts
and models, so e.g. changing ``sensitive_fraction`` changes the models and nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from themis_slurm.sim.trace import INSENSITIVE_MODELS, PROFILE_MODELS, SENSITIVE_MODELS, Trace, TraceJob


@dataclass(frozen=True)
class PublishedStats:
    """Statistics of the authors' workload (docs: themis-facts.md; Mahajan et al., NSDI 2020)."""

    n_apps: int = 84
    n_jobs: int = 4697
    jobs_per_app_median: float = 78.5
    jobs_per_app_max: int = 100
    duration_median_s: float = 13_497.0
    duration_mean_s: float = 14_843.0
    duration_max_s: float = 95_456.0
    gpus: tuple[tuple[int, int], ...] = ((1, 4673), (4, 4), (8, 20))  # (gpus, jobs)
    app_interarrival_units: float = 100.0

    @property
    def jobs_per_app_mean(self) -> float:
        return self.n_jobs / self.n_apps


PUBLISHED = PublishedStats()
AUTHORS_TIME_UNIT_S = 60.0  # inferred from the authors' scripts, see the module docstring
DEFAULT_APP_INTERARRIVAL_S = PUBLISHED.app_interarrival_units * AUTHORS_TIME_UNIT_S
DEFAULT_CLUSTER_GPUS = 32  # the paper's smaller simulated cluster: 2 racks x 2 machines x 2 slots x 4 GPUs

DURATION_MU = math.log(PUBLISHED.duration_median_s)
DURATION_SIGMA = math.sqrt(2.0 * math.log(PUBLISHED.duration_mean_s / PUBLISHED.duration_median_s))


def _jobs_per_app_exponent(stats: PublishedStats = PUBLISHED) -> float:
    """k such that the quantile function of jobs_per_app_quantile has the published mean (closed form)."""
    m, top = stats.jobs_per_app_median, float(stats.jobs_per_app_max)
    lower_half_mean = 2.0 * stats.jobs_per_app_mean - (m + top) / 2.0  # mean = (lower + upper half means) / 2
    return (m - 1.0) / (lower_half_mean - 1.0) - 1.0  # lower half mean = 1 + (m - 1) / (k + 1)


JOBS_PER_APP_EXPONENT = _jobs_per_app_exponent()


def jobs_per_app_quantile(u: np.ndarray | float) -> np.ndarray:
    """Jobs per app (real-valued, before rounding) at quantile ``u`` in [0, 1]; see the module docstring."""
    u = np.asarray(u, dtype=float)
    m, top, k = PUBLISHED.jobs_per_app_median, float(PUBLISHED.jobs_per_app_max), JOBS_PER_APP_EXPONENT
    lower = 1.0 + (m - 1.0) * np.power(np.clip(2.0 * u, 0.0, 1.0), k)
    upper = m + (top - m) * (2.0 * u - 1.0)
    return np.where(u < 0.5, lower, upper)


def _streams(seed: int) -> dict[str, np.random.Generator]:
    children = np.random.SeedSequence(seed).spawn(4)
    return {name: np.random.default_rng(child) for name, child in zip(("jobs", "durations", "gpus", "models"), children, strict=True)}


def _jobs_per_app(rng: np.random.Generator, n_apps: int) -> list[int]:
    u = (rng.permutation(n_apps) + rng.random(n_apps)) / n_apps  # stratified: one draw per 1/n slice
    counts = np.floor(jobs_per_app_quantile(u) + 0.5)
    return [int(c) for c in np.clip(counts, 1, PUBLISHED.jobs_per_app_max)]


def _durations(rng: np.random.Generator, n: int) -> np.ndarray:
    values = rng.lognormal(DURATION_MU, DURATION_SIGMA, n)
    while (over := values > PUBLISHED.duration_max_s).any():  # truncate at the published max by redrawing
        values[over] = rng.lognormal(DURATION_MU, DURATION_SIGMA, int(over.sum()))
    return values


def _gpus(rng: np.random.Generator, n: int) -> np.ndarray:
    gpus = np.ones(n, dtype=int)
    wide = [(g, math.floor(n * count / PUBLISHED.n_jobs + 0.5)) for g, count in PUBLISHED.gpus if g > 1]
    chosen = rng.permutation(n)[: sum(count for _, count in wide)]
    start = 0
    for g, count in wide:
        gpus[chosen[start : start + count]] = g
        start += count
    return gpus


def draw_models(rng: np.random.Generator, n_apps: int, sensitive_fraction: float | None = None) -> list[str]:
    """One profile model per app: uniform over the 10 profiles, or exactly round(f * n) sensitive apps."""
    if sensitive_fraction is None:
        return [PROFILE_MODELS[i] for i in rng.integers(0, len(PROFILE_MODELS), n_apps)]
    if not 0.0 <= sensitive_fraction <= 1.0:
        raise ValueError(f"sensitive_fraction must be in [0, 1], got {sensitive_fraction!r}")
    sensitive = [m for m in PROFILE_MODELS if m in SENSITIVE_MODELS]
    insensitive = [m for m in PROFILE_MODELS if m in INSENSITIVE_MODELS]
    n_sensitive = math.floor(sensitive_fraction * n_apps + 0.5)
    is_sensitive = np.zeros(n_apps, dtype=bool)
    is_sensitive[rng.permutation(n_apps)[:n_sensitive]] = True
    picks = rng.random(n_apps)
    return [
        (sensitive if flag else insensitive)[int(p * len(sensitive if flag else insensitive))]
        for flag, p in zip(is_sensitive, picks, strict=True)
    ]


def assign_models(trace: Trace, seed: int, sensitive_fraction: float | None = None) -> Trace:
    """Give every app of ``trace`` a random profile model (e.g. for the hyperdrive trace, which has none)."""
    apps = trace.apps()
    models = draw_models(np.random.default_rng(seed), len(apps), sensitive_fraction)
    return trace.with_models(dict(zip(apps, models, strict=True)))


def _build(
    seed: int,
    jobs_per_app: Sequence[int],
    interval_s: float,
    sensitive_fraction: float | None,
    duration_scale: float,
    fixed_gpus: int | None,
    source: str,
    notes: list[str],
) -> Trace:
    rngs = _streams(seed)
    n_apps, n_jobs = len(jobs_per_app), sum(jobs_per_app)
    durations = _durations(rngs["durations"], n_jobs) * duration_scale
    gpus = np.full(n_jobs, fixed_gpus, dtype=int) if fixed_gpus is not None else _gpus(rngs["gpus"], n_jobs)
    models = draw_models(rngs["models"], n_apps, sensitive_fraction)
    jobs: list[TraceJob] = []
    for a, count in enumerate(jobs_per_app):
        app = f"app{a:03d}"
        for j in range(count):
            k = len(jobs)
            jobs.append(
                TraceJob(f"{app}/j{j:03d}", app, app, a * interval_s, int(gpus[k]), float(durations[k]), models[a])
            )
    return Trace(jobs=tuple(jobs), source=source, notes=tuple(notes))


def paper_workload(
    seed: int,
    contention: float = 1.0,
    sensitive_fraction: float | None = None,
    n_apps: int = PUBLISHED.n_apps,
    app_interarrival_s: float = DEFAULT_APP_INTERARRIVAL_S,
    cluster_gpus: int = DEFAULT_CLUSTER_GPUS,
) -> Trace:
    """The paper's workload, synthesised from its published statistics (see the module docstring).

    Args:
        seed: makes the result deterministic.
        contention: load multiplier c > 0: round(c * n_apps) apps, arriving every app_interarrival_s / c.
        sensitive_fraction: when set, exactly this fraction of apps gets a placement-sensitive model.
        n_apps: apps at contention 1.
        app_interarrival_s: seconds between app arrivals at contention 1 (default: 100 minutes).
        cluster_gpus: GPUs of the cluster the workload is meant for; no job may ask for more, and the
            notes state the offered load (GPU-seconds demanded per GPU-second of the arrival window).
    """
    if not (math.isfinite(contention) and contention > 0):
        raise ValueError(f"contention must be finite and > 0, got {contention!r}")
    if n_apps < 1:
        raise ValueError(f"n_apps must be >= 1, got {n_apps!r}")
    if not (math.isfinite(app_interarrival_s) and app_interarrival_s >= 0):
        raise ValueError(f"app_interarrival_s must be finite and >= 0, got {app_interarrival_s!r}")
    widest = max(g for g, _ in PUBLISHED.gpus)
    if cluster_gpus < widest:
        raise ValueError(f"cluster_gpus={cluster_gpus} is smaller than the widest job ({widest} GPUs)")
    total_apps = max(1, math.floor(n_apps * contention + 0.5))
    interval = app_interarrival_s / contention
    rng_jobs = _streams(seed)["jobs"]
    per_app = _jobs_per_app(rng_jobs, total_apps)
    source = (
        f"paper_workload(seed={seed}, contention={contention:g}, sensitive_fraction={sensitive_fraction}, "
        f"n_apps={n_apps}, app_interarrival_s={app_interarrival_s:g}, cluster_gpus={cluster_gpus})"
    )
    trace = _build(seed, per_app, interval, sensitive_fraction, 1.0, None, source, [])
    window = total_apps * interval
    load = trace.stats().gpu_seconds / (cluster_gpus * window) if window > 0 else math.inf
    notes = (
        f"synthetic from the published statistics of the Themis paper's Philly workload "
        f"({PUBLISHED.n_apps} apps, {PUBLISHED.n_jobs} jobs)",
        f"{total_apps} apps every {interval:g} s; offered load {load:.2f} x {cluster_gpus} GPUs over the arrival window",
    )
    return Trace(jobs=trace.jobs, source=source, notes=notes)


def scaled_workload(
    seed: int,
    n_apps: int = 8,
    jobs_per_app: int = 10,
    *,
    duration_scale: float = 1.0,
    app_interarrival_s: float = DEFAULT_APP_INTERARRIVAL_S,
    sensitive_fraction: float | None = None,
    gpus: int | None = None,
) -> Trace:
    """A small paper-like workload for tests and examples: ``n_apps`` apps of exactly ``jobs_per_app`` jobs.

    Run times follow the paper's lognormal times ``duration_scale`` (e.g. 0.01 for a quick simulation);
    GPUs per job follow the paper's mix (almost always 1 at this size) unless ``gpus`` fixes them.
    """
    if n_apps < 1 or jobs_per_app < 1:
        raise ValueError("n_apps and jobs_per_app must be >= 1")
    if not (math.isfinite(duration_scale) and duration_scale > 0):
        raise ValueError(f"duration_scale must be finite and > 0, got {duration_scale!r}")
    if gpus is not None and gpus < 1:
        raise ValueError(f"gpus must be >= 1, got {gpus!r}")
    source = f"scaled_workload(seed={seed}, n_apps={n_apps}, jobs_per_app={jobs_per_app}, duration_scale={duration_scale:g})"
    notes = [f"paper-like: {n_apps} apps x {jobs_per_app} jobs, every {app_interarrival_s:g} s"]
    return _build(seed, [jobs_per_app] * n_apps, app_interarrival_s, sensitive_fraction, duration_scale, gpus, source, notes)
