"""`themis status/apps/jobs/explain` during an outage: themisd's API not answering (refused, silent, not
HTTP) while the state database cannot stand in for it (not readable by this user, missing, locked,
damaged) is one line on stderr and exit 1, never a traceback; the line names the address, why it did not
answer, and why the database did not help (for a user the permissions keep out: the group to join)."""

from __future__ import annotations

import functools
import grp
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from api import world

from themis_slurm.cli.client import Client, CliError, load_settings
from themis_slurm.state import reader as db_mod

from .conftest import Run, free_port

REPO = Path(__file__).resolve().parents[3]
SERVICE = "is the service running? (systemctl status themisd)"
COMMANDS = [("status",), ("apps",), ("jobs",), ("explain", "20")]


def config(tmp_path: Path, state_dir: Path, listen: str) -> Path:
    cfg = tmp_path / "themis.yaml"
    cfg.write_text(f"state_dir: {state_dir}\napi:\n  listen: {listen}\n")
    return cfg


def one_error(res: object) -> str:
    """The single stderr line of a failed command (exit 1, no traceback)."""
    assert res.exit_code == 1, res.output  # type: ignore[attr-defined]
    lines = res.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1 and "Traceback" not in res.output, res.output  # type: ignore[attr-defined]
    return lines[0]


@pytest.fixture
def unreadable(db: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The database as a user outside themisd's group sees it (root reads everything: stat is refused)."""
    real_stat = Path.stat

    def stat(self: Path, **kw: object) -> os.stat_result:
        if self == db:
            raise PermissionError(13, "Permission denied", str(self))
        return real_stat(self, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "stat", stat)
    return db


def group_of(path: Path) -> str:
    return grp.getgrgid(path.stat().st_gid).gr_name


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_api_refused_and_database_unreadable(args: tuple[str, ...], run: Run, unreadable: Path,
                                             tmp_path: Path) -> None:
    listen = f"127.0.0.1:{free_port()}"
    res = run(*args, "-c", str(config(tmp_path, unreadable.parent, listen)))
    user = world.UIDS.get(os.geteuid()) or str(os.geteuid())
    assert one_error(res) == (
        f"themis: error: themisd not reachable at http://{listen} (connection refused), and the state database "
        f"{unreadable} is not readable by user {user} (ask an admin to add you to group "
        f"{group_of(unreadable.parent)}): {SERVICE}")


def test_api_silent_says_how_long_it_waited(unreadable: Path, tmp_path: Path) -> None:
    with socket.socket() as srv:  # listens, never accepts: the connection is made, no answer comes
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        listen = f"127.0.0.1:{srv.getsockname()[1]}"
        client = Client(load_settings(config(tmp_path, unreadable.parent, listen), None), timeout=0.3)
        with pytest.raises(CliError) as e:
            client.get("/v1/cluster")
    msg = str(e.value)
    assert msg.startswith(f"themisd not reachable at http://{listen} (no answer within 0.3 s), and the state "
                          f"database {unreadable} is not readable by user "), msg


@pytest.fixture
def not_http() -> Iterator[str]:
    """An address that answers every connection with a line that is not HTTP, then hangs up."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")

    threading.Thread(target=serve, daemon=True).start()
    yield f"127.0.0.1:{srv.getsockname()[1]}"
    srv.close()


def test_not_http_at_the_address(run: Run, not_http: str, tmp_path: Path) -> None:
    res = run("status", "--url", f"http://{not_http}")
    line = one_error(res)
    assert line.startswith(f"themis: error: themisd not reachable at http://{not_http} (not an HTTP answer: "), line
    assert line.endswith(SERVICE)


def test_no_database_here_names_only_the_api(run: Run, tmp_path: Path) -> None:
    listen = f"127.0.0.1:{free_port()}"
    res = run("jobs", "-c", str(config(tmp_path, tmp_path / "state", listen)))
    assert one_error(res) == f"themis: error: themisd not reachable at http://{listen} (connection refused): {SERVICE}"


def test_damaged_database(run: Run, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "themis.db").write_bytes(b"not a database" * 500)
    listen = f"127.0.0.1:{free_port()}"
    line = one_error(run("apps", "-c", str(config(tmp_path, state, listen))))
    assert line == (f"themis: error: themisd not reachable at http://{listen} (connection refused), and cannot "
                    f"read state database {state / 'themis.db'}: file is not a database: {SERVICE}")


def test_locked_database(run: Run, db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the client imports connect_ro from state.reader when the database stands in (only then): patch it there
    monkeypatch.setattr(db_mod, "connect_ro", functools.partial(db_mod.connect_ro, timeout=0.1))
    with closing(sqlite3.connect(db, isolation_level=None)) as holder:
        holder.execute("PRAGMA locking_mode = EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("DELETE FROM events")
        listen = f"127.0.0.1:{free_port()}"
        line = one_error(run("status", "-c", str(config(tmp_path, db.parent, listen))))
        holder.execute("ROLLBACK")
    assert line == (f"themis: error: themisd not reachable at http://{listen} (connection refused), and cannot "
                    f"read state database {db}: database is locked: {SERVICE}")


def test_an_unforeseen_file_error_is_one_line_too(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    def get(self: Client, path: str, params: object = None) -> dict[str, object]:
        raise PermissionError(13, "Permission denied", "/var/lib/themis/themis.db-shm")

    monkeypatch.setattr(Client, "get", get)
    assert one_error(run("status")) == "themis: error: /var/lib/themis/themis.db-shm: Permission denied"


# ------------------------------------------------------------------------------------------ a real other user
def _as_nobody(scratch: Path) -> list[str] | None:
    """The command line that runs Python as user nobody with this checkout importable (its caches in
    `scratch`), or None when this machine cannot: not root, no runuser, or no Python nobody may run."""
    runuser = shutil.which("runuser")
    if os.geteuid() != 0 or runuser is None:
        return None
    site = [p for p in sys.path if p.endswith("site-packages")]
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"  # the same one: the venv's packages load
    for python in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        if not os.access(python, os.X_OK):
            continue
        cmd = [runuser, "-u", "nobody", "--", "env", f"PYTHONPATH={os.pathsep.join([str(REPO), *site])}",
               f"MPLCONFIGDIR={scratch}", python]
        ok = subprocess.run([*cmd, "-c", "import themis_slurm.cli.main"], capture_output=True, timeout=60)
        if ok.returncode == 0:
            return cmd
    return None


@pytest.fixture(scope="module")
def nobody() -> Iterator[list[str]]:
    scratch = Path(tempfile.mkdtemp(prefix="themis-outage-nobody-"))
    scratch.chmod(0o777)
    try:
        cmd = _as_nobody(scratch)
        if cmd is None:
            pytest.skip("needs root, runuser and a Python that user nobody may run (the venv's may live under "
                        "/root)")
        yield cmd
    finally:
        shutil.rmtree(scratch)


@pytest.mark.parametrize("closed", ["directory", "file"])
def test_a_user_outside_the_group(closed: str, nobody: list[str]) -> None:
    """The 25.11 outage as it happened: a plain user, themisd down, the state 0750/0640 (here 0600)."""
    base = Path(tempfile.mkdtemp(prefix="themis-outage-"))
    try:
        base.chmod(0o755)
        state = base / "state"
        db = world.build_store(state)
        if closed == "directory":
            state.chmod(0o750)
        else:
            state.chmod(0o755)
            db.chmod(0o600)
        listen = f"127.0.0.1:{free_port()}"
        cfg = config(base, state, listen)
        cfg.chmod(0o644)
        res = subprocess.run([*nobody, "-m", "themis_slurm.cli.main", "status", "-c", str(cfg)],
                             capture_output=True, text=True, timeout=120, cwd="/")
    finally:
        shutil.rmtree(base)
    assert res.returncode == 1, res.stderr
    assert res.stderr.strip().splitlines() == [
        f"themis: error: themisd not reachable at http://{listen} (connection refused), and the state database "
        f"{db} is not readable by user nobody (ask an admin to add you to group {grp.getgrgid(0).gr_name}): "
        f"{SERVICE}"]
