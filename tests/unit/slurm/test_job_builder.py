"""slurm.job_builder: the derivations every job source shares (squeue JSON, scontrol, pyslurm)."""

from __future__ import annotations

import pytest

from themis_slurm.slurm.errors import SlurmOutputError
from themis_slurm.slurm.job_builder import JobFields, build_job
from themis_slurm.slurm.parse import job_from_json
from themis_slurm.slurm.scontrol import job_from_kv, parse_kv_line

T = 1_700_000_000


def test_times_that_mean_nothing_in_the_state_are_dropped() -> None:
    times = dict(submit_time=T, start_time=T + 10, end_time=T + 99, eligible_time=T + 5)
    pending = build_job(JobFields(7, "PENDING", **times), "test")
    assert (pending.start_time, pending.end_time, pending.eligible_time) == (None, None, T + 5)
    running = build_job(JobFields(7, ["RUNNING"], node_list="n1", **times), "test")
    assert (running.start_time, running.end_time, running.eligible_time) == (T + 10, None, None)
    done = build_job(JobFields(7, "COMPLETED", node_list="n1", **times), "test")
    assert (done.start_time, done.end_time) == (T + 10, T + 99)


def test_held_gres_counts_before_the_tres_and_names_the_type_after_the_requests() -> None:
    f = JobFields(
        8,
        "RUNNING",
        node_list="n[1-2]",
        tres_req="cpu=2,gres/gpu=2",
        tres_alloc="cpu=2,gres/gpu=2",
        held_gres="gpu:h100:4",
    )
    got = build_job(f, "test")
    assert (got.gpus_total, got.gpus_per_node, got.gpu_type) == (4, 2, "h100")
    typed = build_job(
        JobFields(8, "RUNNING", node_list="n1", tres_per_node="gres/gpu:a100:2", held_gres="gpu:h100:2"),
        "test",
    )
    assert typed.gpu_type == "a100"  # the request is trusted first


def test_squeue_gres_list_is_tied_to_the_nodes_in_order_or_names_only_the_type() -> None:
    f = JobFields(9, "RUNNING", node_list="a1,b1", gres_list=("gpu:a100:1(IDX:0)", "gpu:a100:1(IDX:3)"))
    assert build_job(f, "test").gpu_indices == {"a1": (0,), "b1": (3,)}
    ordered = build_job(
        JobFields(9, "RUNNING", node_list="a1,b1", gres_list=f.gres_list, gres_order=("b1", "a1")), "t"
    )
    assert ordered.gpu_indices == {"b1": (0,), "a1": (3,)}
    got = build_job(
        JobFields(9, "RUNNING", node_list="n1", tres_alloc="gres/gpu=2", gres_list=f.gres_list), "t"
    )
    assert got.gpu_type == "a100" and got.gpu_indices == {}  # two details for one node: tied to none


def test_array_fields_only_for_an_array_and_held_from_priority_or_reason() -> None:
    plain = build_job(JobFields(10, "PENDING", array_job_id=0, array_task_id=3, priority=0), "test")
    assert (plain.array_job_id, plain.array_task_id, plain.held) == (None, None, True)
    task = build_job(
        JobFields(11, "PENDING", array_job_id=10, array_task_id=3, priority=5, reason="JobHeldAdmin"), "test"
    )
    assert (task.array_job_id, task.array_task_id, task.held) == (10, 3, True)


def test_a_bad_value_names_the_source_the_job_and_the_field() -> None:
    with pytest.raises(SlurmOutputError, match=r"^src: job 12: required_nodes: "):
        build_job(JobFields(12, "PENDING", required_nodes="n[1-"), "src")
    with pytest.raises(SlurmOutputError, match=r"^src: job 12: "):
        build_job(JobFields(12, "PENDING", tres_per_node="gres/gpu=x"), "src")


def test_scontrol_and_squeue_json_give_the_same_job() -> None:
    line = (
        "JobId=42 JobName=train UserId=alice(1001) Priority=0 Account=vision QOS=normal JobState=PENDING "
        "Reason=JobHeldUser Dependency=(null) Requeue=1 Restarts=2 BatchFlag=1 TimeLimit=01:00:00 "
        "SubmitTime=2023-11-14T22:13:20 EligibleTime=2023-11-14T22:13:25 StartTime=Unknown "
        "EndTime=Unknown Partition=gpu ReqNodeList=n[1-2] ExcNodeList=(null) NodeList=(null) NumNodes=2 "
        "NumCPUs=8 TRES=cpu=8,mem=16G,node=2,billing=8,gres/gpu=4 MinCPUsNode=4 MinMemoryNode=8G "
        "Features=a100 TresPerNode=gres/gpu:2 Comment=themis:est=600 AdminComment=x"
    )
    kv = job_from_kv(parse_kv_line(line))
    js = job_from_json(
        {
            "job_id": 42,
            "name": "train",
            "user_name": "alice",
            "user_id": 1001,
            "priority": 0,
            "account": "vision",
            "qos": "normal",
            "job_state": "PENDING",
            "state_reason": "JobHeldUser",
            "requeue": True,
            "restart_cnt": 2,
            "batch_flag": True,
            "time_limit": 60,
            "submit_time": kv.submit_time,
            "eligible_time": kv.eligible_time,
            "partition": "gpu",
            "required_nodes": "n[1-2]",
            "node_count": 2,
            "cpus": 8,
            "tres_req_str": "cpu=8,mem=16G,node=2,billing=8,gres/gpu=4",
            "minimum_cpus_per_node": 4,
            "memory_per_node": 8192,
            "features": "a100",
            "tres_per_node": "gres/gpu:2",
            "comment": "themis:est=600",
            "admin_comment": "x",
        }
    )
    assert kv == js
    assert (kv.gpus_total, kv.gpus_per_node, kv.cpus_per_node, kv.mem_per_node) == (4, 2, 4, 8192)
