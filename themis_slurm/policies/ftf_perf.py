"""Finish-time fairness over GPU types, as Gavel's ``FinishTimeFairnessPolicyWithPerf`` (issue #37 part 2).

Gavel (Narayanan et al., OSDI 2020; stanford-futuredata/gavel ``scheduler/policies/finish_time_fairness.py``,
read for ideas, no code taken) gives each job a time fraction X_jt on every worker type t and minimises the
largest ``rho_j = (t_j + R_j / sum_t T_jt X_jt) / (t_j + R_j / T_iso_j)``, T_jt its measured throughput on t
and T_iso_j its throughput on the isolated allocation (``isolated.py``: 1/m of each type's workers per job,
divided by its scale factor, every row scaled down alike when some job's fractions would exceed 1).

Ours, per app, in the same GPU terms as :mod:`.ftf` (the homogeneous policy, whose rounds this reuses):

* an app's speed on type t is the work-weighted speed of its jobs there (core/gpu_types.py; a job that may
  not run on t adds 0), so an allocation of g_t GPUs of each type does ``X = sum_t g_t s_t`` work per second;
* its isolated rate is 1/N of each type at those speeds, its fastest first when it cannot use its whole
  share (FairnessModel's T_id, without the placement factor; Gavel scales every type's share down alike
  instead, a difference only for apps narrower than their share);
* ``rho(g) = (t + max(W / X, P)) / (C + max(W / X_iso, P))`` with P the longest job's remaining run on its own
  GPUs of its fastest type, and C the isolated time of the work done so far (as :mod:`.ftf`);
* min max rho by bisection on r, each step a linear feasibility problem (SciPy's HiGHS): every app's rate at
  least W / (r D - t), at most its demand in GPUs, each type's GPUs at most its count. At the optimum the
  GPUs left go where they add the most throughput (the LP maximises sum X at r*: Gavel's solver returns some
  point of the optimal face; this one is work-conserving);
* the rounds run on each app's GPUs summed over types (:class:`~.ftf.FtfPolicy`'s time fractions), and a job
  is placed on its app's types in the order of the GPUs the optimum gives it there, then anywhere it fits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from themis_slurm.core.gpu_types import job_types
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App

_MAX_RHO = 1e6


def rate_needed(remaining: float, isolated: float, elapsed: float, path: float, r: float) -> float | None:
    """The least rate (GPUs, or work per second over types) that finishes `remaining` by rho r, given the
    app's isolated finish time, elapsed time and critical path; 0 with no work, None if no rate can."""
    if remaining <= 0:
        return 0.0
    slack = r * isolated - elapsed
    if slack <= path or isolated <= 0:
        return None
    return remaining / slack


@dataclass(frozen=True)
class TypedRow:
    """One app's numbers: rho(g) = (elapsed + max(remaining / sum_t g_t speeds_t, path)) / isolated."""

    app_id: str
    isolated: float
    remaining: float
    path: float
    elapsed: float
    demand: float
    speeds: tuple[float, ...]  # per type of the cluster (Topology.type_nodes order)

    def needed(self, r: float) -> float | None:
        """The least work per second that brings the app to rho <= r (0 with no work), or None if none can."""
        return rate_needed(self.remaining, self.isolated, self.elapsed, self.path, r)


def app_speeds(topo: Topology, app: App) -> tuple[float, ...]:
    """The work-weighted speed of `app`'s jobs on each type (0 where none may run), in type_nodes order."""
    types = list(topo.type_nodes)
    total = sum(j.work for j in app.jobs)
    if total <= 0:
        return tuple(0.0 for _ in types)
    acc = dict.fromkeys(types, 0.0)
    for j in app.jobs:
        for t, s, _ in job_types(topo, j):
            acc[t] += j.work * s
    return tuple(acc[t] / total for t in types)


def isolated_rate(speeds: Sequence[float], counts: Sequence[float], share: float, demand: float) -> float:
    """Work per second on `share` of each type's GPUs (`counts`), at most `demand` GPUs, fastest first."""
    left, rate = demand, 0.0
    for s, c in sorted(zip(speeds, counts, strict=True), key=lambda e: -e[0]):
        if s <= 0 or left <= 0:
            continue
        take = min(c * share, left)
        rate += take * s
        left -= take
    return rate


def typed_min_max(rows: Sequence[TypedRow], counts: Sequence[float]) -> tuple[dict[str, list[float]], float]:
    """(GPUs of each type per app at the optimum, the minimised max rho); inf when no r up to 1e6 is
    feasible (then each app gets its demand water-filled over the types, fastest first)."""
    from scipy.optimize import linprog  # imported here: importing SciPy costs every `themis` command ~0.5 s

    n_t = len(counts)
    live = [r for r in rows if r.remaining > 0 and any(s > 0 for s in r.speeds)]
    out = {r.app_id: [0.0] * n_t for r in rows}
    if not live or sum(counts) <= 0:
        return out, math.inf
    var = [(i, t) for i, r in enumerate(live) for t in range(n_t) if r.speeds[t] > 0]

    def solve(r: float | None) -> list[float] | None:
        a_ub: list[list[float]] = []
        b_ub: list[float] = []
        for i, row in enumerate(live):
            if r is not None:
                need = row.needed(r)
                if need is None:
                    return None
                a_ub.append([-live[k].speeds[t] if k == i else 0.0 for k, t in var])
                b_ub.append(-need)
            a_ub.append([1.0 if k == i else 0.0 for k, _ in var])
            b_ub.append(row.demand)
        for t in range(n_t):
            a_ub.append([1.0 if tt == t else 0.0 for _, tt in var])
            b_ub.append(counts[t])
        cost = [-live[k].speeds[t] for k, t in var]  # the most work per second among the feasible points
        res = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
        return list(res.x) if res.status == 0 else None

    def feasible(r: float) -> bool:
        return solve(r) is not None

    lo = max((row.elapsed + row.path) / row.isolated for row in live if row.isolated > 0)
    hi = max(1.0, 2.0 * lo)
    while not feasible(hi) and hi < _MAX_RHO:
        hi *= 2.0
    if not feasible(hi):
        got, hi = solve(None), math.inf
    else:
        for _ in range(60):
            if hi - lo <= 1e-4 * hi:
                break
            mid = (lo + hi) / 2.0
            if feasible(mid):
                hi = mid
            else:
                lo = mid
        got = solve(hi)
    assert got is not None
    for (i, t), g in zip(var, got, strict=True):
        out[live[i].app_id][t] = max(0.0, g)
    return out, hi
