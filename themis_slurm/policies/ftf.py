"""Finish-time fairness as Gavel computes it: time fractions that minimise the largest rho, in rounds.

Narayanan et al. (Gavel), OSDI 2020, section 4.2 "Finish-time fairness": each round, the allocation X
minimises max_i rho_i(X), with rho_i = T_shared_i / T_isolated_i, and the round mechanism of
:mod:`.maxmin` (priority X_j / time received, suspending lower-priority jobs at round boundaries)
realises it. Shockwave (NSDI 2023) and Sia (SOSP 2023) run this policy and call it "Themis". It is the
strongest rival for Themis's own metric. Our implementation, for one GPU type and per app:

* rho_a(g) = (elapsed_a + max(remaining_a / g, path_a)) / T_id_a for an app given g GPUs on average, with
  T_id, remaining ideal work and remaining path from the core's FairnessModel (the same rho definition as
  Themis and the simulator's metrics). It does not increase with g.
* **Solve by bisection on the target r** (no LP solver): the least g_a with rho_a(g_a) <= r is
  remaining_a / (r T_id_a - elapsed_a) when r T_id_a > elapsed_a + path_a, else none; r is feasible when
  every app has one, at most its demand (the GPUs of all its jobs at once), and they sum to at most the
  GPUs. The smallest feasible r (to 1e-6 relative) is the optimum, as in Gavel's LP with one GPU type.
  When no r is feasible within 1e6 (an app that cannot catch up), every app gets its demand capped by
  water-filling.
* **Work conservation**: the GPUs the optimum does not need are water-filled over the apps' remaining
  demand (Gavel leaves the LP's slack to its mechanism; the effect is the same: no GPU idles while work
  waits).
* Then each app's GPUs are water-filled over its jobs, X_j = min(1, share / width), and the rounds of
  :class:`~themis_slurm.policies.maxmin.MaxMinPolicy` realise them (restart costs are the simulator's).
"""

from __future__ import annotations

from themis_slurm.core.fairness import FairnessModel
from themis_slurm.core.workload import App
from themis_slurm.policies.base import PolicyContext
from themis_slurm.policies.fairshare import job_time_fractions, water_fill
from themis_slurm.policies.maxmin import MaxMinPolicy

_MAX_RHO = 1e6


def needed_gpus(app: App, model: FairnessModel, now: float, r: float) -> float | None:
    """The least average GPUs that bring `app` to rho <= r (0 when it has no work), or None if none can."""
    t_id, remaining, path = model.facts(app)
    return _needed(t_id, remaining, path, max(0.0, now - app.arrival), r)


def _needed(t_id: float, remaining: float, path: float, elapsed: float, r: float) -> float | None:
    """:func:`needed_gpus` from an app's numbers."""
    if t_id <= 0 or remaining <= 0:
        return 0.0
    slack = r * t_id - elapsed
    if slack <= path:
        return None
    return remaining / slack


def ftf_shares(apps: list[App], model: FairnessModel, now: float, capacity: float) -> tuple[dict[str, float], float]:
    """(GPUs per app, the minimised max rho): bisection on r, then the slack water-filled.

    Each app's numbers are read once per call, not at each of the bisection's some 25 steps.
    """
    demand = {a.id: float(model.demand(a)) for a in apps}  # App.demand, from the pass that computes facts
    rows = []  # (t_id, remaining, path, elapsed, the most GPUs it may use) per app, in app order
    for a in apps:
        t_id, remaining, path = model.facts(a)
        rows.append((t_id, remaining, path, max(0.0, now - a.arrival), demand[a.id] + 1e-9))
    cap = capacity + 1e-9

    def need(r: float) -> list[float] | None:
        """Each app's needed GPUs at r, in app order, or None when r is not feasible."""
        out: list[float] = []
        total = 0.0
        for t_id, remaining, path, elapsed, most in rows:
            g = _needed(t_id, remaining, path, elapsed, r)
            if g is None or g > most:
                return None
            out.append(g)
            total += g
        return out if total <= cap else None

    hi = 1.0
    while need(hi) is None and hi < _MAX_RHO:
        hi *= 2.0
    if need(hi) is None:
        return water_fill(capacity, demand), float("inf")
    lo = 0.0
    while hi - lo > 1e-6 * hi:
        mid = (lo + hi) / 2.0
        if need(mid) is None:
            lo = mid
        else:
            hi = mid
    got = need(hi)
    assert got is not None
    shares = {a.id: g for a, g in zip(apps, got, strict=True)}
    extra = water_fill(capacity - sum(shares.values()), {a: demand[a] - g for a, g in shares.items()})
    return {a: g + extra[a] for a, g in shares.items()}, hi


class FtfPolicy(MaxMinPolicy):
    name = "ftf"
    grants_only_free_or_expired = False
    #: rho from estimated remaining work (see Policy)
    reads_estimates = True

    def __init__(self, quantum_s: float = 360.0) -> None:
        super().__init__(quantum_s)
        self.last_max_rho = float("nan")

    def fractions(self, ctx: PolicyContext, capacity: float) -> dict[str, float]:
        s = ctx.state
        model = FairnessModel(s.topology, s.cluster_gpus or s.topology.size)
        shares, self.last_max_rho = ftf_shares(list(s.apps), model, s.now, capacity)
        out: dict[str, float] = {}
        for a in s.apps:
            job_time_fractions(shares[a.id], a.jobs, out, model.demand(a))
        return out
