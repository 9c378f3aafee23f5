"""SLAQ: quality-driven scheduling, GPUs to the jobs whose loss would drop the most.

Zhang et al., "SLAQ: Quality-Driven Scheduling for Distributed Machine Learning", SoCC 2017. SLAQ
predicts each job's loss curve from its reported losses and, every scheduling epoch, reallocates
resources to the jobs with the largest predicted loss reduction per resource: jobs early in training
(steep loss curves) get more, jobs near convergence less.

Model (ours, stated): there is no loss telemetry here, so the loss curve is assumed, not fitted: a job
that has done x ideal GPU-seconds of work (``Job.done``, a proxy for iterations) has normalised loss
``loss(x) = 1 / sqrt(1 + x / loss_scale_s)`` (sublinear convergence, loss(0) = 1 for every job, as SLAQ
normalises by the initial loss; ``loss_scale_s`` default 3,600). Over one epoch on g GPUs spanning
level L a job advances ``min(epoch * g * factor_L, remaining)``; its value is the loss reduction over
the epoch, and SLAQ ranks by that reduction per GPU.

Simplifications and choices:

* **Epochs on a global clock** (`epoch_s`, default 600 s) as in :mod:`gandiva`: while jobs wait, leases
  end at the next boundary and :meth:`next_wakeup` asks for it. At a boundary, running preemptible jobs
  that started before it may be displaced by a waiting job whose loss reduction per GPU beats theirs by
  more than the hysteresis factor (default 10%), lowest value first; between boundaries only free GPUs
  are used. SLAQ reallocates every few seconds and resizes jobs in place; here a displaced job is
  preempted (checkpoint/restart cost charged by the caller).
* **Allocation**: waiting jobs are admitted at their minimum size (rigid gang whole; elastic on 1 GPU) by
  decreasing loss reduction per GPU; GPUs left over grow elastic jobs admitted in this call one GPU at a
  time by marginal loss reduction (placement-aware). Running jobs are not resized.
* Placement: tightest free placement.
"""

from __future__ import annotations

import math

from themis_slurm.core.decision import Decision
from themis_slurm.core.placement import get_profile
from themis_slurm.core.topology import Level
from themis_slurm.core.workload import Job
from themis_slurm.policies.base import PolicyContext
from themis_slurm.policies.epochs import EpochClock
from themis_slurm.policies.fill import grow_elastic, priority_fill
from themis_slurm.policies.fit import INF, MIN_REMAINING
from themis_slurm.policies.scratchpad import BaselineScratchpad


class SlaqPolicy:
    name = "slaq"
    #: re-allocates every epoch and may preempt running jobs (see Policy)
    grants_only_free_or_expired = False
    #: estimated loss reduction from remaining work (see Policy)
    reads_estimates = True

    def __init__(
        self,
        epoch_s: float = 600.0,
        loss_scale_s: float = 3600.0,
        hysteresis: float = 0.1,
        preempt: bool = True,
    ) -> None:
        if not loss_scale_s > 0:
            raise ValueError(f"loss_scale_s must be > 0, got {loss_scale_s}")
        if hysteresis < 0:
            raise ValueError(f"hysteresis must be >= 0, got {hysteresis}")
        self.epochs = EpochClock(epoch_s)
        self.loss_scale = float(loss_scale_s)
        self.hysteresis = hysteresis
        self.preempt = preempt
        self._wake: float | None = None
        #: id(job) -> (job, topology, loss reduction per GPU) of the last call's waiting jobs: a waiting job's
        #: value depends only on the Job object (immutable) and the topology, and a simulator passes the same
        #: objects while jobs wait, so most of a call's values are lookups (the entry keeps its job alive)
        self._waiting_values: dict[int, tuple[Job, object, float]] = {}

    def loss(self, x: float) -> float:
        return 1.0 / math.sqrt(1.0 + max(0.0, x) / self.loss_scale)

    def reduction(self, job: Job, g: int, level: Level) -> float:
        """Predicted loss reduction over one epoch on `g` GPUs spanning `level`."""
        if g <= 0:
            return 0.0
        rate = g * get_profile(job.profile).factor(level)
        step = min(self.epochs.length * rate, max(job.remaining, MIN_REMAINING))
        return self.loss(job.done) - self.loss(job.done + step)

    def schedule(self, ctx: PolicyContext) -> Decision:
        pad = BaselineScratchpad(ctx.state, self.name)
        topo, now = pad.topo, pad.now

        def per_gpu(job: Job, gpus: frozenset[int] | None = None) -> float:
            if gpus is None:
                g = job.min_gpus
                lvl = topo.best_level(g, job.gpus_per_node, job.nodes)
            else:
                g, lvl = len(gpus), topo.level_of(gpus)
            return self.reduction(job, g, lvl) / g

        value: dict[str, float] = {}
        seen, kept = self._waiting_values, {}
        waiting = pad.waiting()
        for j in waiting:
            hit = seen.get(id(j))
            v = hit[2] if hit is not None and hit[0] is j and hit[1] is topo else per_gpu(j)
            kept[id(j)] = (j, topo, v)
            value[j.id] = v
        self._waiting_values = kept
        value.update({jid: per_gpu(pad.jobs[jid], lease.gpus) for jid, lease in pad.running.items()})
        # by (-value, submit, id): ids are unique, so the jobs themselves are never compared
        order = [t[3] for t in sorted([(-value[j.id], j.submit, j.id, j) for j in waiting])]
        rotatable = self.epochs.rotatable(pad) if self.preempt else []

        def victims(job: Job) -> list[str]:
            bar = value[job.id] / (1.0 + self.hysteresis)
            cands = [jid for jid in rotatable if value[jid] < bar]
            return sorted(cands, key=lambda jid: (value[jid], -pad.running[jid].start, jid))

        priority_fill(
            pad, order, lambda j, p: pad.fit(j, gpus=j.min_gpus, pool=p), victims_for=victims,
            preempt_reason=lambda j: f"job {j.id} would reduce its loss more per GPU",
        )  # fmt: skip
        grow_elastic(pad, self.reduction)
        oversubscribed = any(not pad.is_active(j.id) for j in pad.jobs.values())
        expiry = self.epochs.after(now) if oversubscribed else INF
        pad.set_expiry(expiry)
        # each app's note reports its first waiting job that is still waiting (BaselineScratchpad.decision):
        # only that one is worded, not the thousands behind it, and only once read (BaselineScratchpad.later)
        def word(p: BaselineScratchpad) -> None:
            running, why = p.running, p.why_wait
            for app in p.state.apps:
                for j in app.jobs:
                    if j.id not in running and not p.is_active(j.id):
                        why[j.id] = f"loss reduction {value[j.id]:.2e}/GPU: {why.get(j.id, 'does not fit')}"
                        break

        pad.later(word)
        self._wake = expiry if oversubscribed else None
        return pad.decision(order, renew_expiry=expiry)

    def next_wakeup(self, now: float) -> float | None:
        return self._wake if self._wake is not None and self._wake > now else None
