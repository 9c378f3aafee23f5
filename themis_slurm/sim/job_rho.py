"""Per-job finish-time fairness from finish times alone: one definition for any scheduler's run.

Used to compare our simulator's runs with results another simulator produced (Gavel's own, in
``../shared/traces/gavel/reference``), where only each job's arrival, finish, width and run time alone are
known: the simulator's own metrics (:mod:`themis_slurm.sim.metrics`) need a SimResult and its apps. The
definition is the reference README's ("Comparing like for like"), applied the same way to every run from
that run's own finish times, so that neither side is measured with the other's contention:

* N(t) = the jobs present at t in that run (arrived, not finished: ``a_k <= t < f_k``);
* Nbar_j = the time average of max(1, N(t)) over [a_j, f_j];
* T_id_j = d_j * max(1, g_j * Nbar_j / C), the job's run time on an equal 1/Nbar share of the C GPUs
  (never faster than alone on its own g_j GPUs);
* rho_j = (f_j - a_j) / T_id_j.

Each job is its own app here (what the reference runs assume); the apps of :mod:`.metrics` are not needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: rho above this counts as "slowed beyond its fair share" in :func:`summarise` (the issue's threshold).
ABOVE = 1.05


@dataclass(frozen=True)
class JobTimes:
    """One job of a run: arrival and finish (seconds, one clock), GPUs, run time alone on them (s)."""

    arrival: float
    finish: float
    gpus: int
    run_alone: float


def job_rhos(jobs: Sequence[JobTimes], cluster_gpus: int) -> np.ndarray:
    """rho_j of every job, in input order (module docstring). Raises ValueError naming the job and field
    when a job finishes before it arrives, has no GPUs or no run time, or the cluster has no GPUs."""
    spans = np.array([j.finish - j.arrival for j in jobs], dtype=float)
    return spans / job_t_ids(jobs, cluster_gpus)


def rhos_on(jobs: Sequence[JobTimes], yardstick: Sequence[JobTimes], cluster_gpus: int) -> np.ndarray:
    """Each job's time in `jobs` over its T_id in another run of the same jobs, `yardstick` (matched by
    position): two runs measured with one T_id per job. The README's rho gives each run the T_id of its own
    contention, so a schedule that keeps fewer jobs waiting shortens its own yardstick."""
    if len(jobs) != len(yardstick):
        raise ValueError(f"runs of different jobs: {len(jobs)} against {len(yardstick)}")
    spans = np.array([j.finish - j.arrival for j in jobs], dtype=float)
    return spans / job_t_ids(yardstick, cluster_gpus)


def job_t_ids(jobs: Sequence[JobTimes], cluster_gpus: int) -> np.ndarray:
    """T_id_j of every job (module docstring), from the run's own finish times; :func:`job_rhos`'s checks."""
    if cluster_gpus <= 0:
        raise ValueError(f"cluster_gpus must be > 0, got {cluster_gpus}")
    for i, j in enumerate(jobs):
        if not (math.isfinite(j.arrival) and math.isfinite(j.finish) and j.finish >= j.arrival):
            raise ValueError(
                f"job {i}: finish {j.finish!r} is not a finite time at or after arrival {j.arrival!r}"
            )
        if j.gpus <= 0:
            raise ValueError(f"job {i}: gpus must be > 0, got {j.gpus}")
        if not (math.isfinite(j.run_alone) and j.run_alone > 0):
            raise ValueError(f"job {i}: run_alone must be finite and > 0, got {j.run_alone!r}")
    if not jobs:
        return np.zeros(0)
    a = np.array([j.arrival for j in jobs], dtype=float)
    f = np.array([j.finish for j in jobs], dtype=float)
    g = np.array([j.gpus for j in jobs], dtype=float)
    d = np.array([j.run_alone for j in jobs], dtype=float)
    # N(t) is piecewise constant between the sorted arrival and finish times: +1 at each arrival, -1 at each
    # finish; the integral of max(1, N) up to each breakpoint, then read at a_j and f_j (both breakpoints)
    times = np.unique(np.concatenate([a, f]))
    change = np.zeros(len(times))
    np.add.at(change, np.searchsorted(times, a), 1.0)
    np.add.at(change, np.searchsorted(times, f), -1.0)
    present = np.cumsum(change)[:-1]  # N on [times[i], times[i+1])
    integral = np.concatenate([[0.0], np.cumsum(np.maximum(1.0, present) * np.diff(times))])
    span = f - a
    over = integral[np.searchsorted(times, f)] - integral[np.searchsorted(times, a)]
    # a job that finishes the instant it arrives saw N(a_j) (at least itself): its average is that value
    at_once = np.maximum(1.0, np.concatenate([present, [0.0]])[np.searchsorted(times, a)])
    nbar = np.where(span > 0, over / np.where(span > 0, span, 1.0), at_once)
    return d * np.maximum(1.0, g * nbar / cluster_gpus)


@dataclass(frozen=True)
class RhoSummary:
    """What the reference comparison reports of one run (seconds for JCT)."""

    max_rho: float
    p95_rho: float
    median_rho: float
    share_above: float  # of jobs with rho > ABOVE
    mean_jct_s: float
    n_jobs: int


def summarise(jobs: Sequence[JobTimes], cluster_gpus: int) -> RhoSummary:
    """Max, p95 and median rho (numpy's default percentile), the share of jobs above :data:`ABOVE`, mean JCT."""
    if not jobs:
        raise ValueError("no jobs to summarise")
    rho = job_rhos(jobs, cluster_gpus)
    jct = np.array([j.finish - j.arrival for j in jobs])
    return RhoSummary(
        max_rho=float(rho.max()),
        p95_rho=float(np.percentile(rho, 95)),
        median_rho=float(np.median(rho)),
        share_above=float(np.mean(rho > ABOVE)),
        mean_jct_s=float(jct.mean()),
        n_jobs=len(jobs),
    )
