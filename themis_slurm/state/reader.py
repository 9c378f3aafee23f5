"""Read-only access to themisd's state, as typed rows (state/rows.py): what the status API and the `themis`
CLI read.

The database is opened with a ``file:...?mode=ro`` URI, so neither the API nor the CLI can change it even
by mistake; themisd writes in WAL mode, so readers see the last committed cycle without blocking it.
(A WAL database needs its -shm file: readers of a database whose writer is gone still work as long as
the folder's -wal/-shm files exist or the folder is writable.) themisd keeps the state directory 0750 and
its files 0640: besides the service user, only its group may read them, and :func:`connect_ro` says so
(naming the group) to anyone else, before SQLite's "unable to open database file" would.
"""

from __future__ import annotations

import grp
import os
import pwd
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from themis_slurm.state.errors import StateForbidden, StateMissing, StateUnavailable
from themis_slurm.state.rows import (
    AppRow,
    DecisionInRound,
    DecisionRow,
    EventRow,
    JobRow,
    RoundRow,
    RoundStats,
    StoredTenancy,
    rows_from,
    rows_of,
)
from themis_slurm.tenant_levels import tenancy_from_json

R = TypeVar("R")


def _name(lookup: Callable[[int], Sequence[Any]], key: int) -> str:
    """The name of a uid or gid (pwd.getpwuid, grp.getgrgid), or the number when it has none."""
    try:
        return str(lookup(key)[0])
    except KeyError:
        return str(key)


def _gid(p: Path) -> int | None:
    try:
        return p.stat().st_gid
    except OSError:
        return None


def forbidden(p: Path, gid: int | None) -> StateForbidden:
    """The one line for a user the permissions keep out: the file, the user, and who can let them in."""
    group = f"group {_name(grp.getgrgid, gid)}" if gid is not None else "themisd's group"
    return StateForbidden(
        f"the state database {p} is not readable by user {_name(pwd.getpwuid, os.geteuid())} "
        f"(ask an admin to add you to {group})"
    )


def check_readable(p: Path) -> None:
    """StateMissing, StateForbidden or StateUnavailable when this process cannot read `p`: said before
    SQLite tries, whose "unable to open database file" names neither the cause nor the way out."""
    try:
        st = p.stat()
    except FileNotFoundError:
        raise StateMissing(
            f"state database {p} does not exist (has themisd ever run with this state_dir?)"
        ) from None
    except PermissionError:  # the directory is closed to this user (0750, and not in its group)
        raise forbidden(p, _gid(p.parent)) from None
    except OSError as e:
        raise StateUnavailable(f"cannot read state database {p}: {e.strerror or e}") from None
    if not os.access(p, os.R_OK):
        raise forbidden(p, st.st_gid)


def connect_ro(path: str | Path, timeout: float = 5.0) -> sqlite3.Connection:
    """A read-only connection (``mode=ro``); StateUnavailable (or the finer StateMissing, StateForbidden)
    when the file cannot be read."""
    p = Path(path)
    check_readable(p)
    try:
        db = sqlite3.connect(
            f"file:{quote(str(p.resolve()))}?mode=ro", uri=True, timeout=timeout, check_same_thread=False
        )
        db.row_factory = sqlite3.Row
        db.execute("SELECT 1 FROM schema_version").fetchone()
    except sqlite3.Error as e:
        raise StateUnavailable(f"cannot read state database {p}: {e}") from None
    return db


class StateReader:
    """Queries the API needs, over one read-only connection (a fresh one per request is cheap too)."""

    def __init__(self, db: sqlite3.Connection, path: str = "") -> None:
        self.db = db
        self.path = path

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> StateReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _unreadable(self, e: sqlite3.Error) -> StateUnavailable:
        return StateUnavailable(f"cannot read state database {self.path}: {e}")

    def _rows(self, cls: type[R], sql: str, params: Sequence[Any] = ()) -> list[R]:
        try:
            return rows_of(cls, self.db.execute(sql, params))
        except sqlite3.Error as e:
            raise self._unreadable(e) from None

    def _raw(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        try:
            return list(self.db.execute(sql, params))
        except sqlite3.Error as e:
            raise self._unreadable(e) from None

    def apps(self) -> list[AppRow]:
        return self._rows(AppRow, "SELECT * FROM apps ORDER BY app_key")

    def jobs(self) -> list[JobRow]:
        return self._rows(JobRow, "SELECT * FROM jobs ORDER BY slurm_id, job_id")

    def job(self, job_id: str) -> JobRow | None:
        rows = self._rows(JobRow, "SELECT * FROM jobs WHERE job_id = ?", (job_id,))
        return rows[0] if rows else None

    def rounds(self, limit: int) -> list[RoundRow]:
        """The last `limit` rounds, newest first."""
        return self._rows(RoundRow, "SELECT * FROM rounds ORDER BY id DESC LIMIT ?", (limit,))

    def decisions(self, actions: Sequence[str]) -> list[DecisionRow]:
        """Every decision row with one of these actions (grant, renewal, preemption, app), oldest first."""
        marks = ", ".join("?" for _ in actions)
        return self._rows(
            DecisionRow,
            f"SELECT * FROM decisions WHERE action IN ({marks}) ORDER BY round_id, id",
            tuple(actions),
        )

    def round_stats(self) -> RoundStats:
        r = self._raw(
            "SELECT COUNT(*) AS n, MAX(time) AS last_time, SUM(preemptions) AS preemptions,"
            " AVG(latency_s) AS mean_latency_s, MAX(latency_s) AS max_latency_s FROM rounds"
        )[0]
        return RoundStats(
            r["n"] or 0, r["last_time"], r["preemptions"] or 0, r["mean_latency_s"], r["max_latency_s"]
        )

    def decisions_of(self, job_id: str, app_key: str, rounds: int) -> list[DecisionInRound]:
        """Decision rows of the job and its app's records, in the app's or job's last `rounds` rounds, newest
        round first, each with its round's trigger, mode and fairness knob (None before schema v3)."""
        cols = {r["name"] for r in self._raw("PRAGMA table_info(rounds)")}
        knob = "r.fairness_knob" if "fairness_knob" in cols else "NULL"
        sql = (
            f"SELECT d.*, r.trigger AS round_trigger, r.mode AS round_mode, {knob} AS round_fairness_knob"
            " FROM decisions d JOIN rounds r ON r.id = d.round_id"
            " WHERE d.round_id IN (SELECT DISTINCT round_id FROM decisions WHERE job_id = ? OR app_key = ?"
            "                      ORDER BY round_id DESC LIMIT ?)"
            "   AND (d.job_id = ? OR (d.app_key = ? AND d.action = 'app'))"
            " ORDER BY d.round_id DESC, d.id"
        )
        try:
            cur = self.db.execute(sql, (job_id, app_key, rounds, job_id, app_key))
            raw = cur.fetchall()
        except sqlite3.Error as e:
            raise self._unreadable(e) from None
        rows = rows_from(DecisionRow, [d[0] for d in cur.description], raw)
        return [
            DecisionInRound(d, r["round_trigger"], r["round_mode"], r["round_fairness_knob"])
            for d, r in zip(rows, raw, strict=True)
        ]

    def round_apps(self, round_id: int | None = None) -> list[DecisionRow]:
        """The app records (decision rows ``app``) of round `round_id`, or of the last round."""
        if round_id is None:
            last = self._raw("SELECT MAX(id) AS id FROM rounds")
            if not last or last[0]["id"] is None:
                return []
            round_id = int(last[0]["id"])
        return self._rows(
            DecisionRow,
            "SELECT * FROM decisions WHERE round_id = ? AND action = 'app' ORDER BY id",
            (round_id,),
        )

    def tenancy(self) -> StoredTenancy | None:
        """The tree the rounds use (store v9 table ``tenancy``); None when themisd has stored none (an older
        themisd, or no cycle yet). ValueError (naming what is wrong) for a stored tree that cannot be read."""
        if not self._raw("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'tenancy'"):
            return None
        rows = self._raw("SELECT * FROM tenancy WHERE id = 1")
        if not rows:
            return None
        return StoredTenancy(tenancy_from_json(rows[0]["tree"]), rows[0]["line"] or "", rows[0]["read_at"])

    def app_of_past_job(self, job_id: str) -> str | None:
        """The app of a job that left (its rows are gone, its decisions and events stay in the audit log)."""
        rows = self._raw(
            "SELECT app_key FROM (SELECT app_key, time FROM decisions WHERE job_id = ? UNION ALL"
            " SELECT app_key, time FROM events WHERE job_id = ? AND app_key IS NOT NULL)"
            " ORDER BY time DESC LIMIT 1",
            (job_id, job_id),
        )
        return rows[0]["app_key"] if rows else None

    def preemptions_by_app(self) -> dict[str, int]:
        rows = self._raw(
            "SELECT app_key, COUNT(*) AS n FROM decisions WHERE action = 'preemption' GROUP BY app_key"
        )
        return {r["app_key"]: int(r["n"]) for r in rows}

    def events_of(self, job_id: str, limit: int = 5) -> list[EventRow]:
        """The job's last `limit` events, newest first."""
        return self._rows(
            EventRow, "SELECT * FROM events WHERE job_id = ? ORDER BY id DESC LIMIT ?", (job_id, limit)
        )

    def last_activity(self) -> float | None:
        """The newest time themisd wrote (round, event, or per-cycle accounting): how fresh the data is."""
        rows = self._raw(
            "SELECT MAX(t) AS t FROM (SELECT MAX(time) AS t FROM rounds UNION ALL"
            " SELECT MAX(time) FROM events UNION ALL SELECT MAX(accounted_until) FROM jobs)"
        )
        t = rows[0]["t"] if rows else None
        return float(t) if t is not None else None


StateFactory = Callable[[], StateReader]


def reader_factory(path: str | Path) -> StateFactory:
    """A factory opening `path` read-only for each use (SQLite connections are not shared across threads)."""

    def open_reader() -> StateReader:
        return StateReader(connect_ro(path), str(path))

    return open_reader
