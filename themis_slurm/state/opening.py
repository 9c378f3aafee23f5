"""Opening themisd's database without ever starting silently on empty or damaged state.

:class:`~themis_slurm.state.store.Store` checks the file when it opens it (an SQLite database, ``PRAGMA
quick_check``, a known schema version, every table present) and raises
:class:`~themis_slurm.state.errors.StateError` with a one-line message naming the file, the problem and the
way out. :func:`open_store` (what themisd uses) adds the marker file ``themis.db.marker`` next to the
database, written once the database exists: a marker without its database (missing, or 0 bytes) means a
previous run's history is gone, and themisd refuses to start on empty state unless asked (``themisd run
--fresh-state``, which moves the damaged files aside as ``<name>.damaged-<timestamp>`` rather than deleting
them).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from themis_slurm.state.disk import marker_path, private_opener, sidecars, storage_message, storage_problem
from themis_slurm.state.errors import FRESH_FLAG, FRESH_HINT, StateError
from themis_slurm.state.schema import MIGRATIONS
from themis_slurm.state.store import Store

log = logging.getLogger("themisd")


def _read_marker(marker: Path) -> dict[str, Any] | None:
    """The marker's contents; None when there is none. An unreadable marker still counts as present."""
    try:
        text = marker.read_text()
    except FileNotFoundError:
        return None
    except OSError as e:
        return {"unreadable": e.strerror or str(e)}
    try:
        data = json.loads(text)
    except ValueError:
        return {"unreadable": "not JSON"}
    return data if isinstance(data, dict) else {"unreadable": "not a JSON object"}


def _write_marker(marker: Path, db: Path, previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    now = time.time()
    data: dict[str, Any] = {
        "path": str(db),
        "id": uuid.uuid4().hex,
        "created": now,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "note": "written by themisd once the database exists; if the database is missing "
        "or empty while this file exists, themisd refuses to start (see "
        f"docs/admin-guide.md; {FRESH_FLAG} starts over)",
    }
    if previous:
        data["replaces"] = {k: previous[k] for k in ("id", "created_utc") if k in previous}
    tmp = marker.with_name(marker.name + ".tmp")
    tmp.unlink(missing_ok=True)  # a crash's leftover would keep its mode through the rename
    with open(tmp, "w", opener=private_opener) as f:
        json.dump(data, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, marker)
    try:
        fd = os.open(marker.parent, os.O_RDONLY)
    except OSError:
        return data
    try:
        os.fsync(fd)  # the rename itself must survive a power cut
    except OSError:
        pass
    finally:
        os.close(fd)
    return data


def _describe(marker: Path, info: Mapping[str, Any]) -> str:
    if "unreadable" in info:
        return f"{marker} (unreadable: {info['unreadable']}) shows a previous run had state"
    when = info.get("created_utc") or "?"
    return f"{marker} shows themisd created it on {when} (id {info.get('id', '?')})"


def move_aside(db: Path, stamp: str | None = None) -> list[Path]:
    """Renames `db` and its -wal/-shm/-journal to ``<name>.damaged-<stamp>[-wal...]`` (never deletes).

    The sidecars keep their suffix after the new name, so ``sqlite3 themis.db.damaged-<stamp>`` still
    sees the WAL that belongs to it (and a stale WAL is never replayed into the new database).
    """
    stamp = stamp or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = db.with_name(f"{db.name}.damaged-{stamp}")
    n = 1
    while any(p.exists() for p in (base, *sidecars(base))):
        base = db.with_name(f"{db.name}.damaged-{stamp}-{n}")
        n += 1
    moved = []
    for src, dst in zip((db, *sidecars(db)), (base, *sidecars(base)), strict=True):
        if src.exists():
            os.replace(src, dst)
            moved.append(dst)
    return moved


def open_store(path: str | Path, fresh_state: bool = False, migrations: Sequence[str] = MIGRATIONS) -> Store:
    """Opens themisd's database, refusing to start silently on empty or damaged state.

    * No marker and no database: the very first start; the database is created, then the marker.
    * Marker present, database missing, 0 bytes or without a schema (its WAL deleted), or no database
      but its WAL left: StateError naming the path and ``--fresh-state``, unless `fresh_state`.
    * A damaged database (not SQLite, malformed, failed quick_check, newer schema, ...): the StateError of
      :class:`Store`, unless `fresh_state`.
    * `fresh_state`: the unusable files are moved aside (:func:`move_aside`), a new database and a new
      marker are written, and a warning is logged. On an intact database it changes nothing (a warning).
    """
    db = Path(path)
    marker = marker_path(db)
    info = _read_marker(marker)
    size = db.stat().st_size if db.exists() else None
    wal = db.with_name(db.name + "-wal")
    orphan_wal = wal.exists() and wal.stat().st_size > 0
    reset = False
    if not size and (info is not None or orphan_wal):
        what = "is missing" if size is None else "is empty (0 bytes)"
        evidence = (
            _describe(marker, info) if info is not None else f"its write-ahead log {wal} is still there"
        )
        if not fresh_state:
            raise StateError(
                f"{db}: the state database {what} but {evidence}: the apps' history, leases and "
                f"audit log are gone; restore it from a backup, or start "
                f"with {FRESH_HINT} to begin with empty state"
            )
        moved = move_aside(db)
        log.warning(
            "%s: state database %s; starting with empty state (%s)%s",
            db,
            what,
            FRESH_FLAG,
            f"; moved aside: {', '.join(map(str, moved))}" if moved else "",
        )
        reset = True
    try:
        store = Store(db, migrations, create=reset or info is None)
    except StateError as e:
        if not (fresh_state and e.damaged) or reset:
            raise
        moved = move_aside(db)
        log.warning(
            "%s: unusable (%s); starting with empty state (%s): moved aside to %s",
            db,
            re.split(r": (?:restore|upgrade) ", str(e).removeprefix(f"{db}: "))[0],
            FRESH_FLAG,
            ", ".join(map(str, moved)) or "nothing",
        )
        store = Store(db, migrations)
        reset = True
    else:
        if fresh_state and not reset:
            log.warning(
                "%s: the state database is intact: %s ignored (remove the flag; to really start over, "
                "stop themisd and move the database away)",
                db,
                FRESH_FLAG,
            )
    if reset or info is None or "unreadable" in info:
        try:
            _write_marker(marker, db, previous=info)
        except OSError as e:
            store.close()
            if storage_problem(e):
                raise StateError(
                    f"{storage_message(db, e)}, then start themisd again", damaged=False
                ) from None
            raise StateError(
                f"{marker}: cannot write the state marker: {e.strerror or e}: check that "
                "state_dir is writable by the service user",
                damaged=False,
            ) from None
    return store
