"""The SQLite store: WAL, versioned migrations, atomic transactions."""

from __future__ import annotations

from pathlib import Path

import pytest

from themis_slurm.daemon.state import MIGRATIONS, JobRow, StateError, Store


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
