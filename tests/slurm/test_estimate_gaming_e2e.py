"""Understated estimates on the real local Slurm cluster (issue #33 item 6; core/calibration.py, the peer
floor): a new user's ``est=1m`` jobs for five-minute work next to an honest user's ``est=5m`` ones are
counted at five minutes by themisd (and it says so in its log), and the first round gives the liar no
more GPUs than the honest user who asked first; a user whose running jobs contradict their history is
counted at their peers' claims at once. The share itself is measured in the simulator
(benchmarks/estimate_gaming.py): here, with the rules of before (calibration_running and
calibration_peer_floor false), the first round was 8 and 8 of the 16 GPUs too (the honest app, not
offered, was served first in the leftover), so only the estimates tell the rules apart on this cluster."""

from __future__ import annotations

import re
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


def rows(db: sqlite3.Connection) -> list[dict]:
    db.row_factory = sqlite3.Row
    return [
        dict(r)
        for r in db.execute(
            "SELECT job_id, app_key, est_work, est_factor, work, grant_time FROM jobs"
        ).fetchall()
    ]


def test_a_new_users_short_claims_count_as_the_honest_users(cluster: Cluster, daemon_dir: Path) -> None:
    n = cluster.nodes * cluster.gpus  # one one-GPU job per GPU for each user: they contend for every GPU
    honest = [submit(cluster, BOB, "gpu:1", "themis:app=honest,est=5m", 300) for _ in range(n)]
    liar = [submit(cluster, ALICE, "gpu:1", "themis:app=liar,est=1m", 300) for _ in range(n)]
    d = make_themisd(daemon_dir, cluster, log="estimate-gaming.log")
    try:
        d.start()
        deadline = time.monotonic() + 60
        path = d.config.parent / "state" / "themis.db"
        while time.monotonic() < deadline and not path.exists():
            time.sleep(0.5)
        db = d.db()
        got: list[dict] = []
        while time.monotonic() < deadline:
            try:
                got = rows(db)
            except sqlite3.OperationalError:  # the schema not written yet
                got = []
            if len(got) == 2 * n and any(r["grant_time"] is not None for r in got):
                break
            time.sleep(1)
        log = d.log.read_text()
        mine = {int(r["job_id"]): r for r in got}
        assert set(mine) == set(honest + liar), (got, log[-3000:])
        first = min(r["grant_time"] for r in got if r["grant_time"] is not None)
        granted = {
            who: sum(1 for j in ids if mine[j]["grant_time"] == first)
            for who, ids in (("honest", honest), ("liar", liar))
        }
        assert granted["honest"] + granted["liar"] > 0
        assert {(mine[j]["est_factor"], mine[j]["work"]) for j in honest} == {(1.0, 300.0)}
        assert "Traceback" not in log
        assert {(mine[j]["est_work"], mine[j]["est_factor"], mine[j]["work"]) for j in liar} == {
            (60.0, 5.0, 300.0)
        }
        assert granted["liar"] <= granted["honest"], (granted, log[-3000:])
        assert f"calibration user={ALICE}: factor 5 from peers" in log
    finally:
        d.stop()


def test_a_history_the_running_jobs_contradict_no_longer_shields_the_claims(
    cluster: Cluster, daemon_dir: Path
) -> None:
    """A user with a history (three jobs that ran about 5 s of a claimed 10 s: their own factor, below 1)
    then claims 10 s for two-minute jobs next to an honest user's two-minute claims. Once their running jobs
    have outrun the claims enough to outweigh that history, it is contradicted and their claims count as a
    newcomer's: at the honest user's 120 s x the cluster's prior (core/calibration.py), from that cycle on.
    With the rules before, the first raise was their running jobs' ratio (run time / 10 s, about 1.5-2),
    rising with the run time."""
    n = cluster.nodes * cluster.gpus
    d = make_themisd(daemon_dir, cluster, log="estimate-gaming-history.log", estimates_extra=CALIBRATION)
    try:
        d.start()
        warmup = [submit(cluster, ALICE, "gpu:1", "themis:app=warmup,est=10s", 5) for _ in range(3)]
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not set(warmup) <= done_jobs(cluster).keys():
            time.sleep(1)
        db = d.db()
        learned: list[float] = []
        while time.monotonic() < deadline and len(learned) < 3:
            learned = [r[0] / r[1] for r in db.execute("SELECT work, estimate FROM finished_jobs").fetchall()]
            time.sleep(1)
        assert len(learned) == 3 and all(0.0 < x < 1.0 for x in learned), (learned, d.log.read_text()[-3000:])
        prior = sorted(learned)[1]  # alice's median: her own factor, and the cluster's (the only history)
        for _ in range(n):
            submit(cluster, BOB, "gpu:1", "themis:app=honest,est=120s", 120)
        for _ in range(n):
            submit(cluster, ALICE, "gpu:1", "themis:app=liar,est=10s", 120)
        pattern = re.compile(rf"calibration user={ALICE}: factor ([0-9.e+]+) from (\w+)")
        deadline = time.monotonic() + 120
        sources: list[tuple[float, str]] = []
        while time.monotonic() < deadline and not any(s == "peers" for _, s in sources):
            sources = [(float(f), s) for f, s in pattern.findall(d.log.read_text())]
            time.sleep(1)
        log = d.log.read_text()
        assert "Traceback" not in log
        peers = [f for f, s in sources if s == "peers"]
        assert peers, (sources, log[-3000:])
        # the first time alice's claims are held to the peers': 120 / 10 x her prior (logged to 3 digits)
        assert peers[0] == pytest.approx(12.0 * prior, rel=0.01), (sources, prior)
    finally:
        d.stop()
