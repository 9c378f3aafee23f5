"""The local cluster of slurm_conf/cluster.sh and the Slurm mechanics themisd relies on: shape and topology,
pin-then-release, gangs, the checkpoint signal and requeue-held, slurmctld restarts, idempotent ``up``.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from themis_slurm.slurm.actions import REQUEUE_SETTLE_S

if TYPE_CHECKING:  # conftest is not an importable module at run time; pytest injects the fixtures
    from conftest import Cluster

pytestmark = pytest.mark.slurm

CLUSTER_SH = Path(__file__).resolve().parents[2] / "slurm_conf" / "cluster.sh"


def _cluster_sh(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """Runs cluster.sh against the tests' cluster directory."""
    env = dict(cluster.env, THEMIS_CLUSTER_DIR=str(cluster.dir))
    return subprocess.run([str(CLUSTER_SH), *args], env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def _env_lines(cluster: Cluster) -> list[str]:
    """What `up` and `env` print: SLURM_CONF, after the 25.11 tree's PATH for 25.11."""
    lines = [f"export SLURM_CONF={cluster.dir}/etc/slurm.conf"]
    if cluster.slurm == "25.11":
        lines.insert(0, "export PATH=/opt/slurm-25.11/bin:/opt/slurm-25.11/sbin:$PATH")
    return lines


def _ctld_pid(cluster: Cluster) -> int:
    return int((cluster.dir / "run" / "slurmctld.pid").read_text().strip())


def test_shape_matches_config(cluster: Cluster) -> None:
    doc = json.loads(cluster.check(["sinfo", "--json"]))
    if "nodes" not in doc:  # 23.11+ groups sinfo's output; scontrol lists the nodes
        doc = json.loads(cluster.check(["scontrol", "show", "nodes", "--json"]))
    nodes = doc["nodes"]
    names = sorted({n["name"] for n in nodes})
    assert names == [f"node{i}" for i in range(1, cluster.nodes + 1)]
    for node in nodes:
        assert node["gres"].startswith(f"gpu:{cluster.type_of(node['name'])}:{cluster.gpus}(")
        assert node["cpus"] in (16, {"set": True, "infinite": False, "number": 16})
        assert {"gpu", "debug"} <= set(node["partitions"])
    topology = cluster.check(["scontrol", "show", "topology"])
    for rack in range(1, cluster.racks + 1):
        assert f"SwitchName=rack{rack} " in topology
    assert "SwitchName=spine Level=1" in topology
    gres_conf = (cluster.dir / "etc" / "gres.conf").read_text()
    # Two NVLink islands per node: GPU 0 links to its island mate only.
    if cluster.gpus == 4:
        assert "nvidia0 Cores=0-7 Links=-1,2,0,0" in gres_conf
        assert "nvidia3 Cores=8-15 Links=0,0,2,-1" in gres_conf


def test_partitions(cluster: Cluster) -> None:
    out = cluster.check(["scontrol", "show", "partition", "-o"])
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert "Default=YES" in lines["PartitionName=gpu"]
    assert "Default=NO" in lines["PartitionName=debug"]


def test_up_twice_is_a_noop(cluster: Cluster) -> None:
    pid = _ctld_pid(cluster)
    res = _cluster_sh(cluster, "up")
    assert res.returncode == 0, res.stderr
    assert "already up" in res.stderr and f"Slurm {cluster.slurm}" in res.stderr
    assert res.stdout.strip().splitlines() == _env_lines(cluster)
    assert _ctld_pid(cluster) == pid


def test_up_with_another_shape_is_refused(cluster: Cluster) -> None:
    res = _cluster_sh(cluster, "up", "--nodes", str(cluster.nodes + 1))
    assert res.returncode == 1
    assert "--force" in res.stderr
    assert _cluster_sh(cluster, "status").returncode == 0


def test_status_and_env(cluster: Cluster) -> None:
    res = _cluster_sh(cluster, "status")
    assert res.returncode == 0 and "slurmctld: running" in res.stdout
    assert _cluster_sh(cluster, "env").stdout.strip().splitlines() == _env_lines(cluster)
    version = cluster.check(["sinfo", "--version"]).split()[1]
    assert version.startswith(cluster.slurm), version


def test_the_other_slurm_version_needs_force(cluster: Cluster) -> None:
    other = "22.05" if cluster.slurm == "25.11" else "25.11"
    res = _cluster_sh(cluster, "up", "--slurm", other)
    assert res.returncode == 1 and "--force" in res.stderr and f"Slurm {cluster.slurm} cluster" in res.stderr
    res = _cluster_sh(cluster, "up", "--slurm", "26.05")
    assert res.returncode == 1 and "--slurm takes 22.05 or 25.11, not '26.05'" in res.stderr
    assert _cluster_sh(cluster, "status").returncode == 0


def test_slurm_25_11_without_a_source_says_so(cluster: Cluster, tmp_path: Path) -> None:
    env = dict(cluster.env, THEMIS_CLUSTER_DIR=str(tmp_path / "c"), THEMIS_CLUSTER_PORT=str(cluster.spare_port),
               THEMIS_SLURM_DIST=str(tmp_path / "none"), THEMIS_SLURM25_PREFIX=str(tmp_path / "opt"))
    res = subprocess.run([str(CLUSTER_SH), "up", "--slurm", "25.11"], env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    assert res.returncode == 1
    assert f"Slurm 25.11 is not installed in {tmp_path / 'opt'} and no Slurm 25.11 tarball is in " in res.stderr
    assert "THEMIS_SLURM_DIST" in res.stderr
    assert not (tmp_path / "c" / "etc").exists(), "nothing was set up"


def test_pin_then_release_runs_on_exactly_that_node(cluster: Cluster) -> None:
    job_id = cluster.sbatch("--gres=gpu:2", wrap="echo CUDA=$CUDA_VISIBLE_DEVICES; sleep 300")
    cluster.wait_job(job_id, "PENDING", reason="JobHeldUser")
    cluster.pin_and_release(job_id, "node2", 1)
    job = cluster.wait_job(job_id, "RUNNING")
    assert job["nodes"] == "node2"
    assert job["required_nodes"] == "node2"
    assert len(job["gres_detail"]) == 1 and job["gres_detail"][0].startswith(f"gpu:{cluster.type_of('node2')}:2(IDX:")
    out = cluster.wait_file(cluster.jobs_dir / f"{job_id}.out", contains="CUDA=")
    assert len(out.split("CUDA=")[1].split()[0].split(",")) == 2


def test_gang_pinned_to_two_nodes_runs_there(cluster: Cluster) -> None:
    if cluster.nodes < 3:
        pytest.skip("needs 3 nodes")
    # node1 and node3 sit in different racks: the pin wins over topology/tree's own preference.
    job_id = cluster.sbatch("-N2", "--gres=gpu:2")
    cluster.wait_job(job_id, "PENDING", reason="JobHeldUser")
    cluster.pin_and_release(job_id, "node1,node3", 2)
    job = cluster.wait_job(job_id, "RUNNING")
    assert job["nodes"] == "node[1,3]"
    assert job["node_count"] == 2
    assert len(job["gres_detail"]) == 2


CHECKPOINT_SCRIPT = """#!/bin/bash
#SBATCH --requeue
#SBATCH --open-mode=append
trap 'echo "usr1 restart=${SLURM_RESTART_COUNT:-0}" >> "$MARK"' USR1
echo "start restart=${SLURM_RESTART_COUNT:-0}"
while :; do sleep 0.1; done
"""


def test_checkpoint_signal_then_requeue_held(cluster: Cluster) -> None:
    mark = cluster.jobs_dir / f"usr1-{uuid.uuid4().hex}"
    job_id = cluster.sbatch("--gres=gpu:1", f"--export=ALL,MARK={mark}", script=CHECKPOINT_SCRIPT)
    cluster.pin_and_release(job_id, "node1", 1)
    cluster.wait_job(job_id, "RUNNING")
    out_file = cluster.jobs_dir / f"{job_id}.out"
    cluster.wait_file(out_file, contains="start restart=0")
    # The lease-expiry warning: SIGUSR1 to the batch shell only.
    cluster.check(["scancel", "--batch", "--signal=USR1", str(job_id)])
    assert "usr1 restart=0" in cluster.wait_file(mark, contains="usr1")
    # Take the GPUs back: the job comes back pending and held, same id, one more restart.
    cluster.check(["scontrol", "requeuehold", str(job_id)])
    job = cluster.wait_job(job_id, "PENDING", timeout=20)
    assert job["job_id"] == job_id
    assert job["restart_cnt"] == 1
    assert job["priority"] == 0
    assert job["state_reason"] in {"JobHeldUser", "JobHeldAdmin", "job_requeued_in_held_state"}
    assert job["admin_comment"].startswith("themis:v1;")  # the record survives the requeue
    assert job["required_nodes"] == "node1"  # and so does the pin: themisd must clear or reset it
    # The owner still cannot release it; Themis can. A requeued job is only eligible after
    # BeginTime = requeue + cred_expire + 1 s: StartTime=now lifts that, as themisd must do. But not in
    # the second of the requeue (SubmitTime now says when): slurmd would refuse the launch ("already
    # killed, do not launch batch job") and the job would FAIL (Actions.start waits the same way).
    assert cluster.run(["scontrol", "release", str(job_id)], user="themis-alice").returncode != 0
    time.sleep(max(0.0, job["submit_time"] + REQUEUE_SETTLE_S - time.time()))
    cluster.check(["scontrol", "update", f"JobId={job_id}", "StartTime=now"])
    cluster.pin_and_release(job_id, "node1", 1)
    cluster.wait_job(job_id, "RUNNING", timeout=20)
    assert "start restart=1" in cluster.wait_file(out_file, contains="start restart=1")
    mark.unlink(missing_ok=True)


def test_jobs_survive_a_slurmctld_restart(cluster: Cluster) -> None:
    held = cluster.sbatch("--gres=gpu:1", "--comment=themis:app=survivor")
    running = cluster.sbatch("-p", "debug", "--gres=gpu:1")
    cluster.wait_job(held, "PENDING", reason="JobHeldUser")
    cluster.wait_job(running, "RUNNING")
    old_pid = _ctld_pid(cluster)
    res = _cluster_sh(cluster, "restart-ctld")
    assert res.returncode == 0, res.stderr
    assert _ctld_pid(cluster) != old_pid
    job = cluster.wait_job(held, "PENDING", reason="JobHeldUser")
    assert job["admin_comment"] == "themis:v1;app=survivor;model=;sens=;est="
    cluster.wait_job(running, "RUNNING")
    # job_submit.lua is loaded again by the new slurmctld.
    cluster.wait_job(cluster.sbatch("--gres=gpu:1"), "PENDING", reason="JobHeldUser")
