"""The Slurm adapter (CliBackend) against the REAL local cluster of slurm_conf/cluster.sh.

The cluster is shared with other tests and tools, so assertions are about the jobs and nodes these tests
touch (never "exactly N GPUs free"), placements are chosen among GPUs the snapshot shows free, and every
job submitted is cancelled by the ``cluster`` fixture.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

from themis_slurm.slurm.actions import ActionRefused
from themis_slurm.slurm.backend import CliBackend
from themis_slurm.slurm.backends import make_backend
from themis_slurm.slurm.model import AdapterConfig, ManagedJob, Snapshot
from themis_slurm.slurm.runner import SlurmCommandError, SubprocessRunner

if TYPE_CHECKING:  # conftest is not importable at run time; pytest injects the fixtures
    from conftest import Cluster

pytestmark = pytest.mark.slurm

ALICE = "themis-alice"
BOB = "themis-bob"


@pytest.fixture(params=["cli", "pyslurm"])
def backend(request: pytest.FixtureRequest, cluster: Cluster) -> CliBackend:
    """Each adapter test runs through both backends (pyslurm only where it can: Slurm 25.11)."""
    conf = cluster.env["SLURM_CONF"]
    if request.param == "pyslurm":
        if cluster.slurm != "25.11":
            pytest.skip(f"pyslurm 25.11 needs Slurm 25.11; this cluster is {cluster.slurm}")
        if importlib.util.find_spec("pyslurm") is None:  # find, never import: pyslurm reads slurm.conf
            pytest.skip("pyslurm is not installed (pip install .[pyslurm])")
    runner = SubprocessRunner(slurm_conf=conf, timeout_s=20)
    b, _ = make_backend(request.param, AdapterConfig(slurm_conf=conf), runner)
    b.snapshot()  # the first cycle finds the node listing this Slurm has (25.11 CLI: one extra call, once)
    return b  # type: ignore[return-value]


def wait_for(backend: CliBackend, pred: Callable[[Snapshot], object], what: str, timeout: float = 15) -> Snapshot:
    """Polls snapshots until ``pred`` holds (returns the snapshot)."""
    deadline = time.monotonic() + timeout
    while True:
        snap = backend.snapshot()
        if pred(snap):
            return snap
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not seen within {timeout}s; managed: "
                               f"{[(j.job_id, j.state, j.held) for j in snap.managed]}")
        time.sleep(0.2)


def find(snap: Snapshot, job_id: int | str) -> ManagedJob | None:
    return next((j for j in snap.managed if j.job_id == str(job_id)), None)


def held_job(backend: CliBackend, job_id: int | str) -> ManagedJob:
    # held and done completing (25.11 shows a requeued job as PENDING+COMPLETING for a moment)
    snap = wait_for(backend, lambda s: (j := find(s, job_id)) is not None and j.held and j.state == "PENDING",
                    f"job {job_id} held")
    job = find(snap, job_id)
    assert job is not None
    return job


def free_nodes(snap: Snapshot, per_node: int, count: int, same_rack: bool = True) -> list[str]:
    """``count`` nodes with at least ``per_node`` free GPUs (in one rack when asked)."""
    topo = snap.topology
    for _rack, nodes in topo.rack_nodes.items() if same_rack else [("any", topo.nodes)]:
        ok = [n for n in nodes if sum(g in snap.free for g in topo.node_gpus[n]) >= per_node]
        if len(ok) >= count:
            return ok[:count]
    pytest.skip(f"the shared cluster has not {count} node(s) with {per_node} free GPUs right now")


def running(backend: CliBackend, job_id: int | str) -> ManagedJob:
    snap = wait_for(backend, lambda s: (j := find(s, job_id)) is not None and j.state == "RUNNING"
                    and len(j.gpu_ids) == j.gpus, f"job {job_id} running")
    job = find(snap, job_id)
    assert job is not None
    assert job.gpu_ids <= snap.managed_used and not (job.gpu_ids & snap.free)
    return job


def test_view_matches_cluster_config(cluster: Cluster, backend: CliBackend) -> None:
    snap = backend.snapshot()
    topo = snap.topology
    assert topo.size == cluster.nodes * cluster.gpus
    assert len(topo.nodes) == cluster.nodes and len(topo.racks) == cluster.racks
    for node in topo.nodes:
        assert len(topo.node_gpus[node]) == cluster.gpus
        # gres.conf Links: indices 0-1 and 2-3 are NVLink pairs.
        assert [[topo.gpus[g].index for g in topo.island_gpus[i]] for i in topo.node_islands[node]] == [[0, 1], [2, 3]]
    assert topo.rack_nodes == {"rack1": ("node1", "node2"), "rack2": ("node3", "node4")}
    assert snap.slurm_calls == 2 and snap.warnings == ()
    assert snap.free | snap.unmanaged | snap.unavailable | snap.managed_used == set(range(topo.size))


def test_held_job_fields_and_progress_comment(cluster: Cluster, backend: CliBackend) -> None:
    job_id = cluster.sbatch("--gres=gpu:2", "--time=30", "--comment=themis:app=p1,model=vgg16,est=2h")
    job = held_job(backend, job_id)
    assert (job.user, job.app_key, job.gpus, job.gpus_per_node, job.nodes) == (ALICE, f"{ALICE}/p1", 2, 2, 1)
    assert (job.est_s, job.profile, job.time_limit_s, job.priority) == (7200.0, "vgg16", 1800.0, 0)
    assert job.requeue_ok and job.restart_cnt == 0 and job.progress is None and job.state == "PENDING"
    cluster.check(["scontrol", "update", f"JobId={job_id}", "Comment=themis:progress=0.42"], user=ALICE)
    assert held_job(backend, job_id).progress == 0.42
    cluster.check(["scontrol", "update", f"JobId={job_id}", "Comment=themis:progress=lots"], user=ALICE)
    snap = backend.snapshot()
    job2 = find(snap, job_id)
    assert job2 is not None and job2.progress is None and job2.app_key == f"{ALICE}/p1"
    assert "progress='lots'" in (job2.progress_error or "")
    assert any(str(job_id) in w for w in snap.warnings)


def test_pin_and_release_runs_on_exactly_the_pinned_node(cluster: Cluster, backend: CliBackend) -> None:
    job_id = cluster.sbatch("--gres=gpu:2")
    job = held_job(backend, job_id)
    [node] = free_nodes(backend.snapshot(), 2, 1)
    backend.start(job, {node: 2})
    run = running(backend, job_id)
    assert run.node_gpus == {node: 2} and not run.held
    assert {backend.snapshot().topology.gpus[g].node for g in run.gpu_ids} == {node}
    assert cluster.job(job_id)["nodes"] == node


def test_two_node_gang(cluster: Cluster, backend: CliBackend) -> None:
    job_id = cluster.sbatch("-N2", "--gres=gpu:2", user=BOB)
    job = held_job(backend, job_id)
    assert (job.gpus, job.nodes, job.gpus_per_node) == (4, 2, 2)
    nodes = free_nodes(backend.snapshot(), 2, 2)
    backend.start(job, {n: 2 for n in nodes})
    run = running(backend, job_id)
    assert run.node_gpus == {n: 2 for n in nodes} and len(run.gpu_ids) == 4


TRAP_SCRIPT = """#!/bin/bash
trap 'echo usr1 >> {dir}/usr1.$SLURM_JOB_ID' USR1
echo "start restarts=${{SLURM_RESTART_COUNT:-0}}" >> {dir}/ready.$SLURM_JOB_ID
while true; do sleep 0.2 & wait $!; done
"""


def test_warn_requeue_and_start_again(cluster: Cluster, backend: CliBackend) -> None:
    d = cluster.jobs_dir
    job_id = cluster.sbatch("--gres=gpu:1", "--open-mode=append", script=TRAP_SCRIPT.format(dir=d), wrap=None)
    job = held_job(backend, job_id)
    [node] = free_nodes(backend.snapshot(), 1, 1)
    backend.start(job, {node: 1})
    job = running(backend, job_id)
    cluster.wait_file(d / f"ready.{job_id}", contains="restarts=0")
    backend.warn(job)
    cluster.wait_file(d / f"usr1.{job_id}", contains="usr1")
    assert find(backend.snapshot(), job_id).state == "RUNNING"  # type: ignore[union-attr]  # warning only

    backend.requeue(job)
    again = held_job(backend, job_id)  # same JobId, back in Themis's queue
    assert again.restart_cnt == job.restart_cnt + 1 and again.required_nodes == () and again.state == "PENDING"
    backend.requeue(again)  # a retry is harmless: still held, still unpinned
    assert held_job(backend, job_id).required_nodes == ()

    [node2] = free_nodes(backend.snapshot(), 1, 1)
    t0 = time.monotonic()
    backend.start(again, {node2: 1})  # StartTime=now path: no cred_expire (30 s) wait
    restarted = running(backend, job_id)
    assert time.monotonic() - t0 < 10 and restarted.node_gpus == {node2: 1}
    cluster.wait_file(d / f"ready.{job_id}", contains="restarts=1")


def test_array_task_with_pending_siblings_is_warned_once_and_requeued(cluster: Cluster, backend: CliBackend) -> None:
    # issue 38 item 1: `scancel --batch --signal=USR1 --state=RUNNING A_T` with tasks of A still pending
    # delivered the signal, then answered "Job can not be altered now" and retried for ~95 s (22.05 and 25.11)
    d = cluster.jobs_dir
    array_id = cluster.sbatch("--array=0-3", "--gres=gpu:1", "--open-mode=append",
                              script=TRAP_SCRIPT.format(dir=d), wrap=None)
    task = held_job(backend, f"{array_id}_0")
    [node] = free_nodes(backend.snapshot(), 1, 1)
    backend.start(task, {node: 1})
    run = running(backend, f"{array_id}_0")
    assert run.slurm_id != array_id  # split off; tasks 1-3 still pending in the array's record
    cluster.wait_file(d / f"ready.{run.slurm_id}", contains="restarts=0")
    t0 = time.monotonic()
    backend.warn(run)
    assert time.monotonic() - t0 < 5, "the warning of an array task must not wait on slurmctld's retries"
    cluster.wait_file(d / f"usr1.{run.slurm_id}", contains="usr1")
    time.sleep(2)
    assert (d / f"usr1.{run.slurm_id}").read_text().count("usr1") == 1  # sent once, not re-sent
    backend.requeue(run)
    again = held_job(backend, f"{array_id}_0")
    assert again.restart_cnt == 1 and again.required_nodes == ()
    siblings = [find(backend.snapshot(), f"{array_id}_{i}") for i in (1, 2, 3)]
    assert all(s is not None and s.held and s.state == "PENDING" for s in siblings)  # untouched


def test_progress_of_an_arrays_last_task_is_that_tasks_alone(cluster: Cluster, backend: CliBackend) -> None:
    # issue 38 item 11: the last task of an array runs under the array's own JobId, and Slurm applies an
    # update of that bare id to every task: `themis progress` addresses ARRAYID_TASKID instead
    array_id = cluster.sbatch("--array=0-1", "--gres=gpu:1")
    for task in ("0", "1"):  # task 0 splits off with an id of its own; task 1 then runs as the array's record
        job = held_job(backend, f"{array_id}_{task}")
        [node] = free_nodes(backend.snapshot(), 1, 1)
        backend.start(job, {node: 1})
        running(backend, f"{array_id}_{task}")
    first, last = find(backend.snapshot(), f"{array_id}_0"), find(backend.snapshot(), f"{array_id}_1")
    assert first is not None and last is not None and last.slurm_id == array_id != first.slurm_id
    env = dict(cluster.env, SLURM_JOB_ID=str(array_id), SLURM_ARRAY_JOB_ID=str(array_id), SLURM_ARRAY_TASK_ID="1")
    out = subprocess.run([sys.executable, "-m", "themis_slurm.cli.main", "progress", "0.75"], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    snap = wait_for(backend, lambda s: (j := find(s, f"{array_id}_1")) is not None and j.progress == 0.75,
                    "the last task's progress")
    assert find(snap, f"{array_id}_0").progress is None  # type: ignore[union-attr]  # not every task's


def test_a_hold_is_never_sent_to_a_running_job(cluster: Cluster, backend: CliBackend) -> None:
    # issue 38 item 2: themisd's stale view held 13 jobs Slurm had started (R with JobHeldAdmin, priority 0)
    job_id = cluster.sbatch("--gres=gpu:1")
    job = held_job(backend, job_id)
    [node] = free_nodes(backend.snapshot(), 1, 1)
    backend.start(job, {node: 1})
    running(backend, job_id)
    with pytest.raises(ActionRefused, match="RUNNING in Slurm now, not PENDING: not held"):
        backend.hold(job)  # the stale record still says PENDING
    now = cluster.job(job_id)
    assert now["job_state"] == "RUNNING" and now["priority"] != 0


def test_a_job_that_ended_is_never_requeued(cluster: Cluster, backend: CliBackend) -> None:
    # Slurm requeues a finished batch job too (requeuehold of a COMPLETED job makes it PENDING, held): a
    # job that finished between the cycle's read and its lease's requeue ran a second time in full
    job_id = cluster.sbatch("--gres=gpu:1", "--requeue", wrap="sleep 2")
    job = held_job(backend, job_id)
    [node] = free_nodes(backend.snapshot(), 1, 1)
    backend.start(job, {node: 1})
    job = running(backend, job_id)  # the stale view the requeue is sent with
    wait_for(backend, lambda s: str(job_id) in s.finished, f"job {job_id} finished")
    with pytest.raises(ActionRefused, match="not requeued, so it does not run again"):
        backend.requeue(job)
    assert cluster.job(job_id)["job_state"] == "COMPLETED" and job.restart_cnt == 0


def test_restart_on_the_same_node_in_the_second_of_the_requeue(cluster: Cluster, backend: CliBackend) -> None:
    # slurmd refuses a launch whose credential is stamped in the second of the job's requeue (its revoke)
    # and Slurm then FAILS the job: start must wait that second out, or a re-won job is lost.
    job_id = cluster.sbatch("--gres=gpu:1", "--requeue", wrap="sleep 300")
    job = held_job(backend, job_id)
    [node] = free_nodes(backend.snapshot(), 1, 1)
    backend.start(job, {node: 1})
    job = running(backend, job_id)
    for restarts in (1, 2):  # the race is Slurm's timing: each round catches a regression about half the time
        while time.time() % 1 > 0.05:  # requeue at the top of a second: the restart falls in the same one
            time.sleep(0.01)
        backend.requeue(job)
        again = held_job(backend, job_id)
        backend.start(again, {node: 1})
        job = running(backend, job_id)
        assert job.node_gpus == {node: 1} and job.restart_cnt == restarts


def test_array_is_one_app_and_a_task_can_be_started(cluster: Cluster, backend: CliBackend) -> None:
    array_id = cluster.sbatch("--array=0-3", "--gres=gpu:1")
    snap = wait_for(backend, lambda s: sum(j.job_id.startswith(f"{array_id}_") for j in s.managed) == 4,
                    f"array {array_id}")
    tasks = [j for j in snap.managed if j.job_id.startswith(f"{array_id}_")]
    assert {j.app_key for j in tasks} == {f"{ALICE}/array-{array_id}"}
    assert sorted(j.job_id for j in tasks) == [f"{array_id}_{i}" for i in range(4)]
    task = find(snap, f"{array_id}_2")
    assert task is not None
    [node] = free_nodes(snap, 1, 1)
    backend.start(task, {node: 1})
    run = running(backend, f"{array_id}_2")  # split off with its own JobId, still the same app
    assert run.slurm_id != array_id and run.app_key == f"{ALICE}/array-{array_id}"
    snap = backend.snapshot()
    assert sum(j.app_key == f"{ALICE}/array-{array_id}" for j in snap.managed) == 4
    assert all(j.held for j in snap.managed if j.job_id in {f"{array_id}_{i}" for i in (0, 1, 3)})


def test_tagged_group_is_one_app_per_user(cluster: Cluster, backend: CliBackend) -> None:
    a1 = cluster.sbatch("--gres=gpu:1", "--comment=themis:app=sweep1")
    a2 = cluster.sbatch("--gres=gpu:2", "--comment=themis:app=sweep1")
    b1 = cluster.sbatch("--gres=gpu:1", "--comment=themis:app=sweep1", user=BOB)
    solo = cluster.sbatch("--gres=gpu:1", user=BOB)
    ids = {str(i) for i in (a1, a2, b1, solo)}
    snap = wait_for(backend, lambda s: ids <= {j.job_id for j in s.managed}, "tagged jobs")
    keys = {j.job_id: j.app_key for j in snap.managed if j.job_id in ids}
    assert keys == {str(a1): f"{ALICE}/sweep1", str(a2): f"{ALICE}/sweep1", str(b1): f"{BOB}/sweep1",
                    str(solo): f"{BOB}/job-{solo}"}


def test_drained_node_leaves_the_free_pool(cluster: Cluster, backend: CliBackend) -> None:
    node = "node4"
    try:
        cluster.check(["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=themis-adapter-test"])
        snap = backend.snapshot()
        ids = set(snap.topology.node_gpus[node])
        assert not (ids & snap.free)
        assert ids - snap.unmanaged - snap.managed_used == ids & snap.unavailable
    finally:
        cluster.check(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
    snap = wait_for(backend, lambda s: not (set(s.topology.node_gpus[node]) & s.unavailable), f"{node} resumed")
    assert snap.topology.node_gpus[node]


def test_unmanaged_job_gpus(cluster: Cluster, backend: CliBackend) -> None:
    job_id = cluster.sbatch("-p", "debug", "--gres=gpu:1")
    rec = cluster.wait_job(job_id, "RUNNING", timeout=20)
    snap = backend.snapshot()
    node = rec["nodes"]
    idx = int(rec["gres_detail"][0].split("IDX:")[1].rstrip(")"))
    gid = snap.topology.gpu_id(node, idx)
    assert gid in snap.unmanaged and gid not in snap.free and find(snap, job_id) is None


def test_snapshot_calls_do_not_grow_with_jobs(cluster: Cluster, backend: CliBackend) -> None:
    before = backend.snapshot().slurm_calls
    ids = [cluster.sbatch("--gres=gpu:1", user=ALICE if i % 2 else BOB) for i in range(20)]
    snap = wait_for(backend, lambda s: {str(i) for i in ids} <= {j.job_id for j in s.managed}, "20 jobs")
    assert snap.slurm_calls == before == 2


def test_refused_actions_raise_with_the_command(cluster: Cluster, backend: CliBackend) -> None:
    job_id = cluster.sbatch("--gres=gpu:1")
    job = held_job(backend, job_id)
    with pytest.raises(SlurmCommandError, match=f"scontrol update JobId={job_id} ReqNodeList=nodeX"):
        backend.start(job, {"nodeX": 1})
    with pytest.raises(ActionRefused, match="not RUNNING"):
        backend.warn(job)  # a pending job has no batch shell (and scancel would retry for ~95 s)
    t0 = time.monotonic()
    backend.warn(replace(job, state="RUNNING"))  # stale view: --state=RUNNING makes scancel return at once
    assert time.monotonic() - t0 < 5
    # An admin may make a job non-requeueable; Themis then refuses to preempt it, before calling Slurm.
    cluster.check(["scontrol", "update", f"JobId={job_id}", "Requeue=0"])
    job = wait_for(backend, lambda s: (j := find(s, job_id)) is not None and not j.requeue_ok, "requeue=0")
    job = find(job, job_id)  # type: ignore[arg-type]
    calls = backend.runner.stats.total_calls
    with pytest.raises(ActionRefused, match="cannot be requeued"):
        backend.requeue(job)  # type: ignore[arg-type]
    assert backend.runner.stats.total_calls == calls


def test_hold_and_release_unpinned(cluster: Cluster, backend: CliBackend) -> None:
    job_id = cluster.sbatch("--gres=gpu:1", "--begin=now+1hour")  # released, it still waits for BeginTime
    job = held_job(backend, job_id)
    backend.release_unpinned(job)
    snap = wait_for(backend, lambda s: (j := find(s, job_id)) is not None and not j.held, "released")
    assert find(snap, job_id).required_nodes == ()  # type: ignore[union-attr]
    cluster.check(["scontrol", "update", f"JobId={job_id}", "ReqNodeList=node1"])
    backend.hold(find(snap, job_id))  # type: ignore[arg-type]
    job = held_job(backend, job_id)
    assert job.required_nodes == ()
