"""The typed state of one Themis round, filled in phase by phase (core/arbiter.py lists the phases).

Each phase reads what earlier phases wrote and writes its own fields; nothing else is shared. The idea is
the Kubernetes scheduling framework's per-cycle state, but typed: a reader sees here every quantity the
round computes, and in each field's comment which phase owns it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from themis_slurm.core.decision import GrantSource, Renewal, ReservationNote
from themis_slurm.core.fairness import FairnessModel
from themis_slurm.core.job_facts import JobFactsCache
from themis_slurm.core.placement import Pool
from themis_slurm.core.state import ClusterState, check_state
from themis_slurm.core.tenancy import auction_weights
from themis_slurm.core.workload import Job, Lease

if TYPE_CHECKING:
    from themis_slurm.core.agent import Agent, Gang
    from themis_slurm.core.arbiter import ArbiterConfig
    from themis_slurm.core.auction import Allocation
    from themis_slurm.core.payments import Payment

#: A (re)start may cost at most half a lease in the bids and the ranking: beyond that, a short lease would
#: make every move look worthless and freeze the allocation (restart_cost_s >= lease_s / 2).
MAX_RESTART_DISCOUNT = 0.5


@dataclass
class RoundState:
    """Inputs (set by :meth:`start`) and the results of each phase."""

    state: ClusterState
    cfg: ArbiterConfig
    jobs: dict[str, Job]
    model: FairnessModel
    expiry: float                      # when a lease granted or renewed in full this round ends
    restart_discount: float            # fraction of a lease's throughput a (re)start loses
    weights: dict[str, float]          # app -> its weight in the auction (core/tenancy.py); empty: all 1.0
    # pool phase
    pool: Pool = field(init=False)
    offered: int = 0                   # GPUs in the pool before anything is taken (free + expiring leases)
    held: dict[str, Lease] = field(default_factory=dict)                 # leases that stay this round
    homes: dict[str, frozenset[int]] = field(default_factory=dict)       # expiring leases: job -> its GPUs
    renewals: list[Renewal] = field(default_factory=list)                # holders that cannot be preempted
    # visibility phase
    agents: dict[str, Agent] = field(default_factory=dict)               # apps with waiting work
    rho_now: dict[str, float] = field(default_factory=dict)              # every app's rho before the round
    ranked: list[str] = field(default_factory=list)                      # agents, worst first
    bidders: list[Agent] = field(default_factory=list)                   # the first 1 - f of `ranked`
    # reservation phase (optional)
    reserved: frozenset[int] = frozenset()                               # held idle for a wide gang
    reservations: dict[str, ReservationNote] = field(default_factory=dict)
    # winner determination
    solver: str = ""
    x_star: Allocation | None = None
    # hidden payments and the visibility stop
    payments: dict[str, Payment] = field(default_factory=dict)
    cut: dict[str, float] = field(default_factory=dict)                  # renewals paid in lease time: expiry
    kept_gpus: dict[str, int] = field(default_factory=dict)              # per winner, after payment and stop
    stopped: set[str] = field(default_factory=set)                       # winners the visibility stop cut
    quota_stopped: set[str] = field(default_factory=set)                 # winners their tenant's quota cut
    # leftover: per-user quotas with tenancy levels (core/tenancy.quotas; empty when flat)
    quota: dict[tuple, float] = field(default_factory=dict)              # tenant entity -> GPUs it should hold
    tenant_of: dict[str, tuple] = field(default_factory=dict)            # app -> its tenant entity
    # the allocation, as every phase from reservation on leaves it
    got: dict[str, list[Gang]] = field(default_factory=dict)             # app -> gangs it starts or keeps
    source: dict[str, GrantSource] = field(default_factory=dict)         # job -> auction|leftover|reservation

    @classmethod
    def start(cls, state: ClusterState, cfg: ArbiterConfig, cache: JobFactsCache | None = None) -> RoundState:
        """Checks the input (no GPU claimed twice, job ids unique) and sets the round's constants.

        `cache` carries per-job numbers over from earlier rounds (core/job_facts.py); None starts afresh.
        """
        jobs = check_state(state)
        topo = state.topology
        cache = cache if cache is not None else JobFactsCache(across_rounds=False)
        cache.use(topo, len(jobs))
        return cls(state=state, cfg=cfg, jobs=jobs,
                   model=FairnessModel(topo, state.cluster_gpus or topo.size, cfg.idle_throughput, cache),
                   expiry=state.now + cfg.lease_s,
                   weights={} if state.tenancy.flat else auction_weights(state.tenancy, state.apps),
                   restart_discount=min(MAX_RESTART_DISCOUNT, cfg.restart_cost_s / cfg.lease_s))

    @property
    def now(self) -> float:
        return self.state.now

    def award(self, app_id: str, gangs: list[Gang], source: GrantSource) -> None:
        """Give `gangs` (taken from the pool here) to `app_id`, each recorded with `source`."""
        if not gangs:
            return
        self.pool.take(frozenset().union(*(g.gpus for g in gangs)))
        self.got[app_id] = self.got.get(app_id, []) + gangs
        for g in gangs:
            self.source[g.job_id] = source
