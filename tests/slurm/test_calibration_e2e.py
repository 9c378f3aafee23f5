"""Estimate calibration end to end on the real local Slurm cluster (core/calibration.py, daemon/loop.py).

themisd learns from the jobs Slurm reports COMPLETED (``squeue --all --states=all``, or pyslurm's job list,
while slurmctld keeps them: MinJobAge): jobs that ran 3 s of an estimated 60 s teach alice's factor (her
later estimates shrink, never below ``estimates.min_s``); jobs that ran about 15 s of an estimated 5 s teach
bob's (his later estimates grow, by his median / 1.25); a cancelled job teaches nothing.
"""

from __future__ import annotations

import importlib.util
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import test_daemon_e2e as e2e
from test_daemon_e2e import ALICE, BOB, done_jobs, make_themisd, submit

if TYPE_CHECKING:
    from conftest import Cluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
daemon_dir = e2e.daemon_dir  # the fixture: a folder themisd's account can reach

CALIBRATION = "  calibration_min_jobs: 3\n  calibration_window: 10\n"


def rows(db: sqlite3.Connection, sql: str, *args: object) -> list[dict]:
    db.row_factory = sqlite3.Row
    return [dict(r) for r in db.execute(sql, args).fetchall()]


@pytest.mark.parametrize("backend", ["cli", "pyslurm"])
def test_completed_jobs_calibrate_later_estimates(cluster: Cluster, daemon_dir: Path, backend: str) -> None:
    if backend == "pyslurm" and cluster.slurm != "25.11":
        pytest.skip(f"pyslurm 25.11 needs Slurm 25.11; this cluster is {cluster.slurm}")
    if backend == "pyslurm" and importlib.util.find_spec("pyslurm") is None:
        pytest.skip("pyslurm is not installed (pip install .[pyslurm])")
    d = make_themisd(daemon_dir, cluster, log=f"calibration-{backend}.log", backend=backend,
                     estimates_extra=CALIBRATION)
    quick = [submit(cluster, ALICE, "gpu:1", "themis:app=cal,est=60s", 3) for _ in range(3)]
    slow = [submit(cluster, BOB, "gpu:1", "themis:app=short,est=5s", 15) for _ in range(3)]
    cancelled = submit(cluster, ALICE, "gpu:1", "themis:app=cal,est=60s", 300)
    try:
        d.start()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not set(quick + slow) <= done_jobs(cluster).keys():
            time.sleep(1)
        assert set(quick + slow) <= done_jobs(cluster).keys(), d.log.read_text()[-3000:]
        while time.monotonic() < deadline and cluster.job(cancelled)["job_state"] != "RUNNING":
            time.sleep(1)
        cluster.check(["scancel", str(cancelled)], user=ALICE)
        db = d.db()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(rows(db, "SELECT * FROM finished_jobs")) < 6:
            time.sleep(1)
        time.sleep(3)  # a few more cycles: the cancelled job must not join
        learned = rows(db, "SELECT job_id, user, estimate, work FROM finished_jobs ORDER BY id")
        assert sorted(int(r["job_id"]) for r in learned) == sorted(quick + slow), (learned, d.log.read_text()[-3000:])
        mine = [r for r in learned if r["user"] == ALICE]
        assert len(mine) == 3 and all(r["estimate"] == 60.0 for r in mine), learned
        ratios = sorted(r["work"] / r["estimate"] for r in mine)
        assert all(0.0 < x < 0.5 for x in ratios), ratios  # 3 steps of about 1 s against 60 s
        factor = ratios[1]  # the median of three (equal GPUs and nearly equal work: weights barely matter)
        bobs = sorted(r["work"] / r["estimate"] for r in learned if r["user"] == BOB)
        assert all(2.0 < x < 5.0 for x in bobs), bobs  # 15 steps of about 1 s against 5 s
        assert cluster.job(cancelled)["job_state"] == "CANCELLED"

        later = submit(cluster, ALICE, "gpu:2", "themis:app=cal2,est=600s", 2)
        other = submit(cluster, BOB, "gpu:1", "themis:app=new,est=5s", 2, "--time=10")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(rows(db, "SELECT 1 FROM jobs WHERE job_id IN (?, ?)",
                                                       str(later), str(other))) < 2:
            time.sleep(1)
        got = {int(r["job_id"]): r for r in rows(db, "SELECT job_id, work, est_work, est_factor FROM jobs "
                                                      "WHERE job_id IN (?, ?)", str(later), str(other))}
        assert got[later]["est_work"] == 1200.0 and got[other]["est_work"] == 5.0, got
        # alice's own median lowers hers (never below estimates.min_s, 5 s in these tests) ...
        want = max(factor * 600.0, 5.0) * 2
        assert got[later]["work"] == pytest.approx(want, rel=1e-6), (got, factor)
        assert got[later]["est_factor"] == pytest.approx(want / 1200.0, rel=1e-6)
        # ... and bob's raises his, by his (work-weighted) median / 1.25, within his 10-minute time limit
        assert 1.6 < got[other]["est_factor"] < 4.0, got
        assert got[other]["work"] == pytest.approx(5.0 * got[other]["est_factor"], rel=1e-6)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not {later, other} <= done_jobs(cluster).keys():
            time.sleep(1)
        assert {later, other} <= done_jobs(cluster).keys()
        log = d.log.read_text()
        assert "calibration app=" in log and "Traceback" not in log
    finally:
        d.stop()
