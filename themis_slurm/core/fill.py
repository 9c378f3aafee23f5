"""The greedy fill: hand out a pool's GPUs gang by gang, the most valuable next gang first.

Winner determination's fast solver (core/auction.py), the fast hidden payments (core/payments.py) and the
leftover (core/leftover.py) all hand out GPUs this way; they differ in the order (:data:`ORDERS`):

* ``density`` -- marginal log-gain per GPU, ``weight * (log rho(x) - log rho(x + gang))`` over the gang's
  GPUs (the fast solver's order: the objective is concave in each app's throughput);
* ``gain`` -- the same gain not divided by the GPUs (favours wide gangs that density would starve by
  fragmenting the pool; one of the fast solver's tries);
* ``rho`` -- water-filling: the app with the worst rho so far (the authors' code re-auctions what is left
  to the next-worst apps);
* ``deadline`` -- the latest job against its app's private-share pace first (:meth:`Agent.lateness`,
  earliest virtual deadline first; the leftover's default).

With ``rho`` a gang that would have to (re)start counts the app's rho times the agent's `start_keep`,
with ``deadline`` its lateness less `restart_s`: a lease holder keeps its GPUs unless another job is more
urgent by more than the restart costs (no ping-pong between near-equal apps).

How a fill proceeds, and why it is fast (it is the hot loop of a round):

* Jobs of one kind (:attr:`Job.kind`: same shape, profile and allowed nodes) are interchangeable, so an
  app keeps one queue per kind and only each queue's head job is placed. A kind that does not fit is
  dropped for the rest of the fill: the pool only shrinks.
* Lazy placement. An app whose head jobs are all *plain* (no node shape, not elastic, not a lease
  holder, allowed on any node: the pool's plain best fit places them, as :meth:`Agent.offers` does)
  waits in the heap under an upper bound of its next priority, computed without placing anything (the
  gang at its profile's tightest placement factor), and is placed only when it reaches the top, against
  the pool as it is then; if the placement is worth less than the bound, it goes back with its exact
  priority. Any other app is placed when it is queued. So a gang is placed about once, not once per app
  that took GPUs since it was queued.
* A kind's offers are kept while its head job is the same and all their GPUs are still free, and their
  priorities while the app's throughput is unchanged. Which GPUs an app gets therefore depends on when
  it was placed: the pool's best fit for the same gang can pick other GPUs of equal value later, and
  that changes later placements. The timing above is part of what the fill decides.

:func:`~themis_slurm.core.fill_reference.reference_fill` is the same fill written plainly (no heap, no
kept priorities, every placement through the agent's public methods); tests/unit/core/test_fill.py
checks that the two hand out exactly the same gangs on generated rounds.
"""

from __future__ import annotations

import heapq
import math
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping, Sequence
from operator import itemgetter

from themis_slurm.core.agent import Agent, Gang
from themis_slurm.core.placement import Pool
from themis_slurm.core.topology import Level
from themis_slurm.core.workload import Job

#: what a fill hands out for one job: (its GPUs, the level they span, the throughput they give), as
#: :meth:`Agent.offers` lists them; a :class:`Gang` is made only of the offer handed out
Offer = tuple[frozenset[int], Level, float]
#: a plain job's placement factors per level (island, node, rack, cluster): :attr:`Profile.factors`
Factors = tuple[float, float, float, float]
#: an app's best next gang: (its priority, the kind it is of, the offer)
Found = tuple[float, int, Offer]
#: a heap entry: (-priority, app index, kind, offer); offer None: the priority is a bound, not yet placed.
#: One entry per app at most, so (-priority, app index) decides the order alone.
Entry = tuple[float, int, int, Offer | None]

#: a bound meaning "no bound: place the app now" (a head job is not plain)
PLACE_NOW = -math.inf
#: priorities closer than this count as equal within one app (the first kind and offer win)
TIE = 1e-12
#: the same for lateness, in seconds
TIE_S = 1e-9
_FIRST = itemgetter(0)  # a sequence's first item, without a Python frame


class KindOffers:
    """What one kind of an app was offered for its head job, kept while `job` is still the head and all
    of `gpus` are free (then placing it again would offer the same). One record per kind, renewed in
    place: :meth:`Fill.place` sets every field."""

    __slots__ = ("job", "offers", "gpus", "prios_at", "prios")
    job: Job
    offers: list[Offer]
    gpus: frozenset[int]  # all the offers' GPUs
    #: the offers' priorities (:meth:`FillOrder.priorities`) and the app throughput they are for (None:
    #: not computed yet)
    prios_at: float | None
    prios: list[float]


class AppFill:
    """One app's progress in a fill, holding `held` (gangs from earlier in the round) at its start."""

    __slots__ = ("agent", "plain", "queues", "pos", "heads", "kept", "gangs", "x", "lost", "log_at", "log_now")

    def __init__(self, agent: Agent, held: Sequence[Gang] | None) -> None:
        self.agent = agent
        #: the agent's plain jobs -> their placement factors. Agent keeps them (core/agent.py, _derive) with
        #: no public accessor yet: this is the one place the fill reads them
        self.plain: Mapping[str, Factors] = agent.plain
        kinds = agent.kinds
        #: per kind, its jobs in bidding order (the agent's own tuples when the app holds nothing yet: most
        #: apps take nothing in a fill), the position of the next one, and that job (None: none left, or
        #: the kind no longer fits)
        self.queues: Sequence[Sequence[Job]] = kinds
        self.pos = [0] * len(kinds)
        self.kept: list[KindOffers | None] = [None] * len(kinds)  # per kind: its last offers
        self.gangs: list[Gang] = []
        self.x = 0.0  # the throughput of `gangs`
        self.log_at: float | None = None  # the x at which log_now = log(rho(x)) was computed
        #: the unsaved work of its lease holders not renewed in place by `gangs` (Agent.lost_without): what
        #: the app loses if the fill ends now; a renewal in place saves its holder's share
        self.lost = agent.at_risk
        if held:
            for g in held:
                self.gangs.append(g)
                self.x += g.throughput
            if self.lost:
                self.lost = agent.lost_without(held)
            used = {g.job_id for g in held}
            self.queues = [[j for j in kind if j.id not in used] for kind in kinds]
            self.heads: list[Job | None] = [q[0] if q else None for q in self.queues]
        else:
            self.heads = list(map(_FIRST, kinds))  # an agent's kinds are never empty

    def log_rho(self) -> float:
        """log(rho) at the app's throughput so far, with what it would lose (kept while both are unchanged:
        :meth:`Fill.take` forgets it when `lost` changes)."""
        x = self.x
        if self.log_at != x:
            self.log_now, self.log_at = math.log(self.agent.rho_of(x, self.lost)), x
        return self.log_now  # set with log_at


class Fill:
    """One greedy fill over `pool` in order `order` (see the module docstring); :meth:`run` hands the
    GPUs out."""

    __slots__ = ("pool", "free", "best", "bound", "small", "restart_s", "apps", "heap")

    def __init__(self, agents: Sequence[Agent], pool: Pool, start: Mapping[str, Sequence[Gang]],
                 order: FillOrder, elastic_small: bool, restart_s: float) -> None:  # fmt: skip
        self.pool = pool
        #: the free GPUs, live: ``free >= gpus`` tells whether a kept offer is still free
        self.free = pool.free_view
        self.best, self.bound = order.best, order.bound
        self.small = elastic_small and order.small_offers
        self.restart_s = restart_s
        self.apps = [AppFill(a, start.get(a.app_id)) for a in agents]
        self.heap: list[Entry] = []

    def place(self, app: AppFill, qi: int, job: Job) -> KindOffers | None:
        """Place the kind's head `job` against the pool as it is now and keep its offers (callers first
        check whether the kept ones are still valid); None when the kind no longer fits (it is dropped)."""
        factors = app.plain.get(job.id)
        if factors is not None:  # Agent.offers of a plain job, without its call
            found = self.pool.best(job.gpus)
            if found is None:
                app.heads[qi] = None
                return None
            gpus, level = found
            offers = [(gpus, level, len(gpus) * factors[level] * app.agent.start_keep)]
        else:
            offers = app.agent.offers(job, self.pool, self.small)
            if not offers:
                app.heads[qi] = None
                return None
            gpus = offers[0][0] if len(offers) == 1 else frozenset().union(*(o[0] for o in offers))
        kept = app.kept[qi]
        if kept is None:
            kept = app.kept[qi] = KindOffers()
        kept.job, kept.offers, kept.gpus, kept.prios_at = job, offers, gpus, None
        return kept

    def push(self, k: int) -> None:
        """Queue app `k` (unless it has nothing left that fits): under its bound, or placed now when it
        has no bound."""
        app = self.apps[k]
        bound = self.bound(self, app)
        if bound is None:
            return  # no jobs left
        if bound != PLACE_NOW:
            heapq.heappush(self.heap, (-bound, k, -1, None))
            return
        found = self.best(self, app)
        if found is not None:
            prio, qi, offer = found
            heapq.heappush(self.heap, (-prio, k, qi, offer))

    def take(self, k: int, qi: int, offer: Offer) -> None:
        """Hand app `k` the offer for its kind `qi`'s head job, and queue it again."""
        gpus, level, throughput = offer
        self.pool.take_free(gpus)
        app = self.apps[k]
        job = app.heads[qi]
        assert job is not None, "only a head job is offered"
        app.gangs.append(Gang(job.id, gpus, level, throughput))
        q, at = app.queues[qi], app.pos[qi] + 1
        app.pos[qi], app.heads[qi] = at, q[at] if at < len(q) else None
        app.x += throughput
        if app.lost and app.agent.homes.get(job.id) == gpus:  # a holder renewed in place: its work is saved
            app.lost = app.agent.lost_without(app.gangs)
            app.log_at = None
            for kept in app.kept:
                if kept is not None:
                    kept.prios_at = None
        self.push(k)

    def run(self, group_of: Sequence[Hashable], left: dict[Hashable, float]) -> dict[str, list[Gang]]:
        """Hand out GPUs until no app's next gang fits, the pool is empty or every cap is reached: app k
        may take GPUs while its group ``group_of[k]`` has some `left` (:func:`caps`), else it is out."""
        heap, free, best, apps, pool = self.heap, self.free, self.best, self.apps, self.pool
        for k in range(len(apps)):
            self.push(k)
        open_caps = sum(1 for v in left.values() if v > 0)
        while heap and pool.size and open_caps:  # an empty pool fits nobody
            _, k, qi, offer = heapq.heappop(heap)
            if offer is None or not free >= offer[0]:  # a bound, or an offer someone took part of
                found = best(self, apps[k])
                if found is None:
                    continue
                prio, qi, offer = found
                if heap and (-prio, k) > heap[0][:2]:  # no longer first: back in the heap, exact
                    heapq.heappush(heap, (-prio, k, qi, offer))
                    continue
            g, n = group_of[k], len(offer[0])
            if n > left[g]:
                continue  # past its cap: out of the fill
            left[g] -= n
            if left[g] <= 0:
                open_caps -= 1
            self.take(k, qi, offer)
        return {app.agent.app_id: app.gangs for app in apps if app.gangs}


def caps(n_apps: int, limit: int | None, groups: Sequence[Hashable] | None,
         limits: Mapping[Hashable, int] | None) -> tuple[Sequence[Hashable], dict[Hashable, float]]:  # fmt: skip
    """How many GPUs a fill may hand out: (each app's group, the GPUs left per group). One group for all
    capped at `limit` (None: no cap), or the groups `groups` (one per app) capped at `limits`."""
    if limits is None:
        return (None,) * n_apps, {None: math.inf if limit is None else limit}
    if groups is None or len(groups) != n_apps:
        raise ValueError(f"groups: one per agent ({n_apps}), got {None if groups is None else len(groups)}")
    return groups, {g: limits.get(g, math.inf) for g in groups}


# ------------------------------------------------------------------------------------------- orders
class FillOrder(ABC):
    """How a fill ranks apps (one strategy per order, :data:`ORDERS`): :meth:`priorities` of a kind's
    offers and :meth:`bound`; :meth:`best` is the same for all. `small_offers`: elastic jobs may also be
    offered one GPU (:meth:`Agent.offers`); `tie`: priorities closer than this count as equal within an
    app (the first kind and offer win)."""

    name: str
    small_offers: bool
    tie = TIE

    @abstractmethod
    def priorities(self, fill: Fill, app: AppFill, kept: KindOffers) -> list[float]:
        """The priorities of the kind's offers, in order (the first ones only: those after are not
        ranked), at the app's throughput now. A pure function of the offers and that throughput."""

    @abstractmethod
    def bound(self, fill: Fill, app: AppFill) -> float | None:
        """An upper bound on the app's next priority without placing: None when it has no job left,
        :data:`PLACE_NOW` when a head job is not plain (no bound)."""

    def best(self, fill: Fill, app: AppFill) -> Found | None:
        """The app's best next gang among its kinds that still fit, placed against the pool as it is now
        (None: no kind fits)."""
        x, free, tie = app.x, fill.free, self.tie
        found: Found | None = None
        top = 0.0
        for qi, job in enumerate(app.heads):
            if job is None:
                continue
            kept = app.kept[qi]
            if kept is None or kept.job is not job or not free >= kept.gpus:
                kept = fill.place(app, qi, job)
                if kept is None:
                    continue
            if kept.prios_at != x:
                kept.prios_at, kept.prios = x, self.priorities(fill, app, kept)
            prios = kept.prios
            if len(prios) == 1:  # most kinds (one offer ranked): without a zip
                prio = prios[0]
                if found is None or prio > top + tie:
                    found, top = (prio, qi, kept.offers[0]), prio
                continue
            for offer, prio in zip(kept.offers, prios, strict=False):
                if found is None or prio > top + tie:
                    found, top = (prio, qi, offer), prio
        return found


class ByGain(FillOrder):
    """``density`` (`per_gpu`) or ``gain``: the gang's marginal weighted log-gain, per GPU or not."""

    small_offers = True

    def __init__(self, name: str, per_gpu: bool) -> None:
        self.name, self.per_gpu = name, per_gpu

    def priorities(self, fill: Fill, app: AppFill, kept: KindOffers) -> list[float]:
        ag, x, lost = app.agent, app.x, app.lost
        log_now = app.log_rho()
        home = ag.homes.get(kept.job.id) if lost else None  # renewing a holder in place also saves its work
        out = []
        for gpus, _, throughput in kept.offers:
            after = lost - ag.risk_of(kept.job.id) if home is not None and home == gpus else lost
            gain = ag.weight * (log_now - math.log(ag.rho_of(x + throughput, after)))
            out.append(gain / len(gpus) if self.per_gpu else gain)
        return out

    def bound(self, fill: Fill, app: AppFill) -> float | None:
        """A plain job's gang gets at best its profile's tightest factor: more throughput, more gain."""
        ag, x = app.agent, app.x
        log_now = app.log_rho()
        top = None
        for job in app.heads:
            if job is None:
                continue
            factors = app.plain.get(job.id)
            if factors is None:
                return PLACE_NOW
            gain = ag.weight * (log_now - math.log(ag.rho_of(x + job.gpus * factors[0] * ag.start_keep, app.lost)))
            prio = gain / job.gpus if self.per_gpu else gain
            if top is None or prio > top:
                top = prio
        return top


class ByRho(FillOrder):
    """``rho``: the app with the worst rho so far first (water-filling); a gang off its job's home (a
    restart) multiplies that rho by the throughput a starting gang keeps. Each kind's best offer only."""

    name = "rho"
    small_offers = False

    def priorities(self, fill: Fill, app: AppFill, kept: KindOffers) -> list[float]:
        at_home = app.agent.homes.get(kept.job.id) == kept.offers[0][0]
        return [app.log_rho() + (0.0 if at_home else math.log(app.agent.start_keep))]

    def bound(self, fill: Fill, app: AppFill) -> float | None:
        """Exact for a plain job (never at home), and the same for every plain kind: the first kind left
        decides."""
        for job in app.heads:
            if job is not None:
                if job.id not in app.plain:
                    return PLACE_NOW
                return app.log_rho() + math.log(app.agent.start_keep)
        return None


class ByDeadline(FillOrder):
    """``deadline``: the job latest against its app's private-share pace first; a gang off its job's
    home (a restart) costs `restart_s` seconds of lateness, and a holder renewed at home gains the time its
    unsaved work would take to do again on it (Agent.risk_of / the gang's throughput). Each kind's best
    offer only."""

    name = "deadline"
    small_offers = False
    tie = TIE_S

    def priorities(self, fill: Fill, app: AppFill, kept: KindOffers) -> list[float]:
        job, (gpus, _, throughput) = kept.job, kept.offers[0]
        ag = app.agent
        if ag.homes.get(job.id) != gpus:
            return [ag.lateness(job) - fill.restart_s]
        return [ag.lateness(job) + (ag.risk_of(job.id) / throughput if app.lost else 0.0)]

    def bound(self, fill: Fill, app: AppFill) -> float | None:
        """Exact for plain jobs (never at home): the latest head job's lateness less the restart."""
        top = None
        for job in app.heads:
            if job is None:
                continue
            if job.id not in app.plain:
                return PLACE_NOW
            late = app.agent.lateness(job)
            if top is None or late > top:
                top = late
        return None if top is None else top - fill.restart_s


#: the fill orders by name (see the module docstring)
ORDERS: Mapping[str, FillOrder] = {
    o.name: o for o in (ByGain("density", per_gpu=True), ByGain("gain", per_gpu=False), ByRho(), ByDeadline())
}
FILL_ORDERS = tuple(ORDERS)


def greedy_fill(
    agents: Sequence[Agent],
    pool: Pool,
    start: Mapping[str, Sequence[Gang]] | None = None,
    by: str = "density",
    elastic_small: bool = True,
    restart_s: float = 0.0,
    limit: int | None = None,
    groups: Sequence[Hashable] | None = None,
    limits: Mapping[Hashable, int] | None = None,
) -> dict[str, list[Gang]]:
    """Hand out the pool's GPUs gang by gang to the apps' best next gangs in order `by` (:data:`ORDERS`).

    Takes the GPUs it hands out from `pool` (the caller owns the pool). `start` gives gangs the apps
    already hold in this round (their GPUs must already be out of the pool): gains are computed on top of
    them. Returns all gangs per app, `start` included. Stops when no app's next gang fits. `elastic_small`
    lets elastic jobs be offered one GPU too (``density`` and ``gain``); `restart_s` is what a restart
    costs a job's lateness (``deadline``). `limit`, when given, caps the GPUs this fill hands out;
    `groups` (one per agent) and `limits` cap them per group instead (the leftover's per-tenant quotas,
    core/quota.py): an app whose next gang would pass its cap drops out, and the fill ends when every cap
    is reached.
    """
    order = ORDERS.get(by)
    if order is None:
        raise ValueError(f"by must be one of {', '.join(FILL_ORDERS)}, got {by!r}")
    group_of, left = caps(len(agents), limit, groups, limits)
    return Fill(agents, pool, start or {}, order, elastic_small, restart_s).run(group_of, left)
