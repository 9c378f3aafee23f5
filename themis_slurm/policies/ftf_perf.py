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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from themis_slurm.core.gpu_types import job_types
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App

if TYPE_CHECKING:  # numpy and SciPy are imported where the LP is built (importing them costs every command)
    import numpy as np

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
    feasible (then each app gets its demand water-filled over the types, fastest first).

    The LP's matrix is built once per call, as a sparse one; only the rates needed change with r. The LP
    calls are this policy's cost: on the paper workload over two types, 17 solves of ~3 ms per
    recomputation, most of it SciPy's per-call setup (measured; built row by row as Python lists, twice
    that). Starting the search at the previous optimum saved another third, but moved the results more than
    it saved: which of the equally optimal points HiGHS returns depends on the path, and ftf's max rho over
    types follows that point chaotically (docs/eval/discussion.md).
    """
    n_t = len(counts)
    live = [r for r in rows if r.remaining > 0 and any(s > 0 for s in r.speeds)]
    out = {r.app_id: [0.0] * n_t for r in rows}
    if not live or sum(counts) <= 0:
        return out, math.inf
    lp = _TypedLp(live, counts)
    # lo is infeasible: some app's slack is at most its critical path there
    lo = max((row.elapsed + row.path) / row.isolated for row in live if row.isolated > 0)
    hi, got = _least_feasible(lp.solve, lo)
    if got is None:
        got, hi = lp.solve(None), math.inf
    assert got is not None
    for (i, t), g in zip(lp.var, got, strict=True):
        out[live[i].app_id][t] = max(0.0, float(g))
    return out, hi


class _TypedLp:
    """The feasibility LP of :func:`typed_min_max` for its live apps: variables g_it (GPUs of type t to app i,
    only where i runs on t); rows: each app's rate >= its need at r (as -rate <= -need), then its demand,
    then each type's GPUs; the objective, the most work per second among the feasible points."""

    def __init__(self, live: Sequence[TypedRow], counts: Sequence[float]) -> None:
        import numpy as np
        from scipy.sparse import csr_array, vstack

        self.live = live
        self.var = [(i, t) for i, r in enumerate(live) for t in range(len(counts)) if r.speeds[t] > 0]
        n_a, n_v = len(live), len(self.var)
        cols = np.arange(n_v)
        app_of = np.array([i for i, _ in self.var])
        speed = np.array([live[i].speeds[t] for i, t in self.var])
        ones = np.ones(n_v)
        a_rate = csr_array((-speed, (app_of, cols)), shape=(n_a, n_v))
        by_type = csr_array((ones, (np.array([t for _, t in self.var]), cols)), shape=(len(counts), n_v))
        self.a_cap = vstack([csr_array((ones, (app_of, cols)), shape=(n_a, n_v)), by_type]).tocsr()
        self.b_cap = np.array([row.demand for row in live] + list(counts), dtype=float)
        self.a_all = vstack([a_rate, self.a_cap]).tocsr()
        self.cost = -speed

    def solve(self, r: float | None) -> np.ndarray | None:
        """The point at rho <= r (None: without the rate rows), or None when there is none."""
        # imported here: importing SciPy costs every `themis` command ~0.5 s
        import numpy as np
        from scipy.optimize import linprog

        if r is None:
            a, b = self.a_cap, self.b_cap
        else:
            need = [row.needed(r) for row in self.live]
            if any(n is None for n in need):
                return None
            a, b = self.a_all, np.concatenate([-np.array(need, dtype=float), self.b_cap])
        res = linprog(self.cost, A_ub=a, b_ub=b, bounds=(0, None), method="highs")
        return res.x if res.status == 0 else None


def _least_feasible(solve: Callable[[float], np.ndarray | None], lo: float) -> tuple[float, np.ndarray | None]:
    """The least r (within 1e-4 of it) at which `solve` finds a point, and that point, given `lo`
    infeasible: doubling from 2 lo to a bracket, then bisection; (inf, None) when none up to 1e6."""
    hi = max(1.0, 2.0 * lo)
    while (got := solve(hi)) is None and hi < _MAX_RHO:
        lo, hi = hi, 2.0 * hi
    if got is None:
        return math.inf, None
    for _ in range(60):
        if hi - lo <= 1e-4 * hi:
            break
        mid = (lo + hi) / 2.0
        if (x := solve(mid)) is not None:
            hi, got = mid, x
        else:
            lo = mid
    return hi, got
