from __future__ import annotations

import json

import pytest

from themis_slurm.slurm.errors import SlurmOutputError
from themis_slurm.slurm.openapi import api_version, flag, is_infinite, number, text, words
from themis_slurm.slurm.parse import job_from_json, parse_sinfo_json, parse_squeue_json
from themis_slurm.slurm.records import normalise_job_state, normalise_node_state


def by_id(jobs):
    return {j.job_id: j for j in jobs}


def test_squeue_2205_real(fixture_text):
    doc = json.loads(fixture_text("squeue_2205.json"))
    assert api_version(doc) == "v0.0.38"
    jobs = by_id(parse_squeue_json(fixture_text("squeue_2205.json")))
    assert len(jobs) == 12

    two = jobs[4]  # sbatch -p debug --gres=gpu:2 --time=90 --comment "lr 0.1 epoch=3 Reason=fake"
    assert (two.state, two.held, two.name, two.user_name, two.user_id, two.partition) == (
        "RUNNING", False, "two-gpu", "root", 0, "debug")
    assert (two.num_nodes, two.gpus_per_node, two.gpus_total, two.gpu_type) == (1, 2, 2, "a100")
    assert two.nodes == ("node1",) and two.gpu_indices == {"node1": (0, 1)}
    assert two.time_limit_s == 90 * 60 and two.comment == "lr 0.1 epoch=3 Reason=fake"
    assert two.state_reason == "" and two.start_time == 1795944484 and two.end_time is None
    assert two.tres_per_node == "gres:gpu:2" and two.requeue and two.batch_flag

    gang = jobs[5]  # -N2 --gres=gpu:4
    assert gang.node_list == "node[3-4]" and gang.nodes == ("node3", "node4")
    assert (gang.num_nodes, gang.gpus_per_node, gang.gpus_total) == (2, 4, 8)
    assert gang.gpu_indices == {"node3": (0, 1, 2, 3), "node4": (0, 1, 2, 3)}
    assert gang.time_limit_s is None  # 22.05 prints null for UNLIMITED

    t0, t1, rest = jobs[11], jobs[12], jobs[6]  # --array=0-5%2 --gres=gpu:1
    assert (t0.array_job_id, t0.array_task_id, t0.is_array_task) == (6, 0, True)
    assert t1.array_task_id == 1 and t1.gpu_indices == {"node1": (3,)}
    assert (rest.array_job_id, rest.array_task_id, rest.array_task_spec) == (6, None, "2-5%2")
    assert rest.state_reason == "JobArrayTaskLimit" and not rest.held

    per_job = jobs[7]  # --gpus=3
    assert (per_job.state, per_job.gpus_total, per_job.gpus_per_node, per_job.state_reason) == (
        "PENDING", 3, 3, "Resources")
    assert per_job.start_time is None and per_job.nodes == ()

    later = jobs[8]  # --begin=now+1hour: Slurm fills start_time with the begin time; we hide it
    assert later.state_reason == "BeginTime" and later.start_time is None and later.end_time is None

    managed = jobs[9]  # gpu partition: held by job_submit.lua
    assert managed.held and managed.priority == 0 and managed.state_reason == "JobHeldUser"
    assert managed.admin_comment == "themis:v1;app=myapp;model=;sens=;est=3600"
    assert managed.comment == "themis:app=myapp,est=1h"

    pinned = jobs[10]  # --nodelist=node3 --exclude=node1 --no-requeue
    assert pinned.required_nodes == ("node3",) and pinned.excluded_nodes == ("node1",)
    assert pinned.requeue is False

    other = jobs[3]  # another user's --gpus=8 held job
    assert other.held and other.gpus_total == 8 and other.user_name == "themis-alice" and other.user_id == 1001

    done = jobs[2]
    assert done.state == "COMPLETED" and not done.is_active and done.end_time == 1795944461
    assert done.gpu_indices == {}


def test_squeue_2205_after_requeuehold(fixture_text):
    jobs = by_id(parse_squeue_json(fixture_text("squeue_2205_requeuehold.json")))
    job = jobs[4]
    assert (job.state, job.state_reason, job.priority, job.held, job.restart_cnt) == (
        "PENDING", "JobHeldUser", 0, True, 1)
    assert job.start_time is None and job.nodes == () and job.gpus_total == 2
    cancelled = jobs[3]  # cancelled while held: not "held" any more
    assert cancelled.state == "CANCELLED" and not cancelled.held


def test_squeue_v0040_shapes(fixture_text):
    jobs = by_id(parse_squeue_json(fixture_text("squeue_v0040.json")))
    one = jobs[1]
    assert (one.state, one.priority, one.time_limit_s, one.submit_time) == ("RUNNING", 4294901758, 6000, 1795944458)
    assert one.tres_per_node == "gres/gpu:2" and one.gpus_per_node == 2 and one.gpu_indices == {"node2": (0, 1)}
    assert one.array_job_id is None and one.array_task_id is None
    gang = jobs[5]  # v0.0.41 job_resources.nodes.allocation order
    assert gang.gpu_indices == {"node3": (0, 1, 2, 3), "node4": (0, 1, 2, 3)} and gang.time_limit_s is None
    assert gang.gpus_total == 8
    task = jobs[11]
    assert (task.array_job_id, task.array_task_id) == (6, 0)
    assert jobs[6].array_task_spec == "2-5%2" and jobs[6].array_task_id is None
    assert jobs[9].held and jobs[3].held
    completing = jobs[20]
    assert completing.state == "COMPLETING" and completing.state_flags == frozenset({"RUNNING"})
    assert completing.is_active and completing.gpu_indices == {"node4": (3,)}
    requeued = jobs[21]
    assert requeued.state == "PENDING" and "REQUEUE_HOLD" in requeued.state_flags
    assert requeued.held and requeued.restart_cnt == 2 and requeued.gpu_type == "a100"
    assert requeued.start_time is None


def test_gres_detail_aligned_with_job_resources_order():
    job = {"job_id": 1, "job_state": "RUNNING", "nodes": "a1,b1", "node_count": 2,
           "gres_detail": ["gpu:2(IDX:0-1)", "gpu:1(IDX:3)"],
           "job_resources": {"allocated_nodes": [{"nodename": "b1"}, {"nodename": "a1"}]}}
    assert job_from_json(job).gpu_indices == {"b1": (0, 1), "a1": (3,)}
    job["job_resources"] = {}
    uneven = job_from_json(job)
    assert uneven.gpu_indices == {"a1": (0, 1), "b1": (3,)}
    assert (uneven.gpus_total, uneven.gpus_per_node) == (3, 0)


def test_sinfo_2205_real(fixture_text):
    nodes = {n.name: n for n in parse_sinfo_json(fixture_text("sinfo_2205.json"))}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    n1 = nodes["node1"]
    assert (n1.state, n1.states, n1.available) == ("MIXED", frozenset({"MIXED"}), True)
    assert (n1.gpu_count, n1.gpu_type, n1.gpus[0].sockets) == (4, "a100", (0, 1))
    assert n1.gpu_indices_used == (0, 1, 2, 3) and n1.gpus_used == 4 and n1.gpus_free == 0
    assert n1.partitions == ("gpu", "debug") and n1.cpus == 16
    assert nodes["node2"].gpu_indices_used == (0, 1) and nodes["node2"].gpus_free == 2


@pytest.mark.parametrize("name", ["scontrol_show_nodes_v0040.json", "sinfo_v0040.json"])
def test_nodes_v0040_shapes(fixture_text, name):
    nodes = {n.name: n for n in parse_sinfo_json(fixture_text(name))}
    assert nodes["node1"].available and nodes["node1"].gpu_indices_used == (0, 1, 2, 3)
    drained = nodes["node2"]
    assert drained.state == "IDLE" and "DRAIN" in drained.states and not drained.available
    assert drained.reason == "maintenance window" and drained.gpus_used == 0
    draining = nodes["node3"]
    assert {"MIXED", "DRAIN", "DRAINING"} <= draining.states and not draining.available
    assert draining.gpu_indices_used == (2,)
    down = nodes["node4"]
    assert down.state == "DOWN" and "NOT_RESPONDING" in down.states and not down.available
    assert nodes["node1"].partitions == ("gpu", "debug")


@pytest.mark.parametrize(
    ("raw", "flags", "base", "states"),
    [
        ("idle", [], "IDLE", {"IDLE"}),
        ("idle", ["DRAIN"], "IDLE", {"IDLE", "DRAIN"}),
        ("mixed", ["DRAIN"], "MIXED", {"MIXED", "DRAIN", "DRAINING"}),
        ("alloc", [], "ALLOCATED", {"ALLOCATED"}),
        ("drained", [], "UNKNOWN", {"DRAIN", "UNKNOWN"}),
        ("IDLE+RESERVED", [], "IDLE", {"IDLE", "RESERVED"}),
        (["DOWN", "MAINTENANCE"], [], "DOWN", {"DOWN", "MAINT"}),
        ("idle*", [], "IDLE", {"IDLE"}),
    ],
)
def test_node_state_normalisation(raw, flags, base, states):
    assert normalise_node_state(raw, flags) == (base, frozenset(states))


@pytest.mark.parametrize(
    ("raw", "state", "flags"),
    [
        ("PENDING", "PENDING", set()),
        ("COMPLETING", "COMPLETING", set()),
        (["RUNNING", "COMPLETING"], "COMPLETING", {"RUNNING"}),
        (["PENDING", "REQUEUE_HOLD"], "PENDING", {"REQUEUE_HOLD"}),
        ("REQUEUE_HOLD", "PENDING", {"REQUEUE_HOLD"}),
        ("CONFIGURING", "RUNNING", {"CONFIGURING"}),
        (["PENDING", "REQUEUED"], "REQUEUED", {"PENDING"}),
        ("node_fail", "NODE_FAIL", set()),
        (None, "UNKNOWN", set()),
    ],
)
def test_job_state_normalisation(raw, state, flags):
    assert normalise_job_state(raw) == (state, frozenset(flags))


def test_openapi_accessors():
    assert number({"set": True, "infinite": False, "number": 5}) == 5
    assert number({"set": False, "infinite": False, "number": 0}) is None
    assert number({"set": True, "infinite": True, "number": 0}) is None
    assert is_infinite({"set": True, "infinite": True, "number": 0}) and is_infinite(4294967295)
    assert number(4294967294) is None and number(None) is None and number("12") == 12 and number(True) is None
    assert text(None) == "" and text("(null)") == "" and text(["a", None, "b"]) == "a,b"
    assert words("IDLE") == ["IDLE"] and words(["A", "B"]) == ["A", "B"] and words(None) == []
    assert flag(True) and not flag(0) and flag("yes") and flag(None, default=True)


def test_bad_documents_raise_slurm_output_error():
    with pytest.raises(SlurmOutputError, match="not JSON"):
        parse_squeue_json("{oops")
    with pytest.raises(SlurmOutputError, match="no 'jobs' list"):
        parse_squeue_json("{}")
    with pytest.raises(SlurmOutputError, match="Unable to contact"):
        parse_squeue_json(json.dumps({"errors": [{"error": "Unable to contact slurm controller"}]}))
    with pytest.raises(SlurmOutputError, match="job 7: nodes: bad hostlist"):
        parse_squeue_json(json.dumps({"jobs": [{"job_id": 7, "job_state": "RUNNING", "nodes": "n[1-"}]}))
    with pytest.raises(SlurmOutputError, match="job 7: bad GRES"):
        parse_squeue_json(json.dumps({"jobs": [{"job_id": 7, "nodes": "n1", "gres_detail": ["gpu:x:y:z:w"]}]}))
    with pytest.raises(SlurmOutputError, match="node n1: bad GRES"):
        parse_sinfo_json(json.dumps({"nodes": [{"name": "n1", "state": "idle", "gres": "gpu:2(IDX:"}]}))
    with pytest.raises(SlurmOutputError, match="neither"):
        parse_sinfo_json("{}")


def test_squeue_2511_real(fixture_text):
    """Captured from a real Slurm 25.11.7 cluster (tests/fixtures/slurm/capture.sh 2511)."""
    doc = json.loads(fixture_text("squeue_2511.json"))
    assert api_version(doc) == "v0.0.44"
    jobs = by_id(parse_squeue_json(fixture_text("squeue_2511.json")))
    assert sorted(jobs) == list(range(139, 149))
    one, two, gang, held, later, dep, arr, rq, done, task0 = (jobs[i] for i in range(139, 149))
    assert (one.state, one.held, one.gpu_indices, one.tres_per_node) == ("RUNNING", False, {"node1": (0,)}, "gres/gpu:1")
    assert one.comment == "themis:progress=0.25" and one.admin_comment == "themis:v1;app=bert;model=;sens=;est="
    assert (two.gpus_total, two.gpus_per_node, two.gpu_indices) == (2, 2, {"node2": (0, 1)})
    assert gang.nodes == ("node3", "node4") and (gang.num_nodes, gang.gpus_per_node, gang.gpus_total) == (2, 4, 8)
    assert gang.gpu_indices == {"node3": (0, 1, 2, 3), "node4": (0, 1, 2, 3)}
    assert (held.state, held.held, held.priority, held.state_reason) == ("PENDING", True, 0, "JobHeldUser")
    assert held.time_limit_s == 30 * 60 and held.comment == "themis:app=wait,model=vgg16;a note"
    assert later.eligible_time is not None and later.eligible_time > one.start_time + 3000  # --begin=now+3600
    assert dep.dependency == "afterok:139(unfulfilled)" and dep.eligible_time is None
    assert (arr.array_job_id, arr.array_task_id, arr.array_task_spec, arr.array_max_tasks) == (145, None, "1-5%2", 2)
    assert (task0.array_job_id, task0.array_task_id, task0.state, task0.gpu_indices) == (145, 0, "RUNNING",
                                                                                          {"node1": (2,)})
    # requeued held: PENDING (no REQUEUE_HOLD word once it finished completing), Restarts 1, and a BeginTime
    # Slurm set itself (requeue time + cred_expire): not the user's, see eligibility
    assert (rq.state, rq.held, rq.restart_cnt, rq.state_reason) == ("PENDING", True, 1, "JobHeldUser")
    assert rq.eligible_time is not None
    assert done.state == "COMPLETED" and done.end_time is not None


def test_nodes_2511_real(fixture_text):
    nodes = {n.name: n for n in parse_sinfo_json(fixture_text("scontrol_show_nodes_2511.json"))}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    assert nodes["node1"].gpu_indices_used == (0, 2) and nodes["node1"].gpus_used == 2
    assert nodes["node3"].gpu_indices_used == (0, 1, 2, 3) and nodes["node1"].state == "MIXED"
    assert set(nodes["node1"].partitions) == {"gpu", "debug"}
    # 25.11's sinfo --json groups nodes: parsed, but without per-node indices (scontrol's listing has them)
    grouped = {n.name for n in parse_sinfo_json(fixture_text("sinfo_2511.json"))}
    assert grouped == set(nodes)
