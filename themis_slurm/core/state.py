"""What a scheduling round sees: the cluster state every policy (Themis and the baselines) gets.

It lives apart from the Themis arbiter because the baselines, the simulator and the daemon all build or
read it; only the arbiter turns it into a Themis Decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from themis_slurm.core.tenancy import FLAT, Entity, Tenancy, TenantBook
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App, Job, Lease


@dataclass(frozen=True)
class ClusterState:
    """What the arbiter sees: the cluster, what is free, who holds what, and the apps.

    `free` are GPUs Themis may hand out now; `unavailable` those it must not touch (used by jobs Themis
    does not manage, on drained or down nodes, reserved): never offered, and checked to be disjoint from
    `free` and the leases. `cluster_gpus` is C in T_id (defaults to the topology size).

    `job_index`, when given, is every app's jobs by id, the very objects in `apps`, kept up to date by a
    builder that changes a few jobs between states (the simulator: a dictionary of 2,600 jobs built at
    every call was 3.5% of a run). :func:`check_state` then copies it instead of building it. Not part of
    the state's value (equality, repr); a state made with :func:`dataclasses.replace` and other apps must
    drop it (``job_index=None``).

    `tenancy` is the account -> user -> app tree the apps' shares come from (core/tenancy.py); the default,
    apps alone, is the paper's 1/N. The caller feeds each app's contention clock with
    :func:`~themis_slurm.core.tenancy.contention` under the same tenancy, so that T_id and the auction agree.
    `tenant_books` (tenancy levels only) is each active tenant's :class:`~themis_slurm.core.tenancy.TenantBook`,
    kept by the caller; a tenant without one is paced by its present apps alone (core/quota.py).
    """

    topology: Topology
    now: float
    free: frozenset[int]
    leases: tuple[Lease, ...]
    apps: tuple[App, ...]
    cluster_gpus: int | None = None
    unavailable: frozenset[int] = frozenset()
    job_index: Mapping[str, Job] | None = field(default=None, compare=False, repr=False)
    tenancy: Tenancy = FLAT
    tenant_books: Mapping[Entity, TenantBook] = field(default_factory=dict)

    @property
    def managed_gpus(self) -> int:
        """The GPUs policies share out over time: free now plus leased (never the unavailable ones)."""
        return len(self.free) + sum(len(lease.gpus) for lease in self.leases)


def check_state(state: ClusterState) -> dict[str, Job]:
    """Every app's jobs by id, after checking the state is consistent; ValueError naming the fault when not.

    Job ids are unique across apps; no GPU is claimed twice (free, unavailable, leased) or lies outside the
    topology; every lease is of a known job. The arbiter and the baselines call this first.

    The dictionary is a new one the caller may change. Its order is the state's app and job order, or the
    builder's with a ``job_index``: code that needs an order goes by ``state.apps``, not by it.
    """
    n_jobs = sum(len(a.jobs) for a in state.apps)
    index = state.job_index
    if index is None:
        jobs = {j.id: j for a in state.apps for j in a.jobs}
        if len(jobs) != n_jobs:
            raise ValueError("job ids must be unique across apps")
    else:
        # dict.copy clones the table while at most a third of it is deleted entries (9 us for 2,600 jobs);
        # dict(index) clones only a table with none, and inserts entry by entry otherwise (60 us)
        jobs = index.copy() if isinstance(index, dict) else dict(index)
        # as many ids as jobs (unique ids), and each app's first and last job (a running one, whose
        # snapshot changes at every call) are the index's: an index left over from another state fails here
        if len(jobs) != n_jobs or any(
            jobs.get(a.jobs[0].id) is not a.jobs[0] or jobs.get(a.jobs[-1].id) is not a.jobs[-1]
            for a in state.apps
            if a.jobs
        ):
            raise ValueError("job ids must be unique across apps, and job_index must hold the apps' jobs")
    seen: dict[int, str] = {}
    n = state.topology.size
    for g in state.free:
        if not 0 <= g < n:
            raise ValueError(f"free GPU id {g} is not in the topology (0..{n - 1})")
        seen[g] = "free"
    for g in state.unavailable:
        if g in seen:
            raise ValueError(f"GPU {g} is both free and unavailable")
        seen[g] = "unavailable"
    for lease in state.leases:
        if lease.job_id not in jobs:
            raise ValueError(f"lease for unknown job {lease.job_id}")
        for g in lease.gpus:
            if g in seen:
                raise ValueError(f"GPU {g} is both {seen[g]} and leased to job {lease.job_id}")
            seen[g] = f"leased to job {lease.job_id}"
    return jobs
