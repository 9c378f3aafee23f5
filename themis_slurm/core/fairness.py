"""Finish-time fairness: rho = T_sh / T_id (Themis, NSDI 2020, section 3).

Choices (docs/design.md, "Finish-time fairness", has the reasons):

* **T_id** is the app's finish time on a private 1/N share of the cluster:
  ``T_id = total_work / (min(max_parallelism, C / N) * best_factor)`` where C is the number of GPUs Themis
  schedules, N the app's time-averaged contention over its life so far (:class:`ContentionClock`), and
  best_factor the work-weighted placement factor of the app's jobs at the tightest level the hardware
  allows. An app that cannot use its whole share (max parallelism < C/N) is charged only for what it can
  use. The share is treated as fluid (a gang wider than C/N is time-sliced on it), as the authors'
  simulator does with max(1, demand / C).
* **T_sh** is elapsed time plus the remaining work at the throughput of the allocation being valued:
  ``T_sh = (now - arrival) + max(remaining_work / X, path)``, the authors' online estimate generalised to
  several jobs (an app keeps feeding its jobs into the GPUs it holds), with `path` the longest remaining
  job on its own gang: extra GPUs cannot finish an app before its longest job.
* **Pairs** (T_sh only): with m GPUs (X rounded up) and more than m one-GPU jobs, two of its m + 1
  longest jobs must share a GPU, one after the other, so T_sh is also floored by the sum of the m-th and
  (m+1)-th longest remaining run times (:func:`pair_floor`, the classic lower bound on the makespan of jobs
  on identical machines). The fluid remaining_work / X spreads a waiting job's work over GPUs that are
  busy with others, and put an app that had one job more than GPUs at rho 1.00 while that job waited.
  T_id keeps the fluid share: it is the yardstick the evaluation measures against (docs/design.md).
* **Critical path**: T_id is floored the same way, by the longest job's submit offset plus its run time on
  its own gang at the best placement (:func:`~themis_slurm.core.workload.job_path`): a private cluster of
  any size cannot finish a 5-hour one-GPU job in 3 hours. Without the floor an app of a few long one-GPU
  jobs has rho > 1 under every policy (the authors' after-the-fact T_ideal divides by max parallelism only).
* **No allocation** (X below ``idle_throughput``, default 0.1): T_sh is that of one GPU divided by
  idle_throughput, ``(elapsed + remaining) / 0.1``, so an app with nothing has exactly 10x the rho one
  GPU would give it, however long it has waited. rho, gains and hidden payments stay finite, and the
  first gang of an app with nothing is always worth at least log(10) in the auction. (Flooring X alone,
  ``elapsed + remaining / 0.1``, loses that ratio once elapsed time dominates: a small app that waited
  long then gains almost nothing from a GPU and loses every auction, a starvation spiral.)
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import is_

from themis_slurm.core.gpu_types import gang_speed
from themis_slurm.core.job_facts import SHARED, JobFactsCache
from themis_slurm.core.placement import get_profile, throughput
from themis_slurm.core.topology import Level, Topology
from themis_slurm.core.workload import App, Job


@dataclass(frozen=True, slots=True)
class ContentionClock:
    """Time-average of N (apps contending) over an app's life: integral of N dt divided by elapsed time.

    Pure value type: ``advance`` returns a new clock. Callers advance every app's clock at each event
    with the N that held since the previous event.
    """

    since: float
    last: float
    integral: float = 0.0
    current: float = 1.0

    @classmethod
    def start(cls, now: float, n: float) -> ContentionClock:
        return cls(since=now, last=now, integral=0.0, current=max(1.0, n))

    def advance(self, now: float, n: float) -> ContentionClock:
        """Account for the interval since the last call at the old N, then switch to the new N."""
        dt = max(0.0, now - self.last)
        return ContentionClock(self.since, max(now, self.last), self.integral + dt * self.current, max(1.0, n))

    @property
    def average(self) -> float:
        span = self.last - self.since
        return self.integral / span if span > 0 else self.current


@dataclass(frozen=True)
class FairnessModel:
    """Computes T_id, T_sh and rho for apps on one cluster.

    `job_facts` holds the per-job numbers (core/job_facts.py); a caller that keeps one cache across rounds
    passes it here (RoundState.start does); anyone else shares :data:`~themis_slurm.core.job_facts.SHARED`.
    """

    topology: Topology
    cluster_gpus: int
    idle_throughput: float = 0.1
    job_facts: JobFactsCache | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.cluster_gpus < 1:
            raise ValueError(f"cluster_gpus must be >= 1, got {self.cluster_gpus}")
        if not self.idle_throughput > 0:
            raise ValueError(f"idle_throughput must be > 0, got {self.idle_throughput}")
        if self.job_facts is None:  # the shared cache: same numbers, computed once per Job object
            SHARED.use(self.topology)
            object.__setattr__(self, "job_facts", SHARED)
        object.__setattr__(self, "_facts", {})  # id(app) -> (app, facts(app), demand(app), total_work(app))
        object.__setattr__(self, "_times", {})  # id(app) -> (app, one_gpu_times(app))

    def best_factor(self, job: Job) -> float:
        return self.job_facts.best_factor(job)  # type: ignore[union-attr]

    def t_id(self, app: App) -> float:
        """Finish time on a private 1/N share, from arrival (seconds): the fluid time, floored by the
        longest job (a gang cannot finish sooner than on all its GPUs, however big the share)."""
        return self.facts(app)[0]

    def facts(self, app: App) -> tuple[float, float, float]:
        """(T_id, remaining work, remaining path) of `app`, computed once per app and model (a round asks
        for each app's rho and builds its agent from the same numbers), in one pass over its jobs.

        T_id is ``max(total_work / (share x factor), path)`` (module docstring) with factor the
        work-weighted best placement factor of its jobs and path the latest any of its jobs (or a finished
        one) could end on a private cluster (:func:`~themis_slurm.core.workload.job_path`).
        """
        hit = self._facts.get(id(app))  # type: ignore[attr-defined]
        if hit is not None and hit[0] is app:  # the app is kept in the entry, so its id is not reused
            return hit[1]
        return self._compute(app)[1]

    def demand(self, app: App) -> int:
        """:attr:`App.demand` (GPUs all its unfinished jobs ask for at once), from the pass that computes
        :meth:`facts`: the ranking asks for it of every app every round."""
        hit = self._facts.get(id(app))  # type: ignore[attr-defined]
        if hit is not None and hit[0] is app:
            return hit[2]
        return self._compute(app)[2]

    def total_work(self, app: App) -> float:
        """The app's whole work, finished and not (ideal GPU-seconds, estimates for unfinished jobs): what
        its private-share run does in T_id (:func:`virtual_lateness`), from the pass that computes :meth:`facts`."""
        hit = self._facts.get(id(app))  # type: ignore[attr-defined]
        if hit is not None and hit[0] is app:
            return hit[3]
        return self._compute(app)[3]

    def share_rate(self, app: App) -> float:
        """The work per second of the app's private share, ``min(max_parallelism, C / N) x best_factor``
        (T_id's fluid denominator; 0 for an app with no work): how fast its private-share run gets through
        waiting jobs (the agent's order, core/agent.py :func:`~themis_slurm.core.agent.cannot_wait`)."""
        hit = self._facts.get(id(app))  # type: ignore[attr-defined]
        if hit is not None and hit[0] is app:
            return hit[4]
        return self._compute(app)[4]

    def _compute(self, app: App) -> tuple[App, tuple[float, float, float], int, float, float]:
        """facts(app) and demand(app) in one pass over its jobs, kept for the model's life."""
        cache = self.job_facts
        assert cache is not None
        arrival = app.arrival
        jobs = app.jobs
        # Running sums, one entry per job, in the app's job order. Jobs that are the same objects as last
        # round's at the same positions (a common prefix: jobs that waited and still wait, before the
        # first that ran or changed) keep their entries; the sums then continue from there exactly as one
        # pass over all jobs would (the same floats in the same order).
        seen = cache.sums.get(app.id)
        start = 0
        runs: list[tuple] = []
        if seen is not None and seen[1] == arrival:
            prev, runs, last = seen[0], seen[2], seen[3]
            if prev is jobs:
                start = len(jobs)
            elif (
                last
                and prev[:last] == jobs[:last]
                and (last == len(prev) or last == len(jobs) or prev[last] is not jobs[last])
            ):
                # last round's common prefix is the common prefix again (the waiting jobs that still wait,
                # the usual case): one comparison in C, each element the same object (or an equal job: the
                # same numbers), and the next job differs
                start = last
            else:  # the common prefix of the same objects, compared in C (map stops at the shorter one)
                same = list(map(is_, prev, jobs))
                try:
                    start = same.index(False)
                except ValueError:
                    start = len(same)
        if start < len(jobs):
            runs = runs[:start]  # a copy: the cached list is never changed (the API reads from other threads)
        if start:
            remaining, rem_path, work, work_factor, gpus, t_jobs = runs[start - 1]
        else:
            remaining = rem_path = work = work_factor = 0.0
            gpus = 0
            t_jobs = 0.0
        keep = cache.across_rounds
        if start < len(jobs):
            numbers = cache.numbers
            for j in jobs[start:]:
                j_rem, j_rem_per_gpu, j_work_factor, j_run_s = numbers(j)
                remaining += j_rem
                if j_rem_per_gpu > rem_path:
                    rem_path = j_rem_per_gpu
                work += j.work
                work_factor += j_work_factor
                gpus += j.gpus
                end = (j.submit - arrival if j.submit > arrival else 0.0) + j_run_s
                if end > t_jobs:
                    t_jobs = end
                if keep:
                    runs.append((remaining, rem_path, work, work_factor, gpus, t_jobs))
            if keep:
                cache.sums[app.id] = (jobs, arrival, runs, start)
        t_path = app.finished_path if app.finished_path >= t_jobs else t_jobs
        total = app.finished_work + work
        if total <= 0:
            t_id = rate = 0.0
        elif self.topology.heterogeneous and app.jobs:
            rate = self.typed_rate(app.jobs, work, float(max(app.peak_gpus, gpus)), app.contention)
            t_id = max(total / rate, t_path)
        else:
            share = min(float(max(app.peak_gpus, gpus)), self.cluster_gpus / max(1.0, app.contention))
            factor = work_factor / work if app.jobs else 1.0
            rate = max(share, 1e-9) * factor
            t_id = max(total / rate, t_path)
        entry = (app, (t_id, remaining, rem_path), gpus, total, rate)
        self._facts[id(app)] = entry  # type: ignore[attr-defined]
        return entry

    def typed_rate(self, jobs: Iterable[Job], work: float, parallelism: float, contention: float) -> float:
        """The work per second of an app's private share on a cluster of several GPU types (`jobs` its jobs,
        `work` the sum of their work, `contention` its N): 1/N of *each*
        type (C_t x C / |topology| / N GPUs of type t), each GPU at the work-weighted speed of the app's
        jobs there (a job that may not run on a type adds nothing to it), as Gavel's heterogeneity-aware
        isolated allocation gives each job 1/n of every type's time (stanford-futuredata/gavel,
        scheduler/policies/isolated.py). An app that can use fewer GPUs than its share (max parallelism)
        is charged for its fastest ones only: it would run there on a private cluster."""
        cache = self.job_facts
        assert cache is not None
        per_type: dict[str, float] = {}
        for j in jobs:
            for t, wf in cache.type_work(j):
                per_type[t] = per_type.get(t, 0.0) + wf
        topo = self.topology
        scale = self.cluster_gpus / topo.size / max(1.0, contention)
        left = parallelism
        rate = 0.0
        for t, wf in sorted(per_type.items(), key=lambda e: -e[1]):  # fastest for this app first
            take = min(topo.type_gpus[t] * scale, left)
            rate += take * wf / work
            left -= take
            if left <= 0.0:
                break
        return max(rate, 1e-9)

    def one_gpu_times(self, app: App) -> tuple[float, ...]:
        """The remaining run times of `app`'s one-GPU jobs, longest first (:func:`pair_floor`'s input); made
        when first asked for (only an allocation near the app's critical path needs it), once per model."""
        hit = self._times.get(id(app))  # type: ignore[attr-defined]
        if hit is not None and hit[0] is app:
            return hit[1]
        numbers = self.job_facts.numbers  # type: ignore[union-attr]
        times = tuple(sorted((numbers(j)[1] for j in app.jobs if j.gpus == 1), reverse=True))
        self._times[id(app)] = (app, times)  # type: ignore[attr-defined]
        return times

    def t_sh(self, app: App, now: float, throughput: float, kept: Collection[str] | None = None) -> float:
        """Estimated finish time in the shared cluster under an allocation of `throughput`.

        With `kept` (the ids of the jobs that hold the GPUs of that allocation), also the kept-GPU floor the
        round's agents apply (core/agent.py): the other jobs start only as those GPUs free up, so the
        longest of them ends no sooner than the soonest kept job's end plus its own run time."""
        _, remaining, path = self.facts(app)
        times = self.one_gpu_times(app) if _pairs_may_bind(remaining, throughput, path) else ()
        elapsed = max(0.0, now - app.arrival)
        finish = shared_finish(elapsed, remaining, throughput, self.idle_throughput, path, times)
        if kept and throughput >= self.idle_throughput:
            held = [j.remaining / j.gpus for j in app.jobs if j.id in kept]
            waiting = [j.remaining / j.gpus for j in app.jobs if j.id not in kept]
            if held and waiting:
                finish = max(finish, elapsed + min(held) + max(waiting))
        return finish

    def rho(self, app: App, now: float, throughput: float) -> float:
        """rho = T_sh / T_id; 1.0 for an app with no work at all."""
        tid = self.facts(app)[0]
        if tid <= 0:
            return 1.0
        return self.t_sh(app, now, throughput) / tid


def virtual_lateness(elapsed: float, t_id: float, total_work: float, remaining_after: float) -> float:
    """How late a waiting job is against its app's private-share pace: now minus its virtual finish time.

    The app's private-share run does its whole work W in T_id, at the pace W / T_id. Take its waiting jobs
    after the work already done and the work of the jobs that keep running: the run has done all work up
    to and including a job when only `remaining_after` is left, that is at T_id x (1 - remaining_after / W)
    after the app's arrival. The agent gives the k-th job of its bidding order the `remaining_after` of the
    k-th job of that run served shortest first (the remaining work of the n - k longest; core/agent.py
    _derive). The result is `elapsed` minus that: > 0 when the job is past its virtual finish time. The
    leftover hands out gangs latest first (earliest virtual deadline first, as weighted fair queueing serves
    virtual finish times; docs/design.md, "Leftover and work conservation"). A job's virtual finish time
    does not move while it runs or waits (while the app's jobs that cannot wait stay the same), so two apps
    do not take turns on the same GPUs; and a progress report, which only ever lowers remaining work, can
    make no position in the app's list of virtual finish times earlier (the work after the k-th position is
    a sum of the largest remaining works). An app with no work left to estimate is never late.
    """
    if total_work <= 0.0:
        return -math.inf
    return elapsed - t_id + t_id * remaining_after / total_work


def _pairs_may_bind(remaining: float, throughput: float, path: float) -> bool:
    """Whether :func:`pair_floor` can exceed max(remaining / X, path): it is at most twice the longest
    remaining one-GPU job, so not when the fluid finish is already twice the path (most apps, most X)."""
    return throughput >= 1.0 and remaining < 2.0 * path * throughput


def pair_floor(times: Sequence[float], throughput: float) -> float:
    """The earliest an app's one-GPU jobs can all end on `throughput` GPUs (`times`: their remaining run
    times, longest first): with m = ceil(X) GPUs and more than m such jobs, two of the m + 1 longest share a
    GPU, so the later of the two ends no sooner than ``times[m - 1] + times[m]``. 0 when it does not apply.

    Never rises with X (a larger m picks shorter jobs), and at one GPU never exceeds the remaining work, so
    T_sh keeps falling with X and the no-allocation rule (one GPU's T_sh / idle_throughput) is unchanged.
    """
    m = math.ceil(throughput - 1e-9)
    if 1 <= m < len(times):
        return times[m - 1] + times[m]
    return 0.0


def shared_finish(
    elapsed: float,
    remaining: float,
    throughput: float,
    idle_throughput: float,
    path: float = 0.0,
    one_gpu_times: Sequence[float] = (),
) -> float:
    """T_sh = elapsed + max(remaining / X, path, pair floor); with no allocation (X < idle_throughput), T_sh
    at one GPU divided by idle_throughput.

    `path` is the longest remaining job's run time on its own gang (:attr:`App.remaining_path`): more GPUs
    cannot finish the app before its longest job, so they stop lowering rho there, as in T_id's floor.
    `one_gpu_times` (the remaining run times of the app's one-GPU jobs, longest first) add
    :func:`pair_floor`: with fewer GPUs than such jobs, some of them run one after another.
    The no-allocation value keeps rho(nothing) = rho(one GPU) / idle_throughput for every elapsed time
    (module docstring): it is the largest T_sh for any X >= 0, so T_sh never increases with X.
    """
    if throughput >= idle_throughput:
        finish = max(remaining / throughput, path)
        if one_gpu_times:
            finish = max(finish, pair_floor(one_gpu_times, throughput))
        return elapsed + finish
    return (elapsed + max(remaining, path)) / idle_throughput


def job_throughput(job: Job, gpus: Iterable[int], topology: Topology) -> float:
    """Ideal GPU-seconds per second for `job` on the GPU set `gpus` (placement model)."""
    gpus = list(gpus)
    if not gpus:
        return 0.0
    x = throughput(len(gpus), topology.level_of(gpus), get_profile(job.profile))
    return x * gang_speed(topology, job, gpus) if topology.heterogeneous else x


def app_throughput(
    jobs: Mapping[str, Job], holdings: Mapping[str, Iterable[int]], topology: Topology
) -> float:
    """Total throughput of the jobs in `holdings` (job id -> GPUs)."""
    return sum(job_throughput(jobs[jid], g, topology) for jid, g in holdings.items() if jid in jobs)


__all__ = ["ContentionClock", "FairnessModel", "Level", "app_throughput", "job_throughput", "pair_floor",
           "shared_finish"]
