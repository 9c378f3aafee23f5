"""Accounting on the real local cluster (slurmdbd + MariaDB, started by slurm_conf/cluster.sh).

1. The `--format sacct` loader reads the live `sacct --json` and `sacct -P` of jobs just run: GPUs from
   AllocTRES, the Themis app from the AdminComment record, the run time Slurm measured, and the rows it must
   not replay (cancelled while pending, no GPUs) counted in the notes; both forms give the same jobs.
2. The daemon's account `themis` is a Slurm Operator (sacctmgr) and may do everything themisd does to other
   users' managed jobs (pin, StartTime, release, signal the batch shell, requeuehold, hold), while a plain
   user may not; rewriting AdminComment needs more than Operator (themisd never does it).
3. cluster.sh's accounting daemons are its own (private MariaDB, 127.0.0.1 only), and `down` of a second
   cluster in another DIR stops exactly its MariaDB and slurmdbd.

Skipped, saying so, on a cluster started with `cluster.sh up --no-accounting`.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from themis_slurm.sim.loaders.sacct import FIELDS, load_sacct
from themis_slurm.slurm.actions import REQUEUE_SETTLE_S

if TYPE_CHECKING:
    from conftest import Cluster

pytestmark = pytest.mark.slurm

ALICE, BOB, OPERATOR = "themis-alice", "themis-bob", "themis"
CLUSTER_SH = Path(__file__).resolve().parents[2] / "slurm_conf" / "cluster.sh"


@pytest.fixture
def acct(cluster: Cluster) -> Cluster:
    shape = dict(item.split("=", 1) for item in (cluster.dir / "shape").read_text().split())
    if shape.get("acct") != "1":
        pytest.skip("the cluster runs without accounting (cluster.sh up --no-accounting)")
    return cluster


def settled(cluster: Cluster, ids: list[int], limited: list[int], timeout: float = 30) -> None:
    """Wait until slurmdbd has every listed job's end record (sacct shows no unfinished state) and the jobs
    in `limited` (submitted with -t 5) show their time limit: on 22.05 a record read right after a quick job
    ended once lacked it (time.limit null), filled in a moment later."""
    deadline = time.monotonic() + timeout
    listed = ",".join(map(str, ids))
    while True:
        out = cluster.check(["sacct", "-n", "-X", "-P", "-o", "JobID,State,Timelimit", "-j", listed])
        rows = {r[0]: r[1:] for r in (line.split("|") for line in out.splitlines() if line)}
        # REQUEUED: slurmdbd has a requeued job's cut run but not yet the run after it
        done = len(rows) >= len(ids) and not any(s.startswith(("PENDING", "RUNNING", "COMPLETING", "REQUEUED"))
                                                for s, _ in rows.values())  # fmt: skip
        if done and all(rows.get(str(j), ("", ""))[1] == "00:05:00" for j in limited):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"sacct still shows unfinished jobs after {timeout}s:\n{out}")
        time.sleep(0.5)


def test_loader_reads_the_live_sacct(acct: Cluster, tmp_path: Path) -> None:
    c = acct
    one = c.sbatch("-p", "debug", "--gres=gpu:2", "-t", "5", wrap="sleep 2")
    gang = c.sbatch("-p", "debug", "-N2", "--gres=gpu:4", "-t", "5", user=BOB, wrap="sleep 2")
    tagged = c.sbatch("-p", "gpu", "--gres=gpu:1", "-t", "5", "--comment=themis:app=live,model=vgg16,est=1m",
                      wrap="sleep 1")  # fmt: skip
    never = c.sbatch("-p", "debug", "--gres=gpu:1", "--begin=now+3600", wrap="sleep 1")
    cpu = c.sbatch("-p", "debug", "-t", "5", user=BOB, wrap="sleep 1")
    again = c.sbatch("-p", "debug", "--gres=gpu:1", "-t", "5", "--requeue", wrap="sleep 4")
    c.wait_job(tagged, "PENDING", reason="JobHeldUser")
    c.check(["scontrol", "release", str(tagged)])  # as themisd would (root here)
    c.check(["scancel", str(never)])
    first_submit = float(c.wait_job(again, "RUNNING")["submit_time"])
    c.check(["scontrol", "requeuehold", str(again)])  # a requeue moves Submit; sacct keeps the cut run
    deadline = time.monotonic() + 20
    while (moved := float(c.job(again)["submit_time"])) == first_submit and time.monotonic() < deadline:
        time.sleep(0.2)  # Slurm moves Submit once the cut run has finished completing
    time.sleep(max(0.0, moved + REQUEUE_SETTLE_S - time.time()))  # not in the requeue's second (slurm/actions.py)
    c.check(["scontrol", "update", f"JobId={again}", "StartTime=now"])
    c.check(["scontrol", "release", str(again)])
    ids = [one, gang, tagged, never, cpu, again]
    settled(c, ids, limited=[one, gang, tagged, cpu, again])
    listed = ",".join(map(str, ids))
    as_json = tmp_path / "live.json"
    as_json.write_text(c.check(["sacct", "--json", "-D", "-j", listed]))
    as_pipe = tmp_path / "live.txt"
    as_pipe.write_text(c.check(["sacct", "-a", "-X", "-D", "-P", "-o", ",".join(FIELDS), "-j", listed]))
    traces = [load_sacct(as_json), load_sacct(as_pipe)]
    for trace in traces:
        got = {j.job_id: (j.app_id, j.user, j.gpus, j.model, j.estimate_s) for j in trace.jobs}
        assert got == {
            str(one): (f"{ALICE}/job-{one}", ALICE, 2, None, 300.0),
            str(gang): (f"{BOB}/job-{gang}", BOB, 8, None, 300.0),
            str(tagged): (f"{ALICE}/live", ALICE, 1, "vgg16", 300.0),
            str(again): (f"{ALICE}/job-{again}", ALICE, 1, None, 300.0),
        }, trace.notes
        by_id = {j.job_id: j for j in trace.jobs}
        assert 2 <= by_id[str(one)].duration_s <= 4 and 2 <= by_id[str(gang)].duration_s <= 4
        # the requeued job: its first Submit, not the requeue Slurm moved it to; its last run's time
        assert moved > first_submit and by_id[str(again)].arrival_s == first_submit, (moved, by_id[str(again)])
        assert 4 <= by_id[str(again)].duration_s <= 6
        assert any(n.startswith("sacct: 1 earlier run(s) of requeued jobs") for n in trace.notes), trace.notes
        for j in trace.jobs:
            assert j.actual_start_s is not None and j.actual_end_s is not None
            assert j.arrival_s <= j.actual_start_s < j.actual_end_s
            assert j.actual_end_s - j.actual_start_s == j.duration_s
        assert ("sacct: not replayed: 1 GPU job(s) that never started (1 CANCELLED); 1 job(s) that ran without GPUs"
                in trace.notes), trace.notes  # fmt: skip
    a, b = ([replace(j, line=None) for j in t.jobs] for t in traces)
    assert sorted(a, key=lambda j: j.job_id) == sorted(b, key=lambda j: j.job_id)


def test_themis_is_an_operator_and_may_do_what_themisd_does(acct: Cluster) -> None:
    c = acct
    assert c.check(["sacctmgr", "-n", "-P", "list", "user", OPERATOR, "format=adminlevel"]).strip() == "Operator"
    job = c.sbatch("-p", "gpu", "--gres=gpu:1", "--comment=themis:app=op", wrap="sleep 300")
    c.wait_job(job, "PENDING", reason="JobHeldUser")
    # A plain user may not start someone else's held job.
    res = c.run(["scontrol", "release", str(job)], user=BOB)
    assert res.returncode != 0, res.stdout
    # Everything themisd does (themis_slurm/slurm/actions.py), as the Operator.
    c.check(["scontrol", "update", f"JobId={job}", "ReqNodeList=node2", "NumNodes=1"], user=OPERATOR)
    c.check(["scontrol", "update", f"JobId={job}", "StartTime=now"], user=OPERATOR)
    c.check(["scontrol", "release", str(job)], user=OPERATOR)
    rec = c.wait_job(job, "RUNNING")
    assert rec["nodes"] == "node2"
    c.check(["scancel", "--batch", "--signal=USR1", "--state=RUNNING", str(job)], user=OPERATOR)
    c.check(["scontrol", "requeuehold", str(job)], user=OPERATOR)
    c.wait_job(job, "PENDING", reason="JobHeldUser")
    c.check(["scontrol", "update", f"JobId={job}", "ReqNodeList="], user=OPERATOR)
    c.check(["scontrol", "release", str(job)], user=OPERATOR)
    c.check(["scontrol", "hold", str(job)], user=OPERATOR)
    # AdminComment (the trusted record) needs Administrator: the Operator is refused, as docs/admin-guide.md says.
    res = c.run(["scontrol", "update", f"JobId={job}", "AdminComment=themis:v1;app=forged"], user=OPERATOR)
    assert res.returncode != 0, res.stdout
    assert "app=op" in c.check(["scontrol", "show", "job", str(job)])


def cluster_sh(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLUSTER_SH), *args], env=env, capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip


def pid_of(path: Path) -> int:
    return int(path.read_text().strip())


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def test_accounting_daemons_are_ours(acct: Cluster) -> None:
    """status lists MariaDB and slurmdbd; MariaDB listens on 127.0.0.1 only, its socket under DIR; turning
    accounting off is a change of shape (refused without --force)."""
    env = dict(acct.env, THEMIS_CLUSTER_DIR=str(acct.dir))
    res = cluster_sh(env, "status")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "mariadbd: running" in res.stdout and "slurmdbd: running" in res.stdout
    cnf = (acct.dir / "mariadb" / "my.cnf").read_text()
    assert "bind-address=127.0.0.1" in cnf and f"socket={acct.dir}/mariadb/mariadbd.sock" in cnf
    res = cluster_sh(env, "up", "--no-accounting")
    assert res.returncode == 1 and "with accounting; you asked for" in res.stderr and "--force" in res.stderr
    assert cluster_sh(env, "status").returncode == 0


def test_a_second_cluster_starts_and_stops_exactly_its_own(acct: Cluster) -> None:
    """A fresh cluster with accounting in another DIR and on other ports: `up` twice is a no-op, `down`
    stops its MariaDB and slurmdbd and leaves the shared cluster's running."""
    other = Path(tempfile.mkdtemp(prefix="themis-cluster-test-", dir="/var/tmp")) / "c"
    other.parent.chmod(0o755)  # munged wants every folder above its socket world-executable
    env = dict(acct.env, THEMIS_CLUSTER_DIR=str(other), THEMIS_CLUSTER_PORT=str(acct.spare_port))
    version = ["--slurm", acct.slurm]
    shared = [pid_of(acct.dir / "mariadb" / "mariadbd.pid"), pid_of(acct.dir / "run" / "slurmdbd.pid")]
    try:
        t0 = time.monotonic()
        res = cluster_sh(env, "up", *version, "--nodes", "1", "--racks", "1")
        took = time.monotonic() - t0
        assert res.returncode == 0, res.stderr
        print(f"fresh up with accounting, 1 node: {took:.1f} s")
        ours = [pid_of(other / "mariadb" / "mariadbd.pid"), pid_of(other / "run" / "slurmdbd.pid")]
        assert f"port={acct.spare_port - 2}" in (other / "mariadb" / "my.cnf").read_text()
        level = subprocess.run(["sacctmgr", "-n", "-P", "list", "user", OPERATOR, "format=adminlevel"],
                               env=dict(env, SLURM_CONF=str(other / "etc" / "slurm.conf")), capture_output=True,
                               text=True, timeout=30, check=False)  # fmt: skip
        assert level.stdout.strip() == "Operator", level.stderr
        again = cluster_sh(env, "up")
        assert again.returncode == 0 and "already up" in again.stderr and "with accounting" in again.stderr
        assert [pid_of(other / "mariadb" / "mariadbd.pid"), pid_of(other / "run" / "slurmdbd.pid")] == ours
    finally:
        down = cluster_sh(env, "down", "--purge")
        shutil.rmtree(other.parent, ignore_errors=True)
    assert down.returncode == 0, down.stderr
    assert not any(alive(p) for p in ours)
    assert all(alive(p) for p in shared)
