"""themisd end to end on the real local Slurm cluster (issue 5's tests 1, 2, 4 and 5).

The daemon runs as a subprocess (`themisd run --config`), with 20 s leases and 1 s polls, against the
shared cluster of slurm_conf/cluster.sh (never stopped here). Jobs are docs/examples/ckpt_job.sh: they
checkpoint on SIGUSR1 and resume after a requeue, and append their step count to done-<jobid> when done, so
"every job completes exactly once with its work done" is a file check. While the daemon runs the test
samples the cluster every second and asserts that no GPU is held by two running jobs.

Caveat: themisd manages every held GPU job of the `gpu` partition, so do not run other Slurm tests that
expect their jobs to stay held at the same time (tests/run.sh runs the suite serially).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from themis_slurm.slurm.backend import CliBackend

if TYPE_CHECKING:  # conftest is not an importable module at run time; pytest injects the fixtures
    from conftest import Cluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CKPT_JOB = (REPO / "docs" / "examples" / "ckpt_job.sh").read_text()
THEMISD = [sys.executable, "-m", "themis_slurm.daemon.main"]
LEASE_S = 20.0
ALICE = "themis-alice"  # test users created by slurm_conf/cluster.sh
BOB = "themis-bob"


def write_config(tmp: Path, cluster: Cluster, mode: str = "enforce", **extra: str) -> Path:
    lua = tmp / "themis_job_submit.conf.lua"  # a copy: handback must not switch the shared cluster off
    lua.write_text((cluster.dir / "etc" / "themis_job_submit.conf.lua").read_text())
    cfg = tmp / "themis.yaml"
    cfg.write_text(
        f"mode: {mode}\npoll_interval_s: 1\nstate_dir: {tmp / 'state'}\nlog_level: info\n"
        f"scheduler:\n  lease_minutes: {LEASE_S / 60}\n  grace_s: 3\n  min_runtime_s: 0\n"
        f"  release_timeout_s: 15\nestimates:\n  min_s: 5\n  default_s: 60\n"
        f"slurm:\n  slurm_conf: {cluster.env['SLURM_CONF']}\n  job_submit_conf: {lua}\n"
        "metrics:\n  listen: ''\napi:\n  listen: ''\n" + "".join(f"{k}: {v}\n" for k, v in extra.items())
    )
    return cfg


@dataclass
class Themisd:
    """The daemon subprocess; `kill9` and `start` model crashes and systemd's Restart=on-failure."""

    config: Path
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen | None = None
    kills: int = 0

    def start(self) -> None:
        with open(self.log, "a") as out:
            self.proc = subprocess.Popen([*THEMISD, "run", "--config", str(self.config)], env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT, cwd=REPO)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.kills += 1

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.config.parent / "state" / "themis.db")


@pytest.fixture
def themisd(tmp_path: Path, cluster: Cluster):
    env = dict(cluster.env, PYTHONPATH=str(REPO))
    d = Themisd(write_config(tmp_path, cluster), env, tmp_path / "themisd.log")
    yield d
    d.stop()


@dataclass
class Workload:
    jobs: dict[int, int] = field(default_factory=dict)  # job id -> work steps
    late: list[int] = field(default_factory=list)
    late_submitted: float = 0.0


def submit(cluster: Cluster, user: str, gres: str, comment: str, work: int, *extra: str) -> int:
    out = cluster.jobs_dir
    return cluster.sbatch("-p", "gpu", f"--gres={gres}", f"--comment={comment}", "--open-mode=append",
                          f"--export=ALL,WORK={work},CKPT_DIR={out}", *extra, user=user, script=CKPT_JOB)


def sample_no_double_gpu(backend: CliBackend) -> int:
    snap = backend.snapshot()
    seen: dict[int, str] = {}
    for mj in snap.managed:
        if mj.state != "RUNNING":
            continue
        for g in mj.gpu_ids:
            assert g not in seen, f"GPU {g} held by jobs {seen[g]} and {mj.job_id}"
            seen[g] = mj.job_id
    assert not (set(seen) & (snap.unmanaged | snap.free)), "a managed GPU also counted free/unmanaged"
    return len(seen)


def run_contention(cluster: Cluster, d: Themisd, kills: int) -> Workload:
    w = Workload()
    for _ in range(4):  # alice: a sweep of 2-GPU jobs (one app)
        w.jobs[submit(cluster, ALICE, "gpu:2", "themis:app=sweep,est=30s", 25)] = 25
    for _ in range(2):  # bob: placement-sensitive 4-GPU jobs on one node
        w.jobs[submit(cluster, BOB, "gpu:4", "themis:app=gang,model=vgg16,est=40s", 35)] = 35
    d.start()
    backend = CliBackend()
    start = time.monotonic()
    kill_at = sorted(start + 8 + 9 * k for k in range(kills))
    late_at = start + 15
    deadline = start + 300
    while time.monotonic() < deadline:
        now = time.monotonic()
        if not w.late and now >= late_at:  # alice's late app of 1-GPU jobs
            w.late_submitted = time.time()
            for _ in range(4):
                jid = submit(cluster, ALICE, "gpu:1", "themis:app=late,est=15s", 12)
                w.late.append(jid)
                w.jobs[jid] = 12
        if kill_at and now >= kill_at[0]:
            kill_at.pop(0)
            d.kill9()
            time.sleep(0.5)
            d.start()
        sample_no_double_gpu(backend)
        if w.late and done_jobs(cluster).keys() >= w.jobs.keys():
            break
        time.sleep(1)
    return w


def done_jobs(cluster: Cluster) -> dict[int, list[int]]:
    """job id -> the step counts it reported at each completion (ckpt_job.sh writes CKPT_DIR/done-<id>)."""
    out: dict[int, list[int]] = {}
    for path in cluster.jobs_dir.glob("done-*"):
        jid = path.name.removeprefix("done-")
        if jid.isdigit():
            out[int(jid)] = [int(x) for x in path.read_text().split()]
    return out


def check_contention(cluster: Cluster, d: Themisd, w: Workload) -> None:
    done = done_jobs(cluster)
    missing = sorted(w.jobs.keys() - done.keys())
    assert not missing, f"jobs not completed: {missing}\n{d.log.read_text()[-3000:]}"
    for jid, steps in w.jobs.items():
        assert done[jid] == [steps], f"job {jid} completed {done[jid]} (want exactly once with {steps} steps)"
    db = d.db()
    # preemptions only in rounds triggered by lease expiry
    bad = db.execute("SELECT COUNT(*) FROM rounds WHERE preemptions > 0 AND trigger NOT LIKE '%lease(s) expired%'")
    assert bad.fetchone()[0] == 0
    # leases were contested: the late app's arrival on a full cluster forces preemptions at lease expiry
    assert db.execute("SELECT SUM(preemptions) FROM rounds").fetchone()[0] >= 1
    # leases survive restarts: no running job was ever re-adopted (that would mean a lost lease)
    assert db.execute("SELECT COUNT(*) FROM events WHERE kind = 'adopted'").fetchone()[0] == 0
    # the late app got GPUs within one lease (plus grace and a few polls) of arriving
    first = db.execute("SELECT MIN(time) FROM events WHERE kind = 'started' AND app_key = ?",
                       (f"{ALICE}/late",)).fetchone()[0]
    assert first is not None and first - w.late_submitted <= LEASE_S + 3 + 6, first - w.late_submitted
    # rho values recorded are finite and positive for every app that took part
    rhos = db.execute("SELECT app_key, rho_after FROM decisions WHERE action = 'app'").fetchall()
    assert rhos and all(r is not None and r > 0 for _, r in rhos)
    assert {a for a, _ in rhos} >= {f"{ALICE}/sweep", f"{BOB}/gang", f"{ALICE}/late"}
    ours = {str(j) for j in w.jobs}
    deadline = time.monotonic() + 15  # the daemon notices the last completions within a few polls
    while True:
        left = {r[0] for r in db.execute("SELECT job_id FROM jobs").fetchall()} & ours
        if not left or time.monotonic() > deadline:
            break
        time.sleep(1)
    d.stop()
    assert not left, f"finished jobs still in themisd's store: {sorted(left)}"


def test_contention_three_apps(cluster: Cluster, themisd: Themisd) -> None:
    w = run_contention(cluster, themisd, kills=0)
    check_contention(cluster, themisd, w)
    log = themisd.log.read_text()
    assert " grant app=" in log and "Traceback" not in log


def test_crashes_with_sigkill(cluster: Cluster, themisd: Themisd) -> None:
    w = run_contention(cluster, themisd, kills=5)
    assert themisd.kills == 5
    check_contention(cluster, themisd, w)
    assert "Traceback" not in themisd.log.read_text()


def test_observe_changes_nothing_and_handback_releases(cluster: Cluster, tmp_path: Path) -> None:
    env = dict(cluster.env, PYTHONPATH=str(REPO))
    cfg = write_config(tmp_path, cluster, mode="observe")
    d = Themisd(cfg, env, tmp_path / "observe.log")
    jobs = [submit(cluster, ALICE, "gpu:2", "themis:app=obs,est=20s", 3) for _ in range(3)]
    before = {j: (cluster.job(j)["job_state"], cluster.job(j)["state_reason"]) for j in jobs}
    d.start()
    time.sleep(6)
    d.stop()
    after = {j: (cluster.job(j)["job_state"], cluster.job(j)["state_reason"]) for j in jobs}
    assert before == after and all(s == ("PENDING", "JobHeldUser") for s in after.values())
    assert d.db().execute("SELECT COUNT(*) FROM rounds WHERE mode = 'observe'").fetchone()[0] >= 1
    assert "would grant" in d.log.read_text()
    res = subprocess.run([*THEMISD, "handback", "--config", str(cfg)], env=env, cwd=REPO, capture_output=True,
                         text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert "released 3 job(s)" in res.stdout
    assert 'mode = "off"' in (tmp_path / "themis_job_submit.conf.lua").read_text()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and done_jobs_of(cluster, jobs) != set(jobs):
        time.sleep(1)
    assert done_jobs_of(cluster, jobs) == set(jobs), "Slurm ran every handed-back job"


def done_jobs_of(cluster: Cluster, jobs: list[int]) -> set[int]:
    return set(done_jobs(cluster)) & set(jobs)


def test_bad_inputs_give_clear_messages(cluster: Cluster, themisd: Themisd, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("scheduler:\n  lease_minutes: -3\n")
    res = subprocess.run([*THEMISD, "--check-config", str(bad)], env=themisd.env, cwd=REPO, capture_output=True,
                         text=True, timeout=30, check=False)
    assert res.returncode == 1 and "scheduler.lease_minutes: value -3 is not a positive number" in res.stderr
    res = subprocess.run([*THEMISD, "run", "--config", str(bad)], env=themisd.env, cwd=REPO, capture_output=True,
                         text=True, timeout=30, check=False)
    assert res.returncode == 1 and "lease_minutes" in res.stderr
    # a bad Themis option is refused at submit by job_submit.lua
    r = cluster.sbatch_result("-p", "gpu", "--gres=gpu:1", "--comment=themis:est=abc", user=ALICE)
    assert r.returncode != 0 and "invalid option est=abc" in r.stderr
    # a bad progress report: logged, ignored, the job still completes
    jid = submit(cluster, ALICE, "gpu:1", "themis:app=bad,est=10s", 8)
    cluster.check(["scontrol", "update", f"JobId={jid}", "Comment=themis:progress=lots"], user=ALICE)
    themisd.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and jid not in done_jobs(cluster):
        time.sleep(1)
    assert done_jobs(cluster).get(jid) == [8]
    log = themisd.log.read_text()
    assert f"job={jid}: progress report ignored" in log, log[-2000:]


@pytest.fixture(autouse=True)
def _no_foreign_held_jobs(cluster: Cluster) -> None:
    """themisd would start other tests' held jobs: refuse to run on a busy shared cluster."""
    foreign = [j["job_id"] for j in cluster.jobs() if j["job_state"] in ("PENDING", "RUNNING")
               and j.get("partition") == "gpu"]
    if foreign:
        pytest.skip(f"the shared cluster has other jobs in partition gpu: {foreign[:5]}")
    os.environ.setdefault("SLURM_CONF", cluster.env["SLURM_CONF"])
