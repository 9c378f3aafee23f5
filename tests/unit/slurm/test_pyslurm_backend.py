"""PyslurmBackend and make_backend against a fake ``pyslurm`` module (pyslurm is not installed here).

The fake is shaped like pyslurm 25.11.2's API as read from its sources: ``Jobs.load()`` / ``Nodes.load()``
return id-keyed collections with ``.values()``; `Job` has the attribute names and the None-for-unset
conventions of job.pyx (including task id 0 read as None, the ``%N`` throttle cut from
``array_tasks_waiting``, ``tres_per_node`` None for ``gres/gpu:N``); GRES dicts come from a port of
``cstr.to_gres_dict`` and dependencies from a port of ``dependency_str_to_dict``. Most records are built
from the same squeue/sinfo JSON objects the CLI backend's tests use (`fake_slurm`), so the two backends
can be compared record by record and snapshot by snapshot.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import re
import subprocess
import sys
import types
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.unit.slurm.fake_slurm import FakeRunner, conf_dir, job, node, sinfo, squeue
from themis_slurm.slurm import hostlist
from themis_slurm.slurm.actions import ActionRefused
from themis_slurm.slurm.backend import CliBackend
from themis_slurm.slurm.backends import BackendUnavailable, major_minor, make_backend
from themis_slurm.slurm.eligibility import blocked_reason
from themis_slurm.slurm.gres import gpu_count
from themis_slurm.slurm.limits import SCONTROL_CONFIG
from themis_slurm.slurm.model import AdapterConfig, ManagedJob, Snapshot
from themis_slurm.slurm.parse import job_from_json, node_from_json
from themis_slurm.slurm.pyslurm_backend import (
    PyslurmBackend,
    PyslurmCallError,
    job_from_pyslurm,
    node_from_pyslurm,
)
from themis_slurm.slurm.reservations import SCONTROL_RESERVATIONS
from themis_slurm.slurm.runner import SlurmCommandError

RECORD = "themis:v1;app=sweep;model=resnet;sens=;est=3600"


# ------------------------------------------------------------------------- ports of pyslurm's parsers
def to_gres_dict(gres: str | None) -> dict[str, Any]:
    """pyslurm.utils.cstr.to_gres_dict (25.11.2), line by line."""
    out: dict[str, Any] = {}
    if not gres or gres == "(null)":
        return out
    for item in re.split(",(?=[^,]+?:)", gres):
        cnt = typ = "1"
        if "gres:" in item:
            item = item.replace("gres:", "")
        parts = re.split(":(?=[^:]+?)", item.replace("(", ":", 1).replace(")", ""))
        name = parts[0]
        if len(parts) > 1:
            typ = parts[1]
        if typ.isdigit():
            cnt, typ = typ, None
        elif len(parts) > 2:
            cnt = parts[2]
        else:
            continue
        key = f"{name}:{typ}" if typ else name
        if "IDX" not in parts:
            out[key] = int(cnt)
        else:
            out[key] = {"count": int(cnt), "indexes": parts[3] if not typ else parts[4]}
    return out


def dependency_dict(dep: str) -> dict[str, Any] | None:
    """pyslurm.core.job.util.dependency_str_to_dict (25.11.2)."""
    if not dep:
        return None
    out: dict[str, Any] = {"after": [], "afterany": [], "afterburstbuffer": [], "aftercorr": [],
                           "afternotok": [], "afterok": [], "singleton": False, "satisfy": "all"}
    delim = ","
    if "?" in dep:
        delim = "?"
        out["satisfy"] = "any"
    for item in dep.split(delim):
        if item == "singleton":
            out["singleton"] = True
        dep_and_job = item.split(":", 1)
        if len(dep_and_job) != 2:
            continue
        name, jobs = dep_and_job[0], dep_and_job[1].split(":")
        if name not in out:
            continue
        out[name].extend(int(j) if j.isdigit() else j for j in jobs)
    return out


class GPU:
    def __init__(self, count: int, gpu_type: str | None = None) -> None:
        self.count, self.type = count, gpu_type


class TRES:
    """pyslurm.TrackableResources, GRES part: ``gres`` maps ``gpu`` / ``gpu:a100`` to GPU objects."""

    def __init__(self, tres_str: str) -> None:
        self.gres: dict[str, GPU] = {}
        for kv in tres_str.split(","):
            key, _, val = kv.partition("=")
            if key.startswith("gres/"):
                name = key[len("gres/"):]
                self.gres[name] = GPU(int(val), name.split(":", 1)[1] if ":" in name else None)


def tres(tres_str: str) -> TRES | None:
    return TRES(tres_str) if tres_str else None


class RPCError(Exception):
    def __init__(self, errno: int = -1, msg: str | None = None) -> None:
        self.errno = errno
        self.msg = msg or f"Slurm error {errno}"
        super().__init__(self.msg)


# --------------------------------------------------------------------------------------- fake pyslurm
class FakeJob:
    """pyslurm.Job: the attributes the backend reads, and the action methods it calls."""

    mod: Any = None

    def __init__(self, job_id: int, **attrs: Any) -> None:
        self.id = job_id
        self.name = f"j{job_id}"
        self.user_name, self.user_id = "alice", 1000
        self.partition, self.state, self.state_reason, self.priority = "gpu", "PENDING", "JobHeldUser", 0
        self.num_nodes = 1
        self.allocated_nodes = self.required_nodes = self.excluded_nodes = None
        self.comment, self.admin_comment = None, RECORD
        self.account: str | None = None
        self.qos: str | None = None
        self.requeue_count, self.is_requeueable, self.is_batch_job = 0, True, True
        self.time_limit, self.submit_time = 60, 1000
        self.start_time = self.end_time = self.eligible_time = self.dependencies = None
        self.array_id = self.array_task_id = self.array_tasks_waiting = self.array_tasks_parallel = None
        self.gres_per_node: dict[str, Any] = {"gres/gpu": 1}
        self.tres_per_node = self.tres_per_job = None  # pyslurm cannot parse "gres/gpu:N"
        self.allocated_tres: TRES | None = None
        self.requested_tres: TRES | None = tres("cpu=1,mem=16G,node=1,billing=1")
        self.layout: dict[str, Any] = {}
        for k, v in attrs.items():
            if not hasattr(self, k):
                raise AttributeError(f"the fake Job has no attribute {k!r}")
            setattr(self, k, v)

    def get_resource_layout_per_node(self) -> dict[str, Any]:
        return self.layout

    def _act(self, name: str, *args: Any) -> None:
        self.mod.log.append(("pyslurm", name, self.id, *args))
        err = self.mod.fail.get(name)
        if err is not None:
            raise err

    def modify(self, changes: Any) -> None:
        self._act("modify", changes.kwargs)

    def hold(self, mode: str | None = None) -> None:
        self._act("hold")

    def release(self) -> None:
        self._act("release")

    def requeue(self, hold: bool = False) -> None:
        self._act("requeue", f"hold={hold}")

    def send_signal(self, signal: str | int, steps: str = "children", hurry: bool = False) -> None:
        self._act("send_signal", signal, steps)

    @classmethod
    def load(cls, job_id: int) -> FakeJob:
        cls.mod.log.append(("pyslurm", "Job.load", job_id))
        for j in cls.mod.jobs:
            if j.id == job_id:
                return j
        raise RPCError(2017, "Invalid job id specified")


class FakeNode:
    def __init__(self, name: str, **attrs: Any) -> None:
        self.name, self.state, self.partitions, self.reason, self.total_cpus = name, "IDLE", ["gpu", "debug"], None, 16
        self.configured_gres: dict[str, Any] = {"gpu:a100": 4}
        self.allocated_tres: dict[str, Any] = {}
        for k, v in attrs.items():
            setattr(self, k, v)


class JobSubmitDescription:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


def fake_pyslurm(jobs: list[FakeJob] | None = None, nodes: list[FakeNode] | None = None,
                 version: str = "25.11.2", log: list[tuple[Any, ...]] | None = None) -> types.ModuleType:
    mod = types.ModuleType("pyslurm")
    mod.__version__ = version  # type: ignore[attr-defined]
    mod.jobs, mod.nodes = list(jobs or []), list(nodes or [])  # type: ignore[attr-defined]
    mod.log = [] if log is None else log  # type: ignore[attr-defined]
    mod.fail = {}  # type: ignore[attr-defined]
    mod.RPCError = RPCError  # type: ignore[attr-defined]
    mod.PyslurmError = Exception  # type: ignore[attr-defined]
    mod.JobSubmitDescription = JobSubmitDescription  # type: ignore[attr-defined]
    mod.Job = type("Job", (FakeJob,), {"mod": mod})  # type: ignore[attr-defined]
    for j in mod.jobs:  # type: ignore[attr-defined]
        j.mod = mod

    def load_jobs() -> dict[int, FakeJob]:
        mod.log.append(("pyslurm", "Jobs.load"))  # type: ignore[attr-defined]
        err = mod.fail.get("Jobs.load")  # type: ignore[attr-defined]
        if err is not None:
            raise err
        return {j.id: j for j in mod.jobs}  # type: ignore[attr-defined]

    def load_nodes() -> dict[str, FakeNode]:
        mod.log.append(("pyslurm", "Nodes.load"))  # type: ignore[attr-defined]
        return {n.name: n for n in mod.nodes}  # type: ignore[attr-defined]

    mod.Jobs = types.SimpleNamespace(load=load_jobs)  # type: ignore[attr-defined]
    mod.Nodes = types.SimpleNamespace(load=load_nodes)  # type: ignore[attr-defined]
    return mod


def pjob(j: dict[str, Any]) -> FakeJob:
    """The pyslurm view of one squeue JSON job object (fake_slurm.job), with pyslurm's conventions."""
    waiting, _, throttle = j["array_task_string"].partition("%")
    running = j["job_state"] != "PENDING" and bool(j["nodes"])
    nodes = hostlist.expand(j["nodes"])
    layout: dict[str, Any] = {}
    if running:  # pending jobs have no job_resrcs: get_resource_layout_per_node() == {}
        details = j["gres_detail"] or [None] * len(nodes)
        layout = {n: {"cpu_ids": "0", "gres": to_gres_dict(g), "memory": None} for n, g in zip(nodes, details, strict=True)}
    task = j["array_task_id"]
    return FakeJob(
        j["job_id"], name=j["name"], user_name=j["user_name"], user_id=j["user_id"], partition=j["partition"],
        state=j["job_state"], state_reason=j["state_reason"], priority=j["priority"], num_nodes=j["node_count"],
        allocated_nodes=j["nodes"] or None, required_nodes=j["required_nodes"] or None,
        excluded_nodes=j["excluded_nodes"] or None, comment=j["comment"] or None,
        admin_comment=j["admin_comment"] or None, requeue_count=j["restart_cnt"], is_requeueable=j["requeue"],
        account=j.get("account") or None,
        is_batch_job=j["batch_flag"], time_limit=j["time_limit"], submit_time=j["submit_time"] or None,
        start_time=j["start_time"] or None, end_time=j["end_time"] or None,
        eligible_time=j.get("eligible_time") or None, dependencies=dependency_dict(j.get("dependency", "")),
        array_id=j["array_job_id"] or None, array_task_id=task or None,  # task 0 reads as None in pyslurm
        array_tasks_waiting=waiting or None,
        array_tasks_parallel=int(throttle) if throttle else j.get("array_max_tasks") or None,
        gres_per_node=to_gres_dict(j["tres_per_node"]), allocated_tres=tres(j["tres_alloc_str"]),
        requested_tres=tres(j["tres_req_str"] or "cpu=1,mem=16G,node=1,billing=1"), layout=layout)


def pnode(n: dict[str, Any], tracked: bool = True) -> FakeNode:
    """The pyslurm view of one sinfo JSON node object (fake_slurm.node); ``tracked``: AccountingStorageTRES
    has gres/gpu, so allocated_tres counts GPUs."""
    used = gpu_count(n["gres_used"])
    alloc = {"cpu": 2 * used, **({"gres/gpu": used} if tracked and used else {})} if used else {}
    return FakeNode(n["name"], state="+".join([n["state"].upper(), *n["state_flags"]]),
                    partitions=list(n["partitions"]), configured_gres=to_gres_dict(n["gres"]),
                    allocated_tres=alloc, total_cpus=n["cpus"])


# -------------------------------------------------------------------------------------- fixtures
ALL_NODES = [node(f"node{i}") for i in range(1, 5)]


def running_2node(job_id: int = 10, **kw: Any) -> dict[str, Any]:
    return job(job_id, state="RUNNING", nodes="node[2-3]", node_count=2, gres="gres/gpu:2", priority=1,
               gres_detail=["gpu:a100:2(IDX:2-3)", "gpu:a100:2(IDX:0-1)"], **kw)


def cluster() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A mixed cluster: managed running 2-node job, unmanaged debug job, held pending jobs, an array
    remainder with a throttle, a split-off array task 0, a requeued job, a drained node."""
    rj = running_2node(record=RECORD, comment="themis:progress=0.5")
    debug = job(20, state="RUNNING", partition="debug", nodes="node1", gres="gres/gpu:1",
                gres_detail=["gpu:a100:1(IDX:0)"], record=None)
    held = job(30, gres="gres/gpu:2", record=RECORD)
    arr = job(121, array_job_id=120, array_task_string="3-7%2", gres="gres/gpu:1")
    arr["array_max_tasks"] = 2
    task0 = job(125, array_job_id=120, array_task_id=0, state="RUNNING", nodes="node4", gres="gres/gpu:1",
                gres_detail=["gpu:a100:1(IDX:3)"], priority=1)
    task0["array_max_tasks"] = 2
    requeued = job(40, restart_cnt=1, gres="gres/gpu:1", reason="job_requeued_in_held_state")
    requeued["eligible_time"] = 10**10
    nodes = [node("node1", state="mixed", used="gpu:a100:1(IDX:0)"),
             node("node2", state="mixed", used="gpu:a100:2(IDX:2-3)"),
             node("node3", state="mixed", used="gpu:a100:2(IDX:0-1)", flags=["DRAIN"]),
             node("node4", state="mixed", used="gpu:a100:1(IDX:3)")]
    return [rj, debug, held, arr, task0, requeued], nodes


def backend(tmp_path: Path, jobs: list[FakeJob], nodes: list[FakeNode] | None = None,
            answers: dict | None = None) -> tuple[PyslurmBackend, types.ModuleType, FakeRunner]:
    mod = fake_pyslurm(jobs, nodes if nodes is not None else [pnode(n) for n in ALL_NODES])
    runner = FakeRunner(answers)
    conf = AdapterConfig(slurm_conf=str(conf_dir(tmp_path)))
    return PyslurmBackend(runner, conf, clock=lambda: 123.0, module=mod), mod, runner


def by_id(s: Snapshot) -> dict[str, ManagedJob]:
    return {m.job_id: m for m in s.managed}


# ------------------------------------------------------------------------------------ job mapping
def test_running_two_node_job_maps_like_squeue_json() -> None:
    j = running_2node(record=RECORD)
    got = job_from_pyslurm(pjob(j))
    assert got == job_from_json(j)
    assert got.state == "RUNNING" and got.nodes == ("node2", "node3") and got.num_nodes == 2
    assert got.gpu_indices == {"node2": (2, 3), "node3": (0, 1)} and got.gpu_type == "a100"
    assert got.gpus_total == 4 and got.gpus_per_node == 2 and got.tres_per_node == "gres/gpu:2"
    assert got.time_limit_s == 3600 and got.start_time is None and got.end_time is None and not got.held


def test_held_pending_job_with_record() -> None:
    j = job(30, gres="gres/gpu:2", record=RECORD, comment="themis:progress=0.25")
    got = job_from_pyslurm(pjob(j))
    assert got == job_from_json(j)
    assert got.held and got.state == "PENDING" and got.priority == 0 and got.state_reason == "JobHeldUser"
    assert got.admin_comment == RECORD and got.gpu_indices == {} and got.nodes == ()
    assert got.gpus_total == 2 and got.eligible_time is None


def test_array_remainder_with_throttle() -> None:
    j = job(121, array_job_id=120, array_task_string="3-7%2", gres="gres/gpu:1")
    j["array_max_tasks"] = 2
    p = pjob(j)
    assert p.array_tasks_waiting == "3-7" and p.array_tasks_parallel == 2  # what pyslurm shows
    got = job_from_pyslurm(p)
    assert got == job_from_json(j)
    assert got.array_task_spec == "3-7%2" and got.array_max_tasks == 2 and got.array_task_id is None


def test_array_task_zero_that_pyslurm_reads_as_unset() -> None:
    j = job(125, array_job_id=120, array_task_id=0, state="RUNNING", nodes="node4", gres="gres/gpu:1",
            gres_detail=["gpu:a100:1(IDX:3)"], priority=1)
    p = pjob(j)
    assert p.array_task_id is None and p.array_tasks_waiting is None
    got = job_from_pyslurm(p)
    assert got.array_task_id == 0 and got == job_from_json(j)


def test_requeued_job() -> None:
    j = job(40, restart_cnt=1, gres="gres/gpu:1", reason="job_requeued_in_held_state")
    j["eligible_time"] = 10**10
    got = job_from_pyslurm(pjob(j))
    assert got == job_from_json(j)
    assert got.restart_cnt == 1 and got.held and got.eligible_time == 10**10 and got.start_time is None
    # the 25.11 flag state: REQUEUE_HOLD alone is pending
    flagged = job_from_pyslurm(replace_attrs(pjob(j), state="REQUEUE_HOLD"))
    assert flagged.state == "PENDING" and "REQUEUE_HOLD" in flagged.state_flags and flagged.held


def replace_attrs(p: FakeJob, **attrs: Any) -> FakeJob:
    for k, v in attrs.items():
        setattr(p, k, v)
    return p


def test_dependencies_rebuilt_and_singleton_still_blocks() -> None:
    base = job(50, gres="gres/gpu:1")
    base["dependency"] = "afterok:12(unfulfilled),afterany:13(failed)"
    got = job_from_pyslurm(pjob(base))
    assert set(got.dependency.split(",")) == set(base["dependency"].split(","))  # pyslurm's dict loses the order
    assert (blocked_reason(got, 0.0) or "").startswith("DependencyNeverSatisfied: afterany:13")
    base["dependency"] = "singleton(unfulfilled)"  # pyslurm's dict drops it
    got = job_from_pyslurm(pjob(base))
    assert (blocked_reason(got, 0.0) or "").startswith("Dependency: waits for")
    assert job_from_pyslurm(FakeJob(51)).dependency == ""


def test_per_job_gpu_request_and_unset_numbers() -> None:
    p = FakeJob(60, gres_per_node={}, num_nodes=None, time_limit=None, priority=None, user_name=None)
    got = job_from_pyslurm(p, tres_per_job="gres/gpu:8")
    assert got.gpus_total == 8 and got.num_nodes == 1 and got.time_limit_s is None and got.priority is None
    assert got.tres_per_node == "" and got.user_name == ""
    assert job_from_pyslurm(p).gpus_total == 0  # pyslurm alone cannot see --gpus=8


# ----------------------------------------------------------------------------------- node mapping
def test_node_mapping_with_used_gpu_indices_from_job_layouts(tmp_path: Path) -> None:
    jobs, nodes = cluster()
    b, _, _ = backend(tmp_path, [pjob(j) for j in jobs], [pnode(n) for n in nodes])
    _, got, warnings = b.read()
    assert warnings == []
    want = [node_from_json(n) for n in nodes]
    strip = [replace(n, gpus=tuple(replace(g, sockets=None) for g in n.gpus)) for n in want]  # no (S:) in pyslurm
    assert got == strip
    n3 = got[2]
    assert n3.gpu_indices_used == (0, 1) and n3.gpus_used == 2 and "DRAIN" in n3.states and not n3.available
    assert n3.gpu_type == "a100" and n3.gpu_count == 4 and n3.cpus == 16


def test_node_used_count_without_tracked_gres_tres() -> None:
    """allocated_tres carries gres/gpu only when AccountingStorageTRES tracks it; jobs' layouts still count."""
    n = pnode(node("node1", state="mixed", used="gpu:a100:2(IDX:0-1)"), tracked=False)
    assert n.allocated_tres == {"cpu": 4}
    got = node_from_pyslurm(n, used={0, 1})
    assert got.gpu_indices_used == (0, 1) and got.gpus_used == 2 and got.state == "MIXED"


def test_running_job_without_layout_makes_its_gpus_unavailable(tmp_path: Path) -> None:
    rj = pjob(running_2node(record=RECORD))
    rj.layout = {}
    b, _, _ = backend(tmp_path, [rj], [pnode(n, tracked=False) for n in ALL_NODES])
    s = b.snapshot()
    node2 = {s.topology.gpu_id("node2", i) for i in range(4)}
    assert not (node2 & s.free) and node2 <= s.unavailable
    assert any("node node2: Slurm counts 2 GPUs in use" in w for w in s.warnings)


def test_unreadable_job_record_blocks_its_nodes(tmp_path: Path) -> None:
    bad = pjob(running_2node(record=None))
    bad.required_nodes = "node[1-"  # not a hostlist: the record is skipped
    b, _, _ = backend(tmp_path, [bad])
    s = b.snapshot()
    assert any("skipped a job record" in w for w in s.warnings)
    assert not ({s.topology.gpu_id("node2", i) for i in range(4)} & s.free)
    assert {s.topology.gpu_id("node1", i) for i in range(4)} <= s.free


# --------------------------------------------------------------------------- snapshot vs CliBackend
def test_snapshot_equals_the_cli_backends(tmp_path: Path) -> None:
    jobs, nodes = cluster()
    path = conf_dir(tmp_path)
    config = AdapterConfig(slurm_conf=str(path))
    cli = CliBackend(FakeRunner({("squeue",): squeue(*jobs), ("sinfo",): sinfo(*nodes)}), config,
                     clock=lambda: 123.0).snapshot()
    mod = fake_pyslurm([pjob(j) for j in jobs], [pnode(n) for n in nodes])
    runner = FakeRunner()  # any CLI call would fail
    ps = PyslurmBackend(runner, config, clock=lambda: 123.0, module=mod).snapshot()
    assert ps.topology == cli.topology and ps.time == cli.time == 123.0
    assert ps.free == cli.free and ps.unmanaged == cli.unmanaged and ps.unavailable == cli.unavailable
    assert ps.managed_used == cli.managed_used
    assert ps.managed == cli.managed
    assert set(by_id(ps)) == {"10", "30", "120_3", "120_4", "120_5", "120_6", "120_7", "120_0", "40"}
    assert ps.warnings == cli.warnings
    # two pyslurm loads, and the reservations (scontrol, at most every READ_EVERY_S: reservations.py)
    # and the limits' `scontrol show config` (limits.py: sacctmgr only where Slurm enforces limits)
    assert ps.slurm_calls == 4 and runner.calls == [SCONTROL_RESERVATIONS, SCONTROL_CONFIG]
    assert mod.log == [("pyslurm", "Jobs.load"), ("pyslurm", "Nodes.load")]
    assert runner.stats.calls == {"pyslurm Jobs.load": 1, "pyslurm Nodes.load": 1, "scontrol show": 2}
    mj = by_id(ps)["10"]
    assert mj.app_key == "alice/sweep" and mj.progress == 0.5 and mj.gpus == 4 and mj.nodes == 2
    assert by_id(ps)["120_3"].array_max_tasks == 2 and by_id(ps)["40"].blocked is None


def test_per_job_request_read_once_from_squeue(tmp_path: Path) -> None:
    """--gpus=8: pyslurm shows no GPUs for it; one squeue --json fills it in, kept while the job exists."""
    j = job(70, gres="", tres_per_job="gres/gpu:8", record=RECORD)
    other = job(71, gres="gres/gpu:1")
    b, mod, runner = backend(tmp_path, [pjob(j), pjob(other)], answers={("squeue",): squeue(j, other)})
    s1 = b.snapshot()
    assert by_id(s1)["70"].gpus == 8 and s1.slurm_calls == 5
    assert runner.calls == [["squeue", "--all", "--states=all", "--json"], SCONTROL_RESERVATIONS, SCONTROL_CONFIG]
    s2 = b.snapshot()
    assert by_id(s2)["70"].gpus == 8 and s2.slurm_calls == 2 and len(runner.calls) == 3
    mod.jobs[:] = [pjob(other)]
    b.snapshot()
    assert b._per_job == {}  # forgotten once the job is gone


def test_snapshot_rpc_error_names_the_call(tmp_path: Path) -> None:
    b, mod, runner = backend(tmp_path, [])
    mod.fail["Jobs.load"] = RPCError(1007, "Unable to contact slurm controller (connect failure)")
    with pytest.raises(PyslurmCallError, match=r"pyslurm Jobs.load failed \(Slurm error 1007\): Unable to contact"):
        b.snapshot()
    assert runner.stats.errors == {"pyslurm Jobs.load": 1}


# -------------------------------------------------------------------------------------- actions
JOB = ManagedJob(
    job_id="42", slurm_id=42, app_key="alice/job-42", user="alice", state="PENDING", held=True, gpus=4,
    gpus_per_node=2, nodes=2, node_gpus={}, gpu_ids=frozenset(), est_s=None, time_limit_s=None, profile=None,
    progress=None, progress_error=None, requeue_ok=True, restart_cnt=0, submit_time=0.0, start_time=None,
    required_nodes=(), priority=0,
)
RUNNING = replace(JOB, state="RUNNING", held=False)
PIN = ("cli", "scontrol", "update", "JobId=42", "ReqNodeList=node[3-4]", "NumNodes=2")
CLEAR = ("cli", "scontrol", "update", "JobId=42", "ReqNodeList=")


def acting(jobs: list[FakeJob] | None = None) -> tuple[PyslurmBackend, types.ModuleType, list[tuple[Any, ...]]]:
    """A backend whose CLI calls and pyslurm calls land in one ordered log."""
    log: list[tuple[Any, ...]] = []

    def cli(args: list[str]) -> str:
        log.append(("cli", *args))
        return ""

    mod = fake_pyslurm(jobs, [], log=log)
    def squeue(args: list[str]) -> str:  # the state check before a CLI hold
        log.append(("cli", *args))
        return "PENDING\n"

    runner = FakeRunner({("scontrol",): cli, ("scancel",): cli, ("squeue",): squeue})
    return PyslurmBackend(runner, AdapterConfig(), module=mod), mod, log


def test_start_pins_by_cli_then_releases_by_pyslurm() -> None:
    b, _, log = acting()
    b.start(JOB, {"node3": 2, "node4": 2})
    assert log == [PIN, ("pyslurm", "release", 42)]
    assert b.runner.stats.calls == {"scontrol update": 1, "pyslurm release": 1}


def test_start_of_requeued_job_sets_begin_time_now_before_release() -> None:
    b, _, log = acting()
    b.start(replace(JOB, restart_cnt=1), {"node3": 2, "node4": 2})
    assert log == [PIN, ("pyslurm", "modify", 42, {"begin_time": "now"}), ("pyslurm", "release", 42)]


def test_start_of_just_requeued_job_waits_before_begin_time_and_release() -> None:
    b, _, log = acting()
    slept: list[float] = []
    b.cli.clock, b.cli.sleep = (lambda: 1000.5), slept.append
    b.start(replace(JOB, restart_cnt=1, submit_time=1000.0), {"node3": 2, "node4": 2})
    assert slept == [pytest.approx(1.0)]
    assert log[-1] == ("pyslurm", "release", 42)


def test_bad_placement_is_refused_before_any_call() -> None:
    b, _, log = acting()
    with pytest.raises(ValueError, match="3 GPUs, the job asks for 4"):
        b.start(JOB, {"node1": 2, "node2": 1})
    assert log == []


def test_failed_pin_never_releases() -> None:
    b, _, log = acting()
    b.runner.answers[("scontrol", "update")] = SlurmCommandError(["scontrol", "update"], 1, "not available")
    with pytest.raises(SlurmCommandError):
        b.start(JOB, {"node3": 2, "node4": 2})
    assert log == []


def test_warn_signals_the_batch_step_of_a_running_job() -> None:
    b, _, log = acting([FakeJob(42, state="RUNNING")])
    b.warn(RUNNING)
    assert log == [("pyslurm", "Job.load", 42), ("pyslurm", "send_signal", 42, "SIGUSR1", "batch")]


def test_warn_does_nothing_when_the_job_stopped_running_since_the_snapshot() -> None:
    b, _, log = acting([FakeJob(42, state="PENDING")])
    b.warn(RUNNING)
    assert log == [("pyslurm", "Job.load", 42)]


@pytest.mark.parametrize(("job_", "match"), [
    (JOB, "PENDING, not RUNNING"),
    (replace(RUNNING, requeue_ok=False), "cannot be requeued"),
])
def test_warn_refusals_make_no_call(job_: ManagedJob, match: str) -> None:
    b, _, log = acting([FakeJob(42, state="RUNNING")])
    with pytest.raises(ActionRefused, match=match):
        b.warn(job_)
    assert log == []


def test_requeue_holds_then_clears_the_pin() -> None:
    b, _, log = acting([FakeJob(42, state="RUNNING")])
    b.requeue(RUNNING)
    assert log == [("pyslurm", "Job.load", 42), ("pyslurm", "requeue", 42, "hold=True"), CLEAR]


@pytest.mark.parametrize("state", ["COMPLETED", "FAILED", "CANCELLED"])
def test_requeue_is_never_sent_to_a_job_that_has_ended(state: str) -> None:
    # Slurm requeues a finished batch job too: it would run a second time
    b, _, log = acting([FakeJob(42, state=state)])
    with pytest.raises(ActionRefused, match=f"{state} in Slurm now .*not requeued"):
        b.requeue(RUNNING)
    assert log == [("pyslurm", "Job.load", 42)]


def test_requeue_of_an_already_pending_job_holds_it() -> None:
    b, mod, log = acting([FakeJob(42, state="PENDING")])
    mod.fail["requeue"] = RPCError(2019, "Job is pending execution")
    b.requeue(RUNNING)
    assert log == [("pyslurm", "Job.load", 42), ("pyslurm", "requeue", 42, "hold=True"), ("pyslurm", "hold", 42),
                   CLEAR]


def test_requeue_other_errors_name_job_and_action_and_stop() -> None:
    b, mod, log = acting([FakeJob(42, state="RUNNING")])
    mod.fail["requeue"] = RPCError(2017, "Invalid job id specified")
    with pytest.raises(PyslurmCallError) as exc:
        b.requeue(RUNNING)
    err = exc.value
    assert isinstance(err, SlurmCommandError) and err.job_id == "42" and err.action == "requeuehold"
    assert str(err) == "pyslurm requeuehold of job 42 failed (Slurm error 2017): Invalid job id specified"
    assert err.stderr == "Invalid job id specified" and len(log) == 2
    assert b.runner.stats.errors == {"pyslurm requeuehold": 1}


def test_requeue_refuses_a_job_that_cannot_be_requeued() -> None:
    b, _, log = acting()
    with pytest.raises(ActionRefused, match="cannot be requeued"):
        b.requeue(replace(RUNNING, requeue_ok=False))
    assert log == []


def test_hold_first_then_clear_pin() -> None:
    b, _, log = acting([FakeJob(42, state="PENDING")])
    b.hold(JOB)
    assert log == [("pyslurm", "Job.load", 42), ("pyslurm", "hold", 42), CLEAR]


def test_hold_is_never_sent_to_a_job_that_runs_now() -> None:
    # issue 38 item 2: Slurm applies a hold to a running job (R with JobHeldAdmin, priority 0)
    b, _, log = acting([FakeJob(42, state="RUNNING")])
    with pytest.raises(ActionRefused, match="RUNNING in Slurm now, not PENDING"):
        b.hold(JOB)
    assert log == [("pyslurm", "Job.load", 42)]


def test_warn_of_a_split_off_array_task_goes_by_its_own_job_id() -> None:
    # issue 38 item 1: the task's own record, through pyslurm: no "A_T" and no scancel retry loop
    b, _, log = acting([FakeJob(57, state="RUNNING")])
    task = replace(RUNNING, job_id="40_3", slurm_id=57, array_job_id=40, array_task_id=3)
    b.warn(task)
    assert log == [("pyslurm", "Job.load", 57), ("pyslurm", "send_signal", 57, "SIGUSR1", "batch")]


def test_release_unpinned_clears_pin_then_releases() -> None:
    b, _, log = acting()
    b.release_unpinned(JOB)
    assert log == [CLEAR, ("pyslurm", "release", 42)]


def test_array_tasks_go_through_the_cli_by_user_visible_id() -> None:
    """pyslurm addresses numeric JobIds only; the array record's id would act on every task."""
    b, _, log = acting()
    task = replace(JOB, job_id="40_3", slurm_id=40, gpus=1, gpus_per_node=1, nodes=1, array_job_id=40,
                   array_task_id=3, restart_cnt=1)
    b.start(task, {"node1": 1})
    b.hold(task)
    b.requeue(replace(task, state="RUNNING"))
    b.warn(replace(task, state="RUNNING"))
    b.release_unpinned(task)
    assert all(entry[0] == "cli" for entry in log)
    assert log[0][3] == "JobId=40_3" and ("cli", "scontrol", "release", "40_3") in log
    assert ("cli", "scancel", "-v", "--batch", "--signal=USR1", "--state=RUNNING", "40_3") in log


# ----------------------------------------------------------------------------------- make_backend
@pytest.fixture
def no_pyslurm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # import pyslurm raises ImportError


@pytest.fixture
def with_pyslurm(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    mod = fake_pyslurm()
    monkeypatch.setitem(sys.modules, "pyslurm", mod)
    return mod


def version_runner(version: str = "slurm 25.11.7") -> FakeRunner:
    return FakeRunner({("scontrol", "--version"): version + "\n"})


def test_major_minor() -> None:
    assert major_minor("slurm 25.11.7") == "25.11" and major_minor("slurm-wlm 22.05.8") == "22.05"
    assert major_minor("25.11.2") == "25.11" and major_minor("junk") is None


def test_the_modules_import_without_pyslurm() -> None:
    """Importing them must not import pyslurm (which would read slurm.conf or end the process)."""
    code = ("import sys; sys.modules['pyslurm'] = None; "
            "import themis_slurm.slurm.backends, themis_slurm.slurm.pyslurm_backend; print('ok')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


def test_cli_requested(tmp_path: Path, with_pyslurm: types.ModuleType) -> None:
    runner = version_runner()
    b, why = make_backend("cli", AdapterConfig(slurm_conf=str(conf_dir(tmp_path))), runner)
    assert isinstance(b, CliBackend) and why == "cli: requested" and runner.calls == []


def test_auto_without_pyslurm_is_cli(tmp_path: Path, no_pyslurm: None) -> None:
    runner = version_runner()
    b, why = make_backend("auto", AdapterConfig(slurm_conf=str(conf_dir(tmp_path))), runner)
    assert isinstance(b, CliBackend)
    assert why == "cli: pyslurm is not installed (pip install themis-slurm[pyslurm])"
    assert runner.calls == []


def test_auto_with_version_mismatch_is_cli(tmp_path: Path, with_pyslurm: types.ModuleType) -> None:
    runner = version_runner("slurm 24.11.5")
    b, why = make_backend("auto", AdapterConfig(slurm_conf=str(conf_dir(tmp_path))), runner)
    assert isinstance(b, CliBackend)
    assert why.startswith("cli: pyslurm 25.11.2 is built for Slurm 25.11 but this Slurm is 24.11.5")
    assert runner.calls == [["scontrol", "--version"]]


def test_installed_pyslurm_of_another_release_is_never_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  with_pyslurm: types.ModuleType) -> None:
    """The distribution's version is checked first: a pyslurm built for another libslurm may crash on import."""
    monkeypatch.setattr("themis_slurm.slurm.backends.pyslurm_dist_version", lambda: "25.11.2")

    def no_import(*a: object, **k: object) -> None:
        raise AssertionError("pyslurm must not be imported")

    monkeypatch.setattr(PyslurmBackend, "__init__", no_import)
    b, why = make_backend("auto", AdapterConfig(slurm_conf=str(conf_dir(tmp_path))), version_runner("slurm 24.11.1"))
    assert isinstance(b, CliBackend) and "is built for Slurm 25.11 but this Slurm is 24.11.1" in why


def test_auto_with_matching_pyslurm(tmp_path: Path, with_pyslurm: types.ModuleType) -> None:
    b, why = make_backend("auto", AdapterConfig(slurm_conf=str(conf_dir(tmp_path))), version_runner())
    assert isinstance(b, PyslurmBackend) and b.ps is with_pyslurm
    assert why == "pyslurm: pyslurm 25.11.2 matches Slurm 25.11.7"


def test_auto_without_slurm_conf_is_cli(tmp_path: Path, with_pyslurm: types.ModuleType) -> None:
    b, why = make_backend("auto", AdapterConfig(slurm_conf=str(tmp_path / "nope.conf")), version_runner())
    assert isinstance(b, CliBackend) and "no slurm.conf at" in why and "end the process" in why


def test_auto_when_scontrol_fails_is_cli(tmp_path: Path, with_pyslurm: types.ModuleType) -> None:
    b, why = make_backend("auto", AdapterConfig(slurm_conf=str(conf_dir(tmp_path))), FakeRunner())
    assert isinstance(b, CliBackend) and "cannot tell the installed Slurm's version" in why


def test_pyslurm_forced_without_pyslurm_is_a_clear_error(tmp_path: Path, no_pyslurm: None) -> None:
    with pytest.raises(BackendUnavailable, match=r"pyslurm is not installed \(pip install themis-slurm\[pyslurm\]\)"):
        make_backend("pyslurm", AdapterConfig(slurm_conf=str(conf_dir(tmp_path))), version_runner())


def test_pyslurm_forced_with_version_mismatch_is_a_clear_error(tmp_path: Path,
                                                                with_pyslurm: types.ModuleType) -> None:
    with pytest.raises(BackendUnavailable, match="built for Slurm 25.11 but this Slurm is 22.05.8"):
        make_backend("pyslurm", AdapterConfig(slurm_conf=str(conf_dir(tmp_path))), version_runner("slurm-wlm 22.05.8"))


def test_unknown_kind() -> None:
    with pytest.raises(ValueError, match="expected one of auto, cli, pyslurm"):
        make_backend("rest", AdapterConfig(), version_runner())


def test_slurm_conf_is_set_before_pyslurm_is_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """libslurm reads SLURM_CONF at import (slurm_init): it must be in os.environ by then."""
    path = str(conf_dir(tmp_path))
    seen: list[str | None] = []

    class Loader(importlib.abc.Loader):
        def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
            import os

            seen.append(os.environ.get("SLURM_CONF"))
            return fake_pyslurm()

        def exec_module(self, module: types.ModuleType) -> None:
            pass

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
            return importlib.machinery.ModuleSpec(name, Loader()) if name == "pyslurm" else None

    monkeypatch.setenv("SLURM_CONF", "/somewhere/else/slurm.conf")
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # restored (removed) after the test
    del sys.modules["pyslurm"]
    monkeypatch.setattr(sys, "meta_path", [Finder(), *sys.meta_path])
    b, why = make_backend("pyslurm", AdapterConfig(slurm_conf=path), version_runner())
    assert isinstance(b, PyslurmBackend) and seen == [path] and why.startswith("pyslurm: ")
