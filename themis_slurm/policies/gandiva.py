"""Gandiva: time-slicing with packing and affinity placement.

Xiao et al., "Gandiva: Introspective Cluster Scheduling for Deep Learning", OSDI 2018 (sections 3-5).
When the cluster is oversubscribed, Gandiva suspends and resumes jobs so that every job gets GPU time in
round-robin over fixed quanta; it packs jobs onto GPUs and prefers servers that already run jobs of the
same size (affinity); it migrates jobs to defragment.

How this module models it, and what it simplifies:

* **Quanta on a global clock**: time is cut into quanta of `quantum_s` (default 600 s) at multiples of
  the quantum. At a quantum boundary every preemptible running job that started before it is
  *rotatable*; waiting jobs, in the order they joined the queue (round robin: a suspended job rejoins at
  the back), take free GPUs first and then suspend rotatable jobs, the one that has run longest first,
  until they fit. Rotatable jobs that were not displaced keep running. Aligning quanta (rather than
  ``now + quantum`` per job) keeps staggered leases from starving wide gangs: at a boundary the head of
  the queue can claim a whole node. Between boundaries, arrivals only use free GPUs.
* **Leases**: while jobs wait, grants and renewals expire at the next boundary and :meth:`next_wakeup`
  returns it; when nothing waits, grants never expire and no wake-up is asked for.
* **Suspend-resume is a preemption** (the caller charges its checkpoint/restart cost); Gandiva's
  in-GPU time-slicing of several jobs on one GPU (memory oversubscription) is not modelled: a GPU runs
  one job at a time.
* **Packing/affinity**: best-fit placement (:meth:`Pool.find`), preferring nodes that already run jobs
  with the same GPU count when that is no wider than the best placement anywhere. Gandiva's
  introspective packing (co-locating jobs on one GPU when their combined throughput gains) and
  grow-shrink are not modelled.
* **Migration, simply**: a job suspended for a waiting job may be restarted on other free GPUs in the same
  call (a migration: preemption plus grant); no background defragmenting migration.
* Elastic jobs are rigid gangs of their maximum size.
"""

from __future__ import annotations

from themis_slurm.core.decision import Decision
from themis_slurm.core.placement import Pool
from themis_slurm.core.workload import Job
from themis_slurm.policies.base import PolicyContext
from themis_slurm.policies.epochs import EpochClock
from themis_slurm.policies.fill import priority_fill
from themis_slurm.policies.fit import INF
from themis_slurm.policies.queue_order import WaitClock
from themis_slurm.policies.scratchpad import BaselineScratchpad


class GandivaPolicy:
    name = "gandiva"
    #: time-slices: preempts running jobs at quantum boundaries, whatever their leases (see Policy)
    grants_only_free_or_expired = False
    #: round robin by queue order and run time (see Policy)
    reads_estimates = False

    def __init__(self, quantum_s: float = 600.0, affinity: bool = True, migrate: bool = True) -> None:
        self.epochs = EpochClock(quantum_s)
        self.quantum = self.epochs.length
        self.affinity = affinity
        self.migrate = migrate
        self._clock = WaitClock()
        self._wake: float | None = None

    def schedule(self, ctx: PolicyContext) -> Decision:
        pad = BaselineScratchpad(ctx.state, self.name)
        now = pad.now
        self._clock.sync(pad)
        rotatable = self.epochs.rotatable(pad)
        waiting = self._clock.in_queue_order(pad.waiting())
        order = waiting + [pad.jobs[jid] for jid in rotatable]

        # affinity: nodes already running jobs of each GPU count
        by_size: dict[int, set[str]] = {}
        for lease in pad.running.values():
            by_size.setdefault(len(lease.gpus), set()).update(pad.topo.nodes_of(lease.gpus))

        def placer(job: Job, pool: Pool) -> frozenset[int] | None:
            if job.id in pad.preempted and not self.migrate:
                return None
            anywhere = pad.fit(job, pool=pool)
            nodes = by_size.get(job.gpus) if self.affinity else None
            if anywhere is None or not nodes:
                return anywhere
            near = pad.fit(job, pool=pool, within=sorted(nodes))
            if near is not None and pad.topo.level_of(near) <= pad.topo.level_of(anywhere):
                return near
            return anywhere

        def victims(job: Job) -> list[str]:
            nonlocal rotatable
            rotatable = [jid for jid in rotatable if jid not in pad.preempted]  # shrink as they go
            return rotatable

        priority_fill(
            pad, order, placer, victims_for=victims,
            preempt_reason=lambda j: f"quantum over; suspended for job {j.id}",
        )  # fmt: skip
        for jid in pad.preempted:
            if jid not in pad.granted:
                self._clock.requeue(jid, now)
        oversubscribed = any(not pad.is_active(j.id) for j in pad.jobs.values())
        expiry = self.epochs.after(now) if oversubscribed else INF
        pad.set_expiry(expiry)
        next_quantum = self.epochs.after(now)
        pad.explain_waiting(lambda j, _: f"time-sliced: next quantum at t={next_quantum:.0f}")
        self._wake = expiry if oversubscribed else None
        return pad.decision(order, renew_expiry=expiry)

    def next_wakeup(self, now: float) -> float | None:
        return self._wake if self._wake is not None and self._wake > now else None
