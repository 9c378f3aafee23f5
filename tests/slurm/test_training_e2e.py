"""Real training jobs under Themis's leases, end to end on the real local Slurm cluster (issue 36 item 4).

Each test runs one of docs/examples/ as a user would submit it, on CPU with a tiny model: alice's training
job starts under themisd (20 s leases), then bob submits a gang that needs all 16 GPUs. bob's app, holding
nothing, is the worst off, so at the end of alice's lease themisd warns her job (SIGUSR1 to the batch
shell) and requeues it; bob's gang runs for a few seconds; alice's job starts again and resumes from the
checkpoint it wrote at the warning. The tests check that it lost its lease (themisd's events, Slurm's
restart count), resumed from its checkpoint (the job's own output), finished exactly once (one result line,
COMPLETED) and with the right result: the final loss and weights equal, bit for bit, those of the same
training run without interruption, which the test runs beside it.

The training code runs in a Python environment of its own with torch (CPU build), lightning and submitit:
$THEMIS_ML_VENV, default /var/tmp/themis-ml-venv, made by tests/ml-env.sh (tests/run.sh calls it). The
tests skip, saying so, where it is absent; the rest of the suite never needs those packages. themis_slurm's
jobkit reaches the jobs as a copy of the module alone (it needs nothing else of the package).
"""

from __future__ import annotations

import functools
import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import test_daemon_e2e as e2e
from test_daemon_e2e import ALICE, BOB, Themisd, make_themisd

if TYPE_CHECKING:
    from conftest import Cluster

pytestmark = [pytest.mark.slurm, pytest.mark.ml, pytest.mark.slow]
daemon_dir = e2e.daemon_dir  # the fixture: a folder themisd's account can reach

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "docs" / "examples"
ML_VENV = Path(os.environ.get("THEMIS_ML_VENV", "/var/tmp/themis-ml-venv"))
GRACE_S = 15  # the warning's grace: time for the signal to reach the workers and the checkpoint to be written
# job states after which a job does not run again by itself (conftest's FINISHED_STATES)
FINISHED = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
    }
)


@functools.cache
def _missing(modules: tuple[str, ...]) -> str | None:
    python = ML_VENV / "bin" / "python"
    if not python.exists():
        return f"no ML environment at {ML_VENV} (tests/ml-env.sh makes it; THEMIS_ML_VENV names another)"
    res = subprocess.run([str(python), "-c", f"import {', '.join(modules)}"], capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["?"])[-1]
        return f"{ML_VENV} cannot import {', '.join(modules)} ({last}): tests/ml-env.sh installs them"
    return None


def ml_python(*modules: str) -> str:
    """The ML environment's Python, or a skip naming what is missing."""
    why = _missing(tuple(modules))
    if why:
        pytest.skip(why)
    return str(ML_VENV / "bin" / "python")


@pytest.fixture
def work(cluster: Cluster) -> Iterator[Path]:
    """A folder of alice's in the cluster's jobs folder with a copy of docs/examples/ and, in lib/, of
    themis_slurm's jobkit alone (the test users cannot enter the repository)."""
    folder = Path(tempfile.mkdtemp(prefix="ml-", dir=cluster.jobs_dir))
    shutil.copytree(EXAMPLES, folder, dirs_exist_ok=True)
    lib = folder / "lib" / "themis_slurm"
    lib.mkdir(parents=True)
    shutil.copy(REPO / "themis_slurm" / "jobkit.py", lib / "jobkit.py")
    (lib / "__init__.py").write_text("")
    pw = pwd.getpwnam(ALICE)
    for p in [folder, *folder.rglob("*")]:
        os.chown(p, pw.pw_uid, pw.pw_gid, follow_symlinks=False)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def job_env(work: Path, python: str, **more: Path | str) -> str:
    """sbatch's --export for the examples: the ML Python, jobkit on the path, one thread per process."""
    extra = "".join(f",{k}={v}" for k, v in more.items())
    return f"--export=ALL,PYTHON={python},PYTHONPATH={work / 'lib'},OMP_NUM_THREADS=1{extra}"


def wait_for(what: str, check: Callable[[], Any], timeout: float, log: Callable[[], str]) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s\n{log()}")
        time.sleep(1)


def read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else f"({path.name} does not exist)"


def lose_lease_and_finish(
    cluster: Cluster, d: Themisd, jid: int, log: Path, started: Callable[[], bool]
) -> dict[str, Any]:
    """Start themisd; once alice's job is `started` (training), bob's 16-GPU gang arrives and takes the
    cluster at the end of her lease. Returns alice's job record once it has finished."""

    def context() -> str:
        return f"--- job log\n{read(log)[-4000:]}\n--- themisd log\n{read(d.log)[-3000:]}"

    d.start()

    def training() -> bool:
        if cluster.job(jid)["job_state"] in FINISHED:
            raise AssertionError(f"job {jid} ended before it lost a lease\n{context()}")
        return started()

    wait_for(f"job {jid} running and training", training, 180, context)
    cluster.sbatch("-p", "gpu", "-N4", "--ntasks-per-node=1", "--gres=gpu:4", "--comment=themis:app=gang,est=20s",
                   user=BOB, wrap="sleep 5")  # fmt: skip
    return wait_for(f"job {jid} finished", lambda: (j := cluster.job(jid))["job_state"] in FINISHED and j, 420,
                    context)  # fmt: skip


def themisd_record(d: Themisd, jid: int) -> tuple[list[str], list[str]]:
    """What themisd recorded of the job: its decisions' actions and its events' kinds, in order."""
    db = d.db()
    try:
        decisions = [
            a for (a,) in db.execute("SELECT action FROM decisions WHERE job_id = ? ORDER BY id", (str(jid),))
        ]
        events = [
            k for (k,) in db.execute("SELECT kind FROM events WHERE job_id = ? ORDER BY id", (str(jid),))
        ]
    finally:
        db.close()
    return decisions, events


def results(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in read(path).splitlines() if line.startswith("{")]


def check_lost_lease_and_finished(
    cluster: Cluster,
    d: Themisd,
    jid: int,
    final: dict[str, Any],
    log: Path,
    result: Path,
    reference: dict[str, Any],
    steps: int,
) -> None:
    """What every example must show: warned and requeued by Themis, restarted, COMPLETED, one result equal to
    the uninterrupted run's, and its progress reported to Themis."""
    text = read(log)
    assert final["job_state"] == "COMPLETED", f"job {jid} ended {final['job_state']}\n{text[-4000:]}"
    assert final["restart_cnt"] >= 1, f"job {jid} was never requeued\n{text[-4000:]}"
    decisions, events = themisd_record(d, jid)
    assert "preemption" in decisions, f"job {jid} never lost a lease: {decisions}\n{read(d.log)[-3000:]}"
    assert {"requeue", "requeued", "requeued-outside"} & set(events), f"job {jid} was not requeued: {events}"
    assert events.count("started") >= 2, events  # started again after the requeue
    done = results(result)
    assert len(done) == 1, f"job {jid} completed {len(done)} times: {done}\n{text[-4000:]}"
    assert done[0]["steps"] == steps == reference["steps"]
    assert 0 < done[0]["resumed_from"] < steps, done[0]  # the finishing run resumed from a checkpoint
    assert done[0]["loss"] == reference["loss"], (done[0], reference)
    assert done[0]["weights"] == reference["weights"], (done[0], reference)
    assert re.fullmatch(r"themis:progress=1", final.get("comment") or ""), final.get("comment")


def reference_run(argv: list[str], out: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The same training without interruption, run here (root, no Slurm); its one result line."""
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, cwd=out.parent,
                         env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})  # fmt: skip
    assert res.returncode == 0, f"the uninterrupted run failed: {res.stdout[-2000:]}\n{res.stderr[-4000:]}"
    got = results(out / "result.jsonl")
    assert len(got) == 1, got
    return got[0]


# ------------------------------------------------------------------------------------- (a) torchrun, two nodes
def test_torchrun_two_nodes_survive_a_lost_lease(cluster: Cluster, daemon_dir: Path, work: Path) -> None:
    """docs/examples/torchrun: two nodes, one gloo worker each; the warning travels jobkit -> srun -> the
    torchrun agents -> the workers, which agree on the step to stop at, checkpoint and exit."""
    python = ml_python("torch")
    steps = 200
    folder = work / "torchrun"
    d = make_themisd(daemon_dir, cluster, log="torchrun.log", grace_s=GRACE_S)
    log = folder / "job.out"
    jid = cluster.sbatch(f"--output={log}", f"--chdir={folder}", job_env(work, python, TRAIN=folder / "train.py", OUT=folder / "out"),
                         str(folder / "job.sh"), "--steps", str(steps), "--step-seconds", "0.15",
                         "--report-every-s", "2", user=ALICE, script=None, wrap=None)  # fmt: skip
    ref_out = Path(tempfile.mkdtemp(prefix="ddp-ref-"))
    try:
        reference = reference_run([python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                                   str(folder / "train.py"), "--steps", str(steps), "--out", str(ref_out)],
                                  ref_out, {"PYTHONPATH": str(work / "lib")})  # fmt: skip
        final = lose_lease_and_finish(cluster, d, jid, log, lambda: "run 1: 2 ranks" in read(log))
        check_lost_lease_and_finished(cluster, d, jid, final, log, folder / "out" / "result.jsonl",
                                      reference, steps)  # fmt: skip
        text = read(log)
        warned = re.findall(r"lease warning: checkpoint at step (\d+)", text)
        resumed = re.findall(r"run 2: 2 ranks, starting at step (\d+)", text)
        assert warned and resumed and resumed[0] == warned[0], text[-4000:]
    finally:
        d.stop()
        shutil.rmtree(ref_out, ignore_errors=True)


# --------------------------------------------------------------------------------------- (b) PyTorch Lightning
def test_lightning_auto_requeue_survives_a_lost_lease(cluster: Cluster, daemon_dir: Path, work: Path) -> None:
    """docs/examples/lightning: SLURMEnvironment(auto_requeue=True, requeue_signal=SIGUSR1); Lightning writes
    its hpc checkpoint at a step boundary and requeues the job itself; the next run resumes from it."""
    python = ml_python("lightning")
    steps = 200
    folder = work / "lightning"
    d = make_themisd(daemon_dir, cluster, log="lightning.log", grace_s=GRACE_S)
    log = folder / "job.out"
    jid = cluster.sbatch(f"--output={log}", f"--chdir={folder}",
                         job_env(work, python, TRAIN=folder / "train.py", OUT=folder / "out"),
                         str(folder / "job.sh"), "--steps", str(steps), "--step-seconds", "0.15",
                         "--report-every-s", "2", user=ALICE, script=None, wrap=None)  # fmt: skip
    ref_out = Path(tempfile.mkdtemp(prefix="lightning-ref-"))
    try:
        reference = reference_run([python, str(folder / "train.py"), "--steps", str(steps), "--out", str(ref_out)],
                                  ref_out, {"PYTHONPATH": str(work / "lib")})  # fmt: skip
        final = lose_lease_and_finish(cluster, d, jid, log,
                                      lambda: cluster.job(jid)["comment"].startswith("themis:progress="))  # fmt: skip
        check_lost_lease_and_finished(
            cluster, d, jid, final, log, folder / "out" / "result.jsonl", reference, steps
        )
        text = read(log)
        assert re.search(r"run 1: started at step 0, stopped at step \d+", text), text[-4000:]
        assert "run 1: lease warning: Lightning checkpointed and requeued the job" in text, text[-4000:]
        assert "Restored all states from the checkpoint" in text, text[-4000:]
    finally:
        d.stop()
        shutil.rmtree(ref_out, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ (c) submitit
def test_submitit_checkpointable_survives_a_lost_lease(
    cluster: Cluster, daemon_dir: Path, work: Path
) -> None:
    """docs/examples/submitit: alice submits with submitit and waits for job.result(); submitit's own handler
    (preemption signal USR1, the worker as the batch shell) requeues the job at a step boundary; the result
    that submitit hands back is the uninterrupted run's."""
    python = ml_python("submitit", "torch")
    steps = 200
    folder = work / "submitit"
    d = make_themisd(daemon_dir, cluster, log="submitit.log", grace_s=GRACE_S)
    ref_out = Path(tempfile.mkdtemp(prefix="submitit-ref-"))
    env = {**cluster.env, "PYTHONPATH": str(work / "lib"), "OMP_NUM_THREADS": "1"}
    submitter: subprocess.Popen[str] | None = None
    try:
        reference = reference_run([python, str(folder / "train.py"), "--local", "--steps", str(steps), "--out",
                                   str(ref_out), "--folder", str(ref_out / "submitit")], ref_out, env)  # fmt: skip
        submitter = subprocess.Popen(["runuser", "-u", ALICE, "--", python, str(folder / "train.py"), "--out",
                                      str(folder / "out"), "--folder", str(folder / "jobs"), "--steps", str(steps),
                                      "--step-seconds", "0.15", "--report-every-s", "2", "--wait"],
                                     env=env, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        assert submitter.stdout is not None
        first = submitter.stdout.readline()
        m = re.fullmatch(r"submitted job (\d+)\n", first)
        assert m, f"submitit did not submit: {first!r} {submitter.stderr.read() if submitter.stderr else ''}"
        jid = int(m.group(1))
        cluster.submitted.append(jid)
        log = folder / "jobs" / f"{jid}_0_log.out"
        final = lose_lease_and_finish(cluster, d, jid, log,
                                      lambda: cluster.job(jid)["comment"].startswith("themis:progress="))  # fmt: skip
        out, err = submitter.communicate(timeout=120)
        assert submitter.returncode == 0, f"job.result() failed: {out}\n{err[-3000:]}"
        check_lost_lease_and_finished(
            cluster, d, jid, final, log, folder / "out" / "result.jsonl", reference, steps
        )
        handed = json.loads(out.strip().splitlines()[-1])
        assert handed == results(folder / "out" / "result.jsonl")[0], out  # what submitit's user gets
        text = read(log)
        warned = re.findall(r"run 1: lease warning: checkpoint at step (\d+)", text)
        resumed = re.findall(r"run 2: starting at step (\d+)", text)
        assert warned and resumed and resumed[0] == warned[0], text[-4000:]
    finally:
        if submitter is not None and submitter.poll() is None:
            submitter.kill()
            submitter.wait(10)
        d.stop()
        shutil.rmtree(ref_out, ignore_errors=True)
