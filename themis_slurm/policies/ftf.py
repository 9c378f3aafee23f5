"""Finish-time fairness as Gavel computes it: time fractions that minimise the largest rho, in rounds.

Narayanan et al. (Gavel), OSDI 2020, section 4.2 "Finish-time fairness" (after Themis): the allocation X
minimises max_i rho_i(X), and the round mechanism of :mod:`.maxmin` (Gavel's priorities, deficits and
recomputation on every arrival and departure) realises it. Shockwave (NSDI 2023) and Sia (SOSP 2023) run
this policy and call it "Themis". It is the strongest rival for Themis's own metric. What Gavel does is
read from stanford-futuredata/gavel at c4fa400 (MIT licence; the commit of
``../shared/traces/gavel/reference``), ``scheduler/policies/finish_time_fairness.py``
(``FinishTimeFairnessPolicyWithPerf``, which ``FinishTimeFairnessPolicy`` calls with the V100
throughputs) and ``scheduler/policies/isolated.py``:

* **rho_i(X) = (t_i + R_i / (T_i X_i)) / (C_i + R_i / T_iso_i)**: t_i the time since the job arrived, R_i its
  remaining steps, T_i its throughput, so R_i / (T_i X_i) is its remaining run time at time fraction X_i.
  The isolated throughput is T_iso_i = T_i x_iso_i with x_iso_i = min(1, GPUs / (m s_i)) (``isolated.py``:
  an equal 1/m of the GPUs for each of the m jobs, capped at the job's s_i GPUs), and C_i is the time the
  steps done so far would have taken at the isolated throughputs: at each recomputation the steps done since
  the previous one over the isolated throughput then (``_cumulative_isolated_time``). So rho is the finish
  time the allocation promises over the one an equal share would have given, past and future.
* Minimised over X subject to sum_i s_i X_i <= GPUs and 0 <= X_i <= 1 (``policy.py``), by ECOS.

Ours, per app (each job its own app is Gavel's case): the same rho in GPU terms, an app's remaining work W
(ideal GPU-seconds) at G GPUs taking max(W / G, P) with P its longest job's remaining run on its own GPUs;
the isolated share G_iso = min(demand, GPUs x the app's fraction of the cluster) (1/N flat; the nested share
with tenancy levels); C the app's work done, each recomputation adding the work since the previous one over
the G_iso of that previous one.

* **Solved by bisection on the target r** (no LP solver): the least G with rho_a(G) <= r is
  W / (r D_a - t_a) when r D_a - t_a > P, with D_a = C_a + max(W / G_iso_a, P); r is feasible when every app
  has one, at most its demand, and they sum to at most the GPUs. The smallest feasible r (1e-6 relative) is
  the LP's optimum. When no r is feasible within 1e6, the demands are water-filled.
* **The GPUs the optimum leaves** (while the cluster is not full of jobs, or one app's demand caps it, every
  other app has room above its least G): the LP pins only the maximum and ECOS returns some point of the
  optimal face. We take the face's analytic centre, where an interior-point method's central path ends:
  it maximises sum_a [2 log(G_a - least_a) + log(demand_a - G_a)] + log(GPUs - sum_a G_a) (the LP's log
  barriers, with the cone variable of each 1/X at its best; docs/eval/discussion.md derives it), solved by
  bisection on its one multiplier. ECOS stops short of it (measured there: its point differs by up to 0.2
  in X), and which point of the face is taken moves the max rho of a trace by several percent.
  Then each app's GPUs over its jobs, X_j = min(1, share / width).

On a cluster of several GPU types the same rho is minimised over GPUs of each type, as Gavel's
``FinishTimeFairnessPolicyWithPerf`` (:mod:`.ftf_perf`), and the rounds place each app's jobs on the types
its optimum gives it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from themis_slurm.core.tenancy import fractions as tenancy_fractions
from themis_slurm.core.workload import App, Job
from themis_slurm.policies.base import PolicyContext
from themis_slurm.policies.fairshare import job_time_fractions, water_fill
from themis_slurm.policies.ftf_perf import TypedRow, app_speeds, isolated_rate, rate_needed, typed_min_max
from themis_slurm.policies.maxmin import MaxMinPolicy
from themis_slurm.policies.scratchpad import BaselineScratchpad

_MAX_RHO = 1e6


@dataclass(frozen=True)
class FtfRow:
    """One app's numbers for the min-max: rho(G) = (elapsed + max(remaining / G, path)) / isolated."""

    app_id: str
    isolated: float  # D: C + the remaining run at the isolated share (seconds)
    remaining: float  # W: ideal GPU-seconds still to do
    path: float  # P: the longest job's remaining run on its own GPUs (seconds)
    elapsed: float  # t: seconds since the app arrived
    demand: float  # the most GPUs it can use at once

    def needed(self, r: float) -> float | None:
        """The least average GPUs that bring the app to rho <= r (0 with no work), or None if none can."""
        return rate_needed(self.remaining, self.isolated, self.elapsed, self.path, r)

    def rho(self, gpus: float) -> float:
        if self.remaining <= 0:
            return 0.0
        if gpus <= 0:
            return math.inf
        return (self.elapsed + max(self.remaining / gpus, self.path)) / self.isolated


def min_max_rho(rows: Sequence[FtfRow], capacity: float) -> tuple[dict[str, float], float]:
    """(the least GPUs per app at the optimum, the minimised max rho): bisection on r (module docstring),
    from the lowest max rho any allocation could have (every app at its demand). When no r up to 1e6 is
    feasible (an app that cannot catch up) or there are no GPUs, the demands water-filled and inf."""
    if capacity <= 0 or not rows:
        return {r.app_id: 0.0 for r in rows}, math.inf
    cap = capacity + 1e-9

    def need(r: float) -> list[float] | None:
        out: list[float] = []
        total = 0.0
        for row in rows:
            g = row.needed(r)
            if g is None or g > row.demand + 1e-9:
                return None
            out.append(g)
            total += g
        return out if total <= cap else None

    lo = max(row.rho(row.demand) for row in rows) * (1.0 - 1e-9)
    hi = max(1.0, lo)
    while need(hi) is None and hi < _MAX_RHO:
        hi *= 2.0
    if need(hi) is None:
        return water_fill(capacity, {r.app_id: r.demand for r in rows}), math.inf
    for _ in range(200):  # 1e-6 relative takes some 25 halvings; the bound only guards the arithmetic
        if hi - lo <= 1e-6 * hi:
            break
        mid = (lo + hi) / 2.0
        if need(mid) is None:
            lo = mid
        else:
            hi = mid
    got = need(hi)
    assert got is not None
    return {row.app_id: min(g, row.demand) for row, g in zip(rows, got, strict=True)}, hi


def centre(least: dict[str, float], demand: dict[str, float], capacity: float) -> dict[str, float]:
    """The analytic centre of {least_a <= G_a <= demand_a, sum G_a <= capacity}, weighted as ECOS's cone
    constraints weigh it (module docstring): maximise sum 2 log(G - least) + log(demand - G) + log(capacity -
    sum G). For a multiplier lam the stationary G of each app solves 2 / y - 1 / (w - y) = lam with y = G - least,
    w = demand - least (the smaller root of lam y^2 - (lam w + 3) y + 2 w = 0); lam is found by bisection
    so that lam (capacity - sum G) = 1. Apps with no room keep their least."""
    room = {a: demand[a] - g for a, g in least.items() if demand[a] - g > 1e-12}
    spare = capacity - sum(least.values())
    if not room or spare <= 1e-12:
        return dict(least)

    def ys(lam: float) -> dict[str, float]:
        out = {}
        for a, w in room.items():
            b = lam * w + 3.0
            out[a] = (b - math.sqrt(max(0.0, b * b - 8.0 * lam * w))) / (2.0 * lam)
        return out

    def excess(lam: float) -> float:  # increasing in lam; its root is the centre's multiplier
        return lam * (spare - sum(ys(lam).values())) - 1.0

    lo, hi = 1e-12, 1.0
    while excess(hi) < 0:
        hi *= 2.0
    while excess(lo) > 0:
        lo /= 2.0
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        if excess(mid) < 0:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    y = ys(hi)
    return {a: g + y.get(a, 0.0) for a, g in least.items()}


class FtfPolicy(MaxMinPolicy):
    name = "ftf"
    grants_only_free_or_expired = False
    #: rho from estimated remaining work (see Policy)
    reads_estimates = True

    def __init__(self, quantum_s: float = 360.0) -> None:
        super().__init__(quantum_s)
        self.last_max_rho = float("nan")
        #: per app, on a cluster of several GPU types: the types in the order of the GPUs the optimum gives it
        #: there (policies/ftf_perf.py), where its jobs are placed first
        self._prefer: dict[str, tuple[str, ...]] = {}
        # per app: the isolated time its work done so far would have taken (Gavel's C), and the work done
        # and isolated share at the last recomputation
        self._iso_time: dict[str, float] = {}
        self._last: dict[str, tuple[float, float]] = {}

    def rows(self, ctx: PolicyContext, capacity: float) -> list[FtfRow]:
        """Each app's numbers now, with its isolated time brought up to date (which this commits: call it
        once per recomputation of X, as Gavel calls its policy)."""
        s = ctx.state
        apps: Sequence[App] = s.apps
        share = tenancy_fractions(s.tenancy, apps)
        rows: list[FtfRow] = []
        last: dict[str, tuple[float, float]] = {}
        for a in apps:
            demand = float(a.demand)
            iso_gpus = min(demand, capacity * share[a.id])
            done = a.finished_work + sum(j.done for j in a.jobs)
            c = self._iso_time.get(a.id, 0.0)
            if a.id in self._last:
                done_before, iso_before = self._last[a.id]
                if iso_before > 0:  # no GPUs at all (every one unavailable) counts no isolated time
                    c += max(0.0, done - done_before) / iso_before
            self._iso_time[a.id] = c
            last[a.id] = (done, iso_gpus)
            remaining, path = a.remaining_work, a.remaining_path
            isolated = c + max(remaining / iso_gpus, path) if iso_gpus > 0 else math.inf
            rows.append(FtfRow(a.id, isolated, remaining, path, max(0.0, s.now - a.arrival), demand))
        self._last = last
        for gone in [aid for aid in self._iso_time if aid not in last]:
            del self._iso_time[gone]
        return rows

    def fractions(self, ctx: PolicyContext, capacity: float) -> dict[str, float]:
        if ctx.state.topology.heterogeneous:
            return self._typed_fractions(ctx, capacity)
        rows = self.rows(ctx, capacity)
        least, self.last_max_rho = min_max_rho(rows, capacity)
        demand = {r.app_id: r.demand for r in rows}
        shares = centre(least, demand, capacity) if math.isfinite(self.last_max_rho) else least
        out: dict[str, float] = {}
        for a in ctx.state.apps:
            job_time_fractions(shares[a.id], a.jobs, out, a.demand)
        return out

    # ----------------------------------------------------------------- several GPU types (policies/ftf_perf.py)
    def _typed_rows(self, ctx: PolicyContext, capacity: float) -> list[TypedRow]:
        """:meth:`rows` over GPU types: speeds per type, the isolated rate over 1/N of each type."""
        s = ctx.state
        topo = s.topology
        counts = [topo.type_gpus[t] * capacity / topo.size for t in topo.type_nodes]
        share = tenancy_fractions(s.tenancy, s.apps)
        rows: list[TypedRow] = []
        last: dict[str, tuple[float, float]] = {}
        for a in s.apps:
            speeds = app_speeds(topo, a)
            iso = isolated_rate(speeds, counts, share[a.id], float(a.demand))
            done = a.finished_work + sum(j.done for j in a.jobs)
            c = self._iso_time.get(a.id, 0.0)
            if a.id in self._last:
                done_before, iso_before = self._last[a.id]
                if iso_before > 0:
                    c += max(0.0, done - done_before) / iso_before
            self._iso_time[a.id] = c
            last[a.id] = (done, iso)
            fastest = max(speeds, default=0.0)
            path = max((j.remaining / (j.gpus * fastest) for j in a.jobs), default=0.0) if fastest > 0 else 0.0
            remaining = a.remaining_work
            isolated = c + max(remaining / iso, path) if iso > 0 else math.inf
            rows.append(TypedRow(a.id, isolated, remaining, path, max(0.0, s.now - a.arrival), float(a.demand),
                                 speeds))  # fmt: skip
        self._last = last
        for gone in [aid for aid in self._iso_time if aid not in last]:
            del self._iso_time[gone]
        return rows

    def _typed_fractions(self, ctx: PolicyContext, capacity: float) -> dict[str, float]:
        topo = ctx.state.topology
        types = list(topo.type_nodes)
        counts = [topo.type_gpus[t] * capacity / topo.size for t in types]
        got, self.last_max_rho = typed_min_max(self._typed_rows(ctx, capacity), counts)
        out: dict[str, float] = {}
        self._prefer = {}
        for a in ctx.state.apps:
            g = got.get(a.id, [0.0] * len(types))
            self._prefer[a.id] = tuple(t for t, x in sorted(zip(types, g, strict=True), key=lambda e: -e[1])
                                       if x > 1e-9)  # fmt: skip
            job_time_fractions(sum(g), a.jobs, out, a.demand)
        return out

    def _fit(self, pad: BaselineScratchpad, job: Job) -> frozenset[int] | None:
        """On several GPU types: the types the optimum gives the job's app, most GPUs first, then anywhere."""
        prefer = self._prefer.get(job.app_id) if pad.pool.topo.heterogeneous else None
        for t in prefer or ():
            got = pad.fit(job, within=pad.pool.topo.type_nodes[t])
            if got is not None:
                return got
        return pad.fit(job)
