"""``scontrol show job -d -o`` and ``scontrol show node -o`` one-line Key=Val output -> records.

This is the fallback for fields the JSON of a given Slurm version lacks (and the only per-node GRES
detail on some versions). The format has no quoting: values are ended by the next `` Key=`` token. A few
keys hold free text that may contain spaces and even ``=`` (Comment, Command, Reason, OS, ...); for those
a value runs on until the next token whose key is a key scontrol really prints (`KNOWN_KEYS`) and that
has not appeared earlier on the line, so ``Comment=lr 0.1 epoch=3 Reason=x`` stays whole (Reason= came
before Comment=). A free-text value containing a later real key (`` StdErr=...``) is still cut there:
unavoidable with this format, and why the JSON is the primary source.
Times are printed in the local time zone of the machine running scontrol; we convert with local time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from themis_slurm.slurm import hostlist
from themis_slurm.slurm.errors import SlurmOutputError
from themis_slurm.slurm.gres import gpu_items
from themis_slurm.slurm.job_builder import JobFields, build_job
from themis_slurm.slurm.records import (
    NodeGpus,
    SlurmJob,
    SlurmNode,
    node_available,
    normalise_node_state,
)
from themis_slurm.slurm.resources import mebibytes, per_gpu

FREE_TEXT_KEYS = frozenset({
    "JobName", "Comment", "AdminComment", "SystemComment", "Command", "WorkDir", "StdErr", "StdIn",
    "StdOut", "Reason", "OS", "Extra", "MailUser", "Dependency", "Features", "AvailableFeatures",
    "ActiveFeatures", "Container", "SubmitLine",
})
_KNOWN_KEYS_TEXT = """
JobId ArrayJobId ArrayTaskId ArrayTaskThrottle HetJobId HetJobOffset HetJobIdSet JobName UserId GroupId
MCS_label Priority Nice Account QOS WCKey JobState Reason Dependency Requeue Restarts BatchFlag Reboot
ExitCode DerivedExitCode RunTime TimeLimit TimeMin SubmitTime EligibleTime AccrueTime StartTime EndTime
Deadline SuspendTime SecsPreSuspend LastSchedEval Scheduler Partition AllocNode:Sid ReqNodeList ExcNodeList
NodeList BatchHost NumNodes NumCPUs NumTasks CPUs/Task ReqB:S:C:T TRES Socks/Node NtasksPerN:B:S:C CoreSpec
JOB_GRES Nodes CPU_IDs Mem GRES MinCPUsNode MinMemoryNode MinMemoryCPU MinTmpDiskNode Features DelayBoot
OverSubscribe Contiguous Licenses Network Command WorkDir Comment AdminComment SystemComment StdErr StdIn
StdOut Power TresPerNode TresPerJob TresPerSocket TresPerTask CpusPerTres MemPerTres TresBind TresFreq
MailUser MailType Reservation PreemptEligibleTime PreemptTime Container ContainerID ResvPorts
NtasksPerTRES KillOInInvalidDependent Shared Prefer ClusterFeatures Gres CPUFreq/Gov CpuFreqMin
CpuFreqMax CpuFreqGov SelinuxContext Extra SegmentSize MinMemoryTRES
SLUID SubmitLine ReqTRES LicensesAlloc
NodeName Arch CoresPerSocket CPUAlloc CPUEfctv CPUTot CPULoad AvailableFeatures ActiveFeatures GresDrain
GresUsed NodeAddr NodeHostName Port Version OS RealMemory AllocMem FreeMem Sockets Boards State
ThreadsPerCore TmpDisk Weight Owner Partitions BootTime SlurmdStartTime LastBusyTime ResumeAfterTime
CfgTRES AllocTRES CapWatts CurrentWatts AveWatts ExtSensorsJoules ExtSensorsWatts ExtSensorsTemp
InstanceId InstanceType CPUSpecList MemSpecLimit NextState Topology
"""
KNOWN_KEYS = frozenset(_KNOWN_KEYS_TEXT.split())
_KEY_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_:/]*)=")
_NULL = frozenset({"", "(null)", "None", "N/A", "Unknown"})


def parse_kv_line(line: str) -> list[tuple[str, str]]:
    """One ``Key=Val Key=Val ...`` line as ordered pairs; keys may repeat (``-d`` node groups)."""
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    for tok in line.split():
        m = _KEY_RE.match(tok)
        starts = m is not None and (not pairs or pairs[-1][0] not in FREE_TEXT_KEYS
                                    or (m.group(1) in KNOWN_KEYS and m.group(1) not in seen))
        if starts and m is not None:
            pairs.append((m.group(1), tok[m.end():]))
            seen.add(m.group(1))
        elif pairs:
            key, val = pairs[-1]
            pairs[-1] = (key, f"{val} {tok}")
        else:
            raise ValueError(f"scontrol line does not start with Key=Val: {line[:60]!r}")
    return pairs


def _first(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in pairs:
        out.setdefault(k, v)
    return out


def _val(d: dict[str, str], key: str) -> str:
    v = d.get(key, "").strip()
    return "" if v in _NULL else v


def _int(d: dict[str, str], key: str) -> int | None:
    v = _val(d, key)
    m = re.match(r"^-?\d+", v)
    return int(m.group(0)) if m else None


def parse_time(value: str) -> int | None:
    """``2024-05-01T10:00:00`` (local time) -> epoch seconds; Unknown/None/N/A -> None."""
    v = value.strip()
    if v in _NULL:
        return None
    try:
        return int(datetime.strptime(v, "%Y-%m-%dT%H:%M:%S").timestamp())
    except ValueError:
        raise ValueError(f"bad time {value!r}: expected YYYY-MM-DDTHH:MM:SS") from None


def parse_duration(value: str) -> int | None:
    """Slurm durations -> seconds. ``UNLIMITED``/``INFINITE``/``Partition_Limit`` -> None; otherwise
    ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS`` (as sbatch --time reads them)."""
    v = value.strip()
    if v.upper() in {"UNLIMITED", "INFINITE", "PARTITION_LIMIT", "NONE", ""} or v in _NULL:
        return None
    try:
        days_s, dash, rest = v.partition("-")
        if not dash:
            days_s, rest = "0", v
        days = int(days_s)
        parts = [int(p) for p in rest.split(":")]
        if dash:  # with days the first field is hours
            parts += [0] * (3 - len(parts))
            h, m, s = parts if len(parts) == 3 else (None, None, None)
        elif len(parts) == 1:
            h, m, s = 0, parts[0], 0
        elif len(parts) == 2:
            h, m, s = 0, parts[0], parts[1]
        else:
            h, m, s = parts if len(parts) == 3 else (None, None, None)
        if h is None or m is None or s is None or min(days, h, m, s) < 0:
            raise ValueError
    except ValueError:
        raise ValueError(f"bad duration {value!r}: expected [D-]HH:MM:SS, MM:SS, MM or UNLIMITED") from None
    return ((days * 24 + h) * 60 + m) * 60 + s


def _user(value: str) -> tuple[str, int | None]:
    m = re.match(r"^([^()]*)\((\d+)\)$", value.strip())
    if m:
        return m.group(1), int(m.group(2))
    return value.strip(), None


def job_from_kv(pairs: list[tuple[str, str]]) -> SlurmJob:
    """One ``scontrol show job -d -o`` line (already split) as a SlurmJob (job_builder.build_job)."""
    d = _first(pairs)
    job_id = _int(d, "JobId")
    if job_id is None:
        raise SlurmOutputError("scontrol show job", "job ?", "no JobId")
    try:
        fields = _job_fields(d, pairs, job_id)
    except ValueError as exc:
        raise SlurmOutputError("scontrol show job", f"job {job_id}", str(exc)) from None
    return build_job(fields, "scontrol show job")


def _gres_detail(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """Node -> its GRES detail, from the -d groups ``Nodes=node[1-2] CPU_IDs=0-1 Mem=0 GRES=gpu:a100:2(IDX:0-1)``."""
    out: dict[str, str] = {}
    group_nodes: list[str] = []
    for k, v in pairs:
        if k == "Nodes":
            group_nodes = hostlist.expand(v)
        elif k == "GRES" and group_nodes and v.strip():
            out.update(dict.fromkeys(group_nodes, v))
    return out


def _job_fields(d: dict[str, str], pairs: list[tuple[str, str]], job_id: int) -> JobFields:
    """scontrol's keys and spellings of a job's fields (ValueError: a value that cannot be read)."""
    user, uid = _user(_val(d, "UserId"))
    task = _val(d, "ArrayTaskId")
    task_id = int(task) if task.isdigit() else None
    return JobFields(
        job_id=job_id, state=_val(d, "JobState"), reason=_val(d, "Reason"), priority=_int(d, "Priority"),
        name=d.get("JobName", ""), user_name=user, user_id=uid, partition=_val(d, "Partition"),
        account=_val(d, "Account"), qos=_val(d, "QOS"), node_list=_val(d, "NodeList"),
        num_nodes=_int(d, "NumNodes"), required_nodes=_val(d, "ReqNodeList"), excluded_nodes=_val(d, "ExcNodeList"),
        gres_detail=_gres_detail(pairs), tres_per_node=_val(d, "TresPerNode"), tres_per_job=_val(d, "TresPerJob"),
        tres_req=_val(d, "TRES"), tres_alloc=_val(d, "TRES"), held_gres=_val(d, "JOB_GRES"),
        needs_tres=_val(d, "ReqTRES") or _val(d, "TRES"), cpus=_int(d, "NumCPUs"),
        min_cpus_per_node=_int(d, "MinCPUsNode"), cpus_per_gpu=per_gpu(_val(d, "CpusPerTres")),
        mem_per_node=mebibytes(_val(d, "MinMemoryNode")), mem_per_cpu=mebibytes(_val(d, "MinMemoryCPU")),
        mem_per_gpu=per_gpu(_val(d, "MemPerTres")), array_job_id=_int(d, "ArrayJobId"), array_task_id=task_id,
        array_task_spec="" if task_id is not None else task, array_max_tasks=_int(d, "ArrayTaskThrottle"),
        time_limit_s=parse_duration(_val(d, "TimeLimit")), submit_time=parse_time(d.get("SubmitTime", "")),
        start_time=parse_time(d.get("StartTime", "")), end_time=parse_time(d.get("EndTime", "")),
        eligible_time=parse_time(d.get("EligibleTime", "")), comment=_val(d, "Comment"),
        admin_comment=_val(d, "AdminComment"), restart_cnt=_int(d, "Restarts"), requeue=_val(d, "Requeue") != "0",
        batch_flag=_val(d, "BatchFlag") != "0", dependency=_val(d, "Dependency"), constraint=_val(d, "Features"),
    )


def node_from_kv(pairs: list[tuple[str, str]]) -> SlurmNode:
    """One ``scontrol show node -o`` line as a SlurmNode (GresUsed only with ``-d``: else no used GPUs)."""
    d = _first(pairs)
    name = _val(d, "NodeName")
    if not name:
        raise SlurmOutputError("scontrol show node", "node ?", "no NodeName")
    try:
        base, states = normalise_node_state(_val(d, "State"))
        gpus = tuple(NodeGpus(i.type, i.count, i.sockets) for i in gpu_items(_val(d, "Gres")))
        used = gpu_items(_val(d, "GresUsed"))
    except ValueError as exc:
        raise SlurmOutputError("scontrol show node", f"node {name}", str(exc)) from None
    return SlurmNode(
        name=name,
        state=base,
        states=states,
        available=node_available(states),
        gpus=gpus,
        gpu_indices_used=tuple(sorted({x for i in used for x in (i.indices or ())})),
        gpus_used=sum(i.count for i in used),
        partitions=tuple(p for p in _val(d, "Partitions").split(",") if p),
        reason=_val(d, "Reason"),
        cpus=_int(d, "CPUTot"),
        cpus_alloc=_int(d, "CPUAlloc"),
        memory=_int(d, "RealMemory"),
        memory_alloc=_int(d, "AllocMem"),
        features=frozenset(f for f in _val(d, "ActiveFeatures").split(",") if f),
    )


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("No jobs")]


def parse_scontrol_jobs(text: str) -> list[SlurmJob]:
    """All jobs of ``scontrol show job -d -o`` output (one job per line)."""
    return [job_from_kv(parse_kv_line(ln)) for ln in _lines(text)]


def parse_scontrol_nodes(text: str) -> list[SlurmNode]:
    """All nodes of ``scontrol show node -d -o`` output (one per line; use -d to get GresUsed)."""
    return [node_from_kv(parse_kv_line(ln)) for ln in _lines(text)]
