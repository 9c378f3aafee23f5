"""An app's agent: turns offered GPUs into a valuation table (bundles and the rho each would give).

The agent packs the app's waiting gangs into offered GPUs one by one, in the app's own order (lease
holders first so that winning again means staying in place, then :func:`pace_order`: the jobs that
cannot wait without delaying the app's finish longest first, the others shortest first), each at the
tightest placement the pool allows (:meth:`Pool.find`). A bundle is a prefix of that sequence: its value is
the rho the app would reach with it. The authors' agent enumerates GPU subsets and keeps the best-placed
bundle per size; packing gang by gang gives the same best-placed bundle per size in O(gangs) placements
instead of exponential enumeration. Alternatives that avoid conflicts between apps (the same tight spot
wanted by two apps) come from packing within one rack or one node (:meth:`Agent.valuations` with `within`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from themis_slurm.core.fairness import FairnessModel, virtual_lateness
from themis_slurm.core.gpu_types import gang_speed
from themis_slurm.core.job_facts import JobFacts, JobFactsCache
from themis_slurm.core.placement import Pool, Profile, get_profile, throughput
from themis_slurm.core.quick_init import quick_init
from themis_slurm.core.topology import Level
from themis_slurm.core.workload import App, Job

_ORDER = attrgetter("order")  # JobFacts.order: shortest remaining run first
_LONGEST = attrgetter("longest_first")  # JobFacts.longest_first: longest remaining run first

#: A pool's search, :meth:`Pool.place` or :meth:`Pool.place_among`: (gpus, gpus_per_node, nodes, the nodes to use)
Search = Callable[..., tuple[frozenset[int], Level] | None]


@quick_init
@dataclass(frozen=True, slots=True)
class Gang:
    """A placed gang: the job's GPUs, the level they span and the throughput they give."""

    job_id: str
    gpus: frozenset[int]
    level: Level
    throughput: float


@quick_init
@dataclass(frozen=True, slots=True)
class Bundle:
    """One row of a valuation table: a set of gangs for one app and the rho it would reach."""

    app_id: str
    gangs: tuple[Gang, ...]
    rho: float
    gain: float  # weight x log(rho_base / rho): the auction's value of the bundle (Agent.weight)
    gpus: frozenset[int] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", frozenset().union(*(g.gpus for g in self.gangs)))

    @property
    def throughput(self) -> float:
        return sum(g.throughput for g in self.gangs)


class Agent:
    """Bids for one app in one round.

    `jobs` are the app's jobs that want GPUs this round, in bidding order; `homes` maps lease holders
    (whose lease expires now) to the GPUs they hold, so that they can be renewed in place;
    `base_throughput` is what the app keeps from leases that do not expire, and `kept_free_s` how soon the
    first of those GPUs frees up (the shortest remaining run time among the jobs that keep them; inf when it
    keeps none): under what it keeps, its waiting jobs start no sooner, so its longest waiting job ends no
    sooner than that plus its own run time (the kept-GPU floor of T_sh at no extra GPU, docs/design.md,
    "Finish-time fairness"). `start_cost` is the fraction
    of a lease a gang loses when it has to start (restart cost / lease length): a gang placed anywhere
    but its home is valued at that much less throughput, so GPUs move between jobs only when the move
    is worth a restart (this damps lease churn between near-equal apps).
    """

    def __init__(
        self,
        app: App,
        model: FairnessModel,
        now: float,
        base_throughput: float,
        jobs: Sequence[Job],
        homes: Mapping[str, frozenset[int]] | None = None,
        start_cost: float = 0.0,
        kept_free_s: float = math.inf,
        weight: float = 1.0,
        finish_rho: float = 1.0,
    ) -> None:
        if not 0.0 <= start_cost < 1.0:
            raise ValueError(f"start_cost must be in [0, 1), got {start_cost}")
        if not (weight > 0 and math.isfinite(weight)):
            raise ValueError(f"weight must be a number > 0, got {weight!r}")
        self.app = app
        #: the app's weight in the auction (core/tenancy.auction_weights; 1.0 without tenancy levels): every
        #: gain is weight x log(rho_base / rho), so winner determination maximises the weighted Nash welfare
        self.weight = weight
        #: throughput kept over a lease by a gang that must (re)start: a renewal in place keeps it all
        self.start_keep = 1.0 - start_cost
        self.app_id = app.id
        self.model = model
        self.now = now
        self.base = base_throughput
        self.homes = home = dict(homes or {})
        # renewals first (keep running in place), then the jobs that cannot wait longest first and the rest
        # shortest first (pace_order: short jobs first wherever that keeps the app on its private-share pace)
        cache = model.job_facts
        assert cache is not None
        self._facts = cache  # each job's allowed nodes in topology order (_search)
        self._tid, self._remaining, self._path = model.facts(app)
        self._elapsed = max(0.0, now - app.arrival)
        #: the rho its job order may let the app finish at (>= 1; bidding.rank_by_rho: below the round's worst)
        self._finish_rho = finish_rho
        self._total_work = model.total_work(app)
        # The jobs other than lease holders are sorted once while they stay the same (kept in the cache:
        # the simulator's waiting jobs are the same objects round after round); which of them cannot wait
        # is asked at every round (it moves with the clock), and the order and kinds are made again only
        # when that answer changes. Lease holders, which change at every expiry, go in front (_with_holders).
        jobs = list(jobs)
        rest = [j for j in jobs if j.id not in home] if home else jobs
        hit = cache.orders.get(app.id)
        if hit is None or hit[0] != rest:
            hit = _Sorted(rest, cache)
            cache.orders[app.id] = (rest, hit)
        else:
            hit = hit[1]
        derived = hit.derived(self._elapsed, self._tid, model.share_rate(app), self._remaining, finish_rho)
        if home:
            derived = _with_holders(derived, [j for j in jobs if j.id in home], cache)
        self.jobs, self.kinds, self._plain, self._profiles, self._after, longest = derived
        self._idle = model.idle_throughput
        self._set_risk()
        self._times: tuple[float, ...] | None = None  # model.one_gpu_times(app), fetched when first needed
        self._wait_floor = 0.0  # T_sh's floor (after elapsed) at no extra GPU: see the class docstring
        if kept_free_s < math.inf and self.jobs:
            self._wait_floor = kept_free_s + longest  # the longest waiting job starts no sooner
        self.rho_base = self.rho_of(0.0)

    def with_started(self, job_id: str, throughput: float) -> Agent:
        """This agent once one of its jobs has started outside the auction (a reservation): the job leaves
        its bidding order, kinds and virtual deadlines, and its throughput joins the base. The same agent as
        building one anew without the job: its order is derived again (with one job fewer waiting, which
        jobs cannot wait may change, and so the order and every position's deadline), once a round."""
        new = copy.copy(self)
        new.base = self.base + throughput
        new.homes = homes = {k: v for k, v in self.homes.items() if k != job_id}
        rest = [j for j in self.jobs if j.id != job_id and j.id not in homes]
        cache = self._facts
        derived = _Sorted(rest, cache).derived(self._elapsed, self._tid, self.model.share_rate(self.app),
                                               self._remaining, self._finish_rho)  # fmt: skip
        if homes:
            derived = _with_holders(derived, [j for j in self.jobs if j.id in homes], cache)
        new.jobs, new.kinds, new._plain, new._profiles, new._after, _ = derived
        new._set_risk()
        new._wait_floor = 0.0  # what it keeps changed: no kept-GPU floor (T_sh can only be lower without it)
        new.rho_base = new.rho_of(0.0)
        return new

    def _set_risk(self) -> None:
        """The work its lease holders would throw away if they lost their GPUs now (:attr:`Job.unsaved`:
        done since their last checkpoint), per holder and in all. A holder renewed in place keeps it; any
        other outcome (preempted, or moved to other GPUs, which restarts it) adds it to the app's remaining
        work, so a bundle without that renewal is valued at that much more work (:meth:`rho_of`'s `lost`).
        Without it a job that does not checkpoint looked as cheap to preempt as one that does, and was
        preempted at every lease expiry its app lost (issue #34: 62 preemptions of 32 jobs in 6 minutes)."""
        jobs = {j.id: j for j in self.jobs} if self.homes else {}
        self._risk = {jid: jobs[jid].unsaved for jid in self.homes if jid in jobs and jobs[jid].unsaved > 0.0}
        self._risk_total = sum(self._risk.values())

    @property
    def plain(self) -> Mapping[str, tuple[float, float, float, float]]:
        """The jobs the greedy fill may place by the pool's plain best fit, with their placement factors
        (:func:`_derive`)."""
        return self._plain

    @property
    def at_risk(self) -> float:
        """The unsaved work its lease holders lose unless renewed in place (:meth:`_set_risk`)."""
        return self._risk_total

    def risk_of(self, job_id: str) -> float:
        """The unsaved work of one lease holder (0 for any other job): what renewing it in place saves."""
        return self._risk.get(job_id, 0.0) if self._risk else 0.0

    def lost_without(self, gangs: Iterable[Gang]) -> float:
        """The unsaved work the app loses if it gets exactly `gangs`: that of every holder not among them
        renewed in place."""
        if not self._risk:
            return 0.0
        lost = self._risk_total
        for g in gangs:
            u = self._risk.get(g.job_id)
            if u is not None and self.homes.get(g.job_id) == g.gpus:
                lost -= u
        return max(0.0, lost)

    def rho_of(self, extra_throughput: float, lost: float | None = None) -> float:
        """rho if the app ran at base + extra throughput from now on (:func:`shared_finish` / T_id), with
        `lost` more work to do (the unsaved work of holders not renewed in place; None: all of its holders',
        what it loses with no renewal, :meth:`_set_risk`)."""
        tid = self._tid
        if tid <= 0:
            return 1.0
        if lost is None:
            lost = self._risk_total
        x = self.base + extra_throughput
        if x >= self._idle:  # shared_finish, inlined: this is the auction's innermost call
            remaining, path = self._remaining + lost, self._path
            finish = max(remaining / x, path)
            if x >= 1.0 and remaining < 2.0 * path * x:  # fairness._pairs_may_bind: then the pair floor
                times = self._times
                if times is None:
                    times = self._times = self.model.one_gpu_times(self.app)
                m = math.ceil(x - 1e-9)
                if m < len(times):
                    pair = times[m - 1] + times[m]
                    if pair > finish:
                        finish = pair
            if extra_throughput <= 0.0 and self._wait_floor > finish:
                finish = self._wait_floor
            return (self._elapsed + finish) / tid
        return (self._elapsed + max(self._remaining + lost, self._path)) / self._idle / tid

    def lateness(self, job: Job) -> float:
        """How late waiting `job` is against its app's private-share pace (:func:`fairness.virtual_lateness`:
        now minus its virtual finish time, that of its position in this agent's bidding order). The leftover hands
        out gangs to the latest first (``ArbiterConfig.leftover_order`` "deadline")."""
        return virtual_lateness(self._elapsed, self._tid, self._total_work, self._after[job.id])

    def gain_of(self, extra_throughput: float) -> float:
        return self.weight * (math.log(self.rho_base) - math.log(self.rho_of(extra_throughput)))

    def _search(self, job: Job, pool: Pool, within: Iterable[str] | None) -> tuple[Search, Sequence[str] | None]:
        """How and where to look for GPUs for `job` (a new start, not its home): the pool's search and the
        nodes it may use (None: any). A job Slurm can start on some nodes only (:attr:`Job.allowed_nodes`)
        searches them, cut to `within` when a caller restricts the search too (placement alternatives),
        with :meth:`Pool.place_among`; any other job searches as it always has, `within` or anywhere.
        Callers ask only for a job with a set (a job without one, most jobs, costs them no call)."""
        allowed = job.allowed_nodes
        if allowed is not None:
            among = self._facts.get(job).allowed
            if among is not None:
                return pool.place_among, among if within is None else [n for n in within if n in allowed]
        return pool.place, list(within) if within is not None else None

    def place(self, job: Job, pool: Pool, within: Iterable[str] | None = None) -> Gang | None:
        """The best gang for `job` in `pool` (not taken), or None when it does not fit.

        A lease holder's home comes first whatever its allowed nodes: it runs there, so Slurm has started
        it there (renewing in place starts nothing). Any other gang lies on the job's allowed nodes. On a
        cluster of several GPU types a holder moves when a gang on a faster type gives more throughput
        even after the restart (:meth:`_place_typed`, valued at ``start_keep``): a job that started on the
        slowest type while nothing else was free would otherwise stay there for its whole run."""
        profile = self._profiles.get(job.id) or get_profile(job.profile)
        home = self.homes.get(job.id) if self.homes else None
        if home is not None and pool.has(home):
            level = pool.topo.level_of(home)
            x = throughput(len(home), level, profile)
            if not pool.topo.heterogeneous:
                return Gang(job.id, home, level, x)
            stay = Gang(job.id, home, level, x * gang_speed(pool.topo, job, home))
            move = self._place_typed(job, pool, within, profile)  # a faster type may be worth the restart
            return move if move is not None and move.throughput > stay.throughput else stay
        if pool.topo.heterogeneous:
            return self._place_typed(job, pool, within, profile)
        if job.allowed_nodes is None:  # _search's answer for a job without a set, without the call
            search, where = pool.place, list(within) if within is not None else None
        else:
            search, where = self._search(job, pool, within)
        found = search(job.gpus, job.gpus_per_node, job.nodes, where)
        best: Gang | None = None
        if found is not None:
            gpus, level = found
            best = Gang(job.id, gpus, level, len(gpus) * profile.factors[level] * self.start_keep)
        if job.elastic and (best is None or best.level > Level.NODE):
            # a smaller, tighter allocation may beat a wide one for a placement-sensitive job
            nodes = where if where is not None else pool.topo.nodes
            widest = max((pool.node_free(n) for n in nodes), default=0)
            for n in range(min(job.gpus, widest), 0, -1):
                found = search(n, None, None, where)
                if found is None:
                    continue
                g2 = found[0]
                lvl = pool.topo.level_of(g2)
                cand = Gang(job.id, g2, lvl, throughput(n, lvl, profile) * self.start_keep)
                if best is None or cand.throughput > best.throughput:
                    best = cand
                break
        return best

    def _place_typed(self, job: Job, pool: Pool, within: Iterable[str] | None, profile: Profile) -> Gang | None:
        """:meth:`place` on a cluster of several GPU types: the best gang on each type the job may run on
        (its allowed nodes of that type, cut to `within`), and of those the one of most effective throughput
        (GPUs x placement factor x its speed there; ties: the faster type). So a job takes the type it gains
        most on among those with room, in the auction and in the leftover alike. A gang spans two types (at
        the slower one's speed) only when no one type of the cluster can ever hold it (:func:`spanning_nodes`)."""
        best: Gang | None = None
        inside = None if within is None else set(within)
        for _t, speed, nodes in self._facts.types_of(job):
            among = nodes if inside is None else [n for n in nodes if n in inside]
            if not among:
                continue
            found = pool.place_among(job.gpus, job.gpus_per_node, job.nodes, among)
            if found is None and job.elastic:
                widest = max((pool.node_free(n) for n in among), default=0)
                found = pool.place_among(min(job.gpus, widest), None, None, among) if widest else None
            if found is None:
                continue
            gpus, level = found
            cand = Gang(job.id, gpus, level, len(gpus) * profile.factors[level] * speed * self.start_keep)
            if best is None or cand.throughput > best.throughput:
                best = cand
        span = None if best is not None else self._facts.spanning_of(job)  # wider than any one type: several
        if span is not None:
            among = span if inside is None else [n for n in span if n in inside]
            found = pool.place_among(job.gpus, job.gpus_per_node, job.nodes, among) if among else None
            if found is not None:
                gpus, level = found
                speed = gang_speed(pool.topo, job, gpus)
                best = Gang(job.id, gpus, level, len(gpus) * profile.factors[level] * speed * self.start_keep)
        return best

    def kind(self, job: Job) -> tuple:
        """Jobs of one kind are interchangeable for bidding: same shape, profile and allowed nodes
        (:attr:`Job.kind`), not a lease holder."""
        if job.id in self.homes:
            return ("home", job.id)
        return job.kind

    def options(self, job: Job, pool: Pool, elastic_small: bool = True) -> list[Gang]:
        """Gangs the job could take now: its best placement, and for elastic jobs also one GPU."""
        best = self.place(job, pool)
        if best is None:
            return []
        out = [best]
        if elastic_small and job.elastic and len(best.gpus) > 1 and not pool.topo.heterogeneous:
            search, where = (pool.place, None) if job.allowed_nodes is None else self._search(job, pool, None)
            found = search(1, None, None, where)
            if found is not None:
                one = found[0]
                lvl = pool.topo.level_of(one)
                out.append(Gang(job.id, one, lvl, throughput(1, lvl, get_profile(job.profile)) * self.start_keep))
        return out

    def offers(self, job: Job, pool: Pool, elastic_small: bool = True) -> list[tuple[frozenset[int], Level, float]]:
        """:meth:`options` as (gpus, level, throughput) triples, what the greedy fill compares (it makes a
        Gang only of the offer it hands out). Same numbers: a plain job's offer is the pool's best fit (a
        job restricted to some nodes is never plain: the best fit may lie elsewhere)."""
        factors = self._plain.get(job.id)
        if factors is None:
            return [(g.gpus, g.level, g.throughput) for g in self.options(job, pool, elastic_small)]
        found = pool.best(job.gpus)
        if found is None:
            return []
        gpus, level = found
        return [(gpus, level, len(gpus) * factors[level] * self.start_keep)]

    def valuations(self, pool: Pool, within: Iterable[str] | None = None) -> list[Bundle]:
        """Bundles of growing size: the gangs that fit, packed one after the other.

        The pool is left as it was (GPUs are taken while packing and returned at the end). A job that
        needs more GPUs than are free where it may go (`within`, or the pool) is skipped without a
        placement attempt, which could only fail: an app bids with up to a hundred waiting jobs, and the
        pool of a round is often a few GPUs. Lease holders are always tried (a home may lie outside
        `within`).
        """
        within = list(within) if within is not None else None
        homes = self.homes
        gangs: list[Gang] = []
        bundles: list[Bundle] = []
        x = 0.0
        lost = self._risk_total  # unsaved work of the holders not yet renewed in place in the bundle

        def free_here() -> int:
            return pool.size if within is None else sum(pool.node_free(n) for n in within)

        free = free_here()
        try:
            for job in self.jobs:
                if job.min_gpus > free and not (homes and job.id in homes):
                    if free == 0 and not homes:
                        break  # nothing fits any more (no home can still be renewed)
                    continue
                gang = self.place(job, pool, within)
                if gang is None:
                    continue
                pool.take(gang.gpus)
                free = free_here()
                gangs.append(gang)
                x += gang.throughput
                if lost and gang.job_id in self._risk and homes.get(gang.job_id) == gang.gpus:
                    lost = max(0.0, lost - self._risk[gang.job_id])
                rho = self.rho_of(x, lost)
                bundles.append(Bundle(self.app_id, tuple(gangs), rho,
                                      self.weight * (math.log(self.rho_base) - math.log(rho))))
        finally:
            for g in gangs:
                pool.give(g.gpus)
        return bundles

    def bundle(self, gangs: Sequence[Gang]) -> Bundle:
        """Value an arbitrary set of gangs for this app."""
        x = sum(g.throughput for g in gangs)
        rho = self.rho_of(x, self.lost_without(gangs))
        return Bundle(self.app_id, tuple(gangs), rho, self.weight * (math.log(self.rho_base) - math.log(rho)))


#: what an agent derives from its jobs: (bidding order, kinds in bidding order, plain jobs -> their placement
#: factors, job -> profile, job -> the remaining work after its position (its virtual deadline, _derive), the
#: longest remaining work per GPU among them); see Agent.__init__
Derived = tuple[tuple[Job, ...], tuple[tuple[Job, ...], ...], dict[str, tuple[float, float, float, float]],
                dict[str, Profile], dict[str, float], float]  # fmt: skip


def cannot_wait(facts: Sequence[JobFacts], ahead: Sequence[float], room: float, pace: float) -> tuple[int, ...]:
    """Which jobs must start before the shorter ones to keep their app on its private-share pace.

    `facts` are the app's waiting jobs shortest remaining run first (:attr:`JobFacts.order`), `ahead[i]`
    the remaining work of the jobs before the i-th, `room` the time left until the finish the app must keep
    (less its running jobs' remaining work at that pace; :meth:`_Sorted.derived`) and `pace` the work its
    private share does per second (:meth:`FairnessModel.share_rate`). Served
    shortest first at that pace, a job starts once the work ahead of it is done; it cannot wait when it
    would then end after the finish: ``(work ahead) / pace + its run > room``. The jobs that cannot wait
    go first, so the work ahead of a job that can is that of every shorter job and of every longer job
    that cannot: decided longest first, each job's answer is final when it is reached. Once a job would
    end in time with all the app's waiting work ahead of it, no shorter job can miss (the work ahead never
    exceeds that), so the scan stops there. Returns the indices into `facts` of the jobs that cannot wait,
    longest first. An app with no work to pace (`pace` 0) has none.
    """
    if pace <= 0.0 or not facts:
        return ()
    total = ahead[-1] + facts[-1].remaining
    late = room - total / pace  # a job whose run is at most this ends in time behind all the waiting work
    out: list[int] = []
    before = 0.0  # remaining work of the longer jobs that cannot wait (they go first)
    for i in range(len(facts) - 1, -1, -1):
        f = facts[i]
        if f.run_left <= late:
            break
        if (ahead[i] + before) / pace + f.run_left > room:
            out.append(i)
            before += f.remaining
    return tuple(out)


#: How much later than its fluid finish an app already behind its private-share pace may end, as a fraction
#: of its longest waiting run, to serve its short jobs first (:meth:`_Sorted.derived`; docs/design.md, "Agents
#: and valuation tables", and docs/eval/discussion.md, "The order inside an app", for the values measured).
BEHIND_ALLOWANCE = 0.0


class _Sorted:
    """An app's jobs that hold no lease, sorted shortest first with the running sums :func:`cannot_wait`
    reads, and the Derived of the last answer it gave (kept in JobFactsCache.orders while the jobs stay)."""

    __slots__ = ("facts", "ahead", "last")

    def __init__(self, jobs: list[Job], cache: JobFactsCache) -> None:
        facts = list(map(cache.get, jobs))  # JobFacts keep their job: sort them, not the jobs
        facts.sort(key=_ORDER)
        self.facts = facts
        ahead: list[float] = []
        total = 0.0
        for f in facts:
            ahead.append(total)
            total += f.remaining
        self.ahead = ahead
        self.last: tuple[tuple[int, ...], Derived] | None = None

    def derived(
        self, elapsed: float, t_id: float, pace: float, remaining: float, finish_rho: float = 1.0
    ) -> Derived:
        """The bidding order `elapsed` seconds after the app's arrival (:func:`pace_order`), kept while the
        set of jobs that cannot wait is the same as last time.

        `pace` is the work per second of the app's private share (FairnessModel.share_rate) and `remaining`
        the app's whole remaining work, its running jobs' included. The finish the order keeps is the
        private-share one, T_id; for an app already behind it (its remaining work at that pace, or its
        longest waiting run, ends after T_id), the fluid finish of all its remaining work at that pace plus
        :data:`BEHIND_ALLOWANCE` of its longest waiting run (measured against T_id alone, every job of such
        an app is late and the order is longest first throughout). Either way no sooner than `finish_rho`
        x T_id: the rho below the round's worst-off app that the app may finish at without raising the
        round's worst (bidding.rank_by_rho, ``ArbiterConfig.order_slack``), the slack its short jobs are
        served first in. What the running jobs have left is done first at the same pace, so it shortens the
        room of the waiting ones."""
        facts = self.facts
        urgent: tuple[int, ...] = ()
        if pace > 0.0 and facts:
            waiting = self.ahead[-1] + facts[-1].remaining
            finish = t_id - elapsed
            fluid = remaining / pace
            longest = facts[-1].run_left
            if fluid > finish or longest > finish:  # behind: no order ends the app by T_id at its pace
                finish = max(finish, fluid + BEHIND_ALLOWANCE * longest)
            finish = max(finish, finish_rho * t_id - elapsed)  # the slack below the round's worst app
            room = finish - max(0.0, remaining - waiting) / pace
            urgent = cannot_wait(facts, self.ahead, room, pace)
        last = self.last
        if last is not None and last[0] == urgent:
            return last[1]
        facts = self.facts
        if urgent:
            first = sorted((facts[i] for i in urgent), key=_LONGEST)
            skip = set(urgent)
            ordered = first + [f for i, f in enumerate(facts) if i not in skip]
        else:
            ordered = facts
        d = _derive(ordered, facts)
        self.last = (urgent, d)
        return d


def pace_order(jobs: list[Job], cache: JobFactsCache, elapsed: float, t_id: float, pace: float,
               remaining: float, finish_rho: float = 1.0) -> list[Job]:
    """The bidding order of an app's jobs that hold no lease, `elapsed` seconds after its arrival, with T_id
    `t_id`, private-share pace `pace` (work per second), `remaining` work in all (running jobs' included)
    and `finish_rho` (:meth:`_Sorted.derived`): the jobs that cannot wait (:func:`cannot_wait`, against
    the finish :meth:`_Sorted.derived` keeps) longest remaining run first, then the others shortest remaining run first (ties: submit time,
    then id). The app's finish is its last job's end, which longest first protects; every other job is
    served shortest first, which lowers the mean completion time of its jobs (docs/design.md, "Agents and
    valuation tables")."""
    return list(_Sorted(jobs, cache).derived(elapsed, t_id, pace, remaining, finish_rho)[0])


def _derive(facts: list[JobFacts], shortest_first: list[JobFacts]) -> Derived:
    """Jobs that hold no lease, in bidding order `facts`: grouped by kind, kinds in bidding order
    (interchangeable jobs are placed once), with the remaining work "after" each for its virtual deadline
    (Agent.lateness). The k-th job of the order is due when the app's private-share run, serving its jobs
    shortest first (`shortest_first`, the same jobs), has finished k of them: its "after" is the remaining
    work of the n - k longest. So the deadlines fall along the bidding order (the leftover serves an app's
    jobs in the order it bids them), and a progress report, which only lowers a remaining work, can make
    no position earlier (a sum of the largest remaining works only falls): it cannot buy a place in the
    leftover, even when it moves a job out of the jobs that cannot wait. Plain jobs (no shape, not elastic,
    allowed on any node) are placed by the pool's plain best fit, which the greedy fill calls directly
    (core/fill.py, through :attr:`Agent.plain`): a job restricted to some nodes must go through :meth:`Agent.place`."""
    groups: dict[tuple, list[Job]] = {}
    profiles: dict[str, Profile] = {}
    plain: dict[str, tuple[float, float, float, float]] = {}
    after: dict[str, float] = {}
    total = 0.0
    longest = 0.0
    for f, s in zip(reversed(facts), reversed(shortest_first), strict=True):  # last first: the work after each
        after[f.job.id] = total
        total += s.remaining
        if f.rem_per_gpu > longest:
            longest = f.rem_per_gpu
    for f in facts:
        j = f.job
        profiles[j.id] = profile = f.profile
        groups.setdefault(f.kind, []).append(j)
        if j.nodes is None and not j.elastic and f.allowed is None and not f.typed:
            plain[j.id] = profile.factors
    return (tuple(f.job for f in facts), tuple(tuple(g) for g in groups.values()), plain, profiles, after,
            longest)  # fmt: skip


def _with_holders(rest: Derived, holders: list[Job], cache: JobFactsCache) -> Derived:
    """The other jobs' Derived with the lease holders in front, longest remaining run first among
    themselves (the jobs already running are the app's critical path as long as they keep their GPUs),
    each its own kind (a holder is renewed in place, so it is interchangeable with nobody) and never plain
    (its home is tried first)."""
    facts = sorted(map(cache.get, holders), key=_LONGEST)
    jobs, kinds, plain, profiles, after, longest = rest
    total = after[jobs[0].id] + cache.get(jobs[0]).remaining if jobs else 0.0
    holders_after: dict[str, float] = {}
    for f in reversed(facts):
        holders_after[f.job.id] = total
        total += f.remaining
        if f.rem_per_gpu > longest:
            longest = f.rem_per_gpu
    return (tuple(f.job for f in facts) + jobs, tuple((f.job,) for f in facts) + kinds, plain,
            {**profiles, **{f.job.id: f.profile for f in facts}}, {**after, **holders_after}, longest)  # fmt: skip
