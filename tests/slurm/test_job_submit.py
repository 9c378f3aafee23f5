"""job_submit.lua on a real slurmctld: holds, the trusted AdminComment record, option checks, and the
updates a job's owner may and may not make to a Themis-managed job.

These run against the local cluster of slurm_conf/cluster.sh (partition ``gpu`` managed, ``debug`` not).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # conftest is not an importable module at run time; pytest injects the fixtures
    from conftest import Cluster

pytestmark = pytest.mark.slurm

ALICE = "themis-alice"  # test users created by slurm_conf/cluster.sh
BOB = "themis-bob"

EMPTY_RECORD = "themis:v1;app=;model=;sens=;est="


def _held(cluster: Cluster, job_id: int) -> dict:
    """Waits for the job to be pending and held by job_submit.lua, and returns its squeue record."""
    return cluster.wait_job(job_id, "PENDING", reason="JobHeldUser", timeout=10)


def test_managed_job_is_held_with_record(cluster: Cluster) -> None:
    job_id = cluster.sbatch("--gres=gpu:1")
    job = _held(cluster, job_id)
    assert job["priority"] == 0
    assert job["admin_comment"] == EMPTY_RECORD


@pytest.mark.parametrize("request_gpus", [["--gpus=2"], ["--gpus-per-node=1"], ["--gpus-per-task=1", "-n1"]])
def test_every_gpu_request_form_is_managed(cluster: Cluster, request_gpus: list[str]) -> None:
    job_id = cluster.sbatch(*request_gpus)
    assert _held(cluster, job_id)["admin_comment"] == EMPTY_RECORD


def test_job_in_default_partition_is_managed(cluster: Cluster) -> None:
    # No -p: the default partition (gpu) applies, so the job must be held too.
    job_id = cluster.sbatch("--gres=gpu:1")
    assert _held(cluster, job_id)["partition"] == "gpu"


def test_unmanaged_partition_and_cpu_jobs_are_left_to_slurm(cluster: Cluster) -> None:
    debug_job = cluster.sbatch("-p", "debug", "--gres=gpu:1", wrap="true")
    cpu_job = cluster.sbatch("-p", "gpu", wrap="true")
    for job_id in (debug_job, cpu_job):
        job = cluster.wait_job(job_id, {"RUNNING", "COMPLETING", "COMPLETED"}, timeout=20)
        assert job["admin_comment"] == ""


@pytest.mark.parametrize(
    ("comment", "record"),
    [
        ("themis:app=bert-1,model=ResNet50,est=1h30m", "themis:v1;app=bert-1;model=resnet50;sens=;est=5400"),
        ("THEMIS: app = sweep.A , sens=LOW ; free text after the options",
         "themis:v1;app=sweep.A;model=;sens=low;est="),
        ("themis:est=1-12:00:00", "themis:v1;app=;model=;sens=;est=129600"),
        ("themis:est=2d", "themis:v1;app=;model=;sens=;est=172800"),
        ("themis:", EMPTY_RECORD),
        ("just a note for myself", EMPTY_RECORD),
    ],
)
def test_comment_is_normalised_into_admin_comment(cluster: Cluster, comment: str, record: str) -> None:
    job_id = cluster.sbatch("--gres=gpu:1", f"--comment={comment}")
    job = _held(cluster, job_id)
    assert job["admin_comment"] == record
    assert job["comment"] == comment  # the user's own text is kept as written


@pytest.mark.parametrize(
    ("comment", "expected"),
    [
        ("themis:est=abc", ["est=abc in --comment", "expected a duration above 0 and at most 365 days such as 90m, 6h"]),
        ("themis:est=0s", ["est=0s", "above 0 and at most 365 days"]),
        ("themis:est=400d", ["est=400d", "at most 365 days"]),
        ("themis:est=90", ["est=90", "expected a duration"]),
        ("themis:colour=red", ["unknown option 'colour'", "known options are app, model, sens, est"]),
        ("themis:app=-bad", ["app=-bad", "starting with a letter or digit"]),
        ("themis:app=" + "a" * 65, ["app=", "1 to 64"]),
        ("themis:model=vgg16,sens=high", ["options model and sens in --comment", "mutually exclusive"]),
        ("themis:model=gpt5", ["model=gpt5", "one of vgg11"]),
        ("themis:sens=extreme", ["sens=extreme", "one of high, medium, low, none"]),
        ("themis:app=a,app=b", ["app given twice"]),
        ("themis:est", ["'est'", "has no value"]),
    ],
)
def test_invalid_options_are_rejected_with_a_message(cluster: Cluster, comment: str, expected: list[str]) -> None:
    res = cluster.sbatch_result("--gres=gpu:1", f"--comment={comment}")
    assert res.returncode == 1
    assert "sbatch: error: themis: " in res.stderr
    for fragment in expected:
        assert fragment in res.stderr


def test_options_are_checked_on_unmanaged_jobs_too(cluster: Cluster) -> None:
    # A typo is reported even when the job lands in an unmanaged partition.
    res = cluster.sbatch_result("-p", "debug", "--comment=themis:est=soon")
    assert res.returncode == 1 and "est=soon" in res.stderr


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--no-requeue"], "must be requeueable"),
        (["-p", "gpu,debug"], "may not list Themis-managed and other partitions together"),
    ],
)
def test_jobs_themis_cannot_preempt_are_rejected(cluster: Cluster, options: list[str], message: str) -> None:
    res = cluster.sbatch_result("--gres=gpu:1", *options)
    assert res.returncode == 1 and message in res.stderr


def test_interactive_gpu_job_is_rejected(cluster: Cluster) -> None:
    res = cluster.run(["salloc", "--gres=gpu:1", "--immediate=5", "true"], user=ALICE)
    assert res.returncode == 1
    assert "must be batch jobs" in res.stderr


def test_array_tasks_are_all_held_with_the_record(cluster: Cluster) -> None:
    job_id = cluster.sbatch("--gres=gpu:1", "--array=0-2", "--comment=themis:app=sweep")
    _held(cluster, job_id)
    tasks = cluster.array_tasks(job_id)
    assert tasks, "the array is not in squeue"
    for task in tasks:
        assert task["job_state"] == "PENDING" and task["state_reason"] == "JobHeldUser"
        assert task["admin_comment"] == "themis:v1;app=sweep;model=;sens=;est="


def test_owner_cannot_release_but_root_can(cluster: Cluster) -> None:
    job_id = cluster.sbatch("--gres=gpu:1", wrap="true")
    _held(cluster, job_id)
    res = cluster.run(["scontrol", "release", str(job_id)], user=ALICE)
    assert res.returncode != 0
    assert "held state, pending scheduler release" in res.stderr
    # another user is refused by Slurm itself (22.05 reaches job_submit.lua first, 25.11 says
    # "Invalid user id")
    assert cluster.run(["scontrol", "release", str(job_id)], user=BOB).returncode != 0
    for args in (["scontrol", "update", f"JobId={job_id}", "Priority=100"],
                 ["scontrol", "top", str(job_id)]):
        assert cluster.run(args, user=ALICE).returncode != 0
    time.sleep(0.5)
    assert _held(cluster, job_id)["priority"] == 0  # still held after all those attempts
    cluster.check(["scontrol", "release", str(job_id)])
    cluster.wait_job(job_id, {"RUNNING", "COMPLETING", "COMPLETED"}, timeout=20)


# Every `scontrol update` key of Slurm 22.05 and 25.11 (scontrol(1), src/scontrol/update_job.c) not on the
# owner's allowlist, with a value Slurm accepts in form. Each must be refused for the owner of a held
# managed job, and the job must stay held and unchanged. (ArrayTaskThrottle is not here: slurmctld applies
# it before job_submit.lua runs; it is covered by test_array_throttle_is_not_a_way_out.)
REFUSED_UPDATES = [
    "Account=other", "AdminComment=x", "BurstBuffer=x", "Clusters=x", "ClusterFeatures=x", "Contiguous=1",
    "CoreSpec=1", "CPUsPerTask=2", "CpusPerTres=gpu:2", "Deadline=now+1day", "DelayBoot=60",
    "Dependency=singleton", "EligibleTime=now+1hour", "StartTime=now", "EndTime=now+1day",
    "ExcNodeList=node1", "Features=fast", "Gres=gpu:2", "Licenses=x", "MemPerTres=gpu:100",
    "MinCPUsNode=2", "MinMemoryCPU=100", "MinMemoryNode=100", "MinTmpDiskNode=10", "Nice=0", "Nice=1",
    "Nice=100", "NodeList=node1", "NumCPUs=2", "NumNodes=2", "NumTasks=2", "OverSubscribe=no",
    "Shared=yes", "Partition=debug", "Prefer=fast", "Priority=1", "Priority=4294967294", "QOS=normal",
    "Reboot=yes", "ReqCores=2", "ReqNodeList=node2", "ReqSockets=1", "ReqThreads=1", "Requeue=0",
    "Reservation=x", "ResetAccrueTime", "SiteFactor=100", "StdOut=/tmp/elsewhere", "Switches=1@10",
    "TasksPerNode=2", "ThreadSpec=1", "TimeLimit=UNLIMITED", "TimeLimit=120", "TimeMin=5",
    "TresBind=gpu:closest", "TresFreq=gpu:low", "TresPerJob=gres:gpu:2", "TresPerNode=gres:gpu:2",
    "TresPerSocket=gres:gpu:1", "TresPerTask=gres:gpu:1", "WCKey=x", "WorkDir=/", "UserID=themis-bob",
    # keys Slurm 25.11 added (22.05's scontrol refuses them itself)
    "Extra=x", "MCSLabel=x", "StdErr=/tmp/elsewhere", "StdIn=/dev/zero",
]
# Keys of `scontrol show job -o` that legitimately move while a pending job just sits there.
VOLATILE = {"LastSchedEval", "Reason", "AccrueTime", "EligibleTime", "StartTime", "EndTime"}


def _show(cluster: Cluster, job_id: int) -> dict[str, str]:
    out = cluster.check(["scontrol", "show", "job", "-o", str(job_id)])
    fields = dict(item.split("=", 1) for item in out.split() if "=" in item)
    return {k: v for k, v in fields.items() if k not in VOLATILE}


def test_owner_updates_are_denied_by_default(cluster: Cluster) -> None:
    """Walks every update key as the owner: each refused, the job still held and unchanged."""
    job_id = cluster.sbatch("--gres=gpu:1", "--time=60", "--comment=themis:app=walk")
    _held(cluster, job_id)
    before = _show(cluster, job_id)
    accepted = []
    for change in REFUSED_UPDATES:
        res = cluster.run(["scontrol", "update", f"JobId={job_id}", change], user=ALICE)
        if res.returncode == 0:
            accepted.append(change)
    time.sleep(3)  # long enough for a scheduling pass to start a job that escaped (Nice= did, in 2 s)
    after = _show(cluster, job_id)
    assert not accepted, f"owner updates accepted on a managed job: {accepted}"
    assert after["JobState"] == "PENDING" and after["Priority"] == "0"
    assert cluster.job(job_id)["state_reason"] == "JobHeldUser"
    assert {k: (before.get(k), after.get(k)) for k in before.keys() | after.keys()
            if before.get(k) != after.get(k)} == {}


def test_nice_does_not_start_a_held_job(cluster: Cluster) -> None:
    # The hole found in production: Nice>=0 by the owner made slurmctld recompute the priority (0 -> 2).
    job_id = cluster.sbatch("--gres=gpu:1", wrap="true")
    _held(cluster, job_id)
    for nice in ("0", "1", "10"):
        assert cluster.run(["scontrol", "update", f"JobId={job_id}", f"Nice={nice}"], user=ALICE).returncode
    time.sleep(3)
    job = _held(cluster, job_id)
    assert job["priority"] == 0


def test_time_limit_may_only_shrink(cluster: Cluster) -> None:
    job_id = cluster.sbatch("--gres=gpu:1", "--time=10")
    _held(cluster, job_id)
    for change in ("TimeLimit=20", "TimeLimit=UNLIMITED", "TimeLimit=+5"):
        res = cluster.run(["scontrol", "update", f"JobId={job_id}", change], user=ALICE)
        assert res.returncode != 0, change
    assert cluster.job(job_id)["time_limit"] == 10
    cluster.check(["scontrol", "update", f"JobId={job_id}", "TimeLimit=5"], user=ALICE)
    cluster.check(["scontrol", "update", f"JobId={job_id}", "TimeLimit=5"], user=ALICE)  # same: fine
    assert _held(cluster, job_id)["time_limit"] == 5
    cluster.check(["scontrol", "update", f"JobId={job_id}", "TimeLimit=30"])  # an operator may raise it
    assert cluster.job(job_id)["time_limit"] == 30


def test_owner_hold_and_release_toggle_hold_user(cluster: Cluster) -> None:
    """`scontrol hold` by the owner is recorded as hold=user in the Comment; the job stays Themis-held."""
    job_id = cluster.sbatch("--gres=gpu:1", "--comment=themis:app=h1;my note")
    _held(cluster, job_id)
    cluster.check(["scontrol", "hold", str(job_id)], user=ALICE)
    job = _held(cluster, job_id)
    assert job["comment"] == "themis:app=h1,hold=user;my note"
    assert job["priority"] == 0
    # Another user may neither hold nor release it.
    assert cluster.run(["scontrol", "release", str(job_id)], user=BOB).returncode != 0
    assert _held(cluster, job_id)["comment"] == "themis:app=h1,hold=user;my note"
    # The owner's release removes the user hold only: Themis's hold stays.
    cluster.check(["scontrol", "release", str(job_id)], user=ALICE)
    time.sleep(2)
    job = _held(cluster, job_id)
    assert job["comment"] == "themis:app=h1;my note" and job["priority"] == 0
    # A second release has nothing of the owner's left to release.
    res = cluster.run(["scontrol", "release", str(job_id)], user=ALICE)
    assert res.returncode != 0 and "held state, pending scheduler release" in res.stderr
    # uhold is a hold too; a free-text comment gets the option in front.
    cluster.check(["scontrol", "update", f"JobId={job_id}", "Comment=just text"], user=ALICE)
    cluster.check(["scontrol", "uhold", str(job_id)], user=ALICE)
    assert _held(cluster, job_id)["comment"] == "themis:hold=user;just text"
    cluster.check(["scontrol", "release", str(job_id)], user=ALICE)
    assert _held(cluster, job_id)["comment"] == "just text"


def test_array_throttle_is_not_a_way_out(cluster: Cluster) -> None:
    # slurmctld applies ArrayTaskThrottle before job_submit.lua sees the update: whatever the answer, no
    # task may start by it.
    job_id = cluster.sbatch("--gres=gpu:1", "--array=0-3%1", wrap="true")
    _held(cluster, job_id)
    assert _held(cluster, job_id)["admin_comment"] == EMPTY_RECORD + ";throttle=1"
    cluster.run(["scontrol", "update", f"JobId={job_id}", "ArrayTaskThrottle=4"], user=ALICE)
    time.sleep(3)
    for task in cluster.array_tasks(job_id):
        assert task["job_state"] == "PENDING" and task["state_reason"] == "JobHeldUser"
    # issue 38 item 3: Slurm kept the owner's raise; Themis counts the throttle recorded at submit
    from themis_slurm.slurm.backend import CliBackend
    from themis_slurm.slurm.model import AdapterConfig
    from themis_slurm.slurm.runner import SubprocessRunner

    conf = cluster.env["SLURM_CONF"]
    snap = CliBackend(SubprocessRunner(slurm_conf=conf, timeout_s=20), AdapterConfig(slurm_conf=conf)).snapshot()
    tasks = [j for j in snap.managed if j.array_job_id == job_id]
    assert len(tasks) == 4 and {t.array_max_tasks for t in tasks} == {1}


@pytest.mark.parametrize("order", ["gpu-first", "gpu-second"])
def test_hetjob_with_a_managed_gpu_component_is_refused(cluster: Cluster, order: str) -> None:
    gpu = ["-p", "gpu", "--gres=gpu:1"]
    cpu = ["-p", "debug"]
    first, second = (gpu, cpu) if order == "gpu-first" else (cpu, gpu)
    res = cluster.sbatch_result(*first, ":", *second, script="#!/bin/sh\nsleep 1\n", wrap=None)
    assert res.returncode == 1, res.stdout
    assert "heterogeneous jobs are not supported" in res.stderr


@pytest.mark.parametrize(
    "change",
    [
        ["Partition=debug"],
        ["ReqNodeList=node1"],
        ["ExcNodeList=node1"],
        ["Features=fast"],
        ["NumNodes=2"],
        ["Gres=gpu:2"],
        ["Requeue=0"],
    ],
)
def test_owner_cannot_steer_a_managed_job(cluster: Cluster, change: list[str]) -> None:
    job_id = cluster.sbatch("--gres=gpu:1")
    _held(cluster, job_id)
    before = cluster.job(job_id)
    res = cluster.run(["scontrol", "update", f"JobId={job_id}", *change], user=ALICE)
    assert res.returncode != 0, res.stdout
    assert "Access/permission denied" in res.stderr
    after = _held(cluster, job_id)
    for key in ("partition", "required_nodes", "excluded_nodes", "tres_per_node", "node_count", "features"):
        assert after.get(key) == before.get(key), key


def test_owner_cannot_move_a_job_into_a_managed_partition(cluster: Cluster) -> None:
    # --hold keeps the unmanaged job pending so that it can still be moved.
    job_id = cluster.sbatch("-p", "debug", "--gres=gpu:1", "--hold")
    cluster.wait_job(job_id, "PENDING")
    res = cluster.run(["scontrol", "update", f"JobId={job_id}", "Partition=gpu"], user=ALICE)
    assert res.returncode != 0 and "Access/permission denied" in res.stderr
    assert cluster.job(job_id)["partition"] == "debug"


def test_owner_cannot_add_gpus_to_a_cpu_job_in_a_managed_partition(cluster: Cluster) -> None:
    job_id = cluster.sbatch("-p", "gpu", "--hold")
    cluster.wait_job(job_id, "PENDING")
    res = cluster.run(["scontrol", "update", f"JobId={job_id}", "Gres=gpu:1"], user=ALICE)
    assert res.returncode != 0 and "Access/permission denied" in res.stderr


def test_owner_may_report_progress_rename_and_shorten(cluster: Cluster) -> None:
    job_id = cluster.sbatch("--gres=gpu:1", "--time=60", "--comment=themis:app=p1")
    _held(cluster, job_id)
    for change in ("Comment=themis:progress=0.42", "Name=renamed", "TimeLimit=30"):
        cluster.check(["scontrol", "update", f"JobId={job_id}", change], user=ALICE)
    job = _held(cluster, job_id)
    assert job["comment"] == "themis:progress=0.42"
    assert job["name"] == "renamed"
    assert job["time_limit"] == 30
    # The trusted record is untouched by the user's Comment update.
    assert job["admin_comment"] == "themis:v1;app=p1;model=;sens=;est="
    # And the owner can still cancel it (scancel is not an update).
    cluster.check(["scancel", str(job_id)], user=ALICE)
    cluster.wait_job(job_id, "CANCELLED", timeout=10)


def test_root_may_steer_a_managed_job(cluster: Cluster) -> None:
    job_id = cluster.sbatch("--gres=gpu:1")
    _held(cluster, job_id)
    cluster.check(["scontrol", "update", f"JobId={job_id}", "ExcNodeList=node1"])
    cluster.check(["scontrol", "update", f"JobId={job_id}", "ExcNodeList="])
    # Slurm 25.11 answers a partition change of a job submitted a moment ago with "Resource temporarily
    # unavailable" now and then (not Themis: root is not filtered); retry for a few seconds.
    for _ in range(25):
        res = cluster.run(["scontrol", "update", f"JobId={job_id}", "Partition=debug"])
        if res.returncode == 0 or "temporarily unavailable" not in res.stderr:
            break
        time.sleep(0.2)
    assert res.returncode == 0, res.stderr
    assert cluster.job(job_id)["partition"] == "debug"


@pytest.mark.parametrize(("mode", "held", "record"), [("observe", False, True), ("off", False, False)])
def test_observe_and_off_modes(cluster: Cluster, mode: str, held: bool, record: bool) -> None:
    """Switches the cluster's config copy for a moment; cluster.sh up restores it if this test dies."""
    conf = cluster.dir / "etc" / "themis_job_submit.conf.lua"
    script = cluster.dir / "etc" / "job_submit.lua"
    original = conf.read_text()

    def reload_script() -> None:
        # slurmctld reloads the script (and with it the config) when the script's mtime changes; a change
        # within the same second can go unnoticed, so move the mtime by whole seconds.
        stamp = int(max(time.time(), script.stat().st_mtime)) + 1
        os.utime(script, (stamp, stamp))

    try:
        conf.write_text(original.replace('mode = "enforce"', f'mode = "{mode}"'))
        reload_script()
        job_id = cluster.sbatch("--gres=gpu:1", "--comment=themis:app=obs", wrap="true")
    finally:
        conf.write_text(original)
        reload_script()
    job = cluster.wait_job(job_id, {"PENDING", "RUNNING", "COMPLETING", "COMPLETED"})
    assert (job["state_reason"] == "JobHeldUser") is held
    assert job["admin_comment"] == ("themis:v1;app=obs;model=;sens=;est=" if record else "")
    # Back in enforce mode: the next managed job is held again.
    _held(cluster, cluster.sbatch("--gres=gpu:1"))
