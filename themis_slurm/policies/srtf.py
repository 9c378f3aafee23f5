"""SRTF: shortest remaining (estimated) time first, preemptive.

The classic JCT-minimising baseline (the Themis authors' simulator has SRSF and SJF; Tiresias, NSDI 2019,
uses SRTF as its clairvoyant reference). Remaining time of a job is its estimated remaining work over
its gang size, ``max(work - done, 1) / gpus`` seconds (placement slow-down ignored in the ranking; a job
that overran its estimate ranks as nearly done).

Simplifications and choices:

* **Preemptive**: a waiting job that does not fit preempts running preemptible jobs with a strictly
  longer remaining time, longest first, until it fits (victims whose GPUs the placement does not use are
  kept). Running jobs only get shorter, so a job never preempts the job that just preempted it.
* Work-conserving: jobs further down the order start whenever they fit.
* Elastic jobs are rigid gangs of their maximum size; grants never expire.
* Remaining time, not remaining service (GPUs x time; that would be SRSF).
"""

from __future__ import annotations

from themis_slurm.core.decision import Decision
from themis_slurm.core.workload import Job
from themis_slurm.policies.base import PolicyContext
from themis_slurm.policies.fill import priority_fill
from themis_slurm.policies.fit import MIN_REMAINING
from themis_slurm.policies.queue_order import in_key_order
from themis_slurm.policies.scratchpad import BaselineScratchpad


def remaining_time(job: Job) -> float:
    return max(job.remaining, MIN_REMAINING) / job.gpus


class SrtfPolicy:
    name = "srtf"
    #: preempts a running job for a shorter waiting one (see Policy)
    grants_only_free_or_expired = False
    #: shortest estimated remaining time first (see Policy)
    reads_estimates = True

    def __init__(self, preempt: bool = True) -> None:
        self.preempt = preempt

    def schedule(self, ctx: PolicyContext) -> Decision:
        pad = BaselineScratchpad(ctx.state, self.name)

        jobs = pad.jobs
        left = {jid: remaining_time(j) for jid, j in jobs.items()}
        order = in_key_order(jobs.values(), left, jobs)  # by (remaining time, submit, id)
        longest_first = sorted(pad.running, key=lambda jid: (left[jid], jobs[jid].submit, jid), reverse=True)

        def victims(job: Job) -> list[str]:
            mine = left[job.id]
            out = []
            for jid in longest_first:
                if left[jid] <= mine:
                    break
                if jid not in pad.preempted:
                    out.append(jid)
            return out

        priority_fill(
            pad,
            order,
            lambda j, p: pad.fit(j, pool=p),
            victims_for=victims if self.preempt else None,
            preempt_reason=lambda j: f"job {j.id} has less remaining time",
        )
        return pad.decision(order)

    def next_wakeup(self, now: float) -> float | None:
        return None
