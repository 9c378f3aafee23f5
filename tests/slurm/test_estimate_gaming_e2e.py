"""Understated estimates on the real local Slurm cluster (issue #33 item 6; core/calibration.py, the peer
floor): a new user's ``est=1m`` jobs for five-minute work next to an honest user's ``est=5m`` ones are
counted at five minutes by themisd (and it says so in its log), and the first round gives the liar no
more GPUs than the honest user who asked first. The share itself is measured in the simulator
(benchmarks/estimate_gaming.py): here, with the rules of before (calibration_running and
calibration_peer_floor false), the first round was 8 and 8 of the 16 GPUs too (the honest app, not
offered, was served first in the leftover), so only the estimates tell the rules apart on this cluster."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import test_daemon_e2e as e2e
from test_daemon_e2e import ALICE, BOB, make_themisd, submit

if TYPE_CHECKING:
    from conftest import Cluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
daemon_dir = e2e.daemon_dir  # the fixture: a folder themisd's account can reach


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
