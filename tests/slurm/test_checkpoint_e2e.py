"""Jobs that do not checkpoint, on the real cluster (issue #34 item 2): said at submit, charged while they run.

A job says how it saves its state with ``--themis-ckpt`` (the SPANK plugin) or ``ckpt=`` in
``--comment=themis:``; job_submit.lua writes it into the trusted record. themisd then counts each run of the
job: while the run holds its GPUs, the work a preemption would throw away is charged to its app's bids
(Job.unsaved), and when the run ends in a requeue, that work is taken back from what the job has done.
Here, on the local cluster's 16 GPUs with 20 s leases: 8 two-GPU jobs of alice that never save (40 s of work
from zero at every start, estimated at 20 s) beside 8 of bob that checkpoint (docs/examples/ckpt_job.sh);
one of alice's jobs is requeued by an operator while it runs (as Slurm does when a node fails). Each run of
alice's jobs is counted by the job itself (a line in starts-<id>).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import test_daemon_e2e as e2e  # tests/slurm is on sys.path under pytest
from test_daemon_e2e import ALICE, BOB, Watch, make_themisd, submit

from themis_slurm.slurm.model import Snapshot
from themis_slurm.state.jobs import effective_ckpt, unsaved_work

if TYPE_CHECKING:
    from conftest import Cluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
daemon_dir = e2e.daemon_dir  # the fixture: a folder themisd's account can reach
JOBS, GPUS, WORK_S, EST_S = 8, 2, 40, 20  # per user: 8 two-GPU jobs of 40 s on 16 GPUs; alice's estimated at 20 s

#: does WORK one-second steps from zero at every start (it never saves), ignores Themis's warning, and
#: appends a line to starts-<id> per run and to done-<id> when it finishes
NO_CKPT_JOB = """#!/bin/bash
set -u
dir=$CKPT_DIR
id=$SLURM_JOB_ID
echo "run ${SLURM_RESTART_COUNT:-0}" >> "$dir/starts-$id"
trap '' USR1
step=0
while [ "$step" -lt "$WORK" ]; do sleep 1; step=$((step + 1)); done
echo "$step" >> "$dir/done-$id"
"""


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_the_records_say_how_a_job_saves(cluster: Cluster) -> None:
    # both ways in: the plugin's option and the --comment fallback, normalised into the trusted record
    a = cluster.sbatch("-p", "gpu", "--gres=gpu:1", "--themis-ckpt=NO")
    b = cluster.sbatch("-p", "gpu", "--gres=gpu:1", "--comment=themis:ckpt=1h30m,est=2h")
    assert cluster.wait_job(a, "PENDING")["admin_comment"] == "themis:v1;app=;model=;sens=;est=;ckpt=no"
    assert cluster.wait_job(b, "PENDING")["admin_comment"] == "themis:v1;app=;model=;sens=;est=7200;ckpt=5400"
    res = cluster.sbatch_result("-p", "gpu", "--gres=gpu:1", "--comment=themis:ckpt=sometimes")
    assert res.returncode == 1 and "invalid option ckpt=sometimes in --comment: expected yes, no" in res.stderr
    res = cluster.sbatch_result("-p", "gpu", "--gres=gpu:1", "--themis-ckpt=0s")
    assert res.returncode != 0 and "--themis-ckpt=0s: expected yes, no" in res.stderr  # refused by the plugin
    for jid in (a, b):
        cluster.check(["scancel", str(jid)])


def test_jobs_that_do_not_checkpoint_are_charged_their_runs(cluster: Cluster, daemon_dir: Path) -> None:
    if [j for j in cluster.jobs() if j["job_state"] in ("PENDING", "RUNNING")]:
        pytest.skip("the shared cluster runs other jobs")
    out = cluster.jobs_dir
    alice = [cluster.sbatch("-p", "gpu", f"--gres=gpu:{GPUS}", "--themis-app=nockpt", f"--themis-est={EST_S}s",
                            "--themis-ckpt=no", f"--export=ALL,WORK={WORK_S},CKPT_DIR={out}", script=NO_CKPT_JOB)
             for _ in range(JOBS)]
    bob = [submit(cluster, BOB, f"gpu:{GPUS}", f"themis:app=saves,est={WORK_S}s", WORK_S) for _ in range(JOBS)]
    d = make_themisd(daemon_dir, cluster)
    t0 = time.monotonic()
    d.start()
    w = Watch(cluster, d)
    store = w.open_store()
    try:
        charged: dict[str, float] = {}

        def charge(snap: Snapshot) -> bool:  # alice's running jobs, seen in themisd's store and in Slurm
            for m in snap.managed:
                row = store.job(m.job_id)
                if m.user == ALICE and m.state == "RUNNING" and row is not None and row.run_start is not None:
                    assert effective_ckpt(m, row) == math.inf  # her word, from the trusted record
                    charged[m.job_id] = unsaved_work(row, math.inf, time.time(), row.done_service)
            return any(c >= 2 * GPUS for c in charged.values())  # 2 s of her run on its GPUs at least

        snap = w.until("a running job of alice's to be charged its run", charge, 60)
        # an operator requeues one (as Slurm does when a node fails): its run is lost, and themisd says so
        victim = next(jid for jid, c in charged.items() if c >= 2 * GPUS)
        assert next(m for m in snap.managed if m.job_id == victim).state == "RUNNING"
        cluster.check(["scontrol", "requeue", victim])
        w.until("themisd to take the lost run back", lambda _: (r := store.job(victim)) is not None
                and r.run_start is None and r.done_service == 0.0, 20)
        w.until("every job to finish", lambda _: all(lines(out / f"done-{j}") for j in alice + bob), 420)
        elapsed = time.monotonic() - t0
    finally:
        d.stop()
    log = d.log.read_text()
    db = d.db()
    try:  # holders kept because a preemption would lose more than their lease frees (core/unsaved_work.py)
        kept = db.execute("SELECT COUNT(*) FROM decisions WHERE action = 'renewal' AND cause = 'unsaved'"
                          ).fetchone()[0]  # fmt: skip
    finally:
        db.close()
    assert f"job={victim}: its run of" in log and "of work since its last save lost (it does not checkpoint)" in log
    starts = {j: lines(out / f"starts-{j}") for j in alice}
    print(f"\n[checkpoint e2e] {JOBS} + {JOBS} jobs of {GPUS} GPUs on 16 GPUs: all done in {elapsed:.0f} s; runs "
          f"of alice's jobs {sorted(starts.values())}; renewals kept for their unsaved work {kept}")
    assert starts[int(victim)] >= 2, "the requeued job ran again from zero"
    assert all(lines(out / f"done-{j}") == 1 for j in alice + bob), "a job completed twice or not at all"


def test_a_job_that_would_lose_more_than_a_lease_keeps_its_gpus(cluster: Cluster, daemon_dir: Path) -> None:
    """alice's 8 two-GPU jobs that never save (75 s of work, honestly estimated) hold all 16 GPUs; once each
    has run more than a lease (20 s: a preemption would throw away more than its lease frees), bob submits
    8 two-GPU jobs. bob's app holds nothing and is the worst off, yet alice's jobs keep their GPUs at every
    expiry (core/unsaved_work.py: renewal "unsaved"; her app, at rho about 0.5, is not clearly ahead): each
    runs once, and bob's start as hers finish."""
    if [j for j in cluster.jobs() if j["job_state"] in ("PENDING", "RUNNING")]:
        pytest.skip("the shared cluster runs other jobs")
    out = cluster.jobs_dir
    work = 75
    alice = [cluster.sbatch("-p", "gpu", f"--gres=gpu:{GPUS}", "--themis-app=long", f"--themis-est={work}s",
                            "--themis-ckpt=no", f"--export=ALL,WORK={work},CKPT_DIR={out}", script=NO_CKPT_JOB)
             for _ in range(JOBS)]  # fmt: skip
    d = make_themisd(daemon_dir, cluster)
    d.start()
    w = Watch(cluster, d)
    try:
        w.until("alice's jobs all running", lambda s: sum(m.user == ALICE and m.state == "RUNNING"
                                                           for m in s.managed) == JOBS, 90)  # fmt: skip
        time.sleep(25)  # past one lease of their runs
        bob = [submit(cluster, BOB, f"gpu:{GPUS}", "themis:app=waits,est=20s", 20) for _ in range(JOBS)]
        w.until("every job to finish", lambda _: all(lines(out / f"done-{j}") for j in alice + bob), 300)
    finally:
        d.stop()
    db = d.db()
    try:
        kept = db.execute("SELECT COUNT(*) FROM decisions WHERE action = 'renewal' AND cause = 'unsaved'"
                          ).fetchone()[0]  # fmt: skip
    finally:
        db.close()
    starts = {j: lines(out / f"starts-{j}") for j in alice}
    print(f"\n[checkpoint e2e] alice's runs {sorted(starts.values())}; renewals kept for their unsaved work {kept}")
    assert all(n == 1 for n in starts.values()), f"a job that never saves was preempted: runs {starts}"
    assert kept >= JOBS, f"only {kept} renewals for unsaved work\n{d.log.read_text()[-3000:]}"
    assert all(lines(out / f"done-{j}") == 1 for j in alice + bob), "a job completed twice or not at all"
