"""The one builder of `SlurmJob`: every source maps its own fields onto :class:`JobFields`, and
:func:`build_job` does what they share.

Three sources describe a job: ``squeue --json`` (`parse.job_from_json`), ``scontrol show job -d -o``
(`scontrol.job_from_kv`) and pyslurm's ``Job`` (`pyslurm_backend.job_from_pyslurm`). Each knows where its
values are and how they are spelt (JSON numbers wrapped or not, local times, minutes or seconds, pyslurm's
dicts); none of them derives anything. The derivations (the normalised state and its flags, held, the
expanded node lists, the GPU counts and type, the CPUs and memory needed per node, which times count in
which state) happen here once, so a source cannot drift from the others and a new derived field is written
in one place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from themis_slurm.slurm import hostlist
from themis_slurm.slurm.errors import SlurmOutputError
from themis_slurm.slurm.gres import GpuRequest, gpu_indices, gpu_items, gpu_type, tres_gpus
from themis_slurm.slurm.records import (
    JOB_ACTIVE_STATES,
    SlurmJob,
    derive_gpu_counts,
    job_is_held,
    normalise_job_state,
)
from themis_slurm.slurm.resources import per_node_needs


@dataclass(slots=True)
class JobFields:
    """A job as a source shows it, each value decoded but nothing derived yet.

    Text is ``""`` and numbers None where the source shows nothing. GPU requests are TRES or GRES strings
    as Slurm prints them (`gres.tres_gpus` reads every spelling); `gres_detail` maps each allocated node to
    its GRES detail (``gpu:a100:2(IDX:0-1)``). Times are epoch seconds as the source shows them, whatever
    the state: :func:`build_job` drops those that mean nothing in it.
    """

    job_id: int
    state: str | Sequence[str] | None  # Slurm's job_state in any shape (records.normalise_job_state)
    reason: str = ""
    priority: int | None = None
    name: str = ""
    user_name: str = ""
    user_id: int | None = None
    partition: str = ""
    account: str = ""
    qos: str = ""
    node_list: str = ""  # the allocated hostlist ("" while pending)
    num_nodes: int | None = None
    required_nodes: str = ""  # hostlists, as printed
    excluded_nodes: str = ""
    gres_detail: Mapping[str, str] = field(default_factory=dict)  # node -> its GRES detail
    #: squeue's shape instead: the details as a list, in the order of `gres_order` (its job_resources; empty:
    #: the allocated nodes'); when the counts differ they are tied to no node, but their GPU types count
    gres_list: Sequence[str] = ()
    gres_order: Sequence[str] = ()
    tres_per_node: str = ""  # --gres / --gpus-per-node
    tres_per_job: str = ""  # --gpus
    tres_req: str = ""  # the requested TRES (what a pending job asks for)
    tres_alloc: str = ""  # the allocated TRES (what a started job holds)
    #: GPUs a started job holds, where the source shows them apart from the TRES (scontrol -d JOB_GRES): the
    #: allocation count when it has GPUs, and the GPU type after the requests
    held_gres: str = ""
    needs_tres: str = ""  # the requested TRES whose cpu= and mem= count towards the CPUs and memory needed
    cpus: int | None = None
    min_cpus_per_node: int | None = None
    cpus_per_gpu: int | None = None
    mem_per_node: int | None = None  # MiB
    mem_per_cpu: int | None = None
    mem_per_gpu: int | None = None
    array_job_id: int | None = None  # None or 0: not an array
    array_task_id: int | None = None
    array_task_spec: str = ""  # a pending array's remainder ("3-7%2")
    array_max_tasks: int | None = None  # None or 0: no throttle
    time_limit_s: int | None = None  # None: unlimited
    submit_time: int | None = None
    start_time: int | None = None
    end_time: int | None = None
    eligible_time: int | None = None
    comment: str = ""
    admin_comment: str = ""
    restart_cnt: int | None = None
    requeue: bool = True
    batch_flag: bool = True
    dependency: str = ""
    constraint: str = ""


_NO_GPUS = GpuRequest(0)


def _expand(value: str, source: str, where: str, what: str) -> tuple[str, ...]:
    try:
        return tuple(hostlist.expand(value))
    except ValueError as exc:
        raise SlurmOutputError(source, where, f"{what}: {exc}") from None


@dataclass(frozen=True)
class _Gpus:
    """What a job's GPU fields say together (SlurmJob's docstring has the rules)."""

    indices: dict[str, tuple[int, ...]]
    total: int
    per_node: int
    type: str | None


def _gres_detail(f: JobFields, nodes: Sequence[str]) -> tuple[Mapping[str, str], Sequence[str]]:
    """(node -> GRES detail, details tied to no node)."""
    if not f.gres_list:
        return f.gres_detail, ()
    order = f.gres_order or nodes
    if len(order) != len(f.gres_list):
        return {}, f.gres_list
    return dict(zip(order, f.gres_list, strict=True)), ()


def _gpus(f: JobFields, nodes: Sequence[str], started: bool, num_nodes: int) -> _Gpus:
    detail, unplaced = _gres_detail(f, nodes)
    indices = {n: gpu_indices(g) for n, g in detail.items()}
    held_types = {i.type for g in (*detail.values(), *unplaced) for i in gpu_items(g) if i.type}
    per_node, per_job = tres_gpus(f.tres_per_node), tres_gpus(f.tres_per_job)
    req, alloc = tres_gpus(f.tres_req), tres_gpus(f.tres_alloc)
    held = tres_gpus(f.held_gres) if f.held_gres else _NO_GPUS
    total, per = derive_gpu_counts(
        started=started,
        num_nodes=num_nodes,
        per_node=per_node.count,
        per_job=per_job.count,
        alloc=held.count or alloc.count,
        req=req.count,
        held=indices,
    )
    return _Gpus(indices, total, per, gpu_type((per_node, per_job, req, held), held_types))


def build_job(f: JobFields, source: str) -> SlurmJob:
    """The SlurmJob `f` describes (SlurmJob's docstring has the rules); SlurmOutputError naming `source`
    and the job when a value cannot be read."""
    where = f"job {f.job_id}"
    state, flags = normalise_job_state(f.state)
    nodes = _expand(f.node_list, source, where, "nodes")
    num_nodes = f.num_nodes or len(nodes) or 1
    try:
        gpus = _gpus(f, nodes, bool(nodes) and state != "PENDING", num_nodes)
        cpus_node, mem_node = per_node_needs(
            nodes=num_nodes,
            gpus_per_node=gpus.per_node,
            gpus_total=gpus.total,
            cpus=f.cpus,
            min_cpus_per_node=f.min_cpus_per_node,
            cpus_per_gpu=f.cpus_per_gpu,
            mem_per_node=f.mem_per_node,
            mem_per_cpu=f.mem_per_cpu,
            mem_per_gpu=f.mem_per_gpu,
            req_tres=f.needs_tres,
        )
    except ValueError as exc:
        raise SlurmOutputError(source, where, str(exc)) from None
    pending = state == "PENDING"
    return SlurmJob(
        job_id=f.job_id, array_job_id=f.array_job_id or None,
        array_task_id=f.array_task_id if f.array_job_id else None, array_task_spec=f.array_task_spec,
        name=f.name, user_name=f.user_name, user_id=f.user_id, partition=f.partition, state=state,
        state_flags=flags, state_reason=f.reason, priority=f.priority,
        held=job_is_held(state, flags, f.priority, f.reason), num_nodes=num_nodes, gpus_per_node=gpus.per_node,
        gpus_total=gpus.total, gpu_type=gpus.type, node_list=f.node_list, nodes=nodes,
        required_nodes=_expand(f.required_nodes, source, where, "required_nodes"),
        excluded_nodes=_expand(f.excluded_nodes, source, where, "excluded_nodes"), gpu_indices=gpus.indices,
        time_limit_s=f.time_limit_s, submit_time=f.submit_time, start_time=None if pending else f.start_time,
        end_time=None if state in JOB_ACTIVE_STATES else f.end_time, comment=f.comment,
        admin_comment=f.admin_comment, restart_cnt=f.restart_cnt or 0, requeue=f.requeue,
        batch_flag=f.batch_flag, tres_per_node=f.tres_per_node,
        eligible_time=f.eligible_time if pending else None, dependency=f.dependency,
        array_max_tasks=f.array_max_tasks or None, account=f.account, qos=f.qos, cpus_per_node=cpus_node,
        mem_per_node=mem_node, constraint=f.constraint,
    )  # fmt: skip
