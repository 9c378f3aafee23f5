"""Per-job numbers a round reads again and again, computed once per Job object.

A round reads each job's remaining work, best placement factor, critical path and kind several times
(ranking by rho, T_id, the agent's bidding order and its job kinds). Jobs are immutable, so all of these
are pure functions of the Job object (and the topology, for the factor). :class:`JobFactsCache` keeps them
per object: for one round, or across rounds when the caller keeps the cache and passes it to every
``run_round`` (the simulator's waiting jobs are the same objects round after round, so most of a round's
per-job work is then a dictionary lookup). It only ever returns what recomputing would, so decisions do
not depend on whether a cache is kept (tests/unit/core/test_job_facts.py checks that).
"""

from __future__ import annotations

from themis_slurm.core.gpu_types import best_speed, gang_speed, job_types, spanning_nodes
from themis_slurm.core.placement import Profile, allowed_nodes_on, get_profile, throughput
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import Job

#: Entries of jobs that left are dropped when the cache holds more than this many times the jobs of the
#: current round (plus a constant), so a long-running caller keeps memory bounded.
_PRUNE_FACTOR = 4
_PRUNE_SLACK = 1024
#: A cache used without a job count (:data:`SHARED`) starts afresh beyond this many jobs (about 40 MB).
_MAX_ENTRIES = 200_000
_UNSEEN = object()  # JobFactsCache.allowed_on's miss (None is a kept "any node")


def job_sums(job: Job, factor: float) -> tuple[float, float, float, float]:
    """What T_id and rho sum over a job at best placement factor `factor`: (remaining work, remaining work
    per GPU, work x factor, run time on its own gang at that placement). The one place these are computed."""
    remaining = job.remaining
    return remaining, remaining / job.gpus, job.work * factor, job.work / (job.gpus * factor)


class JobFacts:
    """What the round needs of one job; see the module docstring."""

    __slots__ = ("job", "remaining", "rem_per_gpu", "factor", "work_factor", "run_s", "run_left", "kind",
                 "profile", "order", "longest_first", "allowed", "typed")  # fmt: skip

    def __init__(self, job: Job, factor: float, allowed: tuple[str, ...] | None, typed: bool = False) -> None:
        self.job = job  # kept so that its id is not reused while the entry lives
        self.factor = factor  # best placement factor the hardware allows for the job's shape
        self.remaining, self.rem_per_gpu, self.work_factor, self.run_s = job_sums(job, factor)
        #: how long its remaining work runs on its own gang at that placement (seconds)
        self.run_left = self.rem_per_gpu / factor
        self.kind = job.kind
        self.profile: Profile = get_profile(job.profile)
        #: shortest remaining run first, then submit, then id: the agent's order of the jobs that can wait
        #: (core/agent.py, :func:`~themis_slurm.core.agent.pace_order`)
        self.order = (self.run_left, job.submit, job.id)
        #: longest remaining run first, then submit, then id: the order of the jobs that cannot wait and of
        #: lease holders (LPT: the app's finish is its last job's end)
        self.longest_first = (-self.run_left, job.submit, job.id)
        #: the nodes it may be placed on, in topology order (None: any node), what every placement of it
        #: reads: kept here so that a fill does not filter the topology's nodes at each try
        self.allowed = allowed
        #: on a cluster of several GPU types: placed one type at a time (Agent.place), never by the plain fit
        self.typed = typed


class JobFactsCache:
    """:class:`JobFacts` per Job object, for one topology (another topology starts the cache afresh)."""

    def __init__(self, across_rounds: bool = True) -> None:
        #: False for a cache that lives one round (a cold round, RoundState.start without a cache): the
        #: per-app running sums, kept only for the next round, are then not stored
        self.across_rounds = across_rounds
        self._topology: Topology | None = None
        self._facts: dict[int, JobFacts] = {}
        self._factors: dict[tuple, float] = {}  # (gpus, gpus_per_node, nodes, profile) -> best factor
        self._throughputs: dict[tuple, float] = {}  # (profile, GPU set) -> throughput (throughput_on)
        self._allowed: dict[frozenset[str], tuple[str, ...] | None] = {}  # allowed set -> allowed_on
        #: app id -> (the waiting jobs as passed, what the agent derived from them: see Agent.__init__)
        self.orders: dict[str, tuple[list[Job], tuple]] = {}
        #: app id -> (its jobs, its arrival, the running sums over them that FairnessModel.facts needs, how
        #: many of its first jobs were the same as the round before's)
        self.sums: dict[str, tuple[tuple[Job, ...], float, list[tuple], int]] = {}

    def use(self, topology: Topology, n_jobs: int | None = None) -> None:
        """Start a round on `topology` with `n_jobs` jobs (None: unknown): resets on a new topology, prunes
        when large (beyond a few rounds' worth of `n_jobs`, or :data:`_MAX_ENTRIES` when unknown)."""
        limit = _MAX_ENTRIES if n_jobs is None else _PRUNE_FACTOR * n_jobs + _PRUNE_SLACK
        if topology is not self._topology:
            self._topology = topology
            self._facts = {}
            self._factors = {}
            self._throughputs = {}
            self._allowed = {}
            self.orders = {}
            self.sums = {}
        elif len(self._facts) > limit:
            self._facts = {}
            self._throughputs = {}
            self._allowed = {}
            self.orders = {}
            self.sums = {}

    def best_factor(self, job: Job) -> float:
        """The placement factor of the tightest level the hardware allows for the job's shape."""
        key = (job.gpus, job.gpus_per_node, job.nodes, job.profile)
        topo = self._topology
        if topo is not None and topo.heterogeneous:  # x its fastest type's speed (core/gpu_types.py)
            key = (*key, job.speeds, job.allowed_nodes)
        cached = self._factors.get(key)
        if cached is None:
            assert topo is not None, "call use(topology, n) first"
            level = topo.best_level(job.gpus, job.gpus_per_node, job.nodes)
            cached = get_profile(job.profile).factor(level)
            if topo.heterogeneous:
                cached *= best_speed(topo, job) or 1e-9  # a job no type runs: never faster than nothing
            self._factors[key] = cached
        return cached

    def type_work(self, job: Job) -> tuple[tuple[str, float], ...]:
        """(type, work x best placement factor x speed there) for each type `job` may run on: what T_id sums
        per type on a heterogeneous cluster (FairnessModel). Kept per job's speeds, shape and allowed nodes."""
        key = ("types", job.gpus, job.gpus_per_node, job.nodes, job.profile, job.speeds, job.allowed_nodes)
        cached = self._factors.get(key)
        if cached is None:
            topo = self._topology
            assert topo is not None, "call use(topology, n) first"
            level = topo.best_level(job.gpus, job.gpus_per_node, job.nodes)
            pf = get_profile(job.profile).factor(level)
            cached = self._factors[key] = tuple((t, pf * v) for t, v, _ in job_types(topo, job))  # type: ignore[assignment]
        return tuple((t, job.work * f) for t, f in cached)  # type: ignore[union-attr]

    def throughput_on(self, job: Job, gpus: frozenset[int]) -> float:
        """:func:`~themis_slurm.core.fairness.job_throughput` of `job` on `gpus` (a lease's GPUs), kept per
        (profile, GPU set): a lease's GPUs are read again at every round until it ends."""
        if not gpus:
            return 0.0
        topo = self._topology
        key = (job.profile, gpus) if topo is None or not topo.heterogeneous else (job.profile, gpus, job.speeds)
        cached = self._throughputs.get(key)
        if cached is None:
            assert topo is not None, "call use(topology, n) first"
            level = topo.level_of(gpus)
            cached = throughput(len(gpus), level, get_profile(job.profile))
            if topo.heterogeneous:
                cached *= gang_speed(topo, job, gpus)
            self._throughputs[key] = cached
        return cached

    def types_of(self, job: Job) -> tuple[tuple[str, float, tuple[str, ...]], ...]:
        """:func:`~themis_slurm.core.gpu_types.job_types` of `job` on this cache's topology, kept per speeds and
        allowed nodes (what the agent's typed search reads at every placement)."""
        key = ("where", job.speeds, job.allowed_nodes)
        hit = self._factors.get(key)
        if hit is None:
            assert self._topology is not None, "call use(topology, n) first"
            hit = self._factors[key] = job_types(self._topology, job)  # type: ignore[assignment]
        return hit  # type: ignore[return-value]

    def spanning_of(self, job: Job) -> tuple[str, ...] | None:
        """:func:`~themis_slurm.core.gpu_types.spanning_nodes` of `job`, kept per speeds, allowed nodes and shape."""
        key = ("span", job.speeds, job.allowed_nodes, job.gpus, job.gpus_per_node, job.nodes)
        if key not in self._factors:
            assert self._topology is not None, "call use(topology, n) first"
            self._factors[key] = spanning_nodes(self._topology, job, self.types_of(job))  # type: ignore[assignment]
        return self._factors[key]  # type: ignore[return-value]

    def numbers(self, job: Job) -> tuple[float, float, float, float]:
        """:func:`job_sums` of `job`: from its JobFacts when kept, else computed and *not* kept. FairnessModel
        .facts reads every job this way: a running job is a new snapshot at every round, so keeping its
        facts only filled the cache (and brought its reset sooner); the agents' :meth:`get` keeps the
        waiting jobs'."""
        hit = self._facts.get(id(job))
        if hit is not None and hit.job is job:
            return hit.remaining, hit.rem_per_gpu, hit.work_factor, hit.run_s
        return job_sums(job, self.best_factor(job))

    def get(self, job: Job) -> JobFacts:
        hit = self._facts.get(id(job))
        if hit is not None and hit.job is job:
            return hit
        factor = self.best_factor(job)  # checks that a topology is in use
        allowed = None if job.allowed_nodes is None else self.allowed_on(job.allowed_nodes)
        typed = self._topology is not None and self._topology.heterogeneous
        facts = self._facts[id(job)] = JobFacts(job, factor, allowed, typed)
        return facts

    def allowed_on(self, allowed: frozenset[str]) -> tuple[str, ...] | None:
        """:func:`~themis_slurm.core.placement.allowed_nodes_on` on this cache's topology, kept per set:
        jobs of one partition or GPU type share a set, and a caller such as the daemon builds new Job
        objects at every round. Measured on a cold round of 2,048 jobs on 2,048 GPUs (256 nodes) whose
        jobs all listed every node: filtering the nodes job by job took it from 40 to 125 ms; kept per
        set, it is as fast as without sets."""
        hit = self._allowed.get(allowed, _UNSEEN)
        if hit is _UNSEEN:
            assert self._topology is not None, "call use(topology, n) first"
            hit = self._allowed[allowed] = allowed_nodes_on(self._topology, allowed)
        return hit  # type: ignore[return-value]


#: The cache of every FairnessModel made without one (the baselines' per-call models, metrics): safe to
#: share, since every entry is checked against the very object (or equal values) it was computed for.
SHARED = JobFactsCache()
