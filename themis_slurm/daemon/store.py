"""themisd's durable state: one SQLite database (WAL) under state_dir (the store; the core's ClusterState,
core/state.py, is the input of one round and unrelated).

What must survive a crash or a restart is exactly what Slurm does not know: the apps' service history and
contention clocks (fairness is about the past), each job's Themis intent and lease, and the audit log of
rounds and decisions. Everything else is re-read from Slurm every cycle.

Crash safety comes from the order of writes, not from distributed transactions: the loop records an
intent (``starting``, ``warning``, ``requeueing``) in a committed transaction BEFORE the Slurm action and
the outcome after it; every Slurm action is idempotent, so after a kill -9 the reconciler (reconcile.py)
compares each recorded intent with what Slurm shows and either finishes the action or rolls it back.

The schema is versioned: ``schema_version`` holds the version and :data:`MIGRATIONS` lists the steps from
one version to the next; opening a database applies the missing steps in one transaction each. Never edit
a released migration: append a new one.

State is never silently wrong: :class:`Store` checks the file when it opens it (an SQLite database,
``PRAGMA quick_check``, a known schema version, every table present) and raises :class:`StateError` with a
one-line message naming the file, the problem and the way out. :func:`open_store` (what themisd uses) adds
the marker file ``themis.db.marker`` next to the database, written once the database exists: a marker
without its database (missing, or 0 bytes) means a previous run's history is gone, and themisd refuses to
start on empty state unless asked (``themisd run --fresh-state``, which moves the damaged files aside as
``<name>.damaged-<timestamp>`` rather than deleting them).

The state is private to the service user and its group (:data:`DIR_MODE`, :data:`FILE_MODE`): the
database names every app, job and user, which Slurm's PrivateData may hide from other users. Whatever the
umask, the state directory is created 0750 and every file 0640 (SQLite gives the -wal and -shm files the
database's mode), and themisd refuses to start on state that other users can read (:func:`check_private`).

A disk that cannot take a write (full, I/O error, read-only) is named in one line by
:func:`storage_message`; a failed write rolls its whole transaction back (:meth:`Store.tx`) and raises, so
the Slurm action its intent was recorded for never runs.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import re
import shlex
import sqlite3
import stat
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from themis_slurm.core.decision import AppRecord
from themis_slurm.core.fairness import ContentionClock
from themis_slurm.core.tenancy import Entity, Tenancy, TenantBook
from themis_slurm.tenant_levels import entity_from_json, entity_json, tenancy_from_json, tenancy_json

#: Intents of a job, in its life: waiting (held, wants GPUs) -> granted (a round gave it GPUs; start
#: pending until they are free) -> starting (pin+release sent) -> running (lease) -> warning (SIGUSR1 to
#: send) -> warned (grace running) -> requeueing (requeuehold sent) -> waiting. `running` without a
#: Themis start is an adopted job.
INTENTS = ("waiting", "granted", "starting", "running", "warning", "warned", "requeueing")

_V1 = """
CREATE TABLE apps (
    app_key TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    arrival REAL NOT NULL,
    clock_since REAL NOT NULL,
    clock_last REAL NOT NULL,
    clock_integral REAL NOT NULL,
    clock_current REAL NOT NULL,
    finished_work REAL NOT NULL DEFAULT 0,
    peak_gpus INTEGER NOT NULL DEFAULT 0,
    service_s REAL NOT NULL DEFAULT 0,
    active INTEGER NOT NULL DEFAULT 1,
    rho REAL
);
CREATE TABLE jobs (
    job_id TEXT PRIMARY KEY,
    slurm_id INTEGER NOT NULL,
    app_key TEXT NOT NULL,
    intent TEXT NOT NULL,
    gpus INTEGER NOT NULL,
    work REAL NOT NULL,
    est_source TEXT NOT NULL DEFAULT '',
    est_note TEXT NOT NULL DEFAULT '',
    service_s REAL NOT NULL DEFAULT 0,
    done_service REAL NOT NULL DEFAULT 0,
    progress REAL,
    progress_note TEXT NOT NULL DEFAULT '',
    accounted_until REAL,
    planned_nodes TEXT NOT NULL DEFAULT '{}',
    planned_gpus TEXT NOT NULL DEFAULT '[]',
    grant_time REAL,
    lease_start REAL,
    lease_expiry REAL,
    release_time REAL,
    warn_time REAL,
    requeue_time REAL,
    adopted INTEGER NOT NULL DEFAULT 0,
    first_seen REAL NOT NULL
);
CREATE INDEX jobs_app ON jobs(app_key);
CREATE TABLE rounds (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    mode TEXT NOT NULL,
    trigger TEXT NOT NULL,
    solver TEXT NOT NULL,
    offered_gpus INTEGER NOT NULL,
    grants INTEGER NOT NULL,
    renewals INTEGER NOT NULL,
    preemptions INTEGER NOT NULL,
    latency_s REAL NOT NULL
);
CREATE TABLE decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    round_id INTEGER NOT NULL REFERENCES rounds(id),
    time REAL NOT NULL,
    app_key TEXT NOT NULL,
    job_id TEXT,
    action TEXT NOT NULL,
    reason TEXT NOT NULL,
    rho_before REAL,
    rho_after REAL,
    payment REAL,
    gpus INTEGER,
    nodes TEXT,
    lease_expiry REAL
);
CREATE INDEX decisions_job ON decisions(job_id);
CREATE INDEX decisions_app ON decisions(app_key);
CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    job_id TEXT,
    app_key TEXT,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL
);
"""

#: v2: each round records the worst rho among the apps it saw (before its allocation), so that the rounds
#: table alone shows whether fairness improves over time (the demo summary, /v1/rounds).
_V2 = """
ALTER TABLE rounds ADD COLUMN worst_rho REAL;
"""

#: v3: decisions are data. Each decision row stores the typed outcome of the round (core.decision) in
#: columns, and sentences are made from them when shown (themis_slurm.reasons): app rows (and grant rows,
#: for the app they started) the AppRecord's outcome, rank, ranked, bid, won/kept/leftover GPUs, kept_by
#: and reservation; grant rows their source; renewal and preemption rows their cause (cut_s: a lease cut
#: by the hidden payment; instead_of: the job an in-place renewal kept from moving). Each round stores
#: its fairness knob (named when an app was not offered the pool). `reason` stays for rows written by
#: older daemons (shown as written, never parsed); new rows leave it empty.
_V3 = """
ALTER TABLE rounds ADD COLUMN fairness_knob REAL;
ALTER TABLE decisions ADD COLUMN outcome TEXT;
ALTER TABLE decisions ADD COLUMN rank INTEGER;
ALTER TABLE decisions ADD COLUMN ranked INTEGER;
ALTER TABLE decisions ADD COLUMN bid INTEGER;
ALTER TABLE decisions ADD COLUMN won_gpus INTEGER;
ALTER TABLE decisions ADD COLUMN kept_gpus INTEGER;
ALTER TABLE decisions ADD COLUMN kept_by TEXT;
ALTER TABLE decisions ADD COLUMN leftover_gpus INTEGER;
ALTER TABLE decisions ADD COLUMN reservation_job TEXT;
ALTER TABLE decisions ADD COLUMN reservation_gpus INTEGER;
ALTER TABLE decisions ADD COLUMN reservation_held INTEGER;
ALTER TABLE decisions ADD COLUMN reservation_start_in_s REAL;
ALTER TABLE decisions ADD COLUMN reservation_started INTEGER;
ALTER TABLE decisions ADD COLUMN source TEXT;
ALTER TABLE decisions ADD COLUMN cause TEXT;
ALTER TABLE decisions ADD COLUMN cut_s REAL;
ALTER TABLE decisions ADD COLUMN instead_of TEXT;
"""

#: v4: estimate calibration (core/calibration.py). Each job keeps the estimate it was given before
#: calibration (est_work, ideal GPU-seconds; 0 on rows of older daemons: no sample) and the factor applied
#: (est_factor); `finished_jobs` keeps, per user, the most recent jobs that ended COMPLETED with that
#: estimate and the work they really did, from which each user's factor is computed.
_V4 = """
ALTER TABLE jobs ADD COLUMN est_work REAL NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN est_factor REAL NOT NULL DEFAULT 1;
CREATE TABLE finished_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    user TEXT NOT NULL,
    app_key TEXT NOT NULL,
    time REAL NOT NULL,
    estimate REAL NOT NULL,
    work REAL NOT NULL
);
CREATE INDEX finished_jobs_user ON finished_jobs(user, id);
"""

#: v5: each job keeps the SubmitTime it had when themisd first saw it (submit_time; NULL on rows of older
#: daemons). Slurm resets SubmitTime at every requeue, and the arbiter reads a job's submit time as its
#: place on the app's private timeline (T_id's critical path, core/fairness.py): read afresh, every
#: preemption would push the job later and make its app look better off than it is.
_V5 = """
ALTER TABLE jobs ADD COLUMN submit_time REAL;
"""

#: v6: what a released job that Slurm kept pending taught (a QOS or association limit Themis cannot see on
#: a held job): the job is not granted again before `until`. Kept in memory only before, so a restart
#: granted the same impossible start again.
_V6 = """
CREATE TABLE learned (
    job_id TEXT PRIMARY KEY,
    why TEXT NOT NULL,
    until REAL NOT NULL
);
"""

#: v7: each app keeps the Slurm account its jobs run under (issue 33: the account -> user -> app tree its
#: share comes from, daemon/tenancy.py), set when the app arrives from its first job's account; '' on rows of
#: older daemons (filled from the app's jobs at the next cycle) and without accounting.
_V7 = """
ALTER TABLE apps ADD COLUMN account TEXT NOT NULL DEFAULT '';
"""

#: v8: each active tenant's book (issue 33: paced quotas, core/quota.py): what its share of the cluster has
#: owed it since it last became active (GPU-seconds, integrated at `frac` up to `updated`) and the work of
#: its jobs that finished since; the row goes when the tenant has no jobs left. `entity` is the core's
#: Entity as JSON: ["user", ["account", "user"]].
_V8 = """
CREATE TABLE tenants (
    entity TEXT PRIMARY KEY,
    entitled REAL NOT NULL,
    finished REAL NOT NULL,
    frac REAL NOT NULL,
    updated REAL NOT NULL
);
"""

#: v9: what the status API needs to show tenancy without asking Slurm (issue 33 item 5). `tenancy` holds one
#: row, the tree the rounds use (written when it changes): `levels` (JSON list), `tree` (JSON: the raw
#: shares of accounts and users, core/tenancy.Tenancy; tenant_levels.tenancy_json), `line` (what the log
#: said of it) and `read_at` (when it was last resolved: read from Slurm, or the config's flat tree; NULL for
#: the start fallback, read from nowhere). Each app record (decision rows with an AppRecord) keeps its tenant (the core's Entity as JSON,
#: NULL when flat), the tenant's quota in the round and the GPUs it held after it. decisions_round serves
#: "the last round's records" (the API asks it on every status request) without a scan of the audit log.
_V9 = """
CREATE TABLE tenancy (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    levels TEXT NOT NULL,
    tree TEXT NOT NULL,
    line TEXT NOT NULL DEFAULT '',
    read_at REAL,
    updated REAL NOT NULL
);
ALTER TABLE decisions ADD COLUMN tenant TEXT;
ALTER TABLE decisions ADD COLUMN tenant_quota REAL;
ALTER TABLE decisions ADD COLUMN tenant_gpus INTEGER;
CREATE INDEX decisions_round ON decisions(round_id);
"""

#: Migration k brings the schema from version k to k+1 (version 0 is an empty database).
MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9)


FRESH_FLAG = "--fresh-state"
#: How an admin asks for a fresh start (the flag of `themisd run`); named in the messages.
FRESH_HINT = f"`themisd run {FRESH_FLAG}`"

log = logging.getLogger("themisd")


class StateError(RuntimeError):
    """The database cannot be used (newer schema than this themisd, corrupt file, ...).

    The message is one line: the file, what is wrong, how to recover. `damaged` is True when the file
    itself is unusable (so that ``--fresh-state`` may move it aside), False for a problem of the
    environment (permissions, a lock held by another process) that moving the file would not fix.
    """

    def __init__(self, message: str, damaged: bool = True) -> None:
        super().__init__(message)
        self.damaged = damaged


def _recovery(path: Path) -> str:
    return (f"restore {path} from a backup, or start with {FRESH_HINT} to move it aside and begin with empty "
            "state (the apps' history and the audit log are lost)")


@dataclass(frozen=True)
class BookRow:
    """A tenant's durable book (core/tenancy.TenantBook) with how it is integrated: `entitled` GPU-seconds
    up to `updated`, owed at `frac` (its fraction of the cluster) since; `finished` work of its jobs."""

    entitled: float
    finished: float
    frac: float
    updated: float

    def book(self, now: float, cluster_gpus: float) -> TenantBook:
        return TenantBook(self.entitled + max(0.0, now - self.updated) * cluster_gpus * self.frac, self.finished)


@dataclass(frozen=True)
class AppRow:
    """An app's durable fairness state."""

    app_key: str
    owner: str
    arrival: float
    clock_since: float
    clock_last: float
    clock_integral: float
    clock_current: float
    finished_work: float = 0.0
    peak_gpus: int = 0
    service_s: float = 0.0
    active: int = 1
    rho: float | None = None
    account: str = ""  # the Slurm account of its first job ("" unknown); see planning.advance_apps

    @property
    def clock(self) -> ContentionClock:
        return ContentionClock(self.clock_since, self.clock_last, self.clock_integral, self.clock_current)

    def with_clock(self, c: ContentionClock) -> AppRow:
        return replace(self, clock_since=c.since, clock_last=c.last, clock_integral=c.integral,
                       clock_current=c.current)  # fmt: skip


@dataclass(frozen=True)
class JobRow:
    """A job's Themis intent, lease and accounting. `planned_*` are the GPUs the last grant chose."""

    job_id: str
    slurm_id: int
    app_key: str
    intent: str
    gpus: int
    work: float
    first_seen: float
    est_source: str = ""
    est_note: str = ""
    service_s: float = 0.0
    done_service: float = 0.0
    progress: float | None = None
    progress_note: str = ""
    accounted_until: float | None = None
    planned_nodes: Mapping[str, int] = None  # type: ignore[assignment]
    planned_gpus: frozenset[int] = frozenset()
    grant_time: float | None = None
    lease_start: float | None = None
    lease_expiry: float | None = None
    release_time: float | None = None
    warn_time: float | None = None
    requeue_time: float | None = None
    adopted: int = 0
    est_work: float = 0.0  # the estimate before calibration (what a finished job's ratio is taken against)
    est_factor: float = 1.0  # the calibration factor `work` carries
    #: SubmitTime when first seen (Slurm moves it to the moment of each requeue); None on older rows
    submit_time: float | None = None

    def __post_init__(self) -> None:
        if self.intent not in INTENTS:
            raise ValueError(f"job {self.job_id}: unknown intent {self.intent!r}")
        if self.planned_nodes is None:
            object.__setattr__(self, "planned_nodes", {})


_JOB_FIELDS = tuple(f.name for f in fields(JobRow))
_APP_FIELDS = tuple(f.name for f in fields(AppRow))


def _job_to_sql(row: JobRow) -> dict[str, Any]:
    d = {k: getattr(row, k) for k in _JOB_FIELDS}  # shallow: dataclasses.asdict deep-copies (slow)
    d["planned_nodes"] = json.dumps(dict(sorted(row.planned_nodes.items())))
    d["planned_gpus"] = json.dumps(sorted(row.planned_gpus))
    return d


def _job_from_sql(r: sqlite3.Row) -> JobRow:
    d = {k: r[k] for k in _JOB_FIELDS}
    d["planned_nodes"] = {str(k): int(v) for k, v in json.loads(d["planned_nodes"] or "{}").items()}
    d["planned_gpus"] = frozenset(int(g) for g in json.loads(d["planned_gpus"] or "[]"))
    return JobRow(**d)


def job_row(d: Mapping[str, Any]) -> JobRow:
    """A JobRow from a decoded row dict (api.db's rows: JSON columns already decoded; unknown keys ignored)."""
    v = {k: d[k] for k in _JOB_FIELDS if k in d}
    v["planned_nodes"] = {str(k): int(n) for k, n in dict(d.get("planned_nodes") or {}).items()}
    v["planned_gpus"] = frozenset(int(g) for g in d.get("planned_gpus") or ())
    return JobRow(**v)


def app_row(d: Mapping[str, Any]) -> AppRow:
    """An AppRow from a row dict (unknown keys ignored)."""
    return AppRow(**{k: d[k] for k in _APP_FIELDS if k in d})


class Store:
    """The database. Methods that write must run inside :meth:`tx`; reads may run anywhere."""

    def __init__(self, path: str | Path, migrations: Sequence[str] = MIGRATIONS, create: bool = True) -> None:
        """Opens, checks and migrates the database; StateError (one line) when it cannot be used.

        An existing file is checked first over a read-only connection, so that a refused file is left
        exactly as it was (a read-write connection would checkpoint its WAL into it on close). `create`
        False refuses a database without a schema yet (a previous run's state is expected).
        """
        self.path = Path(path)
        self._in_tx = False
        make_state_dir(self.path.parent)
        _create_private(self.path)
        checked = self.path.exists() and self.path.stat().st_size > 0 and self._check_read_only(migrations, create)
        try:
            self.db = sqlite3.connect(str(self.path), isolation_level=None, timeout=30.0)
        except sqlite3.Error as e:
            raise _open_error(self.path, e) from None
        try:
            self.db.row_factory = sqlite3.Row
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")  # a committed intent must survive a power cut
            self.db.execute("PRAGMA foreign_keys=ON")
            version = self._check(self.db, migrations, create, integrity=not checked)
        except sqlite3.Error as e:
            self.db.close()
            raise _open_error(self.path, e) from None
        except StateError:
            self.db.close()
            raise
        try:
            self.version = self._migrate(version, migrations)
        except sqlite3.DatabaseError as e:
            self.db.close()
            if _is_corruption(e) or storage_problem(e):
                raise _open_error(self.path, e) from None
            raise StateError(f"{self.path}: migration of the schema failed ({e}): the database is left at "
                             f"version {version}; report this bug, and restore a backup if it persists",
                             damaged=False) from None

    # ---------------------------------------------------------------------------------- checks, schema
    def _check_read_only(self, migrations: Sequence[str], create: bool) -> bool:
        """:meth:`_check` over a read-only connection: True when it passed, False when it could not run
        (the read-write connection then checks); StateError when the file is unusable."""
        try:
            ro = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=30.0)
        except sqlite3.Error:
            return False
        try:
            self._check(ro, migrations, create)
            return True
        except sqlite3.Error as e:
            if _is_corruption(e):
                raise _open_error(self.path, e) from None
            return False
        finally:
            ro.close()

    def _check(self, db: sqlite3.Connection, migrations: Sequence[str], create: bool,
               integrity: bool = True) -> int:
        """The stored schema version, after checking the file: PRAGMA quick_check (O(size), no index
        cross-check: a damaged page is refused at open, not mid-cycle), a themisd schema no newer than
        `migrations`, and every table that version should have."""
        if integrity:
            problems = [str(r[0]) for r in db.execute("PRAGMA quick_check(3)")]
            if problems != ["ok"]:
                first = " ".join(problems[0].split()) if problems else "no answer"
                raise StateError(f"{self.path}: the database is damaged (integrity check: {first}): "
                                 f"{_recovery(self.path)}")
        tables = {r[0] for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
        version = 0
        if "schema_version" not in tables:
            if tables:
                raise StateError(f"{self.path}: an SQLite database but not themisd's (tables "
                                 f"{', '.join(sorted(tables)[:5])}, no schema_version): check state_dir, or "
                                 f"{_recovery(self.path)}")
        else:
            rows = db.execute("SELECT version FROM schema_version").fetchall()
            if rows:
                version = rows[0][0]
                if len(rows) != 1 or not isinstance(version, int) or version < 0:
                    raise StateError(f"{self.path}: the database is damaged (schema_version holds "
                                     f"{[r[0] for r in rows][:3]!r}, expected one version number): "
                                     f"{_recovery(self.path)}")
        if version > len(migrations):
            raise StateError(f"{self.path}: schema version {version} is newer than this themisd knows "
                             f"({len(migrations)}): upgrade themisd or restore a matching database, or start "
                             f"with {FRESH_HINT} to move it aside and begin with empty state")
        if version == 0 and not create:
            raise StateError(f"{self.path}: the state database holds no themisd state (no schema) although "
                             f"a previous run had state (its data or its -wal file is gone): "
                             f"{_recovery(self.path)}")
        missing = [t for t in _expected_tables(migrations[:version]) if t not in tables]
        if missing:
            raise StateError(f"{self.path}: the database is damaged (table {', '.join(missing)} missing at "
                             f"schema version {version}): {_recovery(self.path)}")
        return version

    def _migrate(self, version: int, migrations: Sequence[str]) -> int:
        self.db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        for target in range(version + 1, len(migrations) + 1):
            with self.tx():
                for stmt in _statements(migrations[target - 1]):
                    self.db.execute(stmt)
                self.db.execute("DELETE FROM schema_version")
                self.db.execute("INSERT INTO schema_version (version) VALUES (?)", (target,))
        return len(migrations)

    # ---------------------------------------------------------------------------------- transactions
    @contextmanager
    def tx(self) -> Iterator[None]:
        """One atomic unit (BEGIN IMMEDIATE .. COMMIT); nested calls join the outer transaction.

        Any failure, the COMMIT's included (in WAL mode a full disk shows there), undoes the whole unit and
        re-raises: the caller never goes on to the Slurm action whose intent was not recorded, and the
        Store stays usable for the next cycle.
        """
        if self._in_tx:
            yield
            return
        self._rollback()  # a ROLLBACK that failed last time may have left a transaction open
        self.db.execute("BEGIN IMMEDIATE")
        self._in_tx = True
        try:
            yield
            self.db.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        finally:
            self._in_tx = False

    def _rollback(self) -> None:
        """Ends an open transaction without its changes. SQLite rolls some failures (a full disk, an I/O
        error) back by itself, so ROLLBACK only when one is still open; and a ROLLBACK that fails too must
        not hide the error that caused it (the next :meth:`tx` tries again)."""
        if not self.db.in_transaction:
            return
        try:
            self.db.execute("ROLLBACK")
        except sqlite3.Error as e:
            log.debug("%s: rollback failed: %s", self.path, e)

    def _need_tx(self) -> None:
        if not self._in_tx:
            raise RuntimeError("write outside a transaction")

    def close(self) -> None:
        self.db.close()

    # ---------------------------------------------------------------------------------- apps
    def apps(self, active_only: bool = False) -> dict[str, AppRow]:
        q = "SELECT * FROM apps" + (" WHERE active = 1" if active_only else "")
        return {r["app_key"]: AppRow(**{k: r[k] for k in _APP_FIELDS}) for r in self.db.execute(q)}

    def put_app(self, row: AppRow) -> None:
        self.put_apps([row])

    def put_apps(self, rows: Iterable[AppRow]) -> None:
        self._need_tx()
        cols = ", ".join(_APP_FIELDS)
        marks = ", ".join(f":{k}" for k in _APP_FIELDS)
        self.db.executemany(f"INSERT OR REPLACE INTO apps ({cols}) VALUES ({marks})",
                            ({k: getattr(r, k) for k in _APP_FIELDS} for r in rows))

    # ---------------------------------------------------------------------------------- jobs
    def jobs(self) -> dict[str, JobRow]:
        return {r["job_id"]: _job_from_sql(r) for r in self.db.execute("SELECT * FROM jobs")}

    def job(self, job_id: str) -> JobRow | None:
        r = self.db.execute("SELECT * FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return _job_from_sql(r) if r else None

    def put_job(self, row: JobRow) -> None:
        self.put_jobs([row])

    def put_jobs(self, rows: Iterable[JobRow]) -> None:
        self._need_tx()
        cols = ", ".join(_JOB_FIELDS)
        marks = ", ".join(f":{k}" for k in _JOB_FIELDS)
        self.db.executemany(f"INSERT OR REPLACE INTO jobs ({cols}) VALUES ({marks})", map(_job_to_sql, rows))

    def delete_job(self, job_id: str) -> None:
        self._need_tx()
        self.db.execute("DELETE FROM jobs WHERE job_id = ?", (job_id,))

    # ---------------------------------------------------------------------------------- audit log
    def add_round(self, time: float, mode: str, trigger: str, solver: str, offered: int, grants: int,
                  renewals: int, preemptions: int, latency_s: float, worst_rho: float | None = None,
                  fairness_knob: float | None = None) -> int:
        self._need_tx()
        if worst_rho is not None and not math.isfinite(worst_rho):
            worst_rho = None
        cur = self.db.execute(
            "INSERT INTO rounds (time, mode, trigger, solver, offered_gpus, grants, renewals, preemptions,"
            " latency_s, worst_rho, fairness_knob) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (time, mode, trigger, solver, offered, grants, renewals, preemptions, latency_s, worst_rho,
             fairness_knob),
        )
        return int(cur.lastrowid or 0)

    def add_decision(self, round_id: int, time: float, app_key: str, job_id: str | None, action: str,
                     reason: str = "", rho_before: float | None = None, rho_after: float | None = None,
                     payment: float | None = None, gpus: int | None = None,
                     nodes: Mapping[str, int] | None = None, lease_expiry: float | None = None, *,
                     record: AppRecord | None = None, source: str | None = None, cause: str | None = None,
                     cut_s: float | None = None, instead_of: str | None = None) -> None:
        """One audit row. `record` (the app's AppRecord: app rows, and grant rows for the app they started),
        `source` (grants) and `cause`/`cut_s`/`instead_of` (renewals, preemptions) are stored as columns;
        `reason` is only for callers replaying rows of older daemons (new rows leave it empty)."""
        self._need_tx()
        typed: dict[str, Any] = {"source": source, "cause": None if cause is None else str(cause),
                                 "cut_s": _finite(cut_s), "instead_of": instead_of}
        if record is not None:
            note = record.reservation
            typed.update(outcome=str(record.outcome), rank=record.rank, ranked=record.ranked, bid=int(record.bid),
                         won_gpus=record.won_gpus, kept_gpus=record.kept_gpus, kept_by=str(record.kept_by),
                         leftover_gpus=record.leftover_gpus)
            if record.tenant:
                typed.update(tenant=entity_json(record.tenant), tenant_quota=_finite(record.tenant_quota),
                             tenant_gpus=record.tenant_gpus)
            if note is not None:
                typed.update(reservation_job=note.job_id, reservation_gpus=note.gpus,
                             reservation_held=note.held, reservation_start_in_s=_finite(note.start_in_s),
                             reservation_started=int(note.started))
        cols = ["round_id", "time", "app_key", "job_id", "action", "reason", "rho_before", "rho_after",
                "payment", "gpus", "nodes", "lease_expiry", *typed]
        values = [round_id, time, app_key, job_id, action, reason, _finite(rho_before), _finite(rho_after),
                  payment, gpus, json.dumps(dict(nodes)) if nodes is not None else None, _finite(lease_expiry),
                  *typed.values()]
        self.db.execute(f"INSERT INTO decisions ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                        values)

    def add_event(self, time: float, kind: str, detail: str, job_id: str | None = None,
                  app_key: str | None = None) -> None:
        self._need_tx()
        self.db.execute("INSERT INTO events (time, job_id, app_key, kind, detail) VALUES (?, ?, ?, ?, ?)",
                        (time, job_id, app_key, kind, detail))

    def add_finished(self, job_id: str, user: str, app_key: str, time: float, estimate: float, work: float,
                     keep: int) -> None:
        """A job that ended COMPLETED: its estimate and true work join `user`'s calibration history, of
        which the `keep` most recent entries are kept."""
        self._need_tx()
        self.db.execute("INSERT INTO finished_jobs (job_id, user, app_key, time, estimate, work) "
                        "VALUES (?, ?, ?, ?, ?, ?)", (job_id, user, app_key, time, estimate, work))
        self.db.execute("DELETE FROM finished_jobs WHERE user = ? AND id NOT IN (SELECT id FROM finished_jobs "
                        "WHERE user = ? ORDER BY id DESC LIMIT ?)", (user, user, keep))

    def finished_history(self, window: int) -> dict[str, list[tuple[float, float]]]:
        """Per user, (estimate, work) of their `window` most recent finished jobs, oldest first."""
        out: dict[str, list[tuple[float, float]]] = {}
        for r in self.db.execute(
                "SELECT user, estimate, work FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY user ORDER BY id "
                "DESC) AS k FROM finished_jobs) WHERE k <= ? ORDER BY id", (window,)):
            out.setdefault(r["user"], []).append((r["estimate"], r["work"]))
        return out

    def learned(self) -> dict[str, tuple[str, float]]:
        """Jobs not to be granted before a time: job id -> (why, until)."""
        return {r["job_id"]: (r["why"], r["until"]) for r in self.db.execute("SELECT * FROM learned")}

    def put_learned(self, job_id: str, why: str, until: float) -> None:
        self._need_tx()
        self.db.execute("INSERT OR REPLACE INTO learned (job_id, why, until) VALUES (?, ?, ?)", (job_id, why, until))

    def forget_learned(self, job_ids: Iterable[str]) -> None:
        self._need_tx()
        self.db.executemany("DELETE FROM learned WHERE job_id = ?", ((j,) for j in job_ids))

    def tenant_books(self) -> dict[Entity, BookRow]:
        """Every active tenant's book (paced quotas), by the core's Entity."""
        out: dict[Entity, BookRow] = {}
        for r in self.db.execute("SELECT * FROM tenants"):
            out[entity_from_json(r["entity"])] = BookRow(r["entitled"], r["finished"], r["frac"], r["updated"])
        return out

    def put_tenant_books(self, books: Mapping[Entity, BookRow]) -> None:
        """The books of the tenants active now; every other tenant's row goes (its busy period ended)."""
        self._need_tx()
        self.db.execute("DELETE FROM tenants")
        self.db.executemany("INSERT INTO tenants (entity, entitled, finished, frac, updated) VALUES (?, ?, ?, ?, ?)",
                            ((entity_json(ent), b.entitled, b.finished, b.frac, b.updated)
                             for ent, b in books.items()))

    def tenancy(self) -> tuple[Tenancy, str, float | None] | None:
        """The tree last stored by :meth:`put_tenancy` (tenancy, line, read_at); None before any."""
        rows = list(self.db.execute("SELECT * FROM tenancy WHERE id = 1"))
        if not rows:
            return None
        return tenancy_from_json(rows[0]["tree"]), rows[0]["line"], rows[0]["read_at"]

    def put_tenancy(self, tenancy: Tenancy, line: str, read_at: float | None, now: float) -> None:
        """The tree the rounds use from now on (the status API shows shares and levels from it)."""
        self._need_tx()
        self.db.execute("INSERT OR REPLACE INTO tenancy (id, levels, tree, line, read_at, updated) "
                        "VALUES (1, ?, ?, ?, ?, ?)",
                        (json.dumps(list(tenancy.levels)), tenancy_json(tenancy), line, read_at, now))

    def add_tenant_finished(self, entity: Entity, work: float) -> None:
        """A job of this tenant finished with `work` done (ideal GPU-seconds): into its book, if it has one."""
        self._need_tx()
        self.db.execute("UPDATE tenants SET finished = finished + ? WHERE entity = ?",
                        (work, entity_json(entity)))

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Read-only helper for tests, tools and admins' questions."""
        return list(self.db.execute(sql, params))


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


def _expected_tables(migrations: Sequence[str]) -> list[str]:
    """The tables the migrations leave (CREATE TABLE minus DROP TABLE, in order)."""
    out: list[str] = []
    for script in migrations:
        for verb, name in re.findall(r"\b(CREATE|DROP)\s+TABLE\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?(\w+)", script,
                                     flags=re.IGNORECASE):
            if verb.upper() == "CREATE" and name not in out:
                out.append(name)
            elif verb.upper() == "DROP" and name in out:
                out.remove(name)
    return out


_CORRUPT = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


def _is_corruption(e: sqlite3.Error) -> bool:
    name = getattr(e, "sqlite_errorname", "") or ""
    text = str(e).lower()
    return (name.startswith(_CORRUPT) or "file is not a database" in text or "malformed" in text
            or "database corrupt" in text)


def _open_error(path: Path, e: sqlite3.Error) -> StateError:
    """One line for an sqlite3 error met while opening `path`: damage, or a problem of the environment."""
    text = " ".join(str(e).split())
    name = getattr(e, "sqlite_errorname", "") or ""
    if _is_corruption(e):
        what = ("not an SQLite database (truncated or overwritten?)" if "not a database" in text.lower()
                else "the database is damaged")
        return StateError(f"{path}: {what} ({text}): {_recovery(path)}")
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text.lower():
        return StateError(f"{path}: the database is locked by another process ({text}): stop it (an "
                          "sqlite3 shell, a second themisd?) and start again", damaged=False)
    if name.startswith(("SQLITE_CANTOPEN", "SQLITE_READONLY", "SQLITE_PERM", "SQLITE_AUTH")) or any(
            w in text.lower() for w in ("unable to open", "readonly", "permission")):
        return StateError(f"{path}: cannot open the database ({text}): check that state_dir exists and is "
                          "writable by the service user", damaged=False)
    if storage_problem(e):
        return StateError(f"{storage_message(path, e)}, then start themisd again", damaged=False)
    return StateError(f"{path}: cannot open the database ({text}): {_recovery(path)}")


# ------------------------------------------------------------------------------------------ marker, fresh start
MARKER_SUFFIX = ".marker"


def marker_path(db_path: str | Path) -> Path:
    """The marker next to the database (``themis.db`` -> ``themis.db.marker``): proof a previous run had state."""
    p = Path(db_path)
    return p.with_name(p.name + MARKER_SUFFIX)


def _sidecars(db: Path) -> list[Path]:
    return [db.with_name(db.name + s) for s in ("-wal", "-shm", "-journal")]


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
    data: dict[str, Any] = {"path": str(db), "id": uuid.uuid4().hex, "created": now,
                            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                            "note": "written by themisd once the database exists; if the database is missing "
                                    "or empty while this file exists, themisd refuses to start (see "
                                    f"docs/admin-guide.md; {FRESH_FLAG} starts over)"}
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
    while any(p.exists() for p in (base, *_sidecars(base))):
        base = db.with_name(f"{db.name}.damaged-{stamp}-{n}")
        n += 1
    moved = []
    for src, dst in zip((db, *_sidecars(db)), (base, *_sidecars(base)), strict=True):
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
        evidence = _describe(marker, info) if info is not None else f"its write-ahead log {wal} is still there"
        if not fresh_state:
            raise StateError(f"{db}: the state database {what} but {evidence}: the apps' history, leases and "
                             f"audit log are gone; restore it from a backup, or start "
                             f"with {FRESH_HINT} to begin with empty state")
        moved = move_aside(db)
        log.warning("%s: state database %s; starting with empty state (%s)%s", db, what, FRESH_FLAG,
                    f"; moved aside: {', '.join(map(str, moved))}" if moved else "")
        reset = True
    try:
        store = Store(db, migrations, create=reset or info is None)
    except StateError as e:
        if not (fresh_state and e.damaged) or reset:
            raise
        moved = move_aside(db)
        log.warning("%s: unusable (%s); starting with empty state (%s): moved aside to %s", db,
                    re.split(r": (?:restore|upgrade) ", str(e).removeprefix(f"{db}: "))[0], FRESH_FLAG,
                    ", ".join(map(str, moved)) or "nothing")
        store = Store(db, migrations)
        reset = True
    else:
        if fresh_state and not reset:
            log.warning("%s: the state database is intact: %s ignored (remove the flag; to really start over, "
                        "stop themisd and move the database away)", db, FRESH_FLAG)
    if reset or info is None or "unreadable" in info:
        try:
            _write_marker(marker, db, previous=info)
        except OSError as e:
            store.close()
            if storage_problem(e):
                raise StateError(f"{storage_message(db, e)}, then start themisd again", damaged=False) from None
            raise StateError(f"{marker}: cannot write the state marker: {e.strerror or e}: check that "
                             "state_dir is writable by the service user", damaged=False) from None
    return store


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
        raise StateError(f"{path}: cannot create the state directory: {e.strerror or e}: check state_dir and "
                         "the permissions of its parent", damaged=False) from None


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


def _create_private(db: Path) -> None:
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
        raise StateError(f"{db}: cannot create the database: {e.strerror or e}: check that state_dir is "
                         "writable by the service user", damaged=False) from None


def state_modes(db: Path) -> dict[Path, int]:
    """Permission bits of the state directory and of those of themisd's files in it that exist."""
    out: dict[Path, int] = {}
    for p in (db.parent, db, *_sidecars(db), marker_path(db), db.parent / LOCK_NAME):
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
    return StateError(f"{db}: other users can read themisd's state (every app, job and user name): {listed}; "
                      f"run `chmod o-rwx {paths}` and start again", damaged=False)


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
        return (f"state database {path}: the filesystem is full ({room}; {detail}); free space on {where} "
                "(or raise the service user's quota)")
    if problem == "readonly":
        return (f"state database {path}: cannot be written ({detail}); make {path.parent} and its files "
                "writable by the service user (is the filesystem mounted read-only?)")
    return f"state database {path}: disk I/O error ({detail}); check the disk (dmesg, smartctl) and its filesystem"


def storage_message(path: Path, e: BaseException) -> str:
    """:func:`storage_line` for the error `e` met writing `path`, with the free space measured now."""
    detail = " ".join((e.strerror if isinstance(e, OSError) and e.strerror else str(e)).split())
    return storage_line(path, storage_problem(e) or "io", detail, free_space(path))
