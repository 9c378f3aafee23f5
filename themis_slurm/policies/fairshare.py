"""Instantaneous fair share per app, preempting only to restore shares: a fair scheduler as sites run one.

What it models: the fair-share schedulers of shared clusters, e.g. YARN's Fair Scheduler or Mesos with
Dominant Resource Fairness (Ghodsi et al., NSDI 2011; with GPUs as the only resource DRF is max-min on GPU
counts), or a Slurm partition with fair share and share-restoring preemption. Apps get equal GPU shares
*now*, and GPUs are taken back only to bring an app up to its share; nothing is ever time-sliced, so when
every share is below one gang (more apps than a gang's width allows) it behaves like FIFO with backfill.
It is the "instantaneous fair share" baseline the Themis paper argues against (NSDI 2020, section 2).
For max-min fairness of GPU *time* over rounds (Gavel's max_min_fairness), see :mod:`.maxmin`.

Each app's fair share is computed by water-filling the managed GPUs (free + leased) over the apps'
demands (the GPUs all their unfinished jobs would hold at once); shares are fractional. Apps are then
served one job at a time, always the app with the smallest ``held / share`` next (its jobs by submit
time): a job starts on free GPUs when it fits; otherwise, if the app is below its share, it may preempt
jobs of apps above theirs.

Simplifications and choices:

* **Hysteresis, so it does not thrash**: app A may take a job's GPUs from app B only if afterwards A holds
  at most its share and B at least its share (so B can never take them straight back), and only from jobs
  that have run at least `min_run_s` (default 300 s; :meth:`next_wakeup` asks to be called when a
  protected job becomes preemptible while an app is below its share). Victims: the most-over-share app
  first, its most recently started job first; victims whose GPUs the placement does not use are kept.
* **Work conservation** over strict shares: GPUs that no under-share app can use go to any app whose job
  fits, even above its share (they are reclaimed later by preemption if needed).
* Gang granularity: shares are fractional but jobs are whole gangs, so an app can sit below its share
  when its next gang is larger than its deficit.
* Elastic jobs are rigid gangs of their maximum size; grants never expire. Placement: tightest free.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping, Sequence

from themis_slurm.core.decision import Decision
from themis_slurm.core.tenancy import Tenancy, app_shares
from themis_slurm.core.workload import App, Job
from themis_slurm.policies.base import PolicyContext
from themis_slurm.policies.fit import INF
from themis_slurm.policies.scratchpad import BaselineScratchpad

_TOL = 1e-9


def water_fill(capacity: float, demands: Mapping[str, float]) -> dict[str, float]:
    """Max-min fair shares of `capacity` for the given demands (each app gets min(demand, level))."""
    shares = dict.fromkeys(demands, 0.0)
    left = float(capacity)
    active = sorted((d, a) for a, d in demands.items() if d > 0)
    while active and left > _TOL:
        level = left / len(active)
        d, a = active[0]
        if d <= level:
            shares[a] = d
            left -= d
            active.pop(0)
        else:
            for _, b in active:
                shares[b] = level
            left = 0.0
            active = []
    return shares


def _width_then_id(j: Job) -> tuple[int, str]:
    return j.gpus, j.id


def job_time_fractions(share: float, jobs: Sequence[Job], out: dict[str, float], widths: int | None = None) -> None:
    """X_j = min(1, s_j / width_j) into `out`, s being ``water_fill(share, {job: width})``: the same floats
    in the same order, without a dictionary of demands and one of shares per app and call (ftf and maxmin,
    policies/maxmin.py, ask this of every unfinished job of every app, at every call). `widths` is the
    sum of the jobs' widths (the app's demand) when the caller has it already.

    An app whose share covers all its jobs (the sum of their widths) runs each all the time, with no sort;
    nor is there one when even the narrowest job is wider than an equal split of the share (every job then
    gets that split): the same floats, entered in the app's job order instead of the sorted one (callers
    only look them up).
    """
    if share >= (sum(j.gpus for j in jobs) if widths is None else widths):
        for j in jobs:
            out[j.id] = 1.0
        return
    left = float(share)
    n = len(jobs)
    if left <= _TOL:  # nothing to share: the loop below would not run
        for j in jobs:
            out[j.id] = 0.0
        return
    level = left / n
    if level < 1.0 or min(j.gpus for j in jobs) > level:  # every width is at least 1: no min() below one GPU
        # the loop below would stop at its first job (the narrowest) and give everyone the level: no sort
        # needed (an app of one-GPU jobs whose share is below its job count, the common case)
        for j in jobs:
            out[j.id] = level / j.gpus
        return
    order = sorted(jobs, key=_width_then_id)  # water_fill's order: (demand, key)
    i = 0
    while i < n and left > _TOL:
        level = left / (n - i)
        j = order[i]
        d = float(j.gpus)
        if d > level:  # the rest get the level: below each one's width (widths only grow from here)
            for j in order[i:]:
                out[j.id] = level / j.gpus
            return
        out[j.id] = 1.0  # its whole width: d / width
        left -= d
        i += 1
    for j in order[i:]:  # nothing left for them
        out[j.id] = 0.0


class _Serving:
    """One call's bookkeeping: each app's share and GPUs held (and its tenant's), the apps' queues, and the
    heap that says which app is served next. Held apart from the policy so each step of
    :meth:`FairSharePolicy.schedule` is a method over it rather than a closure over a dozen locals.

    The unit shares are restored for is the app (flat) or its tenant (the user, or the account when users
    do not count): the order, the preemption rule and the victims then go by the tenant's GPUs and share,
    the apps of one tenant by their own ratio among themselves.
    """

    def __init__(self, pad: BaselineScratchpad, apps: Sequence[App], tenancy: Tenancy, capacity: int) -> None:
        self.pad, self.flat = pad, tenancy.flat
        demand = {a.id: float(a.demand) for a in apps}
        # with tenancy levels, shares are weighted max-min down the account -> user -> app tree (a fair-share
        # scheduler with hierarchical queues, as YARN's Fair Scheduler or Slurm's Fair Tree set them up)
        self.share = water_fill(capacity, demand) if self.flat else app_shares(tenancy, apps, capacity, demand)
        self.held = {aid: float(n) for aid, n in pad.app_gpus().items()}
        self.group = {a.id: a.id for a in apps} if self.flat else \
            {a.id: ent for a in apps for ent in [tenancy.path(a)[-1]]}  # fmt: skip
        self.members: dict[object, list[str]] = {}
        for aid, g in self.group.items():
            self.members.setdefault(g, []).append(aid)
        self.gshare = {g: sum(self.share[a] for a in ms) for g, ms in self.members.items()}
        self.gheld = {g: sum(self.held[a] for a in ms) for g, ms in self.members.items()}
        self.arrival = {a.id: (a.arrival, a.id) for a in apps}
        self.queues: dict[str, deque[Job]] = {
            a.id: deque(sorted((j for j in a.jobs if j.id not in pad.running), key=lambda j: (j.submit, j.id)))
            for a in apps
        }
        self.failed_size: dict[str, int] = {}  # smallest gang allowed anywhere an app failed to preempt for
        self.protected_until = INF
        self.order: list[Job] = []
        self.live = {aid for aid, q in self.queues.items() if q}
        # the live app with the lowest ratio next: a heap with an entry pushed whenever an app's ratio
        # changes; an entry whose ratio is no longer its app's is stale and skipped (ratios are unique:
        # they end in the app id), so each pop is min(live, key=ratio) in O(log apps)
        self.heap = [(self.ratio(aid), aid) for aid in self.live]
        heapq.heapify(self.heap)

    def ratio(self, aid: str) -> tuple:
        held, share = self.held, self.share
        own = (held[aid] / share[aid] if share[aid] > 0 else math.inf, self.arrival[aid])
        if self.flat:
            return own
        g = self.group[aid]
        return (self.gheld[g] / self.gshare[g] if self.gshare[g] > 0 else math.inf, *own)

    def push(self, aid: str) -> None:
        """Queue `aid` again at its current ratio (its older entries go stale)."""
        heapq.heappush(self.heap, (self.ratio(aid), aid))

    def add(self, aid: str, gpus: float) -> None:
        """`aid` holds `gpus` more (or fewer): its tenant's other live apps are queued again, their keys moved."""
        self.held[aid] += gpus
        g = self.group[aid]
        self.gheld[g] += gpus
        if not self.flat:
            for other in self.members[g]:
                if other != aid and other in self.live:
                    self.push(other)

    def may_preempt(self, aid: str, j: Job) -> bool:
        """The app stays within its share with the job, and no job as wide failed to preempt in this call."""
        g = self.group[aid]
        return self.gheld[g] + j.gpus <= self.gshare[g] + _TOL and j.gpus < self.failed_size.get(aid, math.inf)

    def reason(self, aid: str) -> str:
        return f"does not fit (app holds {self.held[aid]:.0f} of its {self.share[aid]:.1f} GPU share)"

    def first_startable(self, aid: str, job: Job) -> Job | None:
        """`job`, or the first of the app's queue from it that may start or preempt; the ones before it wait.

        A job that cannot start changes nothing: no GPU moves, no ratio changes, so the same app is popped
        next again. While the app's jobs cannot start (fewer GPUs free than the gang, and no preemption to
        try), they are taken here in the order the heap would give, with the app's one reason: a contended
        queue of thousands costs no heap operation or placement try per job. None: every job the app had
        left waits (the app is no longer live).
        """
        pool, queue = self.pad.pool, self.queues[aid]
        if pool.size >= job.gpus or self.may_preempt(aid, job):
            return job
        reason = self.reason(aid)
        while True:
            self.order.append(job)
            self.pad.wait(job, reason)
            if not queue:
                self.live.discard(aid)
                return None
            job = queue.popleft()
            if pool.size >= job.gpus or self.may_preempt(aid, job):
                return job


class FairSharePolicy:
    name = "fairshare"
    #: re-shares: preempts running jobs of apps above their max-min share (see Policy)
    grants_only_free_or_expired = False
    #: shares from gang widths, jobs by submit time (see Policy)
    reads_estimates = False

    def __init__(self, min_run_s: float = 300.0) -> None:
        if min_run_s < 0:
            raise ValueError(f"min_run_s must be >= 0, got {min_run_s}")
        self.min_run_s = float(min_run_s)
        self._wake: float | None = None

    def schedule(self, ctx: PolicyContext) -> Decision:
        """Serve the apps one job at a time, the app with the smallest ``held / share`` first (module docstring)."""
        pad = BaselineScratchpad(ctx.state, self.name)
        s = _Serving(pad, ctx.state.apps, ctx.state.tenancy, ctx.state.managed_gpus)
        while s.heap:
            key, aid = heapq.heappop(s.heap)
            if aid not in s.live or key != s.ratio(aid):
                continue  # a stale entry: the app's ratio has moved since
            job = s.first_startable(aid, s.queues[aid].popleft())
            if job is not None:
                self._serve(s, aid, job)
        for a in ctx.state.apps:
            pad.note(a.id, f"fair share {s.share[a.id]:.1f} GPU(s), holds {s.held[a.id]:.0f}")
        until = s.protected_until
        self._wake = until if math.isfinite(until) and until > pad.now else None
        return pad.decision(s.order)

    def _serve(self, s: _Serving, aid: str, job: Job) -> None:
        """`job` starts on free GPUs, or on GPUs taken from apps above their share, or waits; its app is
        queued again while it has jobs left."""
        pad = s.pad
        if not s.queues[aid]:
            s.live.discard(aid)
        s.order.append(job)
        got = pad.fit(job)
        if got is None and s.may_preempt(aid, job):
            got = self._preempt_for(s, aid, job)
        if got is None:
            pad.wait(job, s.reason(aid))
        else:
            pad.grant(job, got)
            s.add(aid, len(got))
        if aid in s.live:
            s.push(aid)

    def _preempt_for(self, s: _Serving, aid: str, job: Job) -> frozenset[int] | None:
        """A placement for `job` on GPUs of jobs of units above their share (:meth:`_victims`), or None; the
        victims' apps hold that much less and are queued again at their new ratio."""
        pad = s.pad
        victims, blocked = self._victims(pad, job, s.group, s.gshare, s.gheld)
        s.protected_until = min(s.protected_until, blocked)
        before = set(pad.preempted)

        def placer(j: Job, p) -> frozenset[int] | None:
            return pad.fit(j, pool=p)

        got = pad.fit_with_preemption(job, victims, placer, f"above its fair share; GPUs go to app {aid}")
        if got is None and job.allowed_nodes is None:
            # a job restricted to some nodes fails for its nodes, not its size: a wider job of the
            # app that may go elsewhere may still succeed, so it does not bar the app's later tries
            s.failed_size[aid] = job.gpus
        for jid in sorted(set(pad.preempted) - before):
            owner = pad.jobs[jid].app_id
            s.add(owner, -len(pad.running[jid].gpus))
            if owner in s.live:
                s.push(owner)
        return got

    def _victims(
        self, pad: BaselineScratchpad, job: Job, group: Mapping[str, object], share: Mapping[object, float],
        held: Mapping[object, float],
    ) -> tuple[list[str], float]:
        """Jobs `job`'s app may take GPUs from (first = first to go), and when the earliest protected
        candidate stops being protected (inf if none). Per victim unit (an app, or with tenancy levels a
        tenant: `group` maps apps to units, `share` and `held` are per unit), jobs are listed (most
        recently started first) only while the unit would stay at or above its share after losing all of
        them; never from `job`'s own unit."""
        per_unit: dict[object, list[tuple[float, str]]] = {}
        blocked = INF
        mine = group[job.app_id]
        for jid, lease in pad.holding().items():
            victim = pad.jobs[jid]
            if group.get(victim.app_id, victim.app_id) == mine or not victim.preemptible:
                continue
            if pad.now - lease.start < self.min_run_s:
                blocked = min(blocked, lease.start + self.min_run_s)
                continue
            per_unit.setdefault(group.get(victim.app_id, victim.app_id), []).append((-lease.start, jid))
        out: list[tuple[tuple, str]] = []
        for unit, jobs in per_unit.items():
            left = held[unit]
            for neg_start, jid in sorted(jobs):
                left -= len(pad.running[jid].gpus)
                if left < share[unit] - _TOL:
                    break
                out.append(((-(held[unit] - share[unit]), str(unit), neg_start, jid), jid))
        return [jid for _, jid in sorted(out)], blocked

    def next_wakeup(self, now: float) -> float | None:
        return self._wake if self._wake is not None and self._wake > now else None
