"""Max-min fairness of GPU *time* across apps, realised in rounds the way Gavel's scheduler does it.

Narayanan et al., "Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning Workloads" (Gavel),
OSDI 2020, sections 4-5: a policy computes each job's allocation X_j (the fraction of time it should run)
and a round-based mechanism realises it. This module is our own code for one GPU type; what Gavel does is
read from stanford-futuredata/gavel (MIT licence) at c4fa400, the commit of
``../shared/traces/gavel/reference`` (its README), file by file:

* **The allocation** (``scheduler/policies/max_min_fairness.py``, ``MaxMinFairnessPolicy``): every
  throughput is set to 1 and the LP maximises min_j s_j X_j (s_j: the job's scale factor, its GPUs) subject
  to sum_j s_j X_j <= GPUs and 0 <= X_j <= 1 (``policy.py``, ``get_base_constraints``), solved by
  ECOS. With one GPU type the maximised minimum is a water level, so no solver is needed here: every
  managed GPU is water-filled over the apps' demands (the GPUs of all their unfinished jobs at once), and an
  app's share over its jobs, X_j = min(1, share / width). When there are at least as many jobs as GPUs the
  LP has this one solution; otherwise it fixes only the minimum and ECOS returns some point of the optimal
  face, and water-filling is our choice of that point (docs/eval/discussion.md measures what it changes).
  Per app rather than per job, since Themis is fair to apps; with each job its own app it is Gavel's.
* **When X is recomputed** (``scheduler/scheduler.py``, ``_update_priorities``, ``add_job``,
  ``_remove_job``): in simulation, at the start of every round in which a job arrived or left since the
  last computation (with ``minimum_time_between_allocation_resets = 0``, the reference runs' setting).
* **Rounds** (``scheduler.py``, ``simulate``): a round starts when the previous one ends and lasts the
  quantum (360 s), or less when every job of the round finishes sooner; the cluster idle, the next arrival
  starts one. Jobs that arrive during a round, and GPUs that a job finishing early frees, wait for the next
  round: nothing is started or stopped between round starts.
* **Priorities** (``_update_priorities``, ``_reset_time_run_so_far``): each job's time received counts
  from the last recomputation of X, starting at half a round (Gavel's initial value); its priority is
  X_j / (its share of all the time received), so right after a recomputation the largest X runs first. At
  each recomputation the deficit (X_j times the time since the last one, minus what the job received) is
  added up; it breaks ties between equal priorities, then X, then arrival order.
* **The round's jobs** (``_schedule_jobs_on_workers_helper``): jobs in priority order, each taken when its
  gang fits in the GPUs left (a wider one that does not fit is skipped, smaller ones after it still run),
  until none are left. Jobs not taken are suspended (the simulator charges its restart cost; Gavel's
  simulator charges none) and the others keep their GPUs.

Differences that remain: one GPU type, no space sharing; placement is the tightest free one on our
topology (Gavel's one-GPU servers have none), the gangs of the round placed widest first as Gavel does;
elastic jobs run at their maximum width; with tenancy levels X comes from the weighted max-min down the
account -> user -> app tree (as Gavel's hierarchical max-min weights entities).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from themis_slurm.core.decision import Decision
from themis_slurm.core.tenancy import app_shares
from themis_slurm.core.workload import App, Job
from themis_slurm.policies.base import PolicyContext
from themis_slurm.policies.fairshare import job_time_fractions, water_fill
from themis_slurm.policies.fit import INF
from themis_slurm.policies.scratchpad import BaselineScratchpad

_EPS = 1e-3  # seconds: how close to a round's end counts as its end


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
            total += x.get(j.id, 0.0) * j.gpus
        pad.note(app.id, f"{policy} time share {total:.2f} GPU(s)")


@dataclass
class RoundBook:
    """Gavel's round bookkeeping (module docstring), kept across calls.

    `received` is each job's seconds of running since the last recomputation of X plus half a quantum;
    `deficit` the sum over recomputations of X_j x elapsed minus received; `x` the allocation in force;
    `known` the jobs it was computed for; `order` each job's arrival rank (the last tie-break).
    """

    quantum_s: float
    received: dict[str, float] = field(default_factory=dict)
    deficit: dict[str, float] = field(default_factory=dict)
    x: dict[str, float] = field(default_factory=dict)
    known: frozenset[str] = frozenset()
    last_reset: float = 0.0
    round_start: float | None = None
    round_jobs: frozenset[str] = frozenset()
    order: dict[str, int] = field(default_factory=dict)

    def round_over(self, now: float, running: Mapping[str, object]) -> bool:
        """The current round has ended: its quantum is up, or none of its jobs still runs."""
        if self.round_start is None or now >= self.round_start + self.quantum_s - _EPS:
            return True
        return not any(j in running for j in self.round_jobs)

    def close_round(self, now: float, running: Mapping[str, object]) -> None:
        """Count the ended round's running time for its jobs that are still here (Gavel adds each job's
        execution time, not its GPU-time, to its time received)."""
        if self.round_start is None:
            return
        ran = now - self.round_start
        for j in self.round_jobs:
            if j in running and j in self.received:
                self.received[j] += ran

    def needs_reset(self, present: Sequence[Job]) -> bool:
        """A job arrived or left since X was last computed."""
        return len(present) != len(self.known) or any(j.id not in self.known for j in present)

    def reset(self, now: float, present: Sequence[Job], x: Mapping[str, float]) -> None:
        """Gavel's ``_reset_time_run_so_far`` then the new allocation: deficits take what each job was owed
        since the last reset, time received restarts at half a quantum, X becomes `x`."""
        half = self.quantum_s / 2.0
        elapsed = now - self.last_reset
        received, deficit, old = self.received, self.deficit, self.x
        new_jobs = sorted((j for j in present if j.id not in self.order), key=lambda j: (j.submit, j.id))
        # A newcomer's rank is the count of jobs known before this reset's departures, so after departures
        # it may equal a remaining job's rank (ties then go by `present` order). A counter that never
        # repeats a rank was measured against Gavel's own results: in Gavel's world of whole steps it moved
        # gen160_seed11's max-min max rho from Gavel's 1.260 (matched exactly) to 1.397 and changed none of
        # the other four reference traces by more than 0.1%; so this stays as it is.
        for j in new_jobs:
            self.order[j.id] = len(self.order)
        keep = {j.id for j in present}
        for jid in [jid for jid in self.order if jid not in keep]:
            del self.order[jid]
        self.received = {}
        self.deficit = {}
        for j in present:
            jid = j.id
            got = received.get(jid, half) - half
            self.deficit[jid] = deficit.get(jid, 0.0) + old.get(jid, 0.0) * elapsed - got
            self.received[jid] = half
        self.x = dict(x)
        self.known = frozenset(keep)
        self.last_reset = now

    def ranking(self, present: Sequence[Job]) -> list[Job]:
        """`present` in Gavel's order: priority X_j / received_j, then deficit, then X, all descending;
        then arrival order."""
        x, received, deficit, order = self.x, self.received, self.deficit, self.order

        def key(j: Job) -> tuple[float, float, float, int]:
            xj = x.get(j.id, 0.0)
            return -xj / received[j.id], -deficit[j.id], -xj, order[j.id]

        return sorted(present, key=key)


class MaxMinPolicy:
    name = "maxmin"
    #: suspends running jobs at round starts, whatever their leases
    grants_only_free_or_expired = False
    #: time shares from gang widths, rounds from completions, priorities from time received (see Policy)
    reads_estimates = False

    def __init__(self, quantum_s: float = 360.0) -> None:
        if not quantum_s > 0:
            raise ValueError(f"quantum_s must be > 0 seconds, got {quantum_s}")
        self.quantum_s = float(quantum_s)
        self.book = RoundBook(self.quantum_s)
        self._wake: float | None = None

    def schedule(self, ctx: PolicyContext) -> Decision:
        pad = BaselineScratchpad(ctx.state, self.name)
        now, book = pad.now, self.book
        present = [j for a in ctx.state.apps for j in a.jobs]
        running = pad.running
        if not book.round_over(now, running):
            # mid-round: nothing starts or stops until the round ends (Gavel's rounds)
            end = book.round_start + self.quantum_s if book.round_start is not None else INF
            self._explain(pad, ctx.state.apps, end)
            self._wake = end if present else None
            return pad.decision(renew_expiry=end)
        book.close_round(now, running)
        if book.needs_reset(present):
            book.reset(now, present, self.fractions(ctx, float(ctx.state.managed_gpus)))
        ranked = book.ranking(present)
        self._run_round(pad, ranked)
        book.round_start = now
        book.round_jobs = frozenset(jid for jid in pad.jobs if pad.is_active(jid))
        end = now + self.quantum_s
        pad.set_expiry(end)
        pad.renew_all(end)
        self._explain(pad, ctx.state.apps, end)
        self._wake = end if present else None
        return pad.decision(ranked, renew_expiry=end)

    def _run_round(self, pad: BaselineScratchpad, ranked: Sequence[Job]) -> None:
        """Gavel's greedy pass: jobs in rank order, each taken while its gang fits in the GPUs left; the
        running jobs not taken are suspended, the taken ones placed widest first; then anything that still
        fits, in rank order (only placement can leave such GPUs: Gavel's servers have one GPU each)."""
        left = pad.state.managed_gpus
        taken: list[Job] = []
        for jid in pad.running:  # a job that cannot be suspended runs whatever its rank
            job = pad.jobs[jid]
            if not job.preemptible:
                taken.append(job)
                left -= len(pad.running[jid].gpus)
        fixed = {j.id for j in taken}
        for job in ranked:
            if left <= 0:
                break
            if job.id in fixed:
                continue
            width = len(pad.running[job.id].gpus) if job.id in pad.running else job.gpus
            if width <= left:
                taken.append(job)
                left -= width
        chosen = {j.id for j in taken}
        for jid in list(pad.running):
            if jid not in chosen and pad.jobs[jid].preemptible:
                pad.preempt(jid, "lower time-share priority this round")
        for job in sorted((j for j in taken if j.id not in pad.running), key=lambda j: -j.gpus):
            got = self._fit(pad, job)
            if got is None:
                pad.wait(job, "taken for the round but no placement fits")
            else:
                pad.grant(job, got)
        for job in ranked:
            if pad.is_active(job.id):
                continue
            got = self._fit(pad, job) if pad.pool.size >= job.min_gpus else None
            if got is not None:
                pad.grant(job, got)
            else:
                pad.wait(job, "lower time-share priority this round")

    def _fit(self, pad: BaselineScratchpad, job: Job) -> frozenset[int] | None:
        """Where a job taken for the round goes: the scratchpad's tightest fit (ftf over GPU types steers it
        to the types its app's optimum gives it, policies/ftf.py)."""
        return pad.fit(job)

    def _explain(self, pad: BaselineScratchpad, apps: Sequence[App], end: float) -> None:
        book, name = self.book, self.name
        x, received = book.x, book.received

        def why(j: Job, _: str | None) -> str:
            if j.id not in received:
                return f"arrived mid-round: waits for the next round at t={end:.0f}"
            return f"priority {x.get(j.id, 0.0) / received[j.id] * 1e3:.3f}: next round at t={end:.0f}"

        pad.explain_waiting(why)
        pad.later(lambda p: _note_shares(p, name, apps, x))

    def fractions(self, ctx: PolicyContext, capacity: float) -> dict[str, float]:
        """The policy: X_j per job (the rounds realise them). Max-min shares here; with tenancy levels,
        weighted max-min down the account -> user -> app tree (as Gavel's hierarchical max-min weights
        entities, then splits an entity's share among its jobs)."""
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
