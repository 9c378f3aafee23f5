"""Max-min fairness of GPU *time* across apps, time-sliced over rounds (after Gavel's max_min_fairness).

Narayanan et al., "Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning Workloads" (Gavel),
OSDI 2020, section 4: a policy computes each job's allocation X_j (the fraction of time it should run) and
a round-based mechanism realises it, each round scheduling jobs in decreasing priority
X_j / (fraction of time received so far). Its max_min_fairness policy maximises the minimum normalised
share. This module is our own implementation for one GPU type (Gavel's "heterogeneity-agnostic" variant,
where normalised throughput is time share), per app rather than per job, since Themis is fair to apps:

* **Allocation**: every managed GPU (free or leased) is water-filled over the apps' demands (the GPUs of
  all their unfinished jobs at once), then each app's share over its jobs; a job's time fraction is
  X_j = min(1, its share / its gang width). Max-min on shares is what the LP gives with one resource type
  (the maximised minimum is the water level), so no solver is needed.
* **Realisation in rounds**: rounds are quanta of `quantum_s` (default 360 s) on a global clock. A job's
  received fraction is its GPU-seconds so far / (gang width x time since submit). At a round boundary,
  jobs (waiting, and running ones whose slice is over) are placed in decreasing X_j / received; a waiting
  job may suspend running jobs of *lower* priority, lowest first, until it fits (a preemption: the
  simulator charges its restart cost). Running jobs that keep their priority keep their GPUs untouched.
  Between boundaries arrivals only take free GPUs (work conservation, no preemption).
* **Simplifications** (stated as Gavel's differ): one GPU type, no space sharing, no placement awareness
  (tightest free placement), elastic jobs run at their maximum width; priorities are recomputed from the
  jobs' attained service every round instead of Gavel's per-round counters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from themis_slurm.core.decision import Decision
from themis_slurm.core.placement import Pool
from themis_slurm.core.tenancy import app_shares
from themis_slurm.core.workload import App, Job
from themis_slurm.policies.base import PolicyContext
from themis_slurm.policies.common import INF, BaselineScratchpad, EpochClock, in_key_order, priority_fill
from themis_slurm.policies.fairshare import job_time_fractions, water_fill

_EPS = 1e-9


def time_fractions(jobs_by_app: Mapping[str, Sequence[Job]], capacity: float) -> dict[str, float]:
    """X_j for every job: max-min shares of `capacity` GPUs over apps, then over each app's jobs."""
    widths = {a: sum(j.gpus for j in js) for a, js in jobs_by_app.items()}
    shares = water_fill(capacity, {a: float(w) for a, w in widths.items()})
    out: dict[str, float] = {}
    for aid, jobs in jobs_by_app.items():
        job_time_fractions(shares[aid], jobs, out, widths[aid])
    return out


def _note_shares(pad: BaselineScratchpad, policy: str, apps: Sequence[App], x: Mapping[str, float]) -> None:
    """Each app's time share in GPUs (the sum of X_j x width over its jobs), as a note of its record."""
    for app in apps:
        total = 0.0
        for j in app.jobs:
            total += x[j.id] * j.gpus
        pad.note(app.id, f"{policy} time share {total:.2f} GPU(s)")


class MaxMinPolicy:
    name = "maxmin"
    #: time-slices: suspends lower-priority running jobs at round boundaries, whatever their leases
    grants_only_free_or_expired = False
    #: time shares from gang widths, priority from attained service (see Policy)
    reads_estimates = False

    def __init__(self, quantum_s: float = 360.0) -> None:
        self.epochs = EpochClock(quantum_s)
        self._wake: float | None = None

    def schedule(self, ctx: PolicyContext) -> Decision:
        pad = BaselineScratchpad(ctx.state, self.name)
        now = pad.now
        capacity = ctx.state.managed_gpus
        x = self.fractions(ctx, capacity)

        # minus the priority X_j / received fraction floored at _EPS (the rank, then submit and id); the hot
        # loop of ftf and maxmin: every unfinished job
        neg: dict[str, float] = {}
        for app in ctx.state.apps:
            for j in app.jobs:
                jid = j.id
                xj = x[jid]
                service = j.service
                if service > 0:
                    age = now - j.submit
                    received = service / (j.gpus * age) if age > _EPS else 0.0
                    neg[jid] = -(xj / (received if received > _EPS else _EPS))
                else:  # never ran: received nothing
                    neg[jid] = -(xj / _EPS)
        at_boundary = self.epochs.on_boundary(now)
        rotatable = self.epochs.rotatable(pad)
        running, jobs = pad.running, pad.jobs

        def key(jid: str) -> tuple[float, float, str]:
            return neg[jid], jobs[jid].submit, jid

        # waiting jobs (pad.waiting()) and those whose slice is over, by key(): a total order (ids are unique)
        rot = set(rotatable)
        order = in_key_order([j for jid, j in jobs.items() if jid not in running or jid in rot], neg, jobs)

        def placer(job: Job, pool: Pool) -> frozenset[int] | None:
            return pad.fit(job, pool=pool)

        def victims(job: Job) -> list[str]:
            if not (at_boundary or rotatable):
                return []
            mine = key(job.id)
            lower = [v for v in rotatable if v not in pad.preempted and key(v) > mine]
            return sorted(lower, key=key, reverse=True)  # the lowest priority goes first

        # off a boundary with no slice over, nobody can be suspended: no victim search (victims() is empty)
        priority_fill(pad, order, placer, victims_for=victims if at_boundary or rotatable else None,
                      preempt_reason=lambda j: f"lower time-share priority than job {j.id}")  # fmt: skip
        oversubscribed = any(not pad.is_active(j.id) for j in pad.jobs.values())
        expiry = self.epochs.after(now) if oversubscribed else INF
        pad.set_expiry(expiry)
        # each app's time share is a sum over its jobs, for its record's note only: put off until read
        name, apps = self.name, ctx.state.apps
        pad.later(lambda p: _note_shares(p, name, apps, x))
        next_round = self.epochs.after(now)
        pad.explain_waiting(lambda j, _: f"priority {-neg[j.id]:.2f}: next round at t={next_round:.0f}")
        self._wake = expiry if oversubscribed else None
        return pad.decision(order, renew_expiry=expiry)

    def fractions(self, ctx: PolicyContext, capacity: float) -> dict[str, float]:
        """The policy: X_j per job (the round mechanism above realises them). Max-min shares here; with
        tenancy levels, weighted max-min down the account -> user -> app tree (as Gavel's hierarchical
        max-min weights entities, then splits an entity's share among its jobs)."""
        state = ctx.state
        if state.tenancy.flat:
            return time_fractions({a.id: list(a.jobs) for a in state.apps}, capacity)
        widths = {a.id: float(sum(j.gpus for j in a.jobs)) for a in state.apps}
        shares = app_shares(state.tenancy, state.apps, capacity, widths)
        out: dict[str, float] = {}
        for a in state.apps:
            job_time_fractions(shares[a.id], a.jobs, out, widths[a.id])
        return out

    def next_wakeup(self, now: float) -> float | None:
        return self._wake if self._wake is not None and self._wake > now else None
