"""Reading the cluster into a `Snapshot`: a bounded number of Slurm calls per cycle, never one per job.

Per cycle: ``squeue --all --states=all --json`` (every job, finished ones included for as long as
slurmctld keeps them, MinJobAge: how a managed job ended is what estimate calibration learns from; 22.05
ignores the filters and prints them anyway; active jobs are filtered here) and one node listing with GRES used and their indices: ``sinfo --all --json`` up to 23.02,
``scontrol show nodes --json`` on 23.11+ (whose sinfo JSON groups nodes without indices), found on the
first cycle (`SnapshotReader.read_nodes`), ``scontrol show node -d -o`` if neither has them. gres.conf and
topology.conf are plain files next to slurm.conf: read at start and again only when a file's mtime
changes, so topology costs no RPC at all.

The pure part, `build_snapshot`, takes parsed records and is what the unit tests exercise; `SnapshotReader`
adds the commands and the config-file cache. Being conservative is the rule throughout: a GPU that
anything (managed job, other job, or the node's own GRES accounting) uses is never `free`, and a GPU
whose state cannot be known is `unavailable`, because offering a busy GPU makes a released job sit
pending on it while the scheduler believes it runs.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from themis_slurm.core.topology import Topology
from themis_slurm.slurm import constraints, hostlist
from themis_slurm.slurm.eligibility import blocked_reason
from themis_slurm.slurm.errors import ConfigError, SlurmOutputError
from themis_slurm.slurm.gres_conf import GresConf, parse_gres_conf
from themis_slurm.slurm.limits import (
    SACCTMGR_QOS,
    SCONTROL_CONFIG,
    LimitReader,
    Limits,
    LimitView,
    count_usage,
    needs_limits,
    sacctmgr_assoc,
)
from themis_slurm.slurm.model import AdapterConfig, ManagedJob, NodeRoom, Snapshot
from themis_slurm.slurm.options import Record, is_record, parse_progress, parse_record
from themis_slurm.slurm.parse import job_from_json, load_json, node_from_json
from themis_slurm.slurm.ranges import parse_int_list
from themis_slurm.slurm.records import JOB_BASE_STATES, SlurmJob, SlurmNode
from themis_slurm.slurm.reservations import (
    SCONTROL_RESERVATIONS,
    Reservation,
    ReservationReader,
    reserved_for,
)
from themis_slurm.slurm.resources import memory_text
from themis_slurm.slurm.runner import Runner, SlurmCommandError
from themis_slurm.slurm.scontrol import parse_scontrol_nodes
from themis_slurm.slurm.topology_conf import SwitchTree, parse_topology_conf

SQUEUE = ("squeue", "--all", "--states=all", "--json")
SINFO = ("sinfo", "--all", "--json")
SCONTROL_NODES = ("scontrol", "show", "node", "-d", "-o")
SCONTROL_NODES_JSON = ("scontrol", "show", "nodes", "--json")
DEFAULT_RACK = "cluster"  # rack of every node when there is no topology.conf (no switch tree known)


# ------------------------------------------------------------------------------------------- job rules
def job_partitions(job: SlurmJob) -> tuple[str, ...]:
    """A pending job submitted to several partitions prints them comma-separated."""
    return tuple(p for p in job.partition.split(",") if p)


def is_managed(job: SlurmJob, managed_partitions: Iterable[str]) -> bool:
    """Themis manages a job that carries the trusted record AND is in a managed partition.

    Both are needed: the record alone could survive a partition change by an admin, and the partition
    alone would capture jobs submitted while job_submit.lua was off (they were never held).
    """
    return is_record(job.admin_comment) and bool(set(job_partitions(job)) & set(managed_partitions))


def app_key(user: str, app: str | None, job: SlurmJob) -> str:
    """``user/app`` for a tagged job, ``user/array-<id>`` for an array, ``user/job-<id>`` otherwise.

    The user is part of the key, so two users choosing the same app name get two apps.
    """
    if app:
        return f"{user}/{app}"
    if job.array_job_id is not None:
        return f"{user}/array-{job.array_job_id}"
    return f"{user}/job-{job.job_id}"


def array_tasks(spec: str) -> tuple[int, ...]:
    """Task ids of a pending array remainder such as ``0-3,7%2`` (the ``%`` throttle is dropped)."""
    return parse_int_list(spec.split("%", 1)[0])


def requeued_while_completing(job: SlurmJob, now: float | None = None) -> bool:
    """Slurm requeued this job (its owner's ``scontrol requeue``, say) and it is still leaving its nodes.

    Measured on the local cluster right after an owner's requeue of a running job: 25.11 lists the state
    as [PENDING, COMPLETING]; 22.05 shows COMPLETING alone, with the restart counted and, the job being
    pending again underneath, the StartTime of a pending job: its expected start, `now` or later (a job
    that completes shows the past start of its run). Both then show PENDING, reason BeginTime, not held,
    and Slurm starts the job by itself at BeginTime (requeue + cred_expire + 1 s) unless it is held.
    ``now`` (the snapshot's time, taken before the read) None skips the 22.05 test.
    """
    if job.state != "COMPLETING":
        return False
    if "PENDING" in job.state_flags:
        return True
    return (now is not None and job.restart_cnt > 0 and job.start_time is not None
            and job.start_time >= math.floor(now))


def fixed_nodes(job: SlurmJob) -> int | None:
    """Node count the job fixed: any per-node GPU request implies it; else only an explicit -N > 1."""
    if job.tres_per_node or job.num_nodes > 1:
        return job.num_nodes
    return None


# ----------------------------------------------------------------------------------------- topology
def build_topology(nodes: Sequence[SlurmNode], gres: GresConf | None, tree: SwitchTree | None,
                   split_pcie_by_cores: bool = False) -> tuple[Topology, list[str]]:
    """Topology of the given (managed) nodes: islands from gres.conf Links, racks from topology.conf, each
    node's GPU type from the Gres Slurm reports for it (one type per node; several: none, with a warning).

    A node gres.conf does not describe exactly (AutoDetect, or a count that disagrees with what slurmd
    reports) becomes one island of its reported GPUs, with a warning: Slurm's count is what jobs get.
    Racks are ordered by name and nodes in hostlist order, so GPU ids stay stable across rebuilds.
    """
    warnings: list[str] = []
    racks: dict[str, dict[str, list[list[int]]]] = {}
    types: dict[str, str] = {}  # node -> its GPU type (Slurm's Gres, gpu:<type>:n), for core/gpu_types.py
    by_name = {n.name: n for n in nodes if n.gpu_count > 0}
    for name in hostlist.expand(hostlist.fold(by_name)) if by_name else []:
        node = by_name[name]
        islands: list[list[int]] = []
        if gres is not None:
            described = gres.gpus_on(name)
            if len(described) == node.gpu_count:
                islands = [sorted(i) for i in gres.islands(name, split_pcie_by_cores)]
            elif described:
                warnings.append(f"gres.conf describes {len(described)} GPUs on {name} but Slurm reports "
                                f"{node.gpu_count}: treating them as one island")
        if not islands:
            islands = [list(range(node.gpu_count))]
        rack = tree.rack_of(name) if tree is not None and tree.switches else DEFAULT_RACK
        racks.setdefault(rack, {})[name] = islands
        kinds = sorted({(g.type or "").lower() for g in node.gpus if g.count})
        if len(kinds) == 1:
            types[name] = kinds[0]
        elif len(kinds) > 1:
            warnings.append(f"{name} has GPUs of several types ({', '.join(k or 'untyped' for k in kinds)}): "
                            "its GPUs are counted as of no type (speed 1.0)")
    spec = {r: racks[r] for r in sorted(racks)}
    return Topology.from_spec(spec, types), warnings


# ----------------------------------------------------------------------------------------- snapshot
def _job_id_text(job: SlurmJob, task: int | None) -> str:
    if job.array_job_id is not None and task is not None:
        return f"{job.array_job_id}_{task}"
    return str(job.job_id)


def _gpu_ids(job: SlurmJob, topo: Topology, warnings: list[str]) -> frozenset[int]:
    ids: set[int] = set()
    for node, idx in job.gpu_indices.items():
        for i in idx:
            try:
                ids.add(topo.gpu_id(node, i))
            except KeyError:
                warnings.append(f"job {job.job_id}: GPU {i} on {node} is not a managed GPU")
    return frozenset(ids)


def trusted_throttle(slurms: int | None, recorded: int | None) -> int | None:
    """An array's throttle as Themis counts it: never above the one recorded at submit.

    Slurm's copy is the owner's to change (an owner's raise is applied before job_submit.lua refuses it),
    so it counts only where it is lower; the recorded one counts when Slurm's was raised or removed.
    """
    if recorded is None:
        return slurms
    return recorded if slurms is None else min(slurms, recorded)


def placement_limits(job: SlurmJob, user_nodes: Sequence[str], topo: Topology,
                     nodes: Mapping[str, SlurmNode]) -> tuple[frozenset[str] | None, str]:
    """The managed nodes Slurm could start `job` on, and what narrowed them (None, "": any managed node).

    What Slurm checks that Themis can see on a held job: the job's partitions, its GPU type (a typed
    request fits nodes with that type; an untyped one any type), the owner's -w list (from the record:
    Themis's pin replaces ReqNodeList) and -x list. A node with GPUs of several types counts whole.
    Without node records (`nodes` empty) nothing is narrowed. Also the job's feature constraint
    (slurm/constraints.py: one Themis cannot evaluate exactly narrows nothing and is left to Slurm) and the
    nodes too small for its CPUs or memory per node even when empty; what is free on a node changes every
    cycle and is checked when a round grants (daemon/room.py).
    """
    cand = set(topo.node_gpus)
    why: list[str] = []
    parts = {p for p in job.partition.split(",") if p}
    if nodes and parts:
        in_parts = {n for n in cand if n in nodes and parts & set(nodes[n].partitions)}
        if in_parts != cand:
            cand = in_parts
            why.append(f"partition {job.partition}")
    if nodes and job.gpu_type:
        typed = {n for n in cand if n in nodes and any(g.type == job.gpu_type and g.count for g in nodes[n].gpus)}
        if typed != cand:
            cand = typed
            why.append(f"GPU type {job.gpu_type}")
    if user_nodes:
        cand &= set(user_nodes)
        why.append(f"its node list (-w {hostlist.fold(list(user_nodes))})")
    if job.excluded_nodes and cand & set(job.excluded_nodes):
        cand -= set(job.excluded_nodes)
        why.append(f"excluded nodes (-x {hostlist.fold(list(job.excluded_nodes))})")
    if nodes and job.constraint:
        try:
            ok = constraints.matching(job.constraint, {n: nodes[n].features for n in cand if n in nodes}, cand)
        except ValueError:
            ok = None  # Slurm accepted it at submit; what it means is Slurm's to decide
        if ok is not None and ok != cand:
            cand = set(ok)
            why.append(f"features {job.constraint}")
    if nodes and job.cpus_per_node:
        big = {n for n in cand if n in nodes and (nodes[n].cpus is None or nodes[n].cpus >= job.cpus_per_node)}
        if big != cand:
            cand = big
            why.append(f"{job.cpus_per_node} CPUs per node")
    if nodes and job.mem_per_node:
        big = {n for n in cand if n in nodes and (nodes[n].memory is None or nodes[n].memory >= job.mem_per_node)}
        if big != cand:
            cand = big
            why.append(f"{memory_text(job.mem_per_node)} of memory per node")
    if not why:
        return None, ""
    return frozenset(cand), ", ".join(why)


def around_reservations(job: SlurmJob, allowed: frozenset[str] | None, limits: str, topo: Topology,
                        reservations: Sequence[Reservation], now: float) -> tuple[frozenset[str] | None, str]:
    """`allowed` without the nodes a reservation keeps this job from (its time limit would run into it)."""
    reserved, why = reserved_for(reservations, now, job.time_limit_s)
    base = allowed if allowed is not None else frozenset(topo.node_gpus)
    if not reserved & base:
        return allowed, limits
    limit = "no time limit" if not job.time_limit_s else f"its time limit of {job.time_limit_s / 60:.0f} min"
    text = f"{why}: {limit} would run into it"
    return base - reserved, f"{limits}, {text}" if limits else text


def never_fits(job: SlurmJob, allowed: frozenset[str] | None, limits: str, topo: Topology,
               nodes: int | None) -> str | None:
    """Why the job can never run on this cluster's managed nodes as they are configured (None: it can)."""
    where = allowed if allowed is not None else frozenset(topo.node_gpus)
    sizes = sorted((len(topo.node_gpus.get(n, ())) for n in where), reverse=True)
    scope = f" on the nodes {limits} allows" if limits else " on the managed nodes"
    if job.gpus_total > sum(sizes):
        return (f"can never run here: it asks for {job.gpus_total} GPUs and there are {sum(sizes)}{scope} "
                f"({len(sizes)} node(s))")
    if nodes is not None and job.gpus_per_node and (len(sizes) < nodes or sizes[nodes - 1] < job.gpus_per_node):
        fit = sum(1 for s in sizes if s >= job.gpus_per_node)
        return (f"can never run here: it asks for {nodes} node(s) with {job.gpus_per_node} GPUs each and "
                f"{fit} node(s) have that many{scope}")
    return None


def managed_jobs_of(job: SlurmJob, topo: Topology, warnings: list[str], now: float | None = None,
                    nodes: Mapping[str, SlurmNode] | None = None,
                    reservations: Sequence[Reservation] = (),
                    slurm_limits: LimitView | None = None) -> list[ManagedJob]:
    """One ManagedJob per job, or per task for a pending array remainder (``120_[3-7]``).

    ``now`` (the snapshot's time) is what BeginTime is compared with; None skips that check. ``nodes``
    (the node records by name) narrow where the job may go (`placement_limits`). ``slurm_limits``: a QOS
    or association limit that binds now (slurm/limits.py) makes a pending job `blocked` too.
    """
    record, problems = parse_record(job.admin_comment)
    warnings.extend(f"job {job.job_id}: {p}" for p in problems)
    progress, progress_error = parse_progress(job.comment)
    if progress_error:
        warnings.append(f"job {job.job_id}: {progress_error}")
    node_gpus, gpu_ids = _gpus_held(job, topo, warnings)
    user = job.user_name or (str(job.user_id) if job.user_id is not None else "?")
    blocked, allowed, limits = _blocked_and_allowed(job, user, record, topo, warnings, now, nodes or {},
                                                    reservations, slurm_limits)  # fmt: skip
    tasks = _tasks(job, warnings)
    return [
        ManagedJob(
            job_id=_job_id_text(job, task),
            slurm_id=job.job_id,
            app_key=app_key(user, record.app, job),
            user=user,
            state=job.state,
            held=job.held,
            gpus=job.gpus_total,
            gpus_per_node=(job.gpus_per_node or None) if job.tres_per_node else None,
            nodes=fixed_nodes(job),
            node_gpus=node_gpus,
            gpu_ids=gpu_ids,
            est_s=record.est_s,
            time_limit_s=None if job.time_limit_s is None else float(job.time_limit_s),
            profile=record.profile,
            progress=progress,
            progress_error=progress_error,
            requeue_ok=job.requeue and job.batch_flag,
            restart_cnt=job.restart_cnt,
            submit_time=float(job.submit_time or 0),
            start_time=None if job.start_time is None else float(job.start_time),
            required_nodes=job.required_nodes,
            priority=job.priority,
            partition=job.partition,
            name=job.name,
            array_job_id=job.array_job_id,
            array_task_id=task,
            reason=job.state_reason,
            blocked=blocked,
            array_max_tasks=trusted_throttle(job.array_max_tasks, record.throttle),
            allowed_nodes=allowed,
            limits=limits,
            user_nodes=record.nodes,
            account=job.account,
            qos=job.qos,
            requeued=requeued_while_completing(job, now),
            cpus_per_node=job.cpus_per_node,
            mem_per_node=job.mem_per_node,
            ckpt_s=record.ckpt_s,
            ckpt_given=record.ckpt_given,
        )
        for task in tasks
    ]


def _gpus_held(job: SlurmJob, topo: Topology, warnings: list[str]) -> tuple[dict[str, int], frozenset[int]]:
    """GPUs per node the job holds, and their ids in the topology (none known without Slurm's GPU indices)."""
    if job.gpu_indices:
        return {n: len(i) for n, i in job.gpu_indices.items()}, _gpu_ids(job, topo, warnings)
    node_gpus = {n: job.gpus_per_node for n in job.nodes} if job.nodes and job.gpus_per_node else {}
    return node_gpus, frozenset()


def _blocked_and_allowed(
    job: SlurmJob, user: str, record: Record, topo: Topology, warnings: list[str], now: float | None,
    nodes: Mapping[str, SlurmNode], reservations: Sequence[Reservation], slurm_limits: LimitView | None
) -> tuple[str | None, frozenset[str] | None, str]:
    """Why the job may not start now (None: it may), the nodes it may go to (None: any) and what limits them.

    A pending job not blocked otherwise is blocked when it can never fit, then by a QOS or association limit
    that binds now; a reservation narrows its nodes for now (after never_fits: not for ever)."""
    blocked = blocked_reason(job, now)
    allowed, limits = placement_limits(job, record.nodes, topo, nodes)
    if job.state == "PENDING" and blocked is None:
        blocked = never_fits(job, allowed, limits, topo, fixed_nodes(job))
        if blocked is not None:
            warnings.append(f"job {job.job_id} ({user}): {blocked}")
    if job.state == "PENDING" and blocked is None and slurm_limits is not None:
        blocked = slurm_limits.blocked(user, job.account, (job_partitions(job) or ("",))[0], job.qos, job.gpus_total)
    if job.state == "PENDING" and reservations and now is not None:
        allowed, limits = around_reservations(job, allowed, limits, topo, reservations, now)
    return blocked, allowed, limits


def _tasks(job: SlurmJob, warnings: list[str]) -> list[int | None]:
    """The array task ids the record stands for: each task of a pending array remainder, else its own."""
    if job.array_job_id is not None and job.array_task_id is None and job.array_task_spec:
        try:
            return list(array_tasks(job.array_task_spec))
        except ValueError as exc:
            warnings.append(f"job {job.job_id}: array tasks {job.array_task_spec!r}: {exc}")
            return []
    return [job.array_task_id]


def build_snapshot(jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode], topo: Topology,
                   config: AdapterConfig, now: float, slurm_calls: int = 0, latency_s: float = 0.0,
                   warnings: Iterable[str] = (), reservations: Sequence[Reservation] = (),
                   limits: Limits | None = None, memory_consumed: bool = False) -> Snapshot:
    """Combine parsed jobs and nodes with the topology into the daemon's view (pure).

    ``limits`` (enforced QOS and association limits) are counted over every job Slurm lists, managed or
    not (slurm/limits.py), and make the snapshot's `LimitView`. ``memory_consumed``: Slurm allocates
    memory (SelectTypeParameters with MEMORY), so a node's free memory is part of its `room`.
    """
    warns = list(warnings)
    view = None
    if limits is not None and limits.enforced:
        view = LimitView(limits, count_usage(limits, (
            (j.state, j.user_name or str(j.user_id), j.account, j.partition, j.qos, j.gpus_total) for j in jobs)))
    managed: list[ManagedJob] = []
    used: set[int] = set()
    managed_used: set[int] = set()
    finished: dict[str, str] = {}
    finished_times: dict[str, tuple[float | None, float | None]] = {}
    seen = {n.name: n for n in nodes}
    for job in jobs:
        if not job.is_active:
            if job.state in JOB_BASE_STATES and is_managed(job, config.managed_partitions):
                key = _job_id_text(job, job.array_task_id)
                finished[key] = job.state
                finished_times[key] = (job.start_time or None, job.end_time or None)
            continue
        if is_managed(job, config.managed_partitions):
            for mj in managed_jobs_of(job, topo, warns, now, seen, reservations, view):
                managed.append(mj)
                managed_used |= mj.gpu_ids
                used |= mj.gpu_ids
        else:
            for node, idx in job.gpu_indices.items():
                used.update(topo.by_node_index[(node, i)] for i in idx if (node, i) in topo.by_node_index)
    unavailable: set[int] = set()
    for name, ids in topo.node_gpus.items():
        node = seen.get(name)
        if node is None:
            warns.append(f"node {name} is missing from Slurm's node list: its GPUs are unavailable")
            unavailable.update(ids)
            continue
        node_used = {topo.by_node_index[(name, i)] for i in node.gpu_indices_used
                     if (name, i) in topo.by_node_index}
        used |= node_used
        known = {g for g in ids if g in used}
        if node.gpus_used > len(known):
            warns.append(f"node {name}: Slurm counts {node.gpus_used} GPUs in use but only {len(known)} "
                         "are known by index: treating the others as unavailable")
            unavailable.update(g for g in ids if g not in used)
        elif not node.available:
            unavailable.update(g for g in ids if g not in used)
    all_ids = set(range(topo.size))
    free = all_ids - used - unavailable
    room = {name: node_room(seen[name], memory_consumed) for name in topo.node_gpus if name in seen}
    return Snapshot(
        time=now,
        topology=topo,
        free=frozenset(free),
        unmanaged=frozenset(used - managed_used),
        unavailable=frozenset(unavailable - used),
        managed=tuple(managed),
        slurm_calls=slurm_calls,
        warnings=tuple(warns),
        latency_s=latency_s,
        managed_used=frozenset(managed_used),
        finished=finished,
        finished_times=finished_times,
        limits=view,
        room=room,
    )


def node_room(node: SlurmNode, memory_consumed: bool) -> NodeRoom:
    """A node's free CPUs (and memory, where it is consumed) as Slurm counts them; None where not reported."""
    cpus = None if node.cpus is None or node.cpus_alloc is None else max(0, node.cpus - node.cpus_alloc)
    mem = None
    if memory_consumed and node.memory is not None and node.memory_alloc is not None:
        mem = max(0, node.memory - node.memory_alloc)
    return NodeRoom(cpus, mem)


def memory_consumed(config: str) -> bool:
    """Whether ``scontrol show config`` says Slurm allocates memory (SelectTypeParameters CR_*_MEMORY)."""
    for line in config.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "SelectTypeParameters":
            return "MEMORY" in value.upper()
    return False


# ------------------------------------------------------------------------------------ reading Slurm
def parse_jobs_tolerant(doc: Mapping[str, Any]) -> tuple[list[SlurmJob], list[str]]:
    """Jobs of a squeue JSON document; a record that does not parse is skipped with a warning.

    Skipping is safe for free-GPU accounting because node ``gres_used`` still covers what it holds.
    """
    raw = doc.get("jobs")
    if not isinstance(raw, list):
        raise SlurmOutputError("squeue --json", "", "no 'jobs' list")
    jobs: list[SlurmJob] = []
    warnings: list[str] = []
    for item in raw:
        try:
            jobs.append(job_from_json(item))
        except (SlurmOutputError, ValueError, TypeError, AttributeError) as exc:
            warnings.append(f"skipped a job record: {exc}")
    return jobs, warnings


@dataclass
class _ConfCache:
    key: tuple[Any, ...]
    gres: GresConf | None
    tree: SwitchTree | None
    warnings: list[str]


class SnapshotReader:
    """Reads snapshots through a `Runner`, caching the config files and the topology between cycles."""

    def __init__(self, runner: Runner, config: AdapterConfig | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.runner = runner
        self.config = config or AdapterConfig()
        self.clock = clock
        self._conf: _ConfCache | None = None
        self._topo_key: tuple[Any, ...] | None = None
        self._topo: Topology | None = None
        self._topo_warnings: list[str] = []
        self._node_source: str | None = None  # "sinfo", "scontrol-json" or "scontrol", found on first read
        self._reservations = ReservationReader()
        self._limits = LimitReader()
        self.memory_consumed = False  # SelectTypeParameters allocates memory: read with the limits' config

    def reservations(self, now: float, warnings: list[str]) -> Sequence[Reservation]:
        """The reservations, read again when `READ_EVERY_S` has passed (reservations.py)."""
        r = self._reservations
        if r.due(now):
            try:
                warnings.extend(r.update(now, self.runner.run(SCONTROL_RESERVATIONS, self.config.timeout_s)))
            except SlurmCommandError as exc:
                r.failed(now)
                warnings.append(f"reservations not readable ({exc}): the last ones read stay in use")
        return r.current

    def limits(self, now: float, warnings: list[str]) -> Limits:
        """QOS and association limits, read again when `limits.READ_EVERY_S` has passed: one
        ``scontrol show config``, and the two ``sacctmgr`` reads only where Slurm enforces limits."""
        r = self._limits
        if r.due(now):
            try:
                config = self.runner.run(SCONTROL_CONFIG, self.config.timeout_s)
                self.memory_consumed = memory_consumed(config)
                enforced, cluster = needs_limits(config)
                if enforced:
                    qos = self.runner.run(SACCTMGR_QOS, self.config.timeout_s)
                    assocs = self.runner.run(sacctmgr_assoc(cluster), self.config.timeout_s)
                    warnings.extend(r.update(now, config, qos, assocs))
                else:
                    r.update(now, config)
            except SlurmCommandError as exc:
                r.failed(now)
                warnings.append(f"QOS/association limits not readable ({exc}): the last ones read stay in use")
        return r.current

    @property
    def conf_dir(self) -> str:
        path = self.config.slurm_conf or getattr(self.runner, "slurm_conf", None) \
            or os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
        return os.path.dirname(os.path.abspath(path))

    def _files(self) -> tuple[str, str, str]:
        d = self.conf_dir
        return os.path.join(d, "slurm.conf"), os.path.join(d, "gres.conf"), os.path.join(d, "topology.conf")

    def config_files(self) -> _ConfCache:
        """gres.conf + topology.conf, re-read only when one of the three files' mtime changes."""
        paths = self._files()
        key = tuple(_mtime(p) for p in paths)
        if self._conf is not None and self._conf.key == key:
            return self._conf
        warnings: list[str] = []
        gres = tree = None
        _, gres_path, topo_path = paths
        if key[1] is None:
            warnings.append(f"{gres_path} not found: one NVLink island per node assumed")
        else:
            try:
                gres = parse_gres_conf(_read(gres_path), gres_path)
            except ConfigError as exc:
                warnings.append(f"{exc}: one NVLink island per node assumed")
        if key[2] is not None:
            try:
                tree = parse_topology_conf(_read(topo_path), topo_path)
            except ConfigError as exc:
                warnings.append(f"{exc}: all nodes treated as one rack")
        self._conf = _ConfCache(key, gres, tree, warnings)
        return self._conf

    def read_nodes(self) -> list[SlurmNode]:
        """Nodes with their used GPU indices, in one call.

        ``sinfo --json`` lists nodes with ``gres_used`` up to 23.02; 23.11+ groups them (``"sinfo"``) without
        per-node indices, where ``scontrol show nodes --json`` has them. The first cycle finds out which
        works and later cycles go straight to it; ``scontrol show node -d -o`` is the last resort.
        """
        if self._node_source in (None, "sinfo"):
            doc = load_json(self.runner.run(SINFO, self.config.timeout_s), "sinfo --json")
            nodes = _nodes_with_gres_used(doc)
            if nodes is not None:
                self._node_source = "sinfo"
                return nodes
        if self._node_source in (None, "scontrol-json"):
            try:
                doc = load_json(self.runner.run(SCONTROL_NODES_JSON, self.config.timeout_s),
                                "scontrol show nodes --json")
            except (SlurmCommandError, SlurmOutputError):
                doc = {}
            nodes = _nodes_with_gres_used(doc)
            if nodes is not None:
                self._node_source = "scontrol-json"
                return nodes
        self._node_source = "scontrol"
        return parse_scontrol_nodes(self.runner.run(SCONTROL_NODES, self.config.timeout_s))

    def topology(self, nodes: Sequence[SlurmNode]) -> tuple[Topology, list[str]]:
        """Topology of the managed partitions' nodes; rebuilt only when files or the node set change."""
        conf = self.config_files()
        managed = set(self.config.managed_partitions)
        mine = [n for n in nodes if managed & set(n.partitions)]
        key = (conf.key, tuple(sorted((n.name, n.gpu_count, n.gpus) for n in mine)))
        if self._topo is None or key != self._topo_key:
            self._topo, extra = build_topology(mine, conf.gres, conf.tree, self.config.split_pcie_by_cores)
            self._topo_key = key
            self._topo_warnings = conf.warnings + extra
        return self._topo, self._topo_warnings

    def snapshot(self) -> Snapshot:
        stats = self.runner.stats
        calls0 = stats.total_calls
        secs0 = sum(stats.seconds.values())
        now = self.clock()
        squeue_out = self.runner.run(SQUEUE, self.config.timeout_s)
        nodes = self.read_nodes()
        jobs, warnings = parse_jobs_tolerant(load_json(squeue_out, "squeue --json"))
        reservations = self.reservations(now, warnings)
        limits = self.limits(now, warnings)
        topo, topo_warnings = self.topology(nodes)
        return build_snapshot(jobs, nodes, topo, self.config, now,
                              slurm_calls=stats.total_calls - calls0,
                              latency_s=sum(stats.seconds.values()) - secs0,
                              warnings=[*topo_warnings, *warnings], reservations=reservations, limits=limits,
                              memory_consumed=self.memory_consumed)


def _nodes_with_gres_used(doc: Mapping[str, Any]) -> list[SlurmNode] | None:
    """The node records of a JSON document when it lists nodes with their ``gres_used``, else None."""
    raw = doc.get("nodes")
    if isinstance(raw, list) and raw and all(isinstance(n, Mapping) and "gres_used" in n for n in raw):
        return [node_from_json(n) for n in raw]
    return None


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return None


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()
