"""themisd's durable state: one SQLite database (WAL) under state_dir, written only by themisd (the store;
the core's ClusterState, core/state.py, is the input of one round and unrelated).

Crash safety comes from the order of writes, not from distributed transactions: the loop records an
intent (``starting``, ``warning``, ``requeueing``) in a committed transaction BEFORE the Slurm action and
the outcome after it; every Slurm action is idempotent, so after a kill -9 the reconciler
(daemon/reconcile.py) compares each recorded intent with what Slurm shows and either finishes the action or
rolls it back. One round's decision is written in one transaction (state/record.py).

What the tables hold is typed in rows.py, the schema and its migrations are schema.py's; opening.py opens
the database for themisd without starting on empty or damaged state, disk.py keeps its files private and
names a failing disk.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from themis_slurm.core.decision import AppRecord
from themis_slurm.core.tenancy import Entity, Tenancy
from themis_slurm.state.disk import create_private, make_state_dir, storage_message, storage_problem
from themis_slurm.state.errors import FRESH_HINT, StateError, recovery
from themis_slurm.state.rows import (
    APP_FIELDS,
    DECISION_FIELDS,
    JOB_FIELDS,
    AppRow,
    BookRow,
    DecisionRow,
    JobRow,
    Learned,
    StoredTenancy,
    app_columns,
    decision_columns,
    job_columns,
    rows_of,
)
from themis_slurm.state.schema import MIGRATIONS, expected_tables, statements
from themis_slurm.tenant_levels import entity_from_json, entity_json, tenancy_from_json, tenancy_json

log = logging.getLogger("themisd")


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
        create_private(self.path)
        checked = (
            self.path.exists() and self.path.stat().st_size > 0 and self._check_read_only(migrations, create)
        )
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
            raise StateError(
                f"{self.path}: migration of the schema failed ({e}): the database is left at "
                f"version {version}; report this bug, and restore a backup if it persists",
                damaged=False,
            ) from None

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

    def _check(
        self, db: sqlite3.Connection, migrations: Sequence[str], create: bool, integrity: bool = True
    ) -> int:
        """The stored schema version, after checking the file: PRAGMA quick_check (O(size), no index
        cross-check: a damaged page is refused at open, not mid-cycle), a themisd schema no newer than
        `migrations`, and every table that version should have."""
        if integrity:
            problems = [str(r[0]) for r in db.execute("PRAGMA quick_check(3)")]
            if problems != ["ok"]:
                first = " ".join(problems[0].split()) if problems else "no answer"
                raise StateError(
                    f"{self.path}: the database is damaged (integrity check: {first}): {recovery(self.path)}"
                )
        tables = {
            r[0]
            for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        }
        version = 0
        if "schema_version" not in tables:
            if tables:
                raise StateError(
                    f"{self.path}: an SQLite database but not themisd's (tables "
                    f"{', '.join(sorted(tables)[:5])}, no schema_version): check state_dir, or "
                    f"{recovery(self.path)}"
                )
        else:
            rows = db.execute("SELECT version FROM schema_version").fetchall()
            if rows:
                version = rows[0][0]
                if len(rows) != 1 or not isinstance(version, int) or version < 0:
                    raise StateError(
                        f"{self.path}: the database is damaged (schema_version holds "
                        f"{[r[0] for r in rows][:3]!r}, expected one version number): "
                        f"{recovery(self.path)}"
                    )
        if version > len(migrations):
            raise StateError(
                f"{self.path}: schema version {version} is newer than this themisd knows "
                f"({len(migrations)}): upgrade themisd or restore a matching database, or start "
                f"with {FRESH_HINT} to move it aside and begin with empty state"
            )
        if version == 0 and not create:
            raise StateError(
                f"{self.path}: the state database holds no themisd state (no schema) although "
                f"a previous run had state (its data or its -wal file is gone): "
                f"{recovery(self.path)}"
            )
        missing = [t for t in expected_tables(migrations[:version]) if t not in tables]
        if missing:
            raise StateError(
                f"{self.path}: the database is damaged (table {', '.join(missing)} missing at "
                f"schema version {version}): {recovery(self.path)}"
            )
        return version

    def _migrate(self, version: int, migrations: Sequence[str]) -> int:
        self.db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        for target in range(version + 1, len(migrations) + 1):
            with self.tx():
                for stmt in statements(migrations[target - 1]):
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
        return {a.app_key: a for a in rows_of(AppRow, self.db.execute(q))}

    def put_app(self, row: AppRow) -> None:
        self.put_apps([row])

    def put_apps(self, rows: Iterable[AppRow]) -> None:
        self._need_tx()
        self.db.executemany(_insert("INSERT OR REPLACE INTO apps", APP_FIELDS), map(app_columns, rows))

    # ---------------------------------------------------------------------------------- jobs
    def jobs(self) -> dict[str, JobRow]:
        return {j.job_id: j for j in rows_of(JobRow, self.db.execute("SELECT * FROM jobs"))}

    def job(self, job_id: str) -> JobRow | None:
        rows = rows_of(JobRow, self.db.execute("SELECT * FROM jobs WHERE job_id = ?", (job_id,)))
        return rows[0] if rows else None

    def put_job(self, row: JobRow) -> None:
        self.put_jobs([row])

    def put_jobs(self, rows: Iterable[JobRow]) -> None:
        self._need_tx()
        self.db.executemany(_insert("INSERT OR REPLACE INTO jobs", JOB_FIELDS), map(job_columns, rows))

    def delete_job(self, job_id: str) -> None:
        self._need_tx()
        self.db.execute("DELETE FROM jobs WHERE job_id = ?", (job_id,))

    # ---------------------------------------------------------------------------------- audit log
    def add_round(
        self,
        time: float,
        mode: str,
        trigger: str,
        solver: str,
        offered: int,
        grants: int,
        renewals: int,
        preemptions: int,
        latency_s: float,
        worst_rho: float | None = None,
        fairness_knob: float | None = None,
    ) -> int:
        self._need_tx()
        if worst_rho is not None and not math.isfinite(worst_rho):
            worst_rho = None
        cur = self.db.execute(
            "INSERT INTO rounds (time, mode, trigger, solver, offered_gpus, grants, renewals, preemptions,"
            " latency_s, worst_rho, fairness_knob) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                time,
                mode,
                trigger,
                solver,
                offered,
                grants,
                renewals,
                preemptions,
                latency_s,
                worst_rho,
                fairness_knob,
            ),
        )
        return int(cur.lastrowid or 0)

    def add_decision(
        self,
        round_id: int,
        time: float,
        app_key: str,
        job_id: str | None,
        action: str,
        reason: str = "",
        rho_before: float | None = None,
        rho_after: float | None = None,
        payment: float | None = None,
        gpus: int | None = None,
        nodes: Mapping[str, int] | None = None,
        lease_expiry: float | None = None,
        *,
        record: AppRecord | None = None,
        source: str | None = None,
        cause: str | None = None,
        cut_s: float | None = None,
        instead_of: str | None = None,
    ) -> None:
        """One audit row (:meth:`add_decisions`). `record` (the app's AppRecord: app rows, and grant rows for
        the app they started), `source` (grants) and `cause`/`cut_s`/`instead_of` (renewals, preemptions) are
        stored as columns; `reason` is only for callers replaying rows of older daemons (new rows leave it
        empty)."""
        self.add_decisions(
            [
                DecisionRow.of(
                    round_id,
                    time,
                    app_key,
                    job_id,
                    action,
                    record=record,
                    reason=reason,
                    rho_before=rho_before,
                    rho_after=rho_after,
                    payment=payment,
                    gpus=gpus,
                    nodes=nodes,
                    lease_expiry=lease_expiry,
                    source=source,
                    cause=cause,
                    cut_s=cut_s,
                    instead_of=instead_of,
                )
            ]
        )

    def add_decisions(self, rows: Iterable[DecisionRow]) -> None:
        """New audit rows (DecisionRow.of), in order."""
        self._need_tx()
        self.db.executemany(_insert("INSERT INTO decisions", DECISION_FIELDS, positional=True),
                            map(decision_columns, rows))  # fmt: skip

    def add_event(
        self, time: float, kind: str, detail: str, job_id: str | None = None, app_key: str | None = None
    ) -> None:
        self._need_tx()
        self.db.execute(
            "INSERT INTO events (time, job_id, app_key, kind, detail) VALUES (?, ?, ?, ?, ?)",
            (time, job_id, app_key, kind, detail),
        )

    def add_finished(
        self, job_id: str, user: str, app_key: str, time: float, estimate: float, work: float, keep: int
    ) -> None:
        """A job that ended COMPLETED: its estimate and true work join `user`'s calibration history, of
        which the `keep` most recent entries are kept."""
        self._need_tx()
        self.db.execute(
            "INSERT INTO finished_jobs (job_id, user, app_key, time, estimate, work) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (job_id, user, app_key, time, estimate, work),
        )
        self.db.execute(
            "DELETE FROM finished_jobs WHERE user = ? AND id NOT IN (SELECT id FROM finished_jobs "
            "WHERE user = ? ORDER BY id DESC LIMIT ?)",
            (user, user, keep),
        )

    def finished_history(self, window: int) -> dict[str, list[tuple[float, float]]]:
        """Per user, (estimate, work) of their `window` most recent finished jobs, oldest first."""
        out: dict[str, list[tuple[float, float]]] = {}
        for r in self.db.execute(
            "SELECT user, estimate, work FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY user ORDER BY id "
            "DESC) AS k FROM finished_jobs) WHERE k <= ? ORDER BY id",
            (window,),
        ):
            out.setdefault(r["user"], []).append((r["estimate"], r["work"]))
        return out

    def learned(self) -> dict[str, Learned]:
        """Jobs not to be granted before a time: job id -> (why, until)."""
        return {r["job_id"]: Learned(r["why"], r["until"]) for r in self.db.execute("SELECT * FROM learned")}

    def put_learned(self, job_id: str, why: str, until: float) -> None:
        self._need_tx()
        self.db.execute(
            "INSERT OR REPLACE INTO learned (job_id, why, until) VALUES (?, ?, ?)", (job_id, why, until)
        )

    def forget_learned(self, job_ids: Iterable[str]) -> None:
        self._need_tx()
        self.db.executemany("DELETE FROM learned WHERE job_id = ?", ((j,) for j in job_ids))

    def tenant_books(self) -> dict[Entity, BookRow]:
        """Every active tenant's book (paced quotas), by the core's Entity."""
        out: dict[Entity, BookRow] = {}
        for r in self.db.execute("SELECT * FROM tenants"):
            out[entity_from_json(r["entity"])] = BookRow(
                r["entitled"], r["finished"], r["frac"], r["updated"]
            )
        return out

    def put_tenant_books(self, books: Mapping[Entity, BookRow]) -> None:
        """The books of the tenants active now; every other tenant's row goes (its busy period ended)."""
        self._need_tx()
        self.db.execute("DELETE FROM tenants")
        self.db.executemany(
            "INSERT INTO tenants (entity, entitled, finished, frac, updated) VALUES (?, ?, ?, ?, ?)",
            ((entity_json(ent), b.entitled, b.finished, b.frac, b.updated) for ent, b in books.items()),
        )

    def tenancy(self) -> StoredTenancy | None:
        """The tree last stored by :meth:`put_tenancy`; None before any."""
        rows = list(self.db.execute("SELECT * FROM tenancy WHERE id = 1"))
        if not rows:
            return None
        return StoredTenancy(tenancy_from_json(rows[0]["tree"]), rows[0]["line"], rows[0]["read_at"])

    def put_tenancy(self, tenancy: Tenancy, line: str, read_at: float | None, now: float) -> None:
        """The tree the rounds use from now on (the status API shows shares and levels from it)."""
        self._need_tx()
        self.db.execute(
            "INSERT OR REPLACE INTO tenancy (id, levels, tree, line, read_at, updated) "
            "VALUES (1, ?, ?, ?, ?, ?)",
            (json.dumps(list(tenancy.levels)), tenancy_json(tenancy), line, read_at, now),
        )

    def add_tenant_finished(self, entity: Entity, work: float) -> None:
        """A job of this tenant finished with `work` done (ideal GPU-seconds): into its book, if it has one."""
        self._need_tx()
        self.db.execute(
            "UPDATE tenants SET finished = finished + ? WHERE entity = ?", (work, entity_json(entity))
        )

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Read-only helper for tests, tools and admins' questions."""
        return list(self.db.execute(sql, params))


def _insert(verb: str, columns: tuple[str, ...], positional: bool = False) -> str:
    """The INSERT of `columns`, with named parameters (rows as dicts) or positional ones (rows as tuples:
    quicker for the many rows of a round's decisions)."""
    marks = ", ".join("?" if positional else f":{c}" for c in columns)
    return f"{verb} ({', '.join(columns)}) VALUES ({marks})"


_CORRUPT = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


def _is_corruption(e: sqlite3.Error) -> bool:
    name = getattr(e, "sqlite_errorname", "") or ""
    text = str(e).lower()
    return (
        name.startswith(_CORRUPT)
        or "file is not a database" in text
        or "malformed" in text
        or "database corrupt" in text
    )


def _open_error(path: Path, e: sqlite3.Error) -> StateError:
    """One line for an sqlite3 error met while opening `path`: damage, or a problem of the environment."""
    text = " ".join(str(e).split())
    name = getattr(e, "sqlite_errorname", "") or ""
    if _is_corruption(e):
        what = (
            "not an SQLite database (truncated or overwritten?)"
            if "not a database" in text.lower()
            else "the database is damaged"
        )
        return StateError(f"{path}: {what} ({text}): {recovery(path)}")
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text.lower():
        return StateError(
            f"{path}: the database is locked by another process ({text}): stop it (an "
            "sqlite3 shell, a second themisd?) and start again",
            damaged=False,
        )
    if name.startswith(("SQLITE_CANTOPEN", "SQLITE_READONLY", "SQLITE_PERM", "SQLITE_AUTH")) or any(
        w in text.lower() for w in ("unable to open", "readonly", "permission")
    ):
        return StateError(
            f"{path}: cannot open the database ({text}): check that state_dir exists and is "
            "writable by the service user",
            damaged=False,
        )
    if storage_problem(e):
        return StateError(f"{storage_message(path, e)}, then start themisd again", damaged=False)
    return StateError(f"{path}: cannot open the database ({text}): {recovery(path)}")
