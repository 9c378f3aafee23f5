"""Slurm as admins run it today: multifactor priority (age + fair share) with EASY backfill.

Slurm's priority/multifactor plugin (slurm.conf: PriorityWeightAge, PriorityMaxAge,
PriorityWeightFairshare, PriorityDecayHalfLife) and the backfill scheduler; EASY backfill after Lifka,
"The ANL/IBM SP scheduling system" (JSSPP 1995) and Mu'alem & Feitelson (IEEE TPDS 2001).

* **Priority** = ``weight_age * min(1, age / max_age_s) + weight_fairshare * F(user)``, age measured from
  job submit. ``F = 2 ** (-(U / S))`` is Slurm's classic fair-share factor: U the user's share of the
  decayed GPU usage of all users, S the user's normalised shares (equal shares among the users known to
  the policy; with tenancy levels, the user's shares normalised down the account tree, as Slurm's
  NormShares). Usage is GPU-seconds, decayed with half-life `decay_half_life_s` (Slurm's
  PriorityDecayHalfLife; default 7 days as in Slurm). Users are ``App.owner``.
* **EASY backfill**: jobs start in priority order while they fit. The first that does not fit gets a
  reservation: the earliest time at which enough GPUs free up for it, from running jobs' estimated ends
  (estimates stand in for time limits: end = now + remaining work / throughput on their GPUs), and the
  GPUs it would get then. Lower-priority jobs may start now only if they are estimated to finish before
  the reservation or do not use its GPUs. One reservation (EASY), not Slurm's many (bf_max_job_*).
* **No preemption**; grants never expire.

Simplifications (ours): usage is accounted from what this policy saw between its calls (GPUs held after
each call x time to the next call), so the caller must call it at every completion (the simulator
does); usage already held decays between calls, and what an interval adds is charged undecayed
at its end; a job that overran its estimate is assumed to end within a second when
computing the reservation (Slurm would have killed it at its time limit); no QOS, partitions, or
job-size or TRES factors (the association tree only as its normalised shares, with tenancy levels);
elastic jobs are rigid gangs of their maximum size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from themis_slurm.core.decision import Decision, GrantSource
from themis_slurm.core.placement import Pool
from themis_slurm.core.tenancy import Tenancy, fractions
from themis_slurm.core.workload import App, Job
from themis_slurm.policies.base import PolicyContext
from themis_slurm.policies.fit import estimated_runtime
from themis_slurm.policies.queue_order import in_key_order
from themis_slurm.policies.scratchpad import BaselineScratchpad

DAY = 86400.0


@dataclass
class _Reservation:
    """EASY's one reservation: when (`shadow`) and which GPUs the highest-priority waiting job gets, the
    free GPUs outside them (what backfill may still take), and why a backfill candidate waits."""

    shadow: float
    reserved: frozenset[int]
    outside: Pool
    delay: str


class SlurmPolicy:
    name = "slurm"
    #: never preempts, so a call with no free GPU and no expired lease cannot change anything (the
    #: simulator then skips it)
    grants_only_free_or_expired = True
    #: backfill reads estimated run times as time limits (see Policy)
    reads_estimates = True

    def __init__(
        self,
        weight_age: float = 1000.0,
        weight_fairshare: float = 10000.0,
        max_age_s: float = 7 * DAY,
        decay_half_life_s: float = 7 * DAY,
        backfill: bool = True,
    ) -> None:
        if not max_age_s > 0 or not decay_half_life_s > 0:
            raise ValueError("max_age_s and decay_half_life_s must be > 0 seconds")
        if weight_age < 0 or weight_fairshare < 0:
            raise ValueError("priority weights must be >= 0")
        self.weight_age = weight_age
        self.weight_fairshare = weight_fairshare
        self.max_age = float(max_age_s)
        self.half_life = float(decay_half_life_s)
        self.backfill = backfill
        self.usage: dict[str, float] = {}  # user -> decayed GPU-seconds
        self._last: float | None = None
        self._holding: dict[str, int] = {}  # user -> GPUs held after the last call

    # ----------------------------------------------------------------- fair share
    def _account(self, now: float) -> None:
        """Decay usage to `now` and charge what was held since the last call."""
        if self._last is not None and now > self._last:
            dt = now - self._last
            decay = 0.5 ** (dt / self.half_life)
            for user in self.usage:
                self.usage[user] *= decay
            for user, gpus in self._holding.items():
                self.usage[user] = self.usage.get(user, 0.0) + gpus * dt
        self._last = now if self._last is None else max(self._last, now)

    def fairshare(self, user: str, users: int) -> float:
        total = sum(self.usage.values())
        if total <= 0:
            return 1.0
        return 2.0 ** (-(self.usage.get(user, 0.0) / total) * users)

    def priority(self, job: Job, owner: str, now: float, users: int) -> float:
        return self._priority(job, now, self.fairshare(owner, users))

    def _priority(self, job: Job, now: float, fairshare: float) -> float:
        age = min(1.0, max(0.0, now - job.submit) / self.max_age)
        return self.weight_age * age + self.weight_fairshare * fairshare

    # ----------------------------------------------------------------- schedule
    def schedule(self, ctx: PolicyContext) -> Decision:
        """Waiting jobs by priority, started by EASY backfill (module docstring)."""
        pad = BaselineScratchpad(ctx.state, self.name)
        self._account(pad.now)
        owner = {a.id: a.owner for a in ctx.state.apps}
        users = len(set(owner.values()) | set(self.usage)) or 1
        factor = self._factors(ctx.state.apps, ctx.state.tenancy, owner, users)
        waiting = pad.waiting()
        prio, best = self._priorities(waiting, pad.now, factor, owner)
        order = in_key_order(waiting, prio, pad.jobs, descending=True)  # by (-priority, submit, id)
        self._easy_backfill(pad, order)
        for a in ctx.state.apps:
            if a.id in best:
                pad.note(a.id, f"priority {best[a.id]:.0f} (fair share {factor[a.owner]:.3f})")
        self._remember_holding(pad, owner)
        return pad.decision(order)

    def _factors(self, apps: Sequence[App], tenancy: Tenancy, owner: Mapping[str, str], users: int) -> dict[str, float]:
        """user -> fair-share factor: one sum over the usage per user, not per job."""
        factor: dict[str, float] = {}
        if tenancy.flat:
            for u in set(owner.values()):
                factor[u] = self.fairshare(u, users)
            return factor
        # S = the user's normalised shares down the account tree (Slurm's NormShares: the product of
        # each level's shares over its siblings'), over the users with work now (core/tenancy.py)
        norm: dict[str, float] = {}
        for aid, f in fractions(tenancy, apps).items():
            norm[owner[aid]] = norm.get(owner[aid], 0.0) + f
        total = sum(self.usage.values())
        for u, s_u in norm.items():
            factor[u] = 1.0 if total <= 0 else 2.0 ** (-(self.usage.get(u, 0.0) / total) / s_u)
        return factor

    def _priorities(self, waiting: Sequence[Job], now: float, factor: Mapping[str, float],
                    owner: Mapping[str, str]) -> tuple[dict[str, float], dict[str, float]]:  # fmt: skip
        """Each waiting job's priority, and each app's best for its note: :meth:`_priority`, inlined (every
        waiting job, every call)."""
        prio: dict[str, float] = {}
        best: dict[str, float] = {}
        w_age, w_fair, max_age = self.weight_age, self.weight_fairshare, self.max_age
        for j in waiting:
            aid = j.app_id
            p = prio[j.id] = w_age * min(1.0, max(0.0, now - j.submit) / max_age) + w_fair * factor[owner[aid]]
            if aid not in best or p > best[aid]:
                best[aid] = p
        return prio, best

    def _easy_backfill(self, pad: BaselineScratchpad, order: Sequence[Job]) -> None:
        """Jobs start in `order` while they fit; the first that does not gets the one reservation (or, with
        backfill off, every later job waits behind it), and the later ones may only backfill around it."""
        res: _Reservation | None = None
        for k, job in enumerate(order):
            if res is not None:
                if not self._backfill(pad, order, k, job, res):
                    break
                continue
            got = pad.fit(job)
            if got is not None:
                pad.grant(job, got)
                continue
            if not self.backfill:
                pad.wait(job, "highest priority; does not fit")
                for later in order:
                    if not pad.is_active(later.id):
                        pad.wait(later, f"behind job {job.id} (no backfill)")
                break
            res = self._reservation_for(pad, job)

    def _reservation_for(self, pad: BaselineScratchpad, job: Job) -> _Reservation | None:
        """The highest-priority job that does not fit waits with a reservation (None: it can never fit)."""
        found = self._reserve(pad, job)
        if found is None:
            pad.wait(job, "can never fit on the GPUs this policy manages")
            return None
        shadow, reserved = found
        res = _Reservation(shadow, reserved, Pool(pad.topo, pad.pool.free_ids() - reserved),
                           f"would delay the reservation at t={shadow:.0f}")  # fmt: skip
        pad.wait(job, f"highest priority; reserved {len(reserved)} GPU(s) at t={shadow:.0f}")
        return res

    @staticmethod
    def _backfill(pad: BaselineScratchpad, order: Sequence[Job], k: int, job: Job, res: _Reservation) -> bool:
        """`job` (at `k` in `order`) starts if it ends before the reservation or avoids its GPUs, else waits.
        False: no GPU is left, so it and every later job have waited (the loop stops)."""
        if job.gpus > pad.pool.size:  # fits neither the free GPUs nor those outside the reservation
            if not pad.pool.size:  # no GPU left: all the rest wait for the same reason (named when read)
                pad.wait_rest(order, k, res.delay)
                return False
            pad.wait(job, res.delay)
            return True
        got = pad.fit(job)
        if got is not None and pad.now + estimated_runtime(job, got, pad.topo) <= res.shadow:
            how = "backfill: ends before the reservation"
        else:
            got = pad.fit(job, pool=res.outside)
            how = "backfill: avoids the reserved GPUs"
        if got is None:
            pad.wait(job, res.delay)
            return True
        pad.grant(job, got, source=GrantSource.BACKFILL)
        res.outside.take(got - res.reserved)
        pad.note(job.app_id, f"job {job.id} {how}")
        return True

    def _remember_holding(self, pad: BaselineScratchpad, owner: Mapping[str, str]) -> None:
        """The GPUs each user holds after this call, charged as usage at the next (:meth:`_account`)."""
        self._holding = {}
        for jid in pad.jobs:
            if pad.is_active(jid):
                n = len(pad.granted[jid].gpus) if jid in pad.granted else len(pad.running[jid].gpus)
                user = owner[pad.jobs[jid].app_id]
                self._holding[user] = self._holding.get(user, 0) + n

    def _reserve(self, pad: BaselineScratchpad, job: Job) -> tuple[float, frozenset[int]] | None:
        """Earliest estimated time and GPUs at which `job` fits, releasing running jobs (and those just
        started) at their estimated ends."""
        topo, now = pad.topo, pad.now
        ends: list[tuple[float, str, frozenset[int]]] = []
        for jid, lease in pad.holding().items():
            ends.append((now + estimated_runtime(pad.jobs[jid], lease.gpus, topo), jid, lease.gpus))
        for jid, g in pad.granted.items():
            ends.append((now + estimated_runtime(pad.jobs[jid], g.gpus, topo), jid, g.gpus))
        ends.sort()
        pool = Pool(topo, pad.pool.free_ids())
        i = 0
        while i < len(ends):
            t = ends[i][0]
            while i < len(ends) and ends[i][0] <= t:
                pool.give(ends[i][2])
                i += 1
            got = pad.fit(job, pool=pool)
            if got is not None:
                return max(t, now), got
        return None

    def next_wakeup(self, now: float) -> float | None:
        return None
