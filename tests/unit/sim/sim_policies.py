"""Tiny policies for simulator tests: a FIFO first-fit one, and deliberately broken ones."""

from __future__ import annotations

import math
from collections.abc import Callable

from themis_slurm.core.decision import Decision, Grant, GrantSource, Preemption
from themis_slurm.core.placement import Pool
from themis_slurm.policies.base import PolicyContext


class FifoFirstFit:
    """Grant waiting jobs in submit order wherever they fit (tightest placement), no leases, never preempt."""

    name = "fifo-test"
    grants_only_free_or_expired = False  # called whenever jobs wait, like a baseline that may preempt

    def __init__(self, lease_s: float = math.inf) -> None:
        self.lease_s = lease_s

    def schedule(self, ctx: PolicyContext) -> Decision:
        st = ctx.state
        pool = Pool(st.topology, st.free)
        running = {lease.job_id for lease in st.leases}
        waiting = sorted((j for a in st.apps for j in a.jobs if j.id not in running), key=lambda j: (j.submit, j.id))
        grants = []
        for j in waiting:
            gpus = pool.find(j.gpus, j.gpus_per_node, j.nodes)
            if gpus is None:
                continue
            pool.take(gpus)
            grants.append(Grant(j.id, j.app_id, gpus, st.topology.nodes_of(gpus), "", st.now + self.lease_s, GrantSource.POLICY))
        return Decision(now=st.now, grants=tuple(grants))

    def next_wakeup(self, now: float) -> float | None:
        return None


class Broken(FifoFirstFit):
    """FIFO, then `mutate` spoils the decision once something was granted."""

    name = "broken"

    def __init__(self, mutate: Callable[[PolicyContext, Decision], Decision]) -> None:
        super().__init__()
        self.mutate = mutate

    def schedule(self, ctx: PolicyContext) -> Decision:
        d = super().schedule(ctx)
        return self.mutate(ctx, d)


class PreemptAll(FifoFirstFit):
    """Round-robin: every lease expiry preempts all expired holders, then FIFO-fills (tests restarts)."""

    name = "preempt-all"

    def schedule(self, ctx: PolicyContext) -> Decision:
        st = ctx.state
        expired = [lease for lease in st.leases if lease.expiry <= st.now]
        free = set(st.free).union(*(lease.gpus for lease in expired)) if expired else set(st.free)
        gone = {lease.job_id for lease in expired}
        pre = tuple(Preemption(lease.job_id, _app(st, lease.job_id), lease.gpus, note="rr") for lease in expired)
        pool = Pool(st.topology, free)
        running = {lease.job_id for lease in st.leases} - gone
        # the preempted go to the back of the line
        waiting = sorted((j for a in st.apps for j in a.jobs if j.id not in running),
                         key=lambda j: (j.id in gone, j.submit, j.id))
        grants = []
        for j in waiting:
            gpus = pool.find(j.gpus, j.gpus_per_node, j.nodes)
            if gpus is None:
                continue
            pool.take(gpus)
            grants.append(Grant(j.id, j.app_id, gpus, st.topology.nodes_of(gpus), "", st.now + self.lease_s, GrantSource.POLICY))
        return Decision(now=st.now, grants=tuple(grants), preemptions=pre)


def _app(st, job_id: str) -> str:
    return next(j.app_id for a in st.apps for j in a.jobs if j.id == job_id)
