"""Metrics of one simulation, computed the same way for every policy from its SimResult.

Fairness (Themis NSDI 2020, section 3; themis-facts.md):

* ``T_sh = finish - arrival`` of the app (its last job's completion minus its first job's arrival).
* ``T_id`` is :meth:`FairnessModel.t_id` after the fact, with TRUE work: the app's total work on a private
  1/N share, N = its time-averaged contention over its whole life (the simulator's contention clock), the
  share capped at the app's peak concurrent GPU demand (its jobs did not all exist at once, so summing their
  GPUs would overstate what it could use), and the work-weighted best placement factor of its jobs;
  floored by its longest job (submit offset + true run time at best placement), as in FairnessModel.t_id.
* ``rho = T_sh / T_id``; rho <= 1 means the sharing incentive held for the app.
* ``jain`` is Jain's index over each app's ``T_id / T_sh = 1/rho``, the form the authors computed;
  ``jain_rho`` (over rho itself) is also given.

Efficiency: ``gpu_hours`` is all GPU time held (placement slowdowns and restart costs included, so a worse
placement or more preemptions cost more): the paper's efficiency measure. ``utilization`` is that busy
GPU-time over GPUs x makespan; ``makespan_s`` runs from the first arrival to the last completion.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from themis_slurm.core.fairness import FairnessModel
from themis_slurm.core.workload import App, Job, job_path
from themis_slurm.sim.engine import SimResult

#: The keys of the --json summary, in order.
SUMMARY_KEYS: tuple[str, ...] = (
    "max_rho", "median_rho", "p95_rho", "jain", "frac_rho_le_1", "gpu_hours", "makespan_s",
    "mean_app_completion_s", "mean_jct_s", "preemptions", "utilization",
)  # fmt: skip


@dataclass(frozen=True)
class AppMetrics:
    app_id: str
    owner: str
    arrival: float
    finish: float
    t_sh: float
    t_id: float
    rho: float
    contention: float
    peak_gpus: int
    true_work: float
    n_jobs: int


@dataclass(frozen=True)
class Summary:
    max_rho: float
    median_rho: float
    p95_rho: float
    jain: float
    frac_rho_le_1: float
    gpu_hours: float
    makespan_s: float
    mean_app_completion_s: float
    mean_jct_s: float
    preemptions: int
    utilization: float
    # beyond the --json summary
    jain_rho: float
    ideal_gpu_hours: float
    n_apps: int
    n_jobs: int
    events: int
    policy_calls: int
    wall_s: float

    def public(self) -> dict[str, float | int]:
        """The --json summary fields, in SUMMARY_KEYS order."""
        d = asdict(self)
        return {k: d[k] for k in SUMMARY_KEYS}


@dataclass(frozen=True)
class Metrics:
    policy: str
    summary: Summary
    apps: tuple[AppMetrics, ...]
    util_times: tuple[float, ...]
    util_busy: tuple[int, ...]
    gpus: int


def jain_index(values: Sequence[float]) -> float:
    """(sum x)^2 / (n sum x^2): 1 when all equal, 1/n when one takes everything."""
    x = np.asarray(values, dtype=float)
    if x.size == 0 or not np.any(x):
        return 1.0
    return float(x.sum() ** 2 / (x.size * np.square(x).sum()))


def app_t_id(model: FairnessModel, app_id: str, owner: str, arrival: float, contention: float,
             peak_gpus: int, jobs: Sequence[Job]) -> float:  # fmt: skip
    """T_id with FairnessModel.t_id semantics for an app whose jobs are all known (see module docstring)."""
    work = math.fsum(j.work for j in jobs)
    if work <= 0:
        return 0.0
    factor = math.fsum(j.work * model.best_factor(j) for j in jobs) / work
    # t_id of an app with no live jobs uses factor 1 and max parallelism = peak_gpus; apply the factor here
    shell = App(app_id, owner, arrival, (), contention, work, peak_gpus)
    path = max(job_path(j, arrival, model.best_factor(j)) for j in jobs)
    return max(model.t_id(shell) / factor, path)


def compute(result: SimResult) -> Metrics:
    """All metrics of one run (see the module docstring)."""
    topo = result.topology
    model = FairnessModel(topo, topo.size)
    by_app: dict[str, list[Job]] = {}
    for j in result.jobs:
        by_app.setdefault(j.app_id, []).append(Job(j.job_id, j.app_id, j.gpus, j.true_work, profile=j.profile, submit=j.arrival))
    apps: list[AppMetrics] = []
    for a in result.apps:
        t_sh = a.finish - a.arrival
        t_id = app_t_id(model, a.app_id, a.owner, a.arrival, a.contention, a.peak_gpus, by_app[a.app_id])
        rho = t_sh / t_id if t_id > 0 else 1.0
        apps.append(AppMetrics(a.app_id, a.owner, a.arrival, a.finish, t_sh, t_id, rho, a.contention,
                               a.peak_gpus, a.true_work, a.n_jobs))  # fmt: skip
    rhos = np.array([a.rho for a in apps]) if apps else np.array([1.0])
    busy = math.fsum(j.gpu_seconds for j in result.jobs)
    first = min((j.arrival for j in result.jobs), default=0.0)
    last = max((j.finish for j in result.jobs), default=0.0)
    makespan = last - first
    summary = Summary(
        max_rho=float(rhos.max()),
        median_rho=float(np.median(rhos)),
        p95_rho=float(np.percentile(rhos, 95)),
        jain=jain_index(1.0 / rhos),
        frac_rho_le_1=float(np.mean(rhos <= 1.0 + 1e-9)),
        gpu_hours=busy / 3600.0,
        makespan_s=makespan,
        mean_app_completion_s=float(np.mean([a.t_sh for a in apps])) if apps else 0.0,
        mean_jct_s=float(np.mean([j.jct for j in result.jobs])) if result.jobs else 0.0,
        preemptions=result.preemptions,
        utilization=busy / (topo.size * makespan) if makespan > 0 else 0.0,
        jain_rho=jain_index(rhos),
        ideal_gpu_hours=math.fsum(j.true_work for j in result.jobs) / 3600.0,
        n_apps=len(apps),
        n_jobs=len(result.jobs),
        events=result.events,
        policy_calls=result.policy_calls,
        wall_s=result.wall_s,
    )
    return Metrics(result.policy, summary, tuple(apps), result.util_times, result.util_busy, topo.size)
