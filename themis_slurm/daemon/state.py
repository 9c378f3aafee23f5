"""themisd's durable state: one SQLite database (WAL) under state_dir.

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
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from themis_slurm.core.fairness import ContentionClock

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

#: Migration k brings the schema from version k to k+1 (version 0 is an empty database).
MIGRATIONS: tuple[str, ...] = (_V1,)


class StateError(RuntimeError):
    """The database cannot be used (newer schema than this themisd, corrupt file, ...)."""


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


class Store:
    """The database. Methods that write must run inside :meth:`tx`; reads may run anywhere."""

    def __init__(self, path: str | Path, migrations: Sequence[str] = MIGRATIONS) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(self.path), isolation_level=None, timeout=30.0)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")  # a committed intent must survive a power cut
        self.db.execute("PRAGMA foreign_keys=ON")
        self._in_tx = False
        self.version = self._migrate(migrations)

    # ---------------------------------------------------------------------------------- schema
    def _migrate(self, migrations: Sequence[str]) -> int:
        self.db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = self.db.execute("SELECT version FROM schema_version").fetchone()
        version = row[0] if row else 0
        if version > len(migrations):
            raise StateError(f"{self.path}: schema version {version} is newer than this themisd knows "
                             f"({len(migrations)}): upgrade themisd or restore a matching database")
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
        """One atomic unit (BEGIN IMMEDIATE .. COMMIT); nested calls join the outer transaction."""
        if self._in_tx:
            yield
            return
        self.db.execute("BEGIN IMMEDIATE")
        self._in_tx = True
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        else:
            self.db.execute("COMMIT")
        finally:
            self._in_tx = False

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
                  renewals: int, preemptions: int, latency_s: float) -> int:
        self._need_tx()
        cur = self.db.execute(
            "INSERT INTO rounds (time, mode, trigger, solver, offered_gpus, grants, renewals, preemptions,"
            " latency_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (time, mode, trigger, solver, offered, grants, renewals, preemptions, latency_s),
        )
        return int(cur.lastrowid or 0)

    def add_decision(self, round_id: int, time: float, app_key: str, job_id: str | None, action: str,
                     reason: str, rho_before: float | None = None, rho_after: float | None = None,
                     payment: float | None = None, gpus: int | None = None,
                     nodes: Mapping[str, int] | None = None, lease_expiry: float | None = None) -> None:
        self._need_tx()
        self.db.execute(
            "INSERT INTO decisions (round_id, time, app_key, job_id, action, reason, rho_before, rho_after,"
            " payment, gpus, nodes, lease_expiry) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (round_id, time, app_key, job_id, action, reason, _finite(rho_before), _finite(rho_after),
             payment, gpus, json.dumps(dict(nodes)) if nodes is not None else None, _finite(lease_expiry)),
        )

    def add_event(self, time: float, kind: str, detail: str, job_id: str | None = None,
                  app_key: str | None = None) -> None:
        self._need_tx()
        self.db.execute("INSERT INTO events (time, job_id, app_key, kind, detail) VALUES (?, ?, ?, ?, ?)",
                        (time, job_id, app_key, kind, detail))

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Read-only helper for tests, tools and admins' questions."""
        return list(self.db.execute(sql, params))


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]
