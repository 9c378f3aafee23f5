"""The SQLite store: WAL, versioned migrations, atomic transactions."""

from __future__ import annotations

from pathlib import Path

import pytest

from themis_slurm.daemon.store import MIGRATIONS, JobRow, StateError, Store


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


def test_v1_database_gains_worst_rho_and_keeps_its_rounds(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    s = Store(db, migrations=MIGRATIONS[:1])
    with s.tx():
        s.db.execute("INSERT INTO rounds (time, mode, trigger, solver, offered_gpus, grants, renewals,"
                     " preemptions, latency_s) VALUES (1, 'enforce', 'arrival', 'exact', 4, 1, 0, 0, 0.01)")
    s.close()
    s = Store(db)
    with s.tx():
        s.add_round(2.0, "enforce", "lease", "exact", 4, 0, 1, 1, 0.02, worst_rho=1.5)
        s.add_round(3.0, "enforce", "lease", "exact", 4, 0, 1, 1, 0.02, worst_rho=float("inf"))
    got = [tuple(r) for r in s.query("SELECT time, worst_rho FROM rounds ORDER BY id")]
    assert got == [(1.0, None), (2.0, 1.5), (3.0, None)]
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
