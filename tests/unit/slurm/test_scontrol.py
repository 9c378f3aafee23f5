from __future__ import annotations

import dataclasses

import pytest

from themis_slurm.slurm.errors import SlurmOutputError
from themis_slurm.slurm.parse import parse_sinfo_json, parse_squeue_json
from themis_slurm.slurm.scontrol import (
    parse_duration,
    parse_kv_line,
    parse_scontrol_jobs,
    parse_scontrol_nodes,
)


def test_kv_line_free_text_and_repeated_keys():
    line = ("JobId=4 JobName=my job Reason=None NodeList=n[1-2] JOB_GRES=gpu:a100:3   Nodes=n1 CPU_IDs=0 Mem=0 "
            "GRES=gpu:a100:2(IDX:0-1) Nodes=n2 CPU_IDs=0 Mem=0 GRES=gpu:a100:1(IDX:3) "
            "Command=/bin/x --lr=0.1 WorkDir=/tmp Comment=lr 0.1 epoch=3 Reason=fake  StdErr=/tmp/o Power=")
    pairs = parse_kv_line(line)
    d = dict(pairs)
    assert d["JobName"] == "my job"
    assert d["Command"] == "/bin/x --lr=0.1"
    assert d["Comment"] == "lr 0.1 epoch=3 Reason=fake"
    assert d["Power"] == "" and d["StdErr"] == "/tmp/o"
    assert [v for k, v in pairs if k == "Nodes"] == ["n1", "n2"]
    with pytest.raises(ValueError, match="does not start with Key=Val"):
        parse_kv_line("garbage here")


def test_scontrol_jobs_match_squeue_json(fixture_text, utc):
    from_json = {j.job_id: j for j in parse_squeue_json(fixture_text("squeue_2205.json"))}
    from_kv = {j.job_id: j for j in parse_scontrol_jobs(fixture_text("scontrol_show_job_2205.txt"))}
    assert from_json.keys() == from_kv.keys()
    for job_id, a in from_json.items():
        b = from_kv[job_id]
        diff = {f.name: (getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
                if getattr(a, f.name) != getattr(b, f.name)}
        if job_id == 2:  # finished: scontrol still names the GRES type (JOB_GRES), the JSON does not
            assert diff == {"gpu_type": (None, "a100")}
        else:
            assert diff == {}, job_id


def test_scontrol_requeuehold(fixture_text):
    (job,) = parse_scontrol_jobs(fixture_text("scontrol_show_job_2205_requeuehold.txt"))
    assert (job.state, job.state_reason, job.priority, job.held, job.restart_cnt) == (
        "PENDING", "job_requeued_in_held_state", 0, True, 1)
    assert job.start_time is None and job.nodes == () and job.gpus_per_node == 2
    assert job.comment == "lr 0.1 epoch=3 Reason=fake" and job.time_limit_s == 5400


def test_scontrol_nodes_match_sinfo_json(fixture_text):
    js = {n.name: n for n in parse_sinfo_json(fixture_text("sinfo_2205.json"))}
    kv = {n.name: n for n in parse_scontrol_nodes(fixture_text("scontrol_show_node_d_2205.txt"))}
    assert js == kv
    plain = {n.name: n for n in parse_scontrol_nodes(fixture_text("scontrol_show_node_2205.txt"))}
    assert plain["node1"].gpus == js["node1"].gpus and plain["node1"].gpus_used == 0  # no GresUsed without -d


def test_scontrol_node_states_and_reason():
    line = ("NodeName=g1 Arch=x86_64 Gres=gpu:h100:8(S:0-1) GresUsed=gpu:h100:3(IDX:0,2,5) "
            "OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)  State=MIXED+DRAIN "
            "Partitions=gpu  Reason=bad fan State=x [root@2024-05-01T10:00:00]")
    (node,) = parse_scontrol_nodes(line + "\n")
    assert node.states == frozenset({"MIXED", "DRAIN", "DRAINING"}) and not node.available
    assert node.gpu_indices_used == (0, 2, 5) and node.gpu_count == 8 and node.gpus_free == 5
    assert node.reason == "bad fan State=x [root@2024-05-01T10:00:00]"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("UNLIMITED", None), ("Partition_Limit", None), ("01:30:00", 5400), ("2-00:00:00", 172800),
     ("45:10", 2710), ("30", 1800), ("1-2", 93600), ("1-2:30", 95400)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_bad_scontrol_job_names_the_job():
    with pytest.raises(SlurmOutputError, match="job 9: bad time"):
        parse_scontrol_jobs("JobId=9 JobState=RUNNING NodeList=n1 SubmitTime=yesterday\n")
    with pytest.raises(SlurmOutputError, match="no JobId"):
        parse_scontrol_jobs("JobName=x JobState=RUNNING\n")
    assert parse_scontrol_jobs("No jobs in the system\n") == []


@pytest.mark.parametrize("bad", ["1:2:3:4", "x", "1-2:3:4:5", "-5"])
def test_bad_durations(bad):
    with pytest.raises(ValueError, match="bad duration"):
        parse_duration(bad)


def test_scontrol_2511_matches_squeue_2511(fixture_text, utc):
    """The same real Slurm 25.11.7 jobs and nodes through both parsers (capture.sh 2511)."""
    from_json = {j.job_id: j for j in parse_squeue_json(fixture_text("squeue_2511.json"))}
    from_kv = {j.job_id: j for j in parse_scontrol_jobs(fixture_text("scontrol_show_job_2511.txt"))}
    assert from_json.keys() == from_kv.keys()
    diffs = {}
    for job_id, a in from_json.items():
        b = from_kv[job_id]
        diff = {f.name: (getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
                if getattr(a, f.name) != getattr(b, f.name)}
        if diff.get("state_reason") == ("JobHeldUser", "job_requeued_in_held_state"):
            del diff["state_reason"]  # the requeued-held job: both mean held (as on 22.05)
        if diff:
            diffs[job_id] = diff
    # only differences of presentation that the daemon does not use
    allowed = {"gpu_type", "tres_per_node", "end_time", "eligible_time", "state_flags"}
    assert all(set(d) <= allowed for d in diffs.values()), diffs
    js = {n.name: n for n in parse_sinfo_json(fixture_text("scontrol_show_nodes_2511.json"))}
    kv = {n.name: n for n in parse_scontrol_nodes(fixture_text("scontrol_show_node_d_2511.txt"))}
    assert {n: (x.gpu_indices_used, x.gpus_used, x.available) for n, x in js.items()} == \
           {n: (x.gpu_indices_used, x.gpus_used, x.available) for n, x in kv.items()}
