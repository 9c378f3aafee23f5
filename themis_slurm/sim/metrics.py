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

Tenancy (``SimConfig.tenancy``, issue #33): N above is the app's effective N, one over its fraction of the
cluster in the account -> user -> app tree (core/tenancy.py), time-averaged over its life by the simulator
exactly as the policies saw it, so T_id is the finish time on the app's nested share; with the levels
``("app",)`` it is the count of apps, as in the paper. A replayed history's T_id (:func:`actual_metrics`)
follows the same definition.

Per user and per account (:class:`TenantMetrics`, whatever the levels): the GPU time its jobs held, and
while it had waiting work (at least one of its jobs arrived, unfinished and holding no GPU), the GPU time it
held then and that as a share of all GPU time held then: a user who got its fair part of a busy cluster has
about its share; one the scheduler starved has less. Beside them its apps' worst rho and its jobs' mean JCT.

Efficiency: ``gpu_hours`` is all GPU time held (placement slowdowns and restart costs included, so a worse
placement or more preemptions cost more): the paper's efficiency measure. ``utilization`` is that busy
GPU-time over GPUs x makespan; ``makespan_s`` runs from the first arrival to the last completion.

Jobs (issue #34: users feel their job's completion time, not their app's rho): ``mean_jct_s``,
``median_jct_s`` and ``p95_jct_s`` over every job's completion time (finish - arrival), and
``mean_slowdown``, the mean of each job's JCT over its run time alone (its true work on its GPUs at the
best placement, with no wait and no restart: 1 is the least a job can see).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from themis_slurm.core.fairness import FairnessModel
from themis_slurm.core.tenancy import FLAT, Tenancy
from themis_slurm.core.tenancy import contention as tenancy_contention
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App, Job, job_path
from themis_slurm.sim.engine import SimConfig, SimResult
from themis_slurm.sim.trace import Trace, TraceJob

#: The keys of the --json summary, in order.
SUMMARY_KEYS: tuple[str, ...] = (
    "max_rho", "median_rho", "p95_rho", "jain", "frac_rho_le_1", "gpu_hours", "makespan_s",
    "mean_app_completion_s", "mean_jct_s", "median_jct_s", "p95_jct_s", "mean_slowdown", "preemptions",
    "lost_gpu_h", "utilization",
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
    median_jct_s: float
    p95_jct_s: float
    mean_slowdown: float
    preemptions: int
    lost_gpu_h: float  # work preemptions threw away (jobs that had not saved it), GPU-hours of ideal work
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
class TenantMetrics:
    """One user's or account's GPU time (module docstring). Times in seconds; ``share_waiting`` is NaN for
    a tenant that never waited. Users are by name (a user with jobs in two accounts is one row); the account
    ``""`` holds the jobs of a trace without accounts."""

    level: str  # "user" or "account"
    name: str
    n_apps: int
    n_jobs: int
    gpu_seconds: float
    waiting_s: float
    gpu_seconds_waiting: float
    share_waiting: float
    max_rho: float
    mean_jct_s: float


@dataclass(frozen=True)
class Metrics:
    """`levels` are the tenancy levels the run was made with (``("app",)``: the paper's flat 1/N)."""

    policy: str
    summary: Summary
    apps: tuple[AppMetrics, ...]
    util_times: tuple[float, ...]
    util_busy: tuple[int, ...]
    gpus: int
    tenants: tuple[TenantMetrics, ...] = ()
    levels: tuple[str, ...] = ("app",)
    jcts: tuple[float, ...] = ()  # every job's completion time (s), for the JCT CDF


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
    if model.topology.heterogeneous:  # 1/N of each type at its jobs' speeds there (FairnessModel.typed_rate)
        path = max(job_path(j, arrival, model.best_factor(j)) for j in jobs)
        return max(work / model.typed_rate(jobs, work, float(peak_gpus), contention), path)
    factor = math.fsum(j.work * model.best_factor(j) for j in jobs) / work
    # t_id of an app with no live jobs uses factor 1 and max parallelism = peak_gpus; apply the factor here
    shell = App(app_id, owner, arrival, (), contention, work, peak_gpus)
    path = max(job_path(j, arrival, model.best_factor(j)) for j in jobs)
    return max(model.t_id(shell) / factor, path)


@dataclass(frozen=True, slots=True)
class Span:
    """One job's life as the per-tenant GPU time needs it: its app, arrival, finish and each interval it
    held GPUs, (start, end, GPUs) (a simulated job's :attr:`JobResult.holds`; a replayed one's actual run)."""

    app_id: str
    arrival: float
    finish: float
    holds: tuple[tuple[float, float, int], ...]


def spans_of(result: SimResult) -> list[Span]:
    """The :class:`Span` of every job of a simulation."""
    return [Span(j.app_id, j.arrival, j.finish, j.holds) for j in result.jobs]


def waiting_intervals(span: Span) -> Iterator[tuple[float, float]]:
    """The intervals of [arrival, finish] in which the job held no GPU (waiting to start, or preempted)."""
    cur = span.arrival
    for start, end, _ in sorted(span.holds):
        if start > cur:
            yield cur, start
        cur = max(cur, end)
    if span.finish > cur:
        yield cur, span.finish


def segments(spans: Iterable[Span], group_of: Callable[[str], str]
             ) -> Iterator[tuple[float, Mapping[str, int], Mapping[str, int], int]]:  # fmt: skip
    """(length, waiting jobs by group, GPUs held by group, GPUs held in all) of each interval over which
    none of them changes, in time order; `group_of` maps an app id to its group (a user, an account). The
    mappings yielded are live (changed after the next step): read them, do not keep them."""
    edges: list[tuple[float, str, int, int]] = []  # (time, group, change of waiting jobs, change of GPUs)
    for sp in spans:
        g = group_of(sp.app_id)
        for a, b in waiting_intervals(sp):
            edges += ((a, g, 1, 0), (b, g, -1, 0))
        for start, end, n in sp.holds:
            if end > start:
                edges += ((start, g, 0, n), (end, g, 0, -n))
    edges.sort(key=lambda e: e[0])
    waiting: dict[str, int] = {}
    held: dict[str, int] = {}
    total, i, n_edges = 0, 0, len(edges)
    while i < n_edges:
        t = edges[i][0]
        while i < n_edges and edges[i][0] == t:
            _, g, dw, dg = edges[i]
            if dw:
                w = waiting.get(g, 0) + dw
                if w:
                    waiting[g] = w
                else:
                    del waiting[g]
            if dg:
                held[g] = held.get(g, 0) + dg
                total += dg
            i += 1
        if i < n_edges:
            yield edges[i][0] - t, waiting, held, total


def contested_gpu_time(spans: Iterable[Span], group_of: Callable[[str], str], groups: Sequence[str],
                       until: float = math.inf) -> tuple[float, dict[str, float]]:  # fmt: skip
    """(seconds before `until` during which every one of `groups` had waiting work, GPU-seconds each held
    then): the like-for-like comparison of users who all want more than they have (benchmarks/tenancy.py)."""
    window, got = 0.0, dict.fromkeys(groups, 0.0)
    spans = list(spans)
    t = min((sp.arrival for sp in spans), default=0.0)
    for dt, waiting, held, _ in segments(spans, group_of):
        dt, t = max(0.0, min(dt, until - t)), t + dt
        if dt > 0 and all(g in waiting for g in groups):
            window += dt
            for g in groups:
                got[g] += dt * held.get(g, 0)
    return window, got


def tenant_metrics(spans: Sequence[Span], apps: Sequence[AppMetrics],
                   accounts: Mapping[str, str]) -> tuple[TenantMetrics, ...]:  # fmt: skip
    """Every account's then every user's :class:`TenantMetrics` (each in order of first arrival); `accounts`
    maps an app id to its account."""
    owner = {a.app_id: a.owner for a in apps}
    rho = {a.app_id: a.rho for a in apps}
    out: list[TenantMetrics] = []
    for level, of in (("account", accounts), ("user", owner)):
        names = list(dict.fromkeys(of.get(a.app_id, "") for a in apps))
        n_apps = dict.fromkeys(names, 0)
        worst = dict.fromkeys(names, 0.0)
        for a in apps:
            name = of.get(a.app_id, "")
            n_apps[name] += 1
            worst[name] = max(worst[name], rho[a.app_id])
        n_jobs, gpu_s, jct = dict.fromkeys(names, 0), dict.fromkeys(names, 0.0), dict.fromkeys(names, 0.0)
        for sp in spans:
            name = of.get(sp.app_id, "")
            n_jobs[name] += 1
            gpu_s[name] += math.fsum((e - b) * n for b, e, n in sp.holds)
            jct[name] += sp.finish - sp.arrival
        wait_s, held_s, all_s = dict.fromkeys(names, 0.0), dict.fromkeys(names, 0.0), dict.fromkeys(names, 0.0)
        for dt, waiting, held, total in segments(spans, lambda app, of=of: of.get(app, "")):
            for name in waiting:
                wait_s[name] += dt
                held_s[name] += dt * held.get(name, 0)
                all_s[name] += dt * total
        for name in names:
            share = held_s[name] / all_s[name] if all_s[name] > 0 else math.nan
            out.append(TenantMetrics(level, name, n_apps[name], n_jobs[name], gpu_s[name], wait_s[name],
                                     held_s[name], share, worst[name],
                                     jct[name] / n_jobs[name] if n_jobs[name] else 0.0))  # fmt: skip
    return tuple(out)


def summarise(
    rhos: np.ndarray, apps: Sequence[AppMetrics], busy_gpu_s: float, makespan: float, gpus: int, *,
    jct_s: Sequence[float], alone_s: Sequence[float], ideal_gpu_s: float, n_jobs: int, preemptions: int,
    events: int, policy_calls: int, wall_s: float, lost_work: float = 0.0,
) -> Summary:
    """The Summary of one run from its per-app rhos, its jobs' completion times and run times alone
    (`jct_s`, `alone_s`, in the same order) and totals: one definition for simulated runs (:func:`compute`)
    and for what a real cluster did (:func:`actual_metrics`)."""
    jct = np.asarray(jct_s, dtype=float)
    alone = np.maximum(np.asarray(alone_s, dtype=float), 1e-9)
    return Summary(
        max_rho=float(rhos.max()),
        median_rho=float(np.median(rhos)),
        p95_rho=float(np.percentile(rhos, 95)),
        jain=jain_index(1.0 / rhos),
        frac_rho_le_1=float(np.mean(rhos <= 1.0 + 1e-9)),
        gpu_hours=busy_gpu_s / 3600.0,
        makespan_s=makespan,
        mean_app_completion_s=float(np.mean([a.t_sh for a in apps])) if apps else 0.0,
        mean_jct_s=float(jct.mean()) if jct.size else 0.0,
        median_jct_s=float(np.median(jct)) if jct.size else 0.0,
        p95_jct_s=float(np.percentile(jct, 95)) if jct.size else 0.0,
        mean_slowdown=float(np.mean(jct / alone)) if jct.size else 0.0,
        preemptions=preemptions,
        lost_gpu_h=lost_work / 3600.0,
        utilization=busy_gpu_s / (gpus * makespan) if makespan > 0 else 0.0,
        jain_rho=jain_index(rhos),
        ideal_gpu_hours=ideal_gpu_s / 3600.0,
        n_apps=len(apps),
        n_jobs=n_jobs,
        events=events,
        policy_calls=policy_calls,
        wall_s=wall_s,
    )


def compute(result: SimResult) -> Metrics:
    """All metrics of one run (see the module docstring)."""
    topo = result.topology
    model = FairnessModel(topo, topo.size)
    by_app: dict[str, list[Job]] = {}
    for j in result.jobs:
        by_app.setdefault(j.app_id, []).append(Job(j.job_id, j.app_id, j.gpus, j.true_work, profile=j.profile,
                                                   submit=j.arrival, speeds=j.speeds))  # fmt: skip
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
    summary = summarise(
        rhos, apps, busy, makespan, topo.size,
        jct_s=[j.jct for j in result.jobs], alone_s=[j.true_work / j.gpus for j in result.jobs],
        ideal_gpu_s=math.fsum(j.true_work for j in result.jobs), n_jobs=len(result.jobs),
        preemptions=result.preemptions, events=result.events, policy_calls=result.policy_calls,
        wall_s=result.wall_s, lost_work=result.lost_work,
    )  # fmt: skip
    tenants = tenant_metrics(spans_of(result), apps, {a.app_id: a.account for a in result.apps})
    return Metrics(result.policy, summary, tuple(apps), result.util_times, result.util_busy, topo.size, tenants,
                   result.config.tenancy.levels, tuple(j.jct for j in result.jobs))  # fmt: skip


#: The name the report gives the row of what Slurm really did (a replayed ``--format sacct`` history).
ACTUAL = "slurm (actual)"
#: Summary fields the record of a real cluster cannot give (NaN in that row): Slurm's own preemptions and
#: requeues are not in the export, and events, policy calls and wall time belong to a simulation.
ACTUAL_UNKNOWN: frozenset[str] = frozenset({"preemptions", "lost_gpu_h", "events", "policy_calls", "wall_s"})


def actual_metrics(trace: Trace, topology: Topology, default_profile: str | None = None,
                   tenancy: Tenancy = FLAT) -> Metrics | None:  # fmt: skip
    """The metrics of what really happened, from a trace that recorded each job's actual start and end.

    Same definitions as :func:`compute`, applied to Slurm's own times: a job is present from its arrival
    (submit) to its actual end; N(t) counts the apps with present jobs, an app's contention is the time
    average of max(1, N) over [first arrival, last end] and ``peak_gpus`` its peak concurrent demand; T_id
    uses :func:`app_t_id` on the cluster ``topology`` (the simulated one: describe the real cluster with
    it), with each job's work = its GPUs x its actual run time, as the simulator takes it. GPU time is
    what the jobs held (GPUs x run time); utilization is that over GPUs x makespan. The fields in
    ACTUAL_UNKNOWN are NaN. None when not every job has actual times. With tenancy levels (`tenancy`) an
    app's N(t) is its effective N among the apps with present jobs, as the simulator's
    (:func:`_nested_contention`).
    """
    jobs = trace.jobs
    if not jobs or not all(j.has_actual for j in jobs):
        return None
    profile = default_profile or SimConfig().default_profile
    end = {j.job_id: float(j.actual_end_s) for j in jobs}  # type: ignore[arg-type]
    start = {j.job_id: float(j.actual_start_s) for j in jobs}  # type: ignore[arg-type]
    by_app: dict[str, list[TraceJob]] = {}
    for j in jobs:
        by_app.setdefault(j.app_id, []).append(j)
    apps = _actual_apps(jobs, by_app, end, topology, profile, tenancy)
    rhos = np.array([x.rho for x in apps])
    busy = math.fsum(j.gpus * (end[j.job_id] - start[j.job_id]) for j in jobs)
    first = min(j.arrival_s for j in jobs)
    makespan = max(end.values()) - first
    util_times, util_busy = _busy_gpus(jobs, start, end)
    nan = math.nan
    summary = summarise(
        rhos, apps, busy, makespan, topology.size,
        jct_s=[end[j.job_id] - j.arrival_s for j in jobs], alone_s=[end[j.job_id] - start[j.job_id] for j in jobs],
        ideal_gpu_s=math.fsum(j.gpu_seconds for j in jobs), n_jobs=len(jobs),
        preemptions=nan, events=nan, policy_calls=nan, wall_s=nan, lost_work=nan,  # type: ignore[arg-type]
    )  # fmt: skip
    spans = [Span(j.app_id, j.arrival_s, end[j.job_id], ((start[j.job_id], end[j.job_id], j.gpus),)) for j in jobs]
    tenants = tenant_metrics(spans, apps, {a: js[0].account for a, js in by_app.items()})
    return Metrics(ACTUAL, summary, tuple(apps), tuple(util_times), tuple(util_busy), topology.size, tenants,
                   tenancy.levels, tuple(end[j.job_id] - j.arrival_s for j in jobs))  # fmt: skip


def _actual_apps(jobs: Sequence[TraceJob], by_app: Mapping[str, Sequence[TraceJob]], end: Mapping[str, float],
                 topology: Topology, profile: str, tenancy: Tenancy) -> list[AppMetrics]:  # fmt: skip
    """Each app's metrics from its jobs' actual ends (:func:`actual_metrics`): finish-time fairness against
    T_id at its time-averaged contention over [first arrival, last end]."""
    arrival = {a: min(j.arrival_s for j in js) for a, js in by_app.items()}
    finish = {a: max(end[j.job_id] for j in js) for a, js in by_app.items()}
    edges = _presence_edges(jobs, end)
    integral, peak = _contention_integral(edges, by_app)
    nested = None if tenancy.flat else _nested_contention(edges, by_app, arrival, finish, tenancy)
    model = FairnessModel(topology, topology.size)
    apps: list[AppMetrics] = []
    for a, js in by_app.items():
        t0, t1 = arrival[a], finish[a]
        if nested is not None:
            contention = nested[a]
        else:
            contention = max(1.0, (integral(t1) - integral(t0)) / (t1 - t0)) if t1 > t0 else 1.0
        work = [Job(j.job_id, a, j.gpus, j.gpus * j.duration_s, profile=j.model or profile, submit=j.arrival_s)
                for j in js]  # fmt: skip
        t_id = app_t_id(model, a, js[0].user, t0, contention, peak[a], work)
        t_sh = t1 - t0
        apps.append(AppMetrics(a, js[0].user, t0, t1, t_sh, t_id, t_sh / t_id if t_id > 0 else 1.0, contention,
                               peak[a], math.fsum(w.work for w in work), len(js)))  # fmt: skip
    return apps


def _presence_edges(jobs: Sequence[TraceJob], end: Mapping[str, float]) -> list[tuple[float, int, str, int]]:
    """(time, order: ends before arrivals, app, GPUs delta) for each job's arrival and actual end, in time
    order: a job is present from its arrival (submit) to its end."""
    edges: list[tuple[float, int, str, int]] = []
    for j in jobs:
        edges.append((j.arrival_s, 1, j.app_id, j.gpus))
        edges.append((end[j.job_id], 0, j.app_id, -j.gpus))
    edges.sort(key=lambda e: (e[0], e[1]))
    return edges


def _contention_integral(
    edges: Sequence[tuple[float, int, str, int]], by_app: Mapping[str, Sequence[TraceJob]]
) -> tuple[Callable[[float], float], dict[str, int]]:
    """The integral of max(1, N(t)) dt up to any time (N: the apps with present jobs; +1 when an app gets
    its first present job, -1 when its last present job ends), and each app's peak concurrent demand."""
    demand: dict[str, int] = dict.fromkeys(by_app, 0)
    present: dict[str, int] = dict.fromkeys(by_app, 0)
    peak: dict[str, int] = dict.fromkeys(by_app, 0)
    times, cint = [], []  # integral of max(1, N) dt up to each edge time
    now, total, n_active = edges[0][0], 0.0, 0
    for t, _, app, delta in edges:
        total += (t - now) * max(1, n_active)
        now = t
        was = present[app] > 0
        present[app] += 1 if delta > 0 else -1
        demand[app] += delta
        peak[app] = max(peak[app], demand[app])
        n_active += (present[app] > 0) - was
        times.append(t)
        cint.append(total)
    t_arr, c_arr = np.asarray(times), np.asarray(cint)

    def integral(t: float) -> float:
        return float(np.interp(t, t_arr, c_arr))

    return integral, peak


def _busy_gpus(jobs: Sequence[TraceJob], start: Mapping[str, float],
               end: Mapping[str, float]) -> tuple[list[float], list[int]]:  # fmt: skip
    """Busy GPUs over time, as SimResult.util_times/util_busy: the count after each change."""
    steps: dict[float, int] = {}
    for j in jobs:
        steps[start[j.job_id]] = steps.get(start[j.job_id], 0) + j.gpus
        steps[end[j.job_id]] = steps.get(end[j.job_id], 0) - j.gpus
    util_times, util_busy, level = [], [], 0
    for t in sorted(steps):
        level += steps[t]
        util_times.append(t)
        util_busy.append(level)
    return util_times, util_busy


def _nested_contention(edges: Sequence[tuple[float, int, str, int]], by_app: Mapping[str, Sequence[TraceJob]],
                       arrival: Mapping[str, float], finish: Mapping[str, float],
                       tenancy: Tenancy) -> dict[str, float]:  # fmt: skip
    """Each app's time-averaged effective N over [arrival, finish] under `tenancy`, from the edges of
    :func:`actual_metrics` (an app is present from a job's arrival to its end): the simulator's definition
    (sim/engine.py, "Tenancy"), an app with no present job keeping the N it last had."""
    shells = {a: App(a, js[0].user, arrival[a], account=js[0].account) for a, js in by_app.items()}
    present = dict.fromkeys(by_app, 0)
    active: dict[str, None] = {}  # apps with present jobs, in order of (re)activation, as the simulator's
    nint = dict.fromkeys(by_app, 0.0)
    nt = dict(arrival)
    ncur = dict.fromkeys(by_app, 1.0)
    for t, _, app, delta in edges:
        was = present[app] > 0
        present[app] += 1 if delta > 0 else -1
        if was == (present[app] > 0):
            continue
        for a in (*active, *(() if was else (app,))):
            nint[a] += (t - nt[a]) * ncur[a]
            nt[a] = t
        if was:
            del active[app]
        else:
            active[app] = None
        n = tenancy_contention(tenancy, [shells[a] for a in active])
        for a in active:
            ncur[a] = n[a]
    return {a: max(1.0, nint[a] / (finish[a] - arrival[a])) if finish[a] > arrival[a] else 1.0 for a in by_app}
