"""The SQLite store: WAL, versioned migrations, atomic transactions."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from themis_slurm.state.errors import StateError
from themis_slurm.state.rows import JobRow
from themis_slurm.state.schema import MIGRATIONS
from themis_slurm.state.store import Store


def row(jid: str = "1", intent: str = "waiting") -> JobRow:
    return JobRow(job_id=jid, slurm_id=int(jid), app_key="alice/a", intent=intent, gpus=2, work=100.0,
                  first_seen=0.0, planned_nodes={"node1": 2}, planned_gpus=frozenset({0, 1}))


def test_fresh_database_is_at_the_latest_version_in_wal_mode(tmp_path: Path) -> None:
    s = Store(tmp_path / "t.db")
    assert s.version == len(MIGRATIONS)
    assert s.query("SELECT version FROM schema_version")[0][0] == len(MIGRATIONS)
    assert s.query("PRAGMA journal_mode")[0][0] == "wal"
    s.close()


def test_migrations_apply_in_order_and_keep_data(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    s = Store(db, migrations=MIGRATIONS)
    with s.tx():
        s.put_job(row())
    s.close()
    v2 = "ALTER TABLE jobs ADD COLUMN note TEXT NOT NULL DEFAULT 'x'"
    s = Store(db, migrations=(*MIGRATIONS, v2))
    assert s.version == len(MIGRATIONS) + 1
    assert s.query("SELECT note FROM jobs")[0][0] == "x"
    assert s.job("1") == row()
    s.close()
    with pytest.raises(StateError, match="newer than this themisd"):
        Store(db, migrations=MIGRATIONS)


def old_database(tmp_path: Path, version: int, sql: str) -> Path:
    """A database at schema `version` (an older themisd's) holding what `sql` inserts."""
    db = tmp_path / "t.db"
    s = Store(db, migrations=MIGRATIONS[:version])
    with s.tx():
        s.db.execute(sql)
    s.close()
    return db


def test_v1_database_gains_worst_rho_and_keeps_its_rounds(tmp_path: Path) -> None:
    s = Store(old_database(tmp_path, 1, "INSERT INTO rounds (time, mode, trigger, solver, offered_gpus, grants, "
                           "renewals, preemptions, latency_s) VALUES (1, 'enforce', 'arrival', 'exact', 4, 1, 0, 0, 0.01)"))
    with s.tx():
        s.add_round(2.0, "enforce", "lease", "exact", 4, 0, 1, 1, 0.02, worst_rho=1.5)
        s.add_round(3.0, "enforce", "lease", "exact", 4, 0, 1, 1, 0.02, worst_rho=float("inf"))
    got = [tuple(r) for r in s.query("SELECT time, worst_rho FROM rounds ORDER BY id")]
    assert got == [(1.0, None), (2.0, 1.5), (3.0, None)]
    s.close()


def test_v4_job_rows_gain_submit_time_unknown(tmp_path: Path) -> None:
    s = Store(old_database(tmp_path, 4, "INSERT INTO jobs (job_id, slurm_id, app_key, intent, gpus, work, first_seen) "
                           "VALUES ('7', 7, 'u/a', 'waiting', 1, 10.0, 100.0)"))
    row = s.job("7")
    assert row is not None and row.submit_time is None and row.first_seen == 100.0  # submitted() falls back
    with s.tx():
        s.put_job(replace(row, submit_time=90.0))
    assert s.job("7").submit_time == 90.0  # type: ignore[union-attr]
    s.close()


def test_failed_migration_leaves_the_old_version(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    Store(db).close()
    with pytest.raises(Exception, match="no such table"):
        Store(db, migrations=(*MIGRATIONS, "ALTER TABLE nope ADD COLUMN x INTEGER"))
    s = Store(db)
    assert s.query("SELECT version FROM schema_version")[0][0] == len(MIGRATIONS)
    s.close()


def test_transactions_are_atomic(tmp_path: Path) -> None:
    s = Store(tmp_path / "t.db")
    with pytest.raises(RuntimeError, match="outside a transaction"):
        s.put_job(row())
    with pytest.raises(KeyboardInterrupt), s.tx():
        s.put_job(row("1"))
        s.put_job(row("2"))
        raise KeyboardInterrupt  # a kill in the middle of a transaction
    assert s.jobs() == {}
    with s.tx():
        s.put_job(row("1", "starting"))
    s.close()
    s = Store(tmp_path / "t.db")
    assert s.job("1").intent == "starting"
    assert s.job("1").planned_nodes == {"node1": 2}
    s.close()


def test_unknown_intent_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown intent"):
        row(intent="sleeping")


def test_v3_database_gains_calibration_and_keeps_its_jobs(tmp_path: Path) -> None:
    s = Store(old_database(tmp_path, 3, "INSERT INTO jobs (job_id, slurm_id, app_key, intent, gpus, work, "
                           "first_seen) VALUES ('7', 7, 'alice/a', 'waiting', 2, 500.0, 0)"))
    old = s.job("7")
    assert (old.work, old.est_work, old.est_factor) == (500.0, 0.0, 1.0), "no estimate before calibration: no sample"
    s.close()


def test_finished_history_keeps_the_most_recent_jobs_per_user(tmp_path: Path) -> None:
    s = Store(tmp_path / "t.db")
    with s.tx():
        for i in range(6):
            s.add_finished(str(i), "alice", "alice/a", float(i), 100.0, 10.0 * (i + 1), keep=4)
        s.add_finished("b", "bob", "bob/b", 9.0, 100.0, 50.0, keep=4)
    hist = s.finished_history(window=3)
    assert hist == {"alice": [(100.0, 40.0), (100.0, 50.0), (100.0, 60.0)], "bob": [(100.0, 50.0)]}
    assert s.query("SELECT count(*) FROM finished_jobs WHERE user = 'alice'")[0][0] == 4, "older rows deleted"
    s.close()
