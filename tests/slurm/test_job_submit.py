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
        ("themis:est=abc", ["est=abc", "expected a duration such as 90m, 6h"]),
        ("themis:est=0s", ["est=0s", "above 0 and at most 365 days"]),
        ("themis:est=400d", ["est=400d", "at most 365 days"]),
        ("themis:est=90", ["est=90", "expected a duration"]),
        ("themis:colour=red", ["unknown option 'colour'", "known options are app, model, sens, est"]),
        ("themis:app=-bad", ["app=-bad", "starting with a letter or digit"]),
        ("themis:app=" + "a" * 65, ["app=", "1 to 64"]),
        ("themis:model=vgg16,sens=high", ["model= and sens=", "mutually exclusive"]),
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
    for user in (ALICE, BOB):
        res = cluster.run(["scontrol", "release", str(job_id)], user=user)
        assert res.returncode != 0
        assert "held state, pending scheduler release" in res.stderr
    for args in (["scontrol", "update", f"JobId={job_id}", "Priority=100"],
                 ["scontrol", "hold", str(job_id)]):
        assert cluster.run(args, user=ALICE).returncode != 0
    time.sleep(0.5)
    assert _held(cluster, job_id)["priority"] == 0  # still held after all those attempts
    cluster.check(["scontrol", "release", str(job_id)])
    cluster.wait_job(job_id, {"RUNNING", "COMPLETING", "COMPLETED"}, timeout=20)


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
    cluster.check(["scontrol", "update", f"JobId={job_id}", "Partition=debug"])
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
