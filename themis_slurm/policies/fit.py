"""Where a baseline policy may put a job: the tightest free placement honouring its shape and the nodes
Slurm could start it on, the widest placement a consolidating policy accepts, and how long a job would run.

Every baseline places through :func:`shape_fit` (via :meth:`BaselineScratchpad.fit
<themis_slurm.policies.scratchpad.BaselineScratchpad.fit>`), so none grants a job GPUs on a node Slurm would
refuse it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from themis_slurm.core.fairness import job_throughput
from themis_slurm.core.gpu_types import job_types, spanning_nodes
from themis_slurm.core.placement import Pool, allowed_nodes_on, get_profile
from themis_slurm.core.topology import Level, Topology
from themis_slurm.core.workload import Job

INF = math.inf
#: Floor on estimated remaining work (ideal GPU-seconds) so jobs that overran their estimate still rank.
MIN_REMAINING = 1.0

Placer = Callable[[Job, Pool], frozenset[int] | None]


def shape_fit(
    job: Job, pool: Pool, gpus: int | None = None, within: Iterable[str] | None = None
) -> frozenset[int] | None:
    """The tightest free placement for `job` (at `gpus` GPUs if elastic), honouring its node shape and the
    nodes Slurm could start it on (:attr:`Job.allowed_nodes`, cut to `within` when given).

    Every baseline places through here (:meth:`BaselineScratchpad.fit`), so none grants a job GPUs on a
    node Slurm would refuse it; the simulator runs them on the same states as Themis."""
    n = job.gpus if gpus is None else gpus
    if pool.topo.heterogeneous:
        return _typed_fit(job, pool, n, within)
    allowed = job.allowed_nodes
    among = None if allowed is None else allowed_nodes_on(pool.topo, allowed)
    if job.gpus_per_node is not None and job.nodes is not None:
        if among is None:
            return pool.find(job.gpus, job.gpus_per_node, job.nodes, within)
        shape = (job.gpus, job.gpus_per_node, job.nodes)
    else:
        if among is None:
            return pool.find(n, within=within)
        shape = (n, None, None)
    found = pool.place_among(*shape, among if within is None else [x for x in within if x in allowed])
    return found[0] if found is not None else None


def _typed_fit(job: Job, pool: Pool, n: int, within: Iterable[str] | None) -> frozenset[int] | None:
    """:func:`shape_fit` on a cluster of several GPU types: the tightest placement on the fastest type for the
    job that has room (core/gpu_types.py :func:`job_types`); over several types only when none ever holds it."""
    inside = None if within is None else set(within)
    shaped = job.gpus_per_node is not None and job.nodes is not None

    def fit_on(nodes: Iterable[str]) -> frozenset[int] | None:
        among = list(nodes) if inside is None else [x for x in nodes if x in inside]
        found = None
        if among:
            found = (pool.place_among(job.gpus, job.gpus_per_node, job.nodes, among) if shaped
                     else pool.place_among(n, None, None, among))  # fmt: skip
        return found[0] if found is not None else None

    types = job_types(pool.topo, job)
    for _t, _speed, nodes in types:
        if (got := fit_on(nodes)) is not None:
            return got
    span = spanning_nodes(pool.topo, job, types)  # no one type ever holds it: over several (slowest speed)
    return fit_on(span) if span else None


def consolidated_level(topo: Topology, job: Job, gpus: int | None = None) -> Level:
    """The widest level a consolidated placement may span: one node when the gang fits a node, else the
    tightest level the hardware allows for the gang."""
    n = job.gpus if gpus is None else gpus
    return max(Level.NODE, topo.best_level(n, job.gpus_per_node, job.nodes))


def estimated_runtime(job: Job, gpus: Iterable[int], topo: Topology) -> float:
    """Seconds `job` needs to finish its estimated remaining work on `gpus` (placement model)."""
    x = job_throughput(job, gpus, topo)
    return max(job.remaining, MIN_REMAINING) / x if x > 0 else INF


def profile_sensitive(job: Job) -> bool:
    return get_profile(job.profile).sensitive
