"""``squeue --json`` and ``sinfo --json`` -> `SlurmJob` / `SlurmNode` records.

Accepted shapes: 22.05 openapi v0.0.38 (what we run) and data_parser v0.0.40+ (numbers wrapped in
``{"set", "infinite", "number"}``, job_state and node state as lists, ``sinfo --json`` grouped under a
top-level ``"sinfo"`` key). The same node-record code also reads ``scontrol show nodes --json``.
Records that cannot be parsed raise `SlurmOutputError` naming the job or node; the caller decides
whether one bad record should stop a scheduling round (it should not stop reading the others).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from themis_slurm.slurm import hostlist
from themis_slurm.slurm.errors import SlurmOutputError
from themis_slurm.slurm.gres import gpu_items
from themis_slurm.slurm.job_builder import JobFields, build_job
from themis_slurm.slurm.openapi import flag, number, text, time_epoch, words
from themis_slurm.slurm.records import (
    NodeGpus,
    SlurmJob,
    SlurmNode,
    node_available,
    normalise_node_state,
)
from themis_slurm.slurm.resources import per_gpu


def load_json(doc: str | bytes | Mapping[str, Any], source: str) -> Mapping[str, Any]:
    """Decode a Slurm `--json` document; a bad document or one carrying only Slurm errors raises, naming `source`."""
    if isinstance(doc, Mapping):
        return doc
    try:
        loaded = json.loads(doc)
    except json.JSONDecodeError as exc:
        raise SlurmOutputError(source, "", f"not JSON: {exc}") from None
    if not isinstance(loaded, Mapping):
        raise SlurmOutputError(source, "", "top level is not a JSON object")
    errors = loaded.get("errors") or []
    if errors and not loaded.get("jobs") and not loaded.get("nodes") and not loaded.get("sinfo"):
        first = errors[0]
        msg = text(first.get("description") or first.get("error")) if isinstance(first, Mapping) else str(first)
        raise SlurmOutputError(source, "", f"Slurm reported an error: {msg}")
    return loaded


def parse_squeue_json(doc: str | bytes | Mapping[str, Any]) -> list[SlurmJob]:
    """All jobs of a ``squeue --json`` document (text or already-decoded), in Slurm's order."""
    data = load_json(doc, "squeue --json")
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        raise SlurmOutputError("squeue --json", "", "no 'jobs' list")
    return [job_from_json(j) for j in jobs]


def _alloc_order(job: Mapping[str, Any]) -> list[str]:
    """Node names in job_resources order (the order gres_detail follows), if the JSON has them."""
    res = job.get("job_resources")
    if not isinstance(res, Mapping):
        return []
    alloc = res.get("allocated_nodes")
    nodes_field = res.get("nodes")
    if alloc is None and isinstance(nodes_field, Mapping):  # v0.0.41+: nodes.allocation[].name
        alloc = nodes_field.get("allocation")
    names: list[str] = []
    if isinstance(alloc, list):
        for a in alloc:
            if isinstance(a, Mapping):
                n = text(a.get("nodename") or a.get("name"))
                if n:
                    names.append(n)
    return names


def job_from_json(job: Mapping[str, Any], source: str = "squeue --json") -> SlurmJob:
    """One job object of squeue --json (v0.0.38 or v0.0.40+) as a SlurmJob (job_builder.build_job)."""
    job_id = number(job.get("job_id"))
    if job_id is None:
        raise SlurmOutputError(source, "job ?", "no job_id")
    try:
        fields = _job_fields(job, job_id)
    except ValueError as exc:
        raise SlurmOutputError(source, f"job {job_id}", str(exc)) from None
    return build_job(fields, source)


def _job_fields(job: Mapping[str, Any], job_id: int) -> JobFields:
    """squeue's names and spellings of a job's fields (ValueError: a value that cannot be read)."""
    time_limit_min = number(job.get("time_limit"))
    return JobFields(
        job_id=job_id, state=words(job.get("job_state")), reason=text(job.get("state_reason")),
        priority=number(job.get("priority")), name=text(job.get("name")), user_name=text(job.get("user_name")),
        user_id=number(job.get("user_id")), partition=text(job.get("partition")), account=text(job.get("account")),
        qos=text(job.get("qos")), node_list=text(job.get("nodes")), num_nodes=number(job.get("node_count")),
        required_nodes=text(job.get("required_nodes")), excluded_nodes=text(job.get("excluded_nodes")),
        gres_list=[text(g) for g in (job.get("gres_detail") or [])], gres_order=_alloc_order(job),
        tres_per_node=text(job.get("tres_per_node")), tres_per_job=text(job.get("tres_per_job")),
        tres_req=text(job.get("tres_req_str")), tres_alloc=text(job.get("tres_alloc_str")),
        needs_tres=text(job.get("tres_req_str")), cpus=number(job.get("cpus")),
        min_cpus_per_node=number(job.get("minimum_cpus_per_node")),
        cpus_per_gpu=per_gpu(text(job.get("cpus_per_tres"))), mem_per_node=number(job.get("memory_per_node")),
        mem_per_cpu=number(job.get("memory_per_cpu")), mem_per_gpu=per_gpu(text(job.get("memory_per_tres"))),
        array_job_id=number(job.get("array_job_id")), array_task_id=number(job.get("array_task_id")),
        array_task_spec=text(job.get("array_task_string")), array_max_tasks=number(job.get("array_max_tasks")),
        time_limit_s=None if time_limit_min is None else time_limit_min * 60,
        submit_time=time_epoch(job.get("submit_time")), start_time=time_epoch(job.get("start_time")),
        end_time=time_epoch(job.get("end_time")), eligible_time=time_epoch(job.get("eligible_time")),
        comment=text(job.get("comment")), admin_comment=text(job.get("admin_comment")),
        restart_cnt=number(job.get("restart_cnt")), requeue=flag(job.get("requeue"), default=True),
        batch_flag=flag(job.get("batch_flag"), default=True), dependency=text(job.get("dependency")),
        constraint=text(job.get("features")),
    )


def parse_sinfo_json(doc: str | bytes | Mapping[str, Any]) -> list[SlurmNode]:
    """Nodes of a ``sinfo --json`` (or ``scontrol show nodes --json``) document, one record per node.

    v0.0.38 and ``scontrol --json`` list node objects under ``"nodes"``. 23.11+ ``sinfo --json`` groups
    nodes under ``"sinfo"`` (one entry per partition x state x gres group); such groups are expanded and
    a node's partitions merged. A group's ``gres.used`` describes every node in it only when sinfo made
    one group per node (``sinfo -N --json``), so prefer that form or scontrol's for used GPU indices.
    """
    data = load_json(doc, "sinfo --json")
    if isinstance(data.get("nodes"), list):
        return [node_from_json(n) for n in data["nodes"]]
    if isinstance(data.get("sinfo"), list):
        return _nodes_from_sinfo_groups(data["sinfo"])
    raise SlurmOutputError("sinfo --json", "", "neither a 'nodes' nor a 'sinfo' list")


def _node_gpus(gres: str, source: str, where: str) -> tuple[NodeGpus, ...]:
    try:
        cfg = tuple(NodeGpus(i.type, i.count, i.sockets) for i in gpu_items(gres))
    except ValueError as exc:
        raise SlurmOutputError(source, where, str(exc)) from None
    return cfg


def _used(gres_used: str, source: str, where: str) -> tuple[tuple[int, ...], int]:
    try:
        items = gpu_items(gres_used)
    except ValueError as exc:
        raise SlurmOutputError(source, where, str(exc)) from None
    idx = tuple(sorted({x for i in items for x in (i.indices or ())}))
    return idx, sum(i.count for i in items)


def node_from_json(node: Mapping[str, Any], source: str = "sinfo --json") -> SlurmNode:
    """One node object (v0.0.38 ``state`` + ``state_flags``, or v0.0.40+ ``state`` list)."""
    name = text(node.get("name") or node.get("hostname"))
    if not name:
        raise SlurmOutputError(source, "node ?", "no name")
    where = f"node {name}"
    raw_state = node.get("state")
    base, states = normalise_node_state(words(raw_state), words(node.get("state_flags")))
    gpus = _node_gpus(text(node.get("gres")), source, where)
    used_idx, used_n = _used(text(node.get("gres_used")), source, where)
    return SlurmNode(
        name=name,
        state=base,
        states=states,
        available=node_available(states),
        gpus=gpus,
        gpu_indices_used=used_idx,
        gpus_used=used_n,
        partitions=tuple(words(node.get("partitions"))),
        reason=text(node.get("reason")),
        cpus=number(node.get("cpus")),
        cpus_alloc=number(node.get("alloc_cpus")),
        memory=number(node.get("real_memory")),
        memory_alloc=number(node.get("alloc_memory")),
        features=feature_set(node.get("active_features")),
    )


def feature_set(value: Any) -> frozenset[str]:
    """Node features in any shape (22.05 ``"a100,ib"``, 25.11 ``["a100", "ib"]``) as a set of names."""
    return frozenset(f.strip() for w in words(value) for f in w.split(",") if f.strip())


def _nodes_from_sinfo_groups(groups: list[Any]) -> list[SlurmNode]:
    source = "sinfo --json"
    out: dict[str, SlurmNode] = {}
    for g in groups:
        if not isinstance(g, Mapping):
            raise SlurmOutputError(source, "", "a 'sinfo' entry is not an object")
        nodes_obj = g.get("nodes") or {}
        names = words(nodes_obj.get("nodes")) if isinstance(nodes_obj, Mapping) else []
        names = [n for h in names for n in hostlist.expand(h)]
        node_obj = g.get("node") or {}
        gres_obj = g.get("gres") or {}
        part = text((g.get("partition") or {}).get("name"))
        reason = g.get("reason")
        reason_text = text(reason.get("description")) if isinstance(reason, Mapping) else text(reason)
        cpus = g.get("cpus")
        memory = g.get("memory")
        feats = g.get("features")
        one = len(names) == 1  # a group's allocated CPUs and memory are one node's only when it has one node
        for n in names:
            where = f"node {n}"
            base, states = normalise_node_state(words(node_obj.get("state")))
            gpus = _node_gpus(text(gres_obj.get("total")), source, where)
            used_idx, used_n = _used(text(gres_obj.get("used")), source, where)
            prev = out.get(n)
            parts = (prev.partitions if prev else ()) + ((part,) if part else ())
            out[n] = SlurmNode(
                name=n, state=base, states=states, available=node_available(states), gpus=gpus,
                gpu_indices_used=used_idx, gpus_used=used_n, partitions=tuple(dict.fromkeys(parts)),
                reason=reason_text,
                cpus=number(cpus.get("minimum")) if isinstance(cpus, Mapping) else number(cpus),
                cpus_alloc=number(cpus.get("allocated")) if one and isinstance(cpus, Mapping) else None,
                memory=number(memory.get("minimum")) if isinstance(memory, Mapping) else None,
                memory_alloc=number(memory.get("allocated")) if one and isinstance(memory, Mapping) else None,
                features=feature_set(feats.get("active") if isinstance(feats, Mapping) else feats),
            )
    return list(out.values())
