"""State is never silently wrong: damaged, foreign or vanished databases are refused with one line, and
``--fresh-state`` moves them aside (never deletes) and starts on empty state."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from themis_slurm.daemon import service as service_mod
from themis_slurm.daemon.main import cli
from themis_slurm.daemon.service import Service
from themis_slurm.state.disk import marker_path
from themis_slurm.state.errors import StateError
from themis_slurm.state.opening import move_aside, open_store
from themis_slurm.state.schema import MIGRATIONS
from themis_slurm.state.store import Store

from .fake_slurm import FakeSlurm


def one_line(e: pytest.ExceptionInfo[StateError], db: Path) -> str:
    msg = str(e.value)
    assert "\n" not in msg, msg
    assert str(db) in msg, msg
    return msg


def populated(db: Path, events: int = 2000) -> None:
    """A real database with a few hundred KB of audit log, checkpointed into the main file."""
    s = open_store(db)
    with s.tx():
        for i in range(events):
            s.add_event(float(i), "test", "x" * 100, str(i), "alice/a")
    s.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    s.close()


def damaged_files(db: Path) -> list[Path]:
    return sorted(db.parent.glob(db.name + ".damaged-*"))


# ------------------------------------------------------------------------------------------ damage at open
def test_garbage_file_is_refused_with_one_line(tmp_path: Path) -> None:
    db = tmp_path / "themis.db"
    db.write_bytes(os.urandom(8192))
    with pytest.raises(StateError) as e:
        Store(db)
    msg = one_line(e, db)
    assert "not an SQLite database" in msg and "--fresh-state" in msg and "backup" in msg


def test_truncated_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "themis.db"
    populated(db)
    size = db.stat().st_size
    with open(db, "r+b") as f:
        f.truncate(size // 2)
    with pytest.raises(StateError) as e:
        open_store(db)
    msg = one_line(e, db)
    assert "damaged" in msg and "--fresh-state" in msg
    assert e.value.damaged


def test_damaged_page_fails_the_integrity_check(tmp_path: Path) -> None:
    db = tmp_path / "themis.db"
    populated(db)
    with open(db, "r+b") as f:  # a page in the middle of the events table overwritten
        f.seek(4096 * 20)
        f.write(b"\xff" * 4096)
    with pytest.raises(StateError) as e:
        Store(db)
    msg = one_line(e, db)
    assert "damaged" in msg


def test_newer_schema_is_refused_with_the_way_out(tmp_path: Path) -> None:
    db = tmp_path / "themis.db"
    Store(db, migrations=(*MIGRATIONS, "CREATE TABLE later (x INTEGER)")).close()
    with pytest.raises(StateError) as e:
        Store(db)
    msg = one_line(e, db)
    assert "newer than this themisd knows" in msg and "upgrade themisd" in msg and "--fresh-state" in msg


def test_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "themis.db"
    other = sqlite3.connect(db)
    other.execute("CREATE TABLE customers (id INTEGER)")
    other.commit()
    other.close()
    with pytest.raises(StateError, match="not themisd's") as e:
        Store(db)
    one_line(e, db)
    assert sqlite3.connect(db).execute("SELECT name FROM sqlite_master").fetchall() == [("customers",)], \
        "nothing written into a foreign database"


def test_damaged_schema_version_and_missing_table_are_refused(tmp_path: Path) -> None:
    db = tmp_path / "themis.db"
    Store(db).close()
    raw = sqlite3.connect(db, isolation_level=None)
    raw.execute("INSERT INTO schema_version VALUES (1)")
    raw.close()
    with pytest.raises(StateError, match="schema_version holds"):
        Store(db)
    raw = sqlite3.connect(db, isolation_level=None)
    raw.execute("DELETE FROM schema_version WHERE rowid > 1")
    raw.execute("DROP TABLE decisions")
    raw.close()
    with pytest.raises(StateError, match="table decisions missing"):
        Store(db)


def test_a_locked_database_is_not_called_damaged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "themis.db"
    Store(db).close()
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("PRAGMA journal_mode=DELETE")  # so that an exclusive lock blocks readers too
    holder.execute("BEGIN EXCLUSIVE")
    real_connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: real_connect(*a, **{**k, "timeout": 0.1}))
    try:
        with pytest.raises(StateError, match="locked by another process") as e:
            open_store(db, fresh_state=True)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert not e.value.damaged and "--fresh-state" not in str(e.value)
    assert damaged_files(db) == [], "--fresh-state never moves a healthy, merely locked database"


# ------------------------------------------------------------------------------------------ marker: history gone
def test_first_start_on_a_clean_state_dir_needs_no_flag(tmp_path: Path) -> None:
    db = tmp_path / "state" / "themis.db"
    s = open_store(db)
    s.close()
    marker = json.loads(marker_path(db).read_text())
    assert marker["path"] == str(db) and marker["id"] and marker["created_utc"]
    s = open_store(db)  # a restart: same marker
    s.close()
    assert json.loads(marker_path(db).read_text())["id"] == marker["id"]


@pytest.mark.parametrize("loss", ["deleted", "zero bytes", "wal deleted"])
def test_lost_database_with_a_marker_is_refused(tmp_path: Path, loss: str) -> None:
    db = tmp_path / "themis.db"
    s = open_store(db)
    with s.tx():
        s.add_event(1.0, "test", "history")
    before_checkpoint = db.read_bytes()  # WAL mode: the schema and the rows are still only in themis.db-wal
    s.close()
    for p in (db, db.with_name("themis.db-wal"), db.with_name("themis.db-shm")):
        p.unlink(missing_ok=True)
    if loss == "zero bytes":
        db.write_bytes(b"")
    elif loss == "wal deleted":  # killed before a checkpoint, then the -wal file removed by hand
        db.write_bytes(before_checkpoint)
    with pytest.raises(StateError) as e:
        open_store(db)
    msg = one_line(e, db)
    assert "--fresh-state" in msg and "backup" in msg
    if loss != "wal deleted":
        assert str(marker_path(db)) in msg
    if loss == "deleted":
        assert not db.exists(), "nothing created in place of the lost database"


def test_leftover_wal_without_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "themis.db"
    db.with_name("themis.db-wal").write_bytes(b"\x37\x7f\x06\x82" + b"\0" * 100)
    with pytest.raises(StateError, match="write-ahead log"):
        open_store(db)


def test_database_from_before_markers_gets_one(tmp_path: Path) -> None:
    db = tmp_path / "themis.db"
    s = Store(db)  # an older themisd: no marker
    with s.tx():
        s.add_event(1.0, "test", "old")
    s.close()
    s = open_store(db)
    assert len(s.query("SELECT * FROM events")) == 1
    s.close()
    assert marker_path(db).exists()


def test_unreadable_marker_still_counts_as_a_previous_run(tmp_path: Path) -> None:
    db = tmp_path / "themis.db"
    marker_path(db).write_text("{garbage")
    with pytest.raises(StateError, match="unreadable"):
        open_store(db)


# ------------------------------------------------------------------------------------------ --fresh-state
def test_fresh_state_moves_a_damaged_database_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db, wal = tmp_path / "themis.db", tmp_path / "themis.db-wal"
    populated(db)
    s = open_store(db)
    with s.tx():  # rows only in the WAL, as after a kill -9
        s.add_event(1.0, "test", "in the wal")
    crashed = {p: p.read_bytes() for p in (db, wal)}
    s.close()
    for p, data in crashed.items():
        p.write_bytes(data)
    with open(db, "r+b") as f:  # and a damaged page in the main file
        f.seek(4096 * 20)
        f.write(b"\xff" * 4096)
    damaged = {p: p.read_bytes() for p in (db, wal)}
    old_id = json.loads(marker_path(db).read_text())["id"]
    with pytest.raises(StateError, match="damaged"):
        open_store(db)
    assert {p: p.read_bytes() for p in (db, wal)} == damaged, "a refusal changes no file"
    s = open_store(db, fresh_state=True)
    assert s.query("SELECT count(*) FROM events")[0][0] == 0
    s.close()
    moved = damaged_files(db)
    main = next(p for p in moved if not p.name.endswith(("-wal", "-shm")))
    assert main.read_bytes() == damaged[db], "moved, never deleted"
    assert Path(f"{main}-wal").read_bytes() == damaged[wal], "its WAL moved along, under the matching name"
    marker = json.loads(marker_path(db).read_text())
    assert marker["id"] != old_id and marker["replaces"]["id"] == old_id
    assert "starting with empty state" in caplog.text and str(main) in caplog.text
    open_store(db).close()  # the next start needs no flag


def test_fresh_state_after_a_lost_database(tmp_path: Path) -> None:
    db = tmp_path / "themis.db"
    open_store(db).close()
    db.write_bytes(b"")
    s = open_store(db, fresh_state=True)
    assert s.version == len(MIGRATIONS)
    s.close()
    assert [p.stat().st_size for p in damaged_files(db)] == [0]


def test_fresh_state_on_an_intact_database_keeps_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "themis.db"
    populated(db, events=3)
    s = open_store(db, fresh_state=True)
    assert s.query("SELECT count(*) FROM events")[0][0] == 3
    s.close()
    assert damaged_files(db) == []
    assert "intact" in caplog.text and "ignored" in caplog.text


def test_move_aside_never_overwrites(tmp_path: Path) -> None:
    db = tmp_path / "themis.db"
    for content in (b"one", b"two"):
        db.write_bytes(content)
        move_aside(db, stamp="20240101T000000Z")
    assert sorted(p.read_bytes() for p in damaged_files(db)) == [b"one", b"two"]


# ------------------------------------------------------------------------------------------ themisd run
def _config(tmp_path: Path) -> Path:
    path = tmp_path / "themis.yaml"
    path.write_text(f"state_dir: {tmp_path / 'state'}\nmetrics:\n  listen: ''\napi:\n  listen: ''\n"
                    "slurm:\n  job_submit_conf: ''\n")
    return path


@pytest.fixture
def one_cycle(monkeypatch: pytest.MonkeyPatch, slurm: FakeSlurm) -> None:
    """`themisd run` on FakeSlurm for a single cycle, no signal handlers installed."""
    real_run = Service.run
    monkeypatch.setattr("themis_slurm.daemon.main.make_backend", lambda cfg: slurm)
    monkeypatch.setattr(service_mod, "install_signals", lambda svc: None)
    monkeypatch.setattr(Service, "run", lambda self: real_run(self, max_cycles=1))


def test_themisd_run_refuses_damaged_state_in_one_line(tmp_path: Path, one_cycle: None) -> None:
    cfg = _config(tmp_path)
    db = tmp_path / "state" / "themis.db"
    runner = CliRunner()
    assert runner.invoke(cli, ["run", "-c", str(cfg)]).exit_code == 0, "first start on a clean state dir"
    db.write_bytes(b"SQLite format 2\0" + os.urandom(5000))
    res = runner.invoke(cli, ["run", "-c", str(cfg)])
    assert res.exit_code == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"themisd: {db}: not an SQLite database") and "themisd run --fresh-state" in lines[0]
    assert "Traceback" not in res.output
    res = runner.invoke(cli, ["run", "-c", str(cfg), "--fresh-state"])
    assert res.exit_code == 0, res.output
    assert len(damaged_files(db)) == 1
    db.unlink()
    res = runner.invoke(cli, ["run", "-c", str(cfg)])
    assert res.exit_code == 1 and "is missing" in res.stderr and "--fresh-state" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_handback_works_without_usable_state(tmp_path: Path, one_cycle: None) -> None:
    cfg = _config(tmp_path)
    db = tmp_path / "state" / "themis.db"
    db.parent.mkdir()
    open_store(db).close()
    db.write_bytes(os.urandom(5000))
    res = CliRunner().invoke(cli, ["handback", "-c", str(cfg)])
    assert res.exit_code == 0, res.output
    assert "handing back without it" in res.stderr and "Traceback" not in res.output
    assert db.read_bytes() and damaged_files(db) == [], "handback never moves state aside"
