"""How the baselines fill the pool: waiting jobs placed in a policy's ranking, preempting lower-ranked
running jobs where the policy allows (:func:`priority_fill`), and GPUs left over given one at a time to the
elastic jobs granted in the call (:func:`grow_elastic`)."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

from themis_slurm.core.decision import GrantSource
from themis_slurm.core.topology import Level
from themis_slurm.core.workload import Job
from themis_slurm.policies.fit import INF, Placer
from themis_slurm.policies.scratchpad import BaselineScratchpad


def priority_fill(
    pad: BaselineScratchpad,
    ranked: Sequence[Job],
    placer: Placer,
    *,
    victims_for: Callable[[Job], Sequence[str]] | None = None,
    strict: bool = False,
    expiry: float = INF,
    source: GrantSource = GrantSource.POLICY,
    preempt_reason: Callable[[Job], str] | None = None,
) -> None:
    """Place waiting jobs in `ranked` order (running jobs in it are skipped).

    A job that does not fit may preempt the running jobs `victims_for(job)` returns (first = first to
    go). Victim sets must not grow along `ranked` (a lower-ranked job may displace no job a higher one
    could not): then, once a job of n GPUs fails because free plus displaceable GPUs are fewer than n,
    no later job of n or more GPUs can succeed, and its victim search is skipped (this keeps a long
    queue on a full cluster linear). `strict` stops at the first job that cannot be placed (no
    backfill); otherwise smaller jobs further down may use what is left (work conservation).
    """
    short_of = math.inf  # smallest need that failed for lack of GPUs, free or displaceable
    granted, kept = pad.granted, pad.holding()
    for k, job in enumerate(ranked):
        if job.id in granted or job.id in kept:  # pad.is_active, inlined: this loop sees every waiting job
            continue
        if not pad.pool.size and not strict and (victims_for is None or short_of <= 1):
            # nothing can be placed any more (no free GPU, and not even one GPU's worth can be displaced):
            # the rest wait, as the loop would say, without a placement try (named when first read)
            pad.wait_rest(ranked, k, "does not fit")
            return
        # a placement takes at least min_gpus GPUs of the pool: no call that could only fail
        got = placer(job, pad.pool) if pad.pool.size >= job.min_gpus else None
        if got is None and victims_for is not None and job.min_gpus < short_of:
            victims = [v for v in victims_for(job) if v in pad.holding() and pad.jobs[v].preemptible]
            if pad.pool.size + sum(len(pad.running[v].gpus) for v in victims) < job.min_gpus:
                short_of = job.min_gpus
            else:
                why = preempt_reason(job) if preempt_reason else f"preempted for job {job.id}"
                got = pad.fit_with_preemption(job, victims, placer, why)
        if got is None:
            pad.wait(job, "blocked: strict order" if strict else "does not fit")
            if strict:
                for later in ranked:
                    if not pad.is_active(later.id):
                        pad.wait(later, f"behind job {job.id} (no backfill)")
                return
            continue
        pad.grant(job, got, expiry, source)


ValueFn = Callable[[Job, int, Level], float]


def grow_elastic(pad: BaselineScratchpad, value: ValueFn, consolidate: bool = False) -> None:
    """Give the GPUs left in the pool, one at a time, to elastic jobs granted in this call.

    `value(job, n_gpus, level)` is what the policy maximises for a job (higher is better, e.g. minus the
    estimated completion time). Each step goes to the job whose value rises most with one more GPU at its
    current placement level; the job is then re-placed at the new size and the step is kept only if the
    value really rises at the new placement's level (a wider placement can be slower). Running jobs are
    never resized (that would be a checkpoint-restart).
    """
    topo = pad.topo
    heap: list[tuple[float, str]] = []

    def push(jid: str) -> None:
        job, cur = pad.jobs[jid], pad.granted[jid].gpus
        n = len(cur)
        if n >= job.gpus:
            return
        lvl = topo.level_of(cur)
        est = value(job, n + 1, lvl) - value(job, n, lvl)
        if est > 0:
            heapq.heappush(heap, (-est, jid))

    for jid in sorted(pad.granted):
        if pad.jobs[jid].elastic:
            push(jid)
    while heap and pad.pool.size > 0:
        _, jid = heapq.heappop(heap)
        job, cur = pad.jobs[jid], pad.granted[jid].gpus
        pad.pool.give(cur)
        new = pad.fit(job, gpus=len(cur) + 1, consolidate=consolidate)
        pad.pool.take(cur)
        if new is None:
            continue
        if value(job, len(new), topo.level_of(new)) <= value(job, len(cur), topo.level_of(cur)):
            continue
        pad.resize(jid, new)
        push(jid)
