"""FIFO: first come, first served, with no backfill and no preemption.

The reference point every scheduling paper starts from (e.g. Gu et al., Tiresias, NSDI 2019, section 2,
and the YARN/Slurm default queue). Order: app arrival, then job submit time (ids break ties), so an app's
jobs are served together, as a queue of experiments would be.

Simplifications and choices:

* **Strict, no backfill**: the first waiting job that does not fit blocks everything behind it
  (head-of-line blocking is the point of this baseline; `slurm` is the backfilling one).
* Never preempts; grants never expire (``lease_expiry = inf``).
* Elastic jobs are treated as rigid gangs of their maximum size.
* Placement: the tightest free placement (:meth:`Pool.find`), node shapes honoured.
"""

from __future__ import annotations

from themis_slurm.core.decision import Decision
from themis_slurm.policies.base import PolicyContext
from themis_slurm.policies.fill import priority_fill
from themis_slurm.policies.scratchpad import BaselineScratchpad


class FifoPolicy:
    name = "fifo"
    #: never preempts, so a call with no free GPU and no expired lease cannot change anything (the
    #: simulator then skips it)
    grants_only_free_or_expired = True
    #: app arrival and submit order (see Policy)
    reads_estimates = False

    def schedule(self, ctx: PolicyContext) -> Decision:
        pad = BaselineScratchpad(ctx.state, self.name)
        arrival = {a.id: a.arrival for a in ctx.state.apps}
        order = sorted(pad.jobs.values(), key=lambda j: (arrival[j.app_id], j.app_id, j.submit, j.id))
        priority_fill(pad, order, lambda j, p: pad.fit(j, pool=p), strict=True)
        return pad.decision(order)

    def next_wakeup(self, now: float) -> float | None:
        return None
