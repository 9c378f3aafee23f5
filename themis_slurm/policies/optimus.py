"""Optimus: allocation by marginal gain in estimated completion time, from a speed model.

Peng et al., "Optimus: An Efficient Dynamic Resource Scheduler for Deep Learning Clusters", EuroSys 2018
(section 4). Optimus fits a model of each job's training speed as a function of its resources and, at
every scheduling interval, gives every job a minimum allocation and then hands out the remaining resources
one unit at a time to the job whose estimated completion time drops the most.

Model (ours, stated): a job on g GPUs spanning placement level L finishes its estimated remaining work R
(ideal GPU-seconds) in ``T(g, L) = R / (s(g) * factor_L)`` seconds, where ``s(g) = g / (1 + alpha (g-1))``
is a sublinear speed-up (``alpha`` default 0.1: 8 GPUs give 4.7x, not 8x) and factor_L the job's
placement profile. The model is what Optimus *believes*; the simulator progresses jobs by its own
(linear x placement) model, as a real cluster would differ from Optimus's fitted curves.

How the marginal-gain allocation is applied, and what is simplified:

* **Admission** (Optimus's minimum allocation): waiting jobs start at their minimum size (a rigid gang
  whole, all or nothing; an elastic job on 1 GPU) in increasing order of the GPU-time they need under
  the model, ``g * T(g, best level)``: starting the job that finishes with the least GPU-time first
  gives the largest drop in total completion time per GPU-second, Optimus's objective. Jobs that do not
  fit are skipped (smaller ones further down may start).
* **Growth**: GPUs still free go one at a time to the elastic job (admitted in this call) whose ``T``
  drops most with one more GPU, placement-aware (re-placed at the new size; a step that lands on a
  slower, wider placement is not taken). Rigid gangs never grow.
* **No resizing or preemption of running jobs**: Optimus rescales jobs at each interval by checkpoint and
  restart; here a running job keeps its allocation until it ends, so decisions are re-evaluated at every
  event but only over free GPUs. (This keeps the restart cost out of Optimus's numbers.)
* Placement: tightest free placement; no parameter-server/worker split (GPUs only); grants never expire.
"""

from __future__ import annotations

from themis_slurm.core.decision import Decision
from themis_slurm.core.placement import get_profile
from themis_slurm.core.topology import Level
from themis_slurm.core.workload import Job
from themis_slurm.policies.base import PolicyContext
from themis_slurm.policies.fill import grow_elastic, priority_fill
from themis_slurm.policies.fit import MIN_REMAINING
from themis_slurm.policies.scratchpad import BaselineScratchpad


class OptimusPolicy:
    name = "optimus"
    #: never preempts, so a call with no free GPU and no expired lease cannot change anything (the
    #: simulator then skips it)
    grants_only_free_or_expired = True
    #: marginal gain in estimated remaining time (see Policy)
    reads_estimates = True

    def __init__(self, alpha: float = 0.1, grow: bool = True) -> None:
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        self.alpha = alpha
        self.grow = grow

    def speedup(self, g: int) -> float:
        return g / (1.0 + self.alpha * (g - 1)) if g > 0 else 0.0

    def rate(self, g: int, level: Level, profile: str) -> float:
        """Ideal GPU-seconds per second on `g` GPUs spanning `level`, under the speed model."""
        return self.speedup(g) * get_profile(profile).factor(level)

    def completion_time(self, job: Job, g: int, level: Level) -> float:
        """Estimated seconds to finish on `g` GPUs spanning `level`, under the speed model."""
        return max(job.remaining, MIN_REMAINING) / self.rate(g, level, job.profile)

    def schedule(self, ctx: PolicyContext) -> Decision:
        pad = BaselineScratchpad(ctx.state, self.name)
        topo = pad.topo
        # A job's GPU-time under the model, g x T(g, best level) (completion_time's floats, in its order):
        # the rate depends only on the job's shape and profile, so it is computed once per
        # shape in a call instead of once per waiting job (thousands on a contended cluster)
        rates: dict[tuple[int, int | None, int | None, str], float] = {}
        cost: dict[str, float] = {}
        keys: list[tuple[float, float, str, Job]] = []
        for j in pad.waiting():
            g = j.min_gpus
            shape = (g, j.gpus_per_node, j.nodes, j.profile)
            rate = rates.get(shape)
            if rate is None:
                rate = rates[shape] = self.rate(g, topo.best_level(g, j.gpus_per_node, j.nodes), j.profile)
            c = cost[j.id] = g * (max(j.remaining, MIN_REMAINING) / rate)
            keys.append((c, j.submit, j.id, j))
        keys.sort()  # by (cost, submit, id): ids are unique, so the jobs themselves are never compared
        order = [k[3] for k in keys]
        priority_fill(pad, order, lambda j, p: pad.fit(j, gpus=j.min_gpus, pool=p))
        if self.grow:
            grow_elastic(pad, lambda j, g, lvl: -self.completion_time(j, g, lvl))
        # each app's record reports its first job still waiting: only that reason is reworded, not the
        # thousands behind it (running jobs are never preempted here, so that job waited before the call)
        pad.explain_waiting(lambda j, why: f"needs {cost[j.id]:.0f} GPU-s: {why or 'does not fit'}")
        return pad.decision(order)

    def next_wakeup(self, now: float) -> float | None:
        return None
