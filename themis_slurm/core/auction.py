"""Winner determination: the solvers of the partial allocation mechanism.

Winner determination picks at most one bundle per app, no GPU twice, maximising the sum over bidders of
log(rho_base / rho), i.e. the product of 1/rho (Nash social welfare; Themis NSDI 2020 section 4, after
Cole, Gkatzelis and Goel's partial allocation mechanism). Two solvers, each with a ``solve(agents, pool)``:

* :class:`ExactSolver` -- a MILP (scipy.optimize.milp, HiGHS) over every bidder's valuation table plus
  placement alternatives (packed within each rack, and each node on small clusters) and the fast solver's
  own bundles (with and without each bidder), so that it is never worse than the fast solver. The
  oracle, and used for small rounds. Instances of one or two apps (most of them: rounds with one or two
  bidders, and the payments' re-solves without a winner) are solved by enumeration instead, exactly, with
  ties broken towards fewer GPUs (:meth:`ExactSolver._enumerate`); small ones of more apps (a round at a
  lease expiry offers one GPU to a few bidders) by a bounded depth-first search
  (:meth:`ExactSolver._branch_and_bound`). Larger ones first get the LP relaxation, whose optimum is
  nearly always integral and then needs no branch and bound (:meth:`ExactSolver._lp_integral`).
* :class:`FastSolver` -- greedy on marginal log-gain per GPU with lazy placement (the greedy fill,
  core/fill.py, which the fast hidden payments and the leftover share): every app waits in a heap under
  an upper bound of its next gang's priority and is placed only when it reaches the top, against the live
  pool. The objective is concave in each app's throughput, which is why marginal greedy gets within a
  hair of the optimum (tests/unit/core/test_auction.py measures it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from themis_slurm.core.agent import Agent, Bundle, Gang
from themis_slurm.core.fill import FILL_ORDERS as FILL_ORDERS  # re-exported: where callers name the orders
from themis_slurm.core.fill import greedy_fill
from themis_slurm.core.placement import Pool

if TYPE_CHECKING:
    import numpy as np
    from scipy.sparse import csr_array


@dataclass(frozen=True)
class Allocation:
    """Winner determination's answer: the bundle each winning app gets (apps with nothing are absent)."""

    bundles: Mapping[str, Bundle]
    objective: float  # sum of log-gains over winners
    solver: str

    @property
    def gpus(self) -> frozenset[int]:
        return frozenset().union(*(b.gpus for b in self.bundles.values()))


# ------------------------------------------------------------------------------------------- fast
class FastSolver:
    """Greedy winner determination with a bounded local search (see module docstring).

    Runs the density greedy; on rounds of at most `search_max_jobs` waiting jobs also the absolute-gain
    greedy, the density greedy after placing first the first gang of each of the `seeds` apps whose first
    gang is worth the most, and a ruin-and-recreate pass over the winners (single winners, and pairs when
    there are at most `pair_max_winners`; only when some bidder waits with a gang of two or more GPUs:
    the pass repairs gang packing, and one-GPU gangs have none to repair: measured, it improved 0.1% of
    such rounds, without changing a run's max rho); keeps the best. Each greedy run is O(gangs log apps)
    placements; large rounds get the plain greedy only, which is where it is closest to optimal.
    """

    name = "fast"

    def __init__(
        self, seeds: int = 8, improve_max_winners: int = 64, pair_max_winners: int = 12, search_max_jobs: int = 160
    ) -> None:
        self.search_max_jobs = search_max_jobs
        self.seeds = seeds
        self.improve_max_winners = improve_max_winners
        self.pair_max_winners = pair_max_winners

    def solve(self, agents: Sequence[Agent], pool: Pool) -> Allocation:
        by_id = {a.app_id: a for a in agents}

        def value(got: Mapping[str, Sequence[Gang]]) -> float:
            return sum(by_id[aid].bundle(g).gain for aid, g in got.items())

        best = greedy_fill(agents, pool.copy())
        if sum(len(a.jobs) for a in agents) > self.search_max_jobs:
            bundles = {aid: by_id[aid].bundle(gangs) for aid, gangs in best.items()}
            return Allocation(bundles, sum(b.gain for b in bundles.values()), self.name)
        best_v = value(best)
        # Tries that would repeat the first fill exactly are left out: with one-GPU gangs only, a gang's
        # gain per GPU is its gain ("gain" orders the heap the same); `elastic_small` changes only the offers
        # of elastic gangs of two or more GPUs. Most rounds of a paper-size run are one-GPU rounds.
        one_gpu = all(j.gpus == 1 for a in agents for j in a.jobs)
        tries: list[tuple[str, Gang | None, bool]] = []
        if not one_gpu:
            tries.append(("gain", None, True))
            if any(j.elastic for a in agents for j in a.jobs if j.gpus > 1):
                tries.append(("density", None, False))
        firsts: list[tuple[float, str, Gang]] = []
        for a in agents:
            for job in a.jobs:
                gang = a.place(job, pool)
                if gang is not None:
                    firsts.append((a.gain_of(gang.throughput), a.app_id, gang))
                    break
        firsts.sort(key=lambda t: (-t[0], t[1]))
        tries += [("density", gang, True) for _, _, gang in firsts[: self.seeds]]
        owner = {g.job_id: aid for _, aid, g in firsts}
        for by, seed, small in tries:
            work = pool.copy()
            start: dict[str, list[Gang]] = {}
            if seed is not None:
                work.take(seed.gpus)
                start[owner[seed.job_id]] = [seed]
            got = greedy_fill(agents, work, start, by=by, elastic_small=small)
            v = value(got)
            if v > best_v + 1e-12:
                best, best_v = got, v
        # one bidder: ruining its gangs and refilling repeats the first fill and the "gain" try above
        # exactly (the same greedy on the same pool), so the search cannot improve on them; with f = 0.9
        # most rounds have one bidder, and the search was a quarter of a paper-size simulation. Only
        # one-GPU gangs: nothing to repack (docs/eval/design-journal.md, "Fast": it improved 0.1% of such rounds)
        if len(agents) > 1 and len(best) <= self.improve_max_winners and not one_gpu:
            best, best_v = self._ruin_and_recreate(agents, pool, best, best_v, value)
        bundles = {aid: by_id[aid].bundle(gangs) for aid, gangs in best.items()}
        return Allocation(bundles, sum(b.gain for b in bundles.values()), self.name)

    def _ruin_and_recreate(self, agents, pool, best, best_v, value):
        """Local search: take one winner's gangs away, let the others refill first, then everyone."""
        improved = True
        passes = 0
        while improved and passes < 2:
            improved, passes = False, passes + 1
            winners = sorted(best)
            ruins: list[tuple[str, ...]] = [(a,) for a in winners]
            if len(winners) <= self.pair_max_winners:
                ruins += [(a, b) for i, a in enumerate(winners) for b in winners[i + 1 :]]
            for ruin in ruins:
                work = pool.copy()
                start = {k: list(g) for k, g in best.items() if k not in ruin}
                for gangs in start.values():
                    work.take(frozenset().union(*(g.gpus for g in gangs)))
                others = [a for a in agents if a.app_id not in ruin]
                for by in ("density", "gain"):
                    w2 = work.copy()
                    got = greedy_fill(others, w2, start, by=by)
                    got = greedy_fill(agents, w2, got, by=by)
                    v = value(got)
                    if v > best_v + 1e-12:
                        best, best_v, improved = got, v, True
        return best, best_v


# ------------------------------------------------------------------------------------------- exact
#: Search nodes :meth:`ExactSolver._branch_and_bound` may visit before it leaves an instance to the LP and
#: MILP (about a millisecond of Python; a deterministic budget, so a seeded run decides the same).
BNB_MAX_NODES = 2000


class ExactSolver:
    """MILP winner determination over explicit valuation tables (see module docstring).

    `node_alternatives` adds bundles packed within each single node (worth it on small clusters only);
    `time_limit_s` bounds HiGHS (the answer is then the best found so far).
    """

    name = "exact"

    def __init__(self, node_alternatives: bool = True, time_limit_s: float = 60.0) -> None:
        self.node_alternatives = node_alternatives
        self.time_limit_s = time_limit_s

    def candidates(self, agents: Sequence[Agent], pool: Pool) -> list[Bundle]:
        """Every bidder's valuation table with placement alternatives, deduplicated."""
        out: dict[tuple[str, frozenset[int], frozenset[str]], Bundle] = {}

        def add(b: Bundle) -> None:
            key = (b.app_id, b.gpus, frozenset(g.job_id for g in b.gangs))
            if key not in out or out[key].gain < b.gain:
                out[key] = b

        topo = pool.topo
        # One GPU: every bundle is one gang on it, worth the same to an app unless it renews a lease in
        # place, and valuations() puts lease holders first. Packing within its rack or node repeats those
        # bundles, and the fast solver could only add bundles of equal or lower value after them (so the
        # search keeps the same choice). Most rounds of a run with a round at every lease expiry are so.
        one_gpu = pool.size <= 1
        for a in agents:
            for b in a.valuations(pool):
                add(b)
            if one_gpu:
                continue
            if len(topo.rack_nodes) > 1:
                for nodes in topo.rack_nodes.values():
                    for b in a.valuations(pool, within=nodes):
                        add(b)
            if self.node_alternatives:
                for node in topo.nodes:
                    if pool.node_free(node):
                        for b in a.valuations(pool, within=[node]):
                            add(b)
        if one_gpu:
            return list(out.values())
        fast = FastSolver()
        for b in fast.solve(agents, pool).bundles.values():
            add(b)
        if 1 < len(agents) <= 16:  # the fast x*_{-i}: exact payments never worse than the fast ones
            for a in agents:
                for b in fast.solve([o for o in agents if o is not a], pool).bundles.values():
                    add(b)
        return list(out.values())

    def solve(self, agents: Sequence[Agent], pool: Pool) -> Allocation:
        return self.solve_candidates(self.candidates(agents, pool))

    def solve_candidates(self, cands: Sequence[Bundle], exclude: str | None = None) -> Allocation:
        """Optimal choice among explicit bundles (optionally without one app's bundles)."""
        cands = [b for b in cands if b.app_id != exclude and b.gain > 0]
        if not cands:
            return Allocation({}, 0.0, self.name)
        apps = sorted({b.app_id for b in cands})
        if len(apps) <= 2:
            return self._enumerate(cands, apps)
        small = self._branch_and_bound(cands, apps)
        if small is not None:
            return small
        # numpy/scipy only here, where a MILP is solved: importing them costs ~0.5 s, which every `themis`
        # command (through the config's ArbiterConfig) would otherwise pay
        import numpy as np
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import csr_array

        gpus = sorted(set().union(*(b.gpus for b in cands)))
        arow = {a: i for i, a in enumerate(apps)}
        grow = {g: len(apps) + i for i, g in enumerate(gpus)}
        rows, cols = [], []
        for k, b in enumerate(cands):
            rows.append(arow[b.app_id])
            cols.append(k)
            for g in b.gpus:
                rows.append(grow[g])
                cols.append(k)
        a_mat = csr_array((np.ones(len(rows)), (rows, cols)), shape=(len(apps) + len(gpus), len(cands)))
        gains = -np.array([b.gain for b in cands])
        chosen = self._lp_integral(cands, gains, a_mat)
        if chosen is None:
            res = milp(
                c=gains,
                constraints=[LinearConstraint(a_mat, -np.inf, 1.0)],
                integrality=np.ones(len(cands)),
                bounds=Bounds(0, 1),
                options={"time_limit": self.time_limit_s},
            )
            if res.x is None:
                raise RuntimeError(f"exact winner determination failed: {res.message}")
            chosen = [cands[k] for k in np.flatnonzero(res.x > 0.5)]
        bundles = {b.app_id: b for b in chosen}
        return Allocation(bundles, sum(b.gain for b in chosen), self.name)

    def _lp_integral(self, cands: Sequence[Bundle], gains: np.ndarray, a_mat: csr_array) -> list[Bundle] | None:
        """The LP relaxation's optimum when it is integral (then it is an optimum of the MILP too: the
        relaxation's bound is reached by a feasible choice), else None.

        Most instances are: on the 84-app paper workload every MILP of a sample of rounds (9-10 apps, up
        to 1,300 candidate bundles) had an integral LP optimum, and HiGHS's simplex found it 4x to 25x
        faster than its MILP search took to prove it (3-28 ms against 6-345 ms), which is most of a
        round with hidden payments (a re-solve per winner). A fractional optimum goes to the MILP.
        """
        import numpy as np
        from scipy.optimize import linprog

        lp = linprog(gains, A_ub=a_mat, b_ub=np.ones(a_mat.shape[0]), bounds=(0, 1), method="highs",
                     options={"time_limit": self.time_limit_s})
        if lp.status != 0 or lp.x is None:
            return None
        x = lp.x
        if np.any(np.minimum(np.abs(x), np.abs(1.0 - x)) > 1e-6):
            return None
        chosen = [cands[k] for k in np.flatnonzero(x > 0.5)]
        apps: set[str] = set()
        used: set[int] = set()
        for b in chosen:  # the rounded choice must be feasible exactly, not within HiGHS's tolerances
            if b.app_id in apps or not used.isdisjoint(b.gpus):
                return None
            apps.add(b.app_id)
            used |= b.gpus
        return chosen

    def _branch_and_bound(self, cands: Sequence[Bundle], apps: Sequence[str]) -> Allocation | None:
        """The optimum of a small instance by depth-first search, or None when the search would take more
        than :data:`BNB_MAX_NODES` nodes (the LP, then the MILP, take it).

        Most instances of three or more apps are tiny: on the contended 84-app run (one app per hour, 64
        GPUs, a round at every lease expiry) 99.4% of them offered a single GPU, the one lease that
        expired, to 3 to 7 bidders with fewer than 10 bundles; HiGHS through scipy spent ~1.3 ms on each,
        almost all of it building and checking the problem, and that was 43% of the run. The search is
        exact: apps are branched in decreasing order of their best bundle, each app's bundles in
        decreasing gain, and a branch is cut when even every remaining app's best bundle could not reach
        the best allocation found. Ties (within 1e-12) go to the fewest GPUs, as in :meth:`_enumerate`,
        then to the first found; the LP picks among ties as its simplex happens to go.
        """
        eps = 1e-12
        by_app: dict[str, list[Bundle]] = {a: [] for a in apps}
        for b in cands:
            by_app[b.app_id].append(b)
        for bs in by_app.values():
            bs.sort(key=lambda b: (-b.gain, len(b.gpus)))  # stable: candidate order among equals
        order = sorted(apps, key=lambda a: -by_app[a][0].gain)
        lists = [by_app[a] for a in order]
        rest = [0.0] * (len(order) + 1)  # rest[i]: sum of the best gains of apps i.. (the bound)
        for i in range(len(order) - 1, -1, -1):
            rest[i] = rest[i + 1] + lists[i][0].gain
        best: list[Bundle] = []
        best_v, best_n = 0.0, 0
        chosen: list[Bundle] = []
        nodes = 0

        def visit(i: int, used: frozenset[int], v: float, n: int) -> bool:
            """False when the node budget ran out."""
            nonlocal best, best_v, best_n, nodes
            nodes += 1
            if nodes > BNB_MAX_NODES:
                return False
            if i == len(lists):
                if v > best_v + eps or (v >= best_v - eps and n < best_n):
                    best, best_v, best_n = list(chosen), v, n
                return True
            if v + rest[i] < best_v - eps:
                return True
            for b in lists[i]:
                if v + b.gain + rest[i + 1] < best_v - eps:
                    break
                if used.isdisjoint(b.gpus):
                    chosen.append(b)
                    ok = visit(i + 1, used | b.gpus, v + b.gain, n + len(b.gpus))
                    chosen.pop()
                    if not ok:
                        return False
            return visit(i + 1, used, v, n)  # the app gets nothing

        if not visit(0, frozenset(), 0.0, 0):
            return None
        return Allocation({b.app_id: b for b in best}, sum(b.gain for b in best), self.name)

    def _enumerate(self, cands: Sequence[Bundle], apps: Sequence[str]) -> Allocation:
        """The optimum over one or two apps' bundles by enumeration (most rounds' MILPs: a round with one
        or two bidders, and every payment re-solve of a round with two or three).

        Exact, and deterministic where the MILP is not: among allocations of equal welfare (within 1e-12;
        common, since a bundle past an app's critical path is worth no more than a smaller one) it takes
        the one with the fewest GPUs, which leaves the rest to the leftover; then a fixed order (gain,
        then candidate order). HiGHS stops within its default relative gap of 1e-4 and picks among ties
        as its search happens to go.
        """
        eps = 1e-12
        first = [b for b in cands if b.app_id == apps[0]]
        best: tuple[Bundle, ...] = ()
        best_v, best_n = 0.0, 0
        for b in cands:  # single bundles
            v, n = b.gain, len(b.gpus)
            if v > best_v + eps or (v >= best_v - eps and best and n < best_n):
                best, best_v, best_n = (b,), v, n
        if len(apps) == 2:
            second = sorted((b for b in cands if b.app_id == apps[1]), key=lambda b: -b.gain)
            top = second[0].gain
            for a in sorted(first, key=lambda b: -b.gain):
                if a.gain + top < best_v - eps:
                    break
                for b in second:
                    v = a.gain + b.gain
                    if v < best_v - eps:
                        break
                    if not a.gpus.isdisjoint(b.gpus):
                        continue
                    n = len(a.gpus) + len(b.gpus)
                    if v > best_v + eps or n < best_n:
                        best, best_v, best_n = (a, b), v, n
        return Allocation({b.app_id: b for b in best}, sum(b.gain for b in best), self.name)
