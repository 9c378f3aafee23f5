"""The files of themisd's state and the disk under them: who may read them, and what a failing disk means.

The state is private to the service user and its group (:data:`DIR_MODE`, :data:`FILE_MODE`): the
database names every app, job and user, which Slurm's PrivateData may hide from other users. Whatever the
umask, the state directory is created 0750 and every file 0640 (SQLite gives the -wal and -shm files the
database's mode), and themisd refuses to start on state that other users can read (:func:`check_private`).

A disk that cannot take a write (full, I/O error, read-only) is named in one line by
:func:`storage_message`; a failed write rolls its whole transaction back (:meth:`Store.tx
<themis_slurm.state.store.Store.tx>`) and raises, so the Slurm action its intent was recorded for never runs.
"""

from __future__ import annotations

import errno
import os
import shlex
import sqlite3
import stat
from collections.abc import Mapping
from pathlib import Path

from themis_slurm.state.errors import StateError

MARKER_SUFFIX = ".marker"


def marker_path(db_path: str | Path) -> Path:
    """The marker next to the database (``themis.db`` -> ``themis.db.marker``): proof a previous run had state."""
    p = Path(db_path)
    return p.with_name(p.name + MARKER_SUFFIX)


def sidecars(db: Path) -> list[Path]:
    return [db.with_name(db.name + s) for s in ("-wal", "-shm", "-journal")]


# ------------------------------------------------------------------------------------------ permissions
#: The state directory and its files: the service user writes, its group reads (`themis status` on the
#: controller falls back to reading the database, read-only, as a member of the service's group), other
#: users get nothing.
DIR_MODE = 0o750
FILE_MODE = 0o640
#: The lock of one themisd per state directory (daemon/service.py); checked with the other files.
LOCK_NAME = "themisd.lock"


def make_state_dir(path: Path) -> None:
    """Creates the state directory with :data:`DIR_MODE` whatever the umask (mkdir's mode goes through it,
    hence the chmod); an existing directory is left as it is for :func:`check_private` to judge."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir(mode=DIR_MODE)
        except FileExistsError:
            return
        os.chmod(path, DIR_MODE)
    except OSError as e:
        raise StateError(
            f"{path}: cannot create the state directory: {e.strerror or e}: check state_dir and "
            "the permissions of its parent",
            damaged=False,
        ) from None


def private_opener(path: str, flags: int) -> int:
    """``open(..., opener=private_opener)``: a file it creates gets :data:`FILE_MODE` whatever the umask;
    an existing file keeps its mode (:func:`check_private` judges it)."""
    if not flags & os.O_CREAT:
        return os.open(path, flags)
    try:
        fd = os.open(path, flags | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return os.open(path, flags & ~os.O_CREAT)
    os.fchmod(fd, FILE_MODE)
    return fd


def create_private(db: Path) -> None:
    """A missing database file is created empty with :data:`FILE_MODE` before SQLite opens it: SQLite
    would create it 0644 (less the umask), and it gives the -wal and -shm files the database's mode."""
    try:
        if db.exists():
            return
        with open(db, "ab", opener=private_opener):
            pass
    except OSError as e:
        if storage_problem(e):
            raise StateError(f"{storage_message(db, e)}, then start themisd again", damaged=False) from None
        raise StateError(
            f"{db}: cannot create the database: {e.strerror or e}: check that state_dir is "
            "writable by the service user",
            damaged=False,
        ) from None


def state_modes(db: Path) -> dict[Path, int]:
    """Permission bits of the state directory and of those of themisd's files in it that exist."""
    out: dict[Path, int] = {}
    for p in (db.parent, db, *sidecars(db), marker_path(db), db.parent / LOCK_NAME):
        try:
            out[p] = stat.S_IMODE(p.stat().st_mode)
        except OSError:  # missing (or not ours to stat: opening it will say so)
            continue
    return out


def exposed(modes: Mapping[Path, int]) -> dict[Path, int]:
    """The paths whose mode lets other users (neither the owner nor the group) in."""
    return {p: m for p, m in modes.items() if m & 0o007}


def privacy_error(db: Path, open_to_all: Mapping[Path, int]) -> StateError:
    """One line: which paths other users can read, with their modes, and the command that closes them."""
    listed = ", ".join(f"{p} (mode {m:04o})" for p, m in open_to_all.items())
    paths = " ".join(shlex.quote(str(p)) for p in open_to_all)
    return StateError(
        f"{db}: other users can read themisd's state (every app, job and user name): {listed}; "
        f"run `chmod o-rwx {paths}` and start again",
        damaged=False,
    )


def check_private(db: Path) -> None:
    """StateError when other users can read the state directory or any of themisd's files in it.

    Refused rather than fixed in silence: the data was exposed (an admin should know), and the modes may
    be an admin's choice that themisd should not undo behind their back.
    """
    bad = exposed(state_modes(db))
    if bad:
        raise privacy_error(db, bad)


# ------------------------------------------------------------------------------------------ a failing disk
_STORAGE_ERRNOS = {errno.ENOSPC: "full", errno.EDQUOT: "full", errno.EIO: "io", errno.EROFS: "readonly"}


def storage_problem(e: BaseException) -> str | None:
    """'full', 'io' or 'readonly' when `e` says the disk cannot take a write (nothing themisd can fix:
    it retries, the admin fixes the disk); None for any other error."""
    if isinstance(e, sqlite3.Error):
        name = getattr(e, "sqlite_errorname", "") or ""
        text = str(e).lower()
        if name.startswith("SQLITE_FULL") or "disk is full" in text:
            return "full"
        if name.startswith("SQLITE_IOERR") or "disk i/o error" in text:
            return "io"
        if name.startswith("SQLITE_READONLY") or "readonly database" in text:
            return "readonly"
        return None
    if isinstance(e, OSError):
        return _STORAGE_ERRNOS.get(e.errno or 0)
    return None


def free_space(path: Path) -> tuple[int, Path] | None:
    """(bytes free for unprivileged users, mount point) of the filesystem holding the file `path`; None
    if unknown."""
    try:
        st = os.statvfs(path.parent)
        mount = path.parent.resolve()
    except OSError:
        return None
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    return st.f_bavail * st.f_frsize, mount


def storage_line(path: Path, problem: str, detail: str, free: tuple[int, Path] | None) -> str:
    """The one line naming what cannot be written, where, and what to do (`problem` from
    :func:`storage_problem`, `free` from :func:`free_space`)."""
    if problem == "full":
        room = f"{free[0] / 2**20:.0f} MiB free on {free[1]}" if free else "free space unknown"
        where = free[1] if free else path.parent
        return (
            f"state database {path}: the filesystem is full ({room}; {detail}); free space on {where} "
            "(or raise the service user's quota)"
        )
    if problem == "readonly":
        return (
            f"state database {path}: cannot be written ({detail}); make {path.parent} and its files "
            "writable by the service user (is the filesystem mounted read-only?)"
        )
    return f"state database {path}: disk I/O error ({detail}); check the disk (dmesg, smartctl) and its filesystem"


def storage_message(path: Path, e: BaseException) -> str:
    """:func:`storage_line` for the error `e` met writing `path`, with the free space measured now."""
    detail = " ".join((e.strerror if isinstance(e, OSError) and e.strerror else str(e)).split())
    return storage_line(path, storage_problem(e) or "io", detail, free_space(path))
