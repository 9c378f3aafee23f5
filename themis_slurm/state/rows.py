"""Typed rows of every table of themisd's database, and their SQL form.

What must survive a crash or a restart is exactly what Slurm does not know: the apps' service history and
contention clocks (:class:`AppRow`: fairness is about the past), each job's Themis intent and lease
(:class:`JobRow`), the audit log of rounds, decisions and events (:class:`RoundRow`, :class:`DecisionRow`,
:class:`EventRow`), what calibration learned from finished jobs, what a release that Slurm kept pending taught
(:class:`Learned`), the tenants' books (:class:`BookRow`) and the tenancy tree the rounds use
(:class:`StoredTenancy`). Everything else is re-read from Slurm every cycle.

The writer (:class:`~themis_slurm.state.store.Store`) and the readers
(:class:`~themis_slurm.state.reader.StateReader`) decode rows here, so both see the same types: JSON columns
decoded, non-finite numbers stored as NULL, and columns an older schema lacks read as their defaults.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, NamedTuple, TypeVar

from themis_slurm.core.decision import AppRecord
from themis_slurm.core.fairness import ContentionClock
from themis_slurm.core.tenancy import Entity, Tenancy, TenantBook
from themis_slurm.state.intents import Intent
from themis_slurm.tenant_levels import entity_from_json, entity_json


def finite(x: float | None) -> float | None:
    """`x`, or None for None and non-finite numbers (SQLite and JSON have no infinity)."""
    return None if x is None or not math.isfinite(x) else x


@dataclass(frozen=True)
class BookRow:
    """A tenant's durable book (core/tenancy.TenantBook) with how it is integrated: `entitled` GPU-seconds
    up to `updated`, owed at `frac` (its fraction of the cluster) since; `finished` work of its jobs."""

    entitled: float
    finished: float
    frac: float
    updated: float

    def book(self, now: float, cluster_gpus: float) -> TenantBook:
        return TenantBook(
            self.entitled + max(0.0, now - self.updated) * cluster_gpus * self.frac, self.finished
        )


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
    intent: Intent
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
    #: the run themisd is counting (Slurm's StartTime; None: none yet, or the last one ended and what it
    #: lost is settled) and done_service when it began: what a restart resumes from if the run saved
    #: nothing (state/jobs.py, "checkpoints"; schema v10)
    run_start: float | None = None
    run_base: float = 0.0
    #: the progress accepted when the job's last run ended (a requeue), until a report of the next run shows
    #: whether it resumed from there. `ckpt_learned`: "no", a report restarted below it, so the job does not
    #: checkpoint (used where its owner did not say, with --themis-ckpt); "yes", a job said never to save
    #: went on from there (the claim is set aside)
    resumed_from: float | None = None
    ckpt_learned: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.intent, Intent):
            try:
                object.__setattr__(self, "intent", Intent(self.intent))
            except ValueError:
                raise ValueError(f"job {self.job_id}: unknown intent {self.intent!r}") from None
        if self.planned_nodes is None:
            object.__setattr__(self, "planned_nodes", {})


@dataclass(frozen=True)
class RoundRow:
    """One round of the audit log: when, why, how it was solved, what it decided (counts) and how long it
    took; the worst rho among the apps it saw, before its allocation (schema v2); its fairness knob (v3)."""

    id: int
    time: float
    mode: str
    trigger: str
    solver: str
    offered_gpus: int
    grants: int
    renewals: int
    preemptions: int
    latency_s: float
    worst_rho: float | None = None
    fairness_knob: float | None = None


@dataclass(frozen=True)
class DecisionRow:
    """One decision of a round, as data (schema v3; the sentence is made when shown, themis_slurm.reasons).

    `action` is grant, renewal, preemption or app. App rows (and grant rows, for the app they started) carry
    the app's AppRecord in columns (outcome .. reservation_started, and its tenant, the tenant's quota and
    the GPUs it held after the round: v9); grant rows their `source`; renewal and preemption rows their
    `cause` (`cut_s`: a lease cut by the hidden payment; `instead_of`: the job an in-place renewal kept from
    moving). `reason` is the sentence of rows written by older daemons (shown as written, never parsed).
    `id` is None until the row is stored.
    """

    round_id: int
    time: float
    app_key: str
    job_id: str | None
    action: str
    reason: str = ""
    rho_before: float | None = None
    rho_after: float | None = None
    payment: float | None = None
    gpus: int | None = None
    nodes: Mapping[str, int] | None = None
    lease_expiry: float | None = None
    outcome: str | None = None
    rank: int | None = None
    ranked: int | None = None
    bid: int | None = None
    won_gpus: int | None = None
    kept_gpus: int | None = None
    kept_by: str | None = None
    leftover_gpus: int | None = None
    reservation_job: str | None = None
    reservation_gpus: int | None = None
    reservation_held: int | None = None
    reservation_start_in_s: float | None = None
    reservation_started: int | None = None
    source: str | None = None
    cause: str | None = None
    cut_s: float | None = None
    instead_of: str | None = None
    tenant: Entity | None = None
    tenant_quota: float | None = None
    tenant_gpus: int | None = None
    id: int | None = None

    @classmethod
    def of(
        cls,
        round_id: int,
        time: float,
        app_key: str,
        job_id: str | None,
        action: str,
        *,
        record: AppRecord | None = None,
        **columns: Any,
    ) -> DecisionRow:
        """A new row; `record` (the app's AppRecord) fills the record's columns. Non-finite numbers become
        None; `cause` and `source` are stored as their strings. (Built once, without dataclasses.replace: a
        round over a full cluster writes a row per job.)"""
        for k in _FINITE:
            if k in columns:
                columns[k] = finite(columns[k])
        for k in ("cause", "source"):
            if columns.get(k) is not None:
                columns[k] = str(columns[k])
        if record is not None:
            columns.update(outcome=str(record.outcome), rank=record.rank, ranked=record.ranked, bid=int(record.bid),
                           won_gpus=record.won_gpus, kept_gpus=record.kept_gpus, kept_by=str(record.kept_by),
                           leftover_gpus=record.leftover_gpus)  # fmt: skip
            if record.tenant:
                columns.update(tenant=record.tenant, tenant_quota=finite(record.tenant_quota),
                               tenant_gpus=record.tenant_gpus)  # fmt: skip
            note = record.reservation
            if note is not None:
                columns.update(reservation_job=note.job_id, reservation_gpus=note.gpus, reservation_held=note.held,
                               reservation_start_in_s=finite(note.start_in_s),
                               reservation_started=int(note.started))  # fmt: skip
        return cls(round_id, time, app_key, job_id, action, **columns)


_FINITE = ("rho_before", "rho_after", "lease_expiry", "cut_s")


@dataclass(frozen=True)
class DecisionInRound:
    """A decision row with its round's trigger, mode and fairness knob (None before schema v3): what
    `themis explain` shows of one round."""

    row: DecisionRow
    trigger: str
    mode: str
    fairness_knob: float | None


@dataclass(frozen=True)
class EventRow:
    """Something themisd did or saw outside a round (a hold it put back, a requeue, an adopted job, ...)."""

    id: int
    time: float
    job_id: str | None
    app_key: str | None
    kind: str
    detail: str


@dataclass(frozen=True)
class RoundStats:
    """The rounds table in one line: how many, the last one's time, preemptions, mean and max latency."""

    n: int
    last_time: float | None
    preemptions: int
    mean_latency_s: float | None
    max_latency_s: float | None


class Learned(NamedTuple):
    """A released job Slurm kept pending for a reason Themis cannot see on a held job (a QOS or association
    limit): why, and the time before which it is not granted again (schema v6)."""

    why: str
    until: float


class StoredTenancy(NamedTuple):
    """The tenancy tree the rounds use, as themisd stored it (schema v9): the tree, what the log said of it,
    and when it was last resolved (None: the start fallback, read from nowhere)."""

    tenancy: Tenancy
    line: str
    read_at: float | None


# ---------------------------------------------------------------------------------------------- SQL form
R = TypeVar("R")


def _entity(value: str | None) -> Entity | None:
    return entity_from_json(value) if value else None


def _nodes(value: str | None) -> dict[str, int] | None:
    return {str(k): int(v) for k, v in json.loads(value).items()} if value else None


#: How each JSON column is read back.
_DECODE: dict[str, Callable[[Any], Any]] = {
    "planned_nodes": lambda v: _nodes(v) or {},
    "planned_gpus": lambda v: frozenset(int(g) for g in json.loads(v or "[]")),
    "nodes": _nodes,
    "tenant": _entity,
}


def rows_of(cls: type[R], cursor: sqlite3.Cursor) -> list[R]:
    """Every row of `cursor` as `cls` (:func:`rows_from`)."""
    return rows_from(cls, [d[0] for d in cursor.description or ()], cursor)


def rows_from(cls: type[R], columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[R]:
    """`rows` (of these `columns`) as `cls`: the columns it has and `cls` knows, JSON columns decoded (a column
    an older schema lacks takes its default; a column `cls` does not know, such as a join's, is left out)."""
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    names = list(columns)
    every = all(c in known for c in names)
    take = [(i, c) for i, c in enumerate(names) if c in known]
    decode = [(c, _DECODE[c]) for _, c in take if c in _DECODE]
    out = []
    for r in rows:  # read every cycle (all jobs): one dict per row, then only the JSON columns touched
        values = dict(zip(names, r, strict=True)) if every else {c: r[i] for i, c in take}
        for c, fn in decode:
            values[c] = fn(values[c])
        out.append(cls(**values))
    return out


def job_columns(row: JobRow) -> dict[str, Any]:
    """A JobRow as its table's columns."""
    d = {k: getattr(row, k) for k in JOB_FIELDS}  # shallow: dataclasses.asdict deep-copies (slow)
    d["intent"] = str(row.intent)
    d["planned_nodes"] = json.dumps(dict(sorted(row.planned_nodes.items())))
    d["planned_gpus"] = json.dumps(sorted(row.planned_gpus))
    return d


def app_columns(row: AppRow) -> dict[str, Any]:
    return {k: getattr(row, k) for k in APP_FIELDS}


def decision_columns(row: DecisionRow) -> tuple[Any, ...]:
    """A new DecisionRow as its table's columns, in DECISION_FIELDS order (`id` is the database's)."""
    nodes = json.dumps(dict(row.nodes)) if row.nodes is not None else None
    tenant = entity_json(row.tenant) if row.tenant else None
    return tuple(
        nodes if k == "nodes" else tenant if k == "tenant" else getattr(row, k) for k in DECISION_FIELDS
    )


JOB_FIELDS = tuple(f.name for f in fields(JobRow))
APP_FIELDS = tuple(f.name for f in fields(AppRow))
DECISION_FIELDS = tuple(f.name for f in fields(DecisionRow) if f.name != "id")
