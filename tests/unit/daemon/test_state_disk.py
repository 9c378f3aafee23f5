"""The state on disk: private to the service user and its group whatever the umask (other users never read
app, job or user names around Slurm's PrivateData), and a disk that cannot take a write (full, here for
real through SQLite's max_page_count) costs cycles, not the daemon: one line, no Slurm action that was
not recorded first, and the daemon resumes by itself once there is room again."""

from __future__ import annotations

import errno
import logging
import os
import re
import sqlite3
import stat
import subprocess
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from themis_slurm.core.topology import Topology
from themis_slurm.daemon import service as service_mod
from themis_slurm.daemon.main import cli
from themis_slurm.daemon.service import Service
from themis_slurm.slurm.model import ManagedJob, Snapshot
from themis_slurm.state.disk import storage_line, storage_problem
from themis_slurm.state.errors import StateError
from themis_slurm.state.store import Store

from .conftest import daemon_config
from .fake_slurm import FakeJob, FakeSlurm

NO_LIMIT = 1073741823  # SQLite's default max_page_count
LONG = "x" * 3000  # app names this long make nearly every row of theirs need a new page of its own


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def modes(state: Path) -> dict[str, int]:
    """Permission bits of the state directory ("") and of every file in it, by name."""
    return {"": stat.S_IMODE(state.stat().st_mode),
            **{p.name: stat.S_IMODE(p.stat().st_mode) for p in state.iterdir()}}


def fill(store: Store) -> None:
    """The disk is full from now on: the database may not grow by a single page."""
    pages = store.db.execute("PRAGMA page_count").fetchone()[0]
    store.db.execute(f"PRAGMA max_page_count = {pages}")


def free(store: Store) -> None:
    store.db.execute(f"PRAGMA max_page_count = {NO_LIMIT}")


def integrity(db: Path) -> list[str]:
    with closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as c:
        return [r[0] for r in c.execute("PRAGMA integrity_check")]


class RecordedFirst(FakeSlurm):
    """FakeSlurm whose clock moves 5 s per read, with a hook before each read (the test fills and frees the
    disk there), and which reads, at every action, the job's intent over a connection of its own (which
    sees committed transactions only): `unrecorded` lists the actions whose intent was not committed."""

    INTENT = {"start": "starting", "warn": "warning", "requeue": "requeueing"}

    def __init__(self, topo: Topology, db: Path, on_read: Callable[[int], None]) -> None:
        super().__init__(topo)
        self.db = db
        self.on_read = on_read
        self.unrecorded: list[tuple[str, str, str | None]] = []

    def committed_intent(self, job_id: str) -> str | None:
        with closing(sqlite3.connect(f"{self.db.as_uri()}?mode=ro", uri=True)) as c:
            row = c.execute("SELECT intent FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return row[0] if row else None

    def _enter(self, action: str, job: ManagedJob) -> FakeJob:
        intent = self.committed_intent(job.job_id)
        if intent is None or self.INTENT.get(action, intent) != intent:
            self.unrecorded.append((action, job.job_id, intent))
        return super()._enter(action, job)

    def snapshot(self) -> Snapshot:
        self.on_read(self.snapshots)
        self.advance(5.0)
        return super().snapshot()


def serve(tmp_path: Path, topo: Topology, monkeypatch: pytest.MonkeyPatch,
          script: Callable[[int, RecordedFirst, Store], None]) -> tuple[Service, RecordedFirst]:
    """A Service on RecordedFirst, without sleeping between cycles; `script(read number, slurm, store)` runs
    before each read of Slurm, with the store the service opened."""
    cfg = replace(daemon_config(tmp_path / "state"), poll_interval_s=0.0)
    opened: list[Store] = []
    real_open = service_mod.open_store

    def open_store(*args: object, **kw: object) -> Store:
        opened.append(real_open(*args, **kw))  # type: ignore[arg-type]
        return opened[-1]

    monkeypatch.setattr(service_mod, "open_store", open_store)
    slurm = RecordedFirst(topo, cfg.db_path, lambda n: script(n, slurm, opened[-1]))
    return Service(cfg, tmp_path / "themis.yaml", slurm), slurm


@pytest.fixture
def themisd(tmp_path: Path, slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch) -> Callable[[], Result]:
    """Runs `themisd run` on FakeSlurm for at most one cycle (no signal handlers), state in tmp_path/state."""
    real_run = Service.run
    monkeypatch.setattr("themis_slurm.daemon.main.make_backend", lambda cfg: slurm)
    monkeypatch.setattr(service_mod, "install_signals", lambda svc: None)
    monkeypatch.setattr(Service, "run", lambda self: real_run(self, max_cycles=1))
    cfg = tmp_path / "themis.yaml"
    cfg.write_text(f"state_dir: {tmp_path / 'state'}\nmetrics:\n  listen: ''\napi:\n  listen: ''\n"
                   "slurm:\n  job_submit_conf: ''\n")
    return lambda: CliRunner().invoke(cli, ["run", "-c", str(cfg)])


# ------------------------------------------------------------------------------------------ permissions
@pytest.mark.parametrize("mask", [0o022, 0o000])
def test_a_new_state_dir_is_private_whatever_the_umask(mask: int, tmp_path: Path, topo: Topology,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, int]] = []

    def script(n: int, slurm: RecordedFirst, store: Store) -> None:
        if n == 0:
            slurm.submit("alice", "a", 2, 600.0, est_s=600.0)
        seen.append(modes(store.path.parent))  # while themisd runs: the -wal and -shm files exist

    svc, _ = serve(tmp_path, topo, monkeypatch, script)
    with umask(mask):
        assert svc.run(max_cycles=3) == 0
    found = seen[-1]
    assert found.pop("") == 0o750
    assert {"themis.db", "themis.db-wal", "themis.db-shm", "themis.db.marker", "themisd.lock"} <= set(found)
    assert {name: oct(m) for name, m in found.items() if m & ~0o640} == {}, "0640 or stricter"


@pytest.mark.parametrize(("name", "mode"), [("", 0o755), ("themis.db", 0o644), ("themis.db.marker", 0o604),
                                            ("themisd.lock", 0o666)])
def test_state_other_users_can_read_is_refused_with_the_fix(name: str, mode: int, tmp_path: Path,
                                                            topo: Topology, monkeypatch: pytest.MonkeyPatch) -> None:
    svc, _ = serve(tmp_path, topo, monkeypatch, lambda n, slurm, store: None)
    assert svc.run(max_cycles=1) == 0
    path = tmp_path / "state" / name
    path.chmod(mode)
    with pytest.raises(StateError) as e:
        svc.run(max_cycles=1)
    msg = str(e.value)
    assert "\n" not in msg and f"{path} (mode {mode:04o})" in msg, msg
    fix = re.search(r"`(chmod o-rwx [^`]+)`", msg)
    assert fix, msg
    subprocess.run(fix.group(1), shell=True, check=True)  # the command the message gives is the fix
    assert stat.S_IMODE(path.stat().st_mode) == mode & ~0o007
    assert svc.run(max_cycles=1) == 0, "group read (0750/0640) is fine"


def test_themisd_run_refuses_a_world_readable_state_dir_in_one_line(tmp_path: Path,
                                                                     themisd: Callable[[], Result]) -> None:
    state = tmp_path / "state"
    with umask(0o022):
        state.mkdir()  # as demo/run.sh and many installs did: 0755
    res = themisd()
    assert res.exit_code == 1
    assert res.stderr.strip().splitlines() == [
        f"themisd: {state / 'themis.db'}: other users can read themisd's state (every app, job and user name): "
        f"{state} (mode 0755); run `chmod o-rwx {state}` and start again"]
    assert not (state / "themis.db").exists(), "refused before the database is opened"


# ------------------------------------------------------------------------------------------ a full disk
def test_a_failed_commit_rolls_back_and_the_store_stays_usable(tmp_path: Path) -> None:
    store = Store(tmp_path / "themis.db")
    with store.tx():
        store.add_event(0.0, "before", "kept")
    fill(store)
    with pytest.raises(sqlite3.OperationalError) as e, store.tx():
        for i in range(50):
            store.add_event(float(i), "lost", "x" * 2000)
    assert storage_problem(e.value) == "full"
    assert not store.db.in_transaction
    assert [r[0] for r in store.query("SELECT kind FROM events")] == ["before"], "all or nothing"
    free(store)
    with store.tx():
        store.add_event(1.0, "after", "written")
    assert [r[0] for r in store.query("SELECT kind FROM events")] == ["before", "after"]
    store.close()
    assert integrity(tmp_path / "themis.db") == ["ok"]


def test_a_full_disk_mid_run_is_one_line_and_no_unrecorded_action(tmp_path: Path, topo: Topology,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    jobs: list[str] = []

    def script(n: int, slurm: RecordedFirst, store: Store) -> None:
        if n == 0:
            jobs.append(slurm.submit("alice", LONG, 8, 2000.0, est_s=2000.0))
        if n == 3:
            jobs.extend(slurm.submit(u, LONG, 4, 100.0, est_s=100.0) for u in ("bob", "carol"))
            fill(store)
        if n == 20:
            free(store)

    svc, slurm = serve(tmp_path, topo, monkeypatch, script)
    with caplog.at_level(logging.INFO, logger="themisd"):
        assert svc.run(max_cycles=90) == 0, "no exception escapes"
    db = svc.cfg.db_path
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert re.fullmatch(rf"state database {re.escape(str(db))}: the filesystem is full \(\d+ MiB free on /\S*; "
                        r"database or disk is full\); free space on \S+ \(or raise the service user's quota\); "
                        r"themisd retries every cycle and takes no Slurm action it cannot record first", errors[0])
    failed = svc.metrics.value("themis_state_errors_total", {"problem": "full"})
    assert failed >= 5, "the disk stayed full for several cycles"
    assert sum("writable again" in r.getMessage() for r in caplog.records) == 1
    assert slurm.unrecorded == [], "every action followed its committed intent"
    assert set(slurm.completed) == set(jobs[1:]), "the waiting jobs ran once there was room again"
    assert integrity(db) == ["ok"]


def test_a_round_lost_to_a_full_disk_runs_again(tmp_path: Path, topo: Topology,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Free GPUs and a waiting job, nothing else changing: the round that could not be recorded must run
    again once the disk has room (the daemon does not take it for done)."""
    busy: list[str] = []

    def script(n: int, slurm: RecordedFirst, store: Store) -> None:
        if n == 0:
            busy.extend(slurm.add_unmanaged(node, 4) for node in ("node1", "node2"))
        if n == 1:
            slurm.submit("bob", LONG, 4, 60.0, est_s=60.0)
        if n == 3:
            fill(store)
        if n == 4:
            slurm.cancel(busy[0])  # GPUs free up while the disk is full: the round cannot be recorded
        if n == 8:
            free(store)

    svc, slurm = serve(tmp_path, topo, monkeypatch, script)
    assert svc.run(max_cycles=40) == 0
    assert svc.metrics.value("themis_state_errors_total", {"problem": "full"}) >= 1
    assert [a for a, _ in slurm.calls] == ["start"]
    assert len(slurm.completed) == 1 and slurm.unrecorded == []


def test_themisd_run_on_a_full_disk_says_so_in_one_line(tmp_path: Path, themisd: Callable[[], Result],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    real_connect = sqlite3.connect

    def full_disk(*args: object, **kw: object) -> sqlite3.Connection:
        db = real_connect(*args, **kw)  # type: ignore[arg-type]
        db.execute("PRAGMA max_page_count = 1")  # an empty database cannot even get its schema
        return db

    monkeypatch.setattr(sqlite3, "connect", full_disk)
    res = themisd()
    assert res.exit_code == 1 and "Traceback" not in res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"themisd: state database {tmp_path / 'state' / 'themis.db'}: the filesystem is full (")
    assert lines[0].endswith("then start themisd again")


@pytest.mark.parametrize(("err", "problem"), [
    (OSError(errno.ENOSPC, "No space left on device"), "full"), (OSError(errno.EDQUOT, "Disk quota exceeded"), "full"),
    (OSError(errno.EIO, "Input/output error"), "io"), (OSError(errno.EROFS, "Read-only file system"), "readonly"),
    (OSError(errno.EACCES, "Permission denied"), None), (sqlite3.OperationalError("disk I/O error"), "io"),
    (sqlite3.OperationalError("attempt to write a readonly database"), "readonly"),
    (sqlite3.OperationalError("database is locked"), None), (ValueError("full"), None)])
def test_storage_problems(err: BaseException, problem: str | None) -> None:
    assert storage_problem(err) == problem


def test_storage_lines_name_the_file_the_place_and_the_fix() -> None:
    db = Path("/var/lib/themis/themis.db")
    assert storage_line(db, "full", "database or disk is full", (3 * 2**20, Path("/var"))) == (
        "state database /var/lib/themis/themis.db: the filesystem is full (3 MiB free on /var; database or disk "
        "is full); free space on /var (or raise the service user's quota)")
    assert "disk I/O error (x); check the disk" in storage_line(db, "io", "x", None)
    assert "make /var/lib/themis and its files writable" in storage_line(db, "readonly", "x", None)
