"""Tiresias: discretized two-dimensional least-attained-service (2D-LAS) scheduling.

Gu et al., "Tiresias: A GPU Cluster Manager for Distributed Deep Learning", NSDI 2019 (sections 3.1-3.3).
A job's attained service is GPUs x time it has run (``Job.service``, GPU-seconds). Jobs sit in K queues by
attained service (queue k holds jobs with ``thresholds[k-1] <= service < thresholds[k]``); queues are
served in order, FIFO inside a queue; a waiting job in a higher queue that does not fit preempts running
jobs of lower queues. A job that has waited ``promote_knob`` x the time it has executed (or longer) is promoted
to the highest queue (starvation avoidance). Placement-sensitive ("skewed") models get consolidated
placement, the others any placement.

Simplifications and choices (ours):

* **Thresholds** default to 3,600 and 36,000 GPU-seconds (three queues). The paper tunes K and the
  thresholds per cluster and reports that two queues already capture most of the gain; configurable.
* **Promotion**: "executed time" is attained service / GPUs (wall time run); "waiting time" is time since
  the job last stopped (or was submitted), which this policy remembers across calls. A promoted job's
  demotion clock restarts: it is ranked by service attained since promotion. Knob default 8 (ours;
  0 disables promotion).
* **FIFO inside a queue** is by submit time (promoted jobs keep their submit time).
* **Preemption** only across queues (never within one), lowest queue first and, inside it, the job that
  started last first; victims whose GPUs the new placement does not use are kept.
* **Consolidation**: a job whose placement profile is sensitive (crossing machines costs > 5%) only starts
  on a single node when it fits a node (else the tightest level the hardware allows) and waits otherwise;
  others take the tightest free placement anywhere (the Pool's best fit, not Tiresias's random choice).
  Tiresias learns skew from the model's tensor sizes; we read it from the placement profile.
* **Time-driven events**: queue crossings of running jobs and promotions of waiting ones happen between
  events; :meth:`next_wakeup` returns the earliest such instant when some job is waiting.
* Elastic jobs are rigid gangs of their maximum size; grants never expire.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence

from themis_slurm.core.decision import Decision
from themis_slurm.core.workload import Job
from themis_slurm.policies.base import PolicyContext
from themis_slurm.policies.fill import priority_fill
from themis_slurm.policies.fit import INF, profile_sensitive
from themis_slurm.policies.queue_order import WaitClock, in_key_order
from themis_slurm.policies.scratchpad import BaselineScratchpad


class TiresiasPolicy:
    name = "tiresias"
    #: demotes and preempts running jobs of lower-priority queues (see Policy)
    grants_only_free_or_expired = False
    #: least attained service: queues by GPU-seconds run (see Policy)
    reads_estimates = False

    def __init__(
        self,
        thresholds: Sequence[float] = (3600.0, 36000.0),
        promote_knob: float = 8.0,
        consolidate: bool = True,
    ) -> None:
        ts = [float(t) for t in thresholds]
        if any(t <= 0 for t in ts) or ts != sorted(set(ts)):
            raise ValueError(f"thresholds must be positive and strictly increasing, got {list(thresholds)}")
        if promote_knob < 0:
            raise ValueError(f"promote_knob must be >= 0, got {promote_knob}")
        self.thresholds = tuple(ts)
        self.promote_knob = promote_knob
        self.consolidate = consolidate
        self._clock = WaitClock()
        self._base: dict[str, float] = {}  # service at promotion, per promoted job
        self._wake: float | None = None

    # ----------------------------------------------------------------- queues
    def _service(self, job: Job) -> float:
        return max(0.0, job.service - self._base.get(job.id, 0.0))

    def queue_of(self, job: Job) -> int:
        """0 is the highest-priority queue."""
        return bisect.bisect_right(self.thresholds, self._service(job))

    def _rank(self, pad: BaselineScratchpad) -> tuple[dict[str, int], list[tuple[float, str]]]:
        """Every job's queue, with waiting jobs promoted that waited long enough; and when each waiting job
        still outside queue 0 would be promoted.

        One pass over every unfinished job at every call (this was four: queues, promotions, sort keys and
        the promotion instants :meth:`_next_event` needs), with :meth:`queue_of` and the promotion rule
        inlined. A job that never ran is in queue 0 (thresholds are positive, attained service is never
        negative) and cannot be promoted: most of a long queue, so no bisection and no clock for them.
        """
        th, right, now = self.thresholds, bisect.bisect_right, pad.now
        base, running = self._base, pad.running
        knob = self.promote_knob
        since = self._clock.since_of()
        queue: dict[str, int] = {}
        promote_at: list[tuple[float, str]] = []
        # pad.waiting()'s order for the promotion notes (not pad.jobs's: the state builder's), without building it
        for job in itertools.chain.from_iterable(a.jobs for a in pad.state.apps):
            jid, service = job.id, job.service
            if service <= 0:
                q = 0
            else:
                b = base.get(jid)  # promoted jobs rank by the service since their promotion
                q = right(th, service if b is None else max(0.0, service - b))
                if q and knob > 0 and jid not in running:
                    executed = service / job.gpus
                    waited = now - since[jid]
                    if waited >= knob * executed - 1e-6:
                        base[jid] = service
                        q = 0
                        pad.note(job.app_id, f"job {jid} promoted to queue 0 (waited {waited:.0f}s)")
                    else:
                        promote_at.append((since[jid] + knob * executed, jid))
            queue[jid] = q
        return queue, promote_at

    # ----------------------------------------------------------------- schedule
    def schedule(self, ctx: PolicyContext) -> Decision:
        pad = BaselineScratchpad(ctx.state, self.name)
        self._clock.sync(pad)
        self._base = {jid: b for jid, b in self._base.items() if jid in pad.jobs}
        queue, promote_at = self._rank(pad)
        order = in_key_order(pad.jobs.values(), queue, pad.jobs)  # by (queue, submit, id)

        def placer(job: Job, pool) -> frozenset[int] | None:
            return pad.fit(job, pool=pool, consolidate=self.consolidate and profile_sensitive(job))

        # lowest queue first, and inside a queue the job that started last first
        lowest_first = sorted(pad.running, key=lambda jid: (-queue[jid], -pad.running[jid].start, jid))

        def victims(job: Job) -> list[str]:
            out = []
            for jid in lowest_first:
                if queue[jid] <= queue[job.id]:
                    break
                if jid not in pad.preempted:
                    out.append(jid)
            return out

        priority_fill(
            pad, order, placer, victims_for=victims,
            preempt_reason=lambda j: f"lower queue than job {j.id} (queue {queue[j.id]})",
        )  # fmt: skip
        for jid in pad.preempted:
            if jid not in pad.granted:
                self._clock.requeue(jid, pad.now)
        # the queue goes in front of the reason an app's record reports, when that job was waiting before
        # this call; only that reason is read, so the thousands of others are not reworded (put off until
        # the reasons are read: BaselineScratchpad.later)
        def word(p: BaselineScratchpad) -> None:
            why = p.why_wait
            for app in p.state.apps:
                j = p.reported_waiting(app)
                if j is not None and j.id not in p.running:
                    why[j.id] = f"queue {queue[j.id]}: {why[j.id]}"

        pad.later(word)
        self._wake = self._next_event(pad, queue, promote_at)
        return pad.decision(order)

    def _next_event(self, pad: BaselineScratchpad, queue: dict[str, int], promote_at: list[tuple[float, str]]
                    ) -> float | None:
        """Earliest future queue crossing of a kept running job or promotion of a waiting one.

        `promote_at` is when each job waiting at the start of the call, and not promoted, would be (from
        :meth:`_rank`); jobs granted in this call drop out, and jobs preempted in it join (their clock
        restarted now)."""
        granted, kept = pad.granted, pad.holding()
        if len(pad.jobs) == len(granted.keys() | kept.keys()):  # every job holds GPUs: nobody waits
            return None
        t = INF
        for jid, lease in kept.items():
            q = queue[jid]
            if q < len(self.thresholds):
                t = min(t, pad.now + (self.thresholds[q] - self._service(pad.jobs[jid])) / len(lease.gpus))
        for g in granted.values():
            q = queue[g.job_id]
            if q < len(self.thresholds):
                t = min(t, pad.now + (self.thresholds[q] - self._service(pad.jobs[g.job_id])) / len(g.gpus))
        if self.promote_knob > 0:
            for at, jid in promote_at:  # waiting jobs that ran before (only those can be promoted)
                if at < t and jid not in granted:
                    t = at
            since = self._clock.since_of()
            for jid in pad.preempted:
                job = pad.jobs[jid]
                if jid not in granted and queue[jid] > 0 and job.service > 0:
                    at = since[jid] + self.promote_knob * (job.service / job.gpus)
                    if at < t:
                        t = at
        if not math.isfinite(t):
            return None
        return max(t, pad.now + 1e-6)

    def next_wakeup(self, now: float) -> float | None:
        return self._wake if self._wake is not None and self._wake > now else None
