"""Loader for a site's own Slurm history: ``sacct --json`` or ``sacct -P`` exports (``--format sacct``).

"What would Themis have done with last month?" Export the month from slurmdbd (as root or a Slurm
operator; ``-a`` for every user), in either form::

    sacct --json -a -D -S 2026-11-01 -E 2026-12-01 >month.json
    sacct -a -X -D -P -S 2026-11-01 -E 2026-12-01 \\
        -o JobID,JobIDRaw,User,Account,Submit,Start,End,Timelimit,State,AllocTRES,ReqTRES,AdminComment >month.txt

and run ``themis simulate --trace month.json --format sacct`` (with ``--racks/--nodes-per-rack/
--gpus-per-node`` describing the cluster). The file's first character tells the two forms apart ('{' is
JSON). ``sacct --json`` is read in both shapes: Slurm 22.05 (openapi dbv0.0.38: bare numbers, NO_VAL and
INFINITE as in-band values, ``state.current`` a string) and 23.02 and later, 25.11 included (data_parser
v0.0.4x: numbers as ``{"set", "infinite", "number"}``, ``state.current`` a list). For ``-P`` the header line is
required and the columns may come in any order; JobID, User, Submit, Start, End, State and AllocTRES are
required, JobIDRaw, Account, Timelimit, ReqTRES and AdminComment are used when present, any other sacct column is
ignored. ``-P`` does not escape ``|`` inside a value, so keep free text (AdminComment) the LAST column: a row
with more fields than the header is joined back into that column. ``-P`` times are the local time sacct
printed (``2026-11-03T10:21:11``; ``SLURM_TIME_FORMAT=%s`` epoch seconds work too). The cluster needs
``AccountingStorageTRES=gres/gpu`` in slurm.conf for AllocTRES to carry GPUs.

A job becomes a :class:`~themis_slurm.sim.trace.TraceJob`:

* GPUs: ``gres/gpu`` of AllocTRES (``tres.allocated``); ReqTRES (``tres.requested``) is read for jobs that
  never started, only to tell GPU jobs from others in the counts below.
* arrival: Submit (the trace is shifted so the first arrival is 0), the FIRST one of a requeued job: Slurm
  moves a job's Submit to each requeue and keeps the earlier runs as records of state REQUEUED (25.11's
  JSON: ``["PENDING", "REQUEUED"]``), which sacct lists with ``-D`` (hence ``-D`` above; 22.05's ``--json``
  lists them without it; otherwise a requeued job arrives at its last requeue). Each such run is counted
  in the notes; the job is replayed from its last record, in the order sacct lists them (its earlier runs
  first). Duration: End - Start of that record, the time the job really ran to its end (sacct has 1 s
  resolution: a job that ran under a second counts as 1 s, and the notes say how many); estimate (``TraceJob.estimate_s``): the time limit (none when UNLIMITED; recorded in the trace,
  but the simulator does not read it yet: its policies see ``--estimate-error``'s); Slurm's own Start and
  End are kept as ``actual_start_s``/``actual_end_s`` so the report can show what really happened.
* app (``group_by``): ``themis`` (default) groups as themisd does (``themis_slurm.slurm.snapshot.app_key``):
  ``user/app`` from the job's trusted AdminComment record (``themis:v1;app=...``, written by job_submit.lua
  and read with the daemon's own :func:`~themis_slurm.slurm.options.parse_record`), else ``user/array-ID``
  for an array, else ``user/job-ID``; ``array`` ignores the records; ``user`` makes each user one app; ``job``
  each job. The record's ``model=`` becomes the job's placement profile.
* account (``TraceJob.account``, the top of the tenancy tree with ``themis simulate --levels account,...``):
  the job's Slurm account, ``account`` of ``--json`` (both shapes) or the Account column of ``-P``; ``""``
  for an export without it (a ``-P`` export made before the column was in the list above).

Rows that are valid but not replayed are COUNTED in the trace's notes, by kind: step rows (``12.batch``,
``12.extern``; ``-X`` leaves them out), jobs not finished when sacct ran (PENDING, RUNNING, SUSPENDED,
REQUEUE_HOLD, ...), earlier runs of requeued jobs (REQUEUED, above), jobs that never started (cancelled
while pending, GPU jobs counted apart; known by an empty AllocTRES, since Slurm 22.05 records Start = End for a job cancelled
within a second of its submission), and jobs that ran without GPUs. Jobs that started and then FAILED, hit their TIMEOUT,
were CANCELLED, lost their node, ran out of memory or were preempted are kept, with the time they actually
ran, and the notes count them by state. Malformed input (bad JSON, a missing or ill-typed field, a time or
TRES value that does not parse, End before Start) raises a TraceError naming file:line, the field and the
value, or with ``skip_bad=True`` is skipped and counted like other loaders' bad rows.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from themis_slurm.sim.loaders._common import Collector, PathArg, RowContext, open_text
from themis_slurm.sim.trace import Trace, TraceError, TraceJob
from themis_slurm.slurm.gres import parse_tres, tres_gpus
from themis_slurm.slurm.openapi import INFINITE, INFINITE64, NO_VAL, NO_VAL64, text, words
from themis_slurm.slurm.options import is_record, parse_record
from themis_slurm.slurm.scontrol import parse_duration, parse_time

GroupBy = Literal["themis", "array", "user", "job"]
GROUP_BY: tuple[str, ...] = ("themis", "array", "user", "job")
#: The -P columns the documented command asks for (module docstring), in that order.
FIELDS: tuple[str, ...] = ("JobID", "JobIDRaw", "User", "Account", "Submit", "Start", "End", "Timelimit", "State",
                           "AllocTRES", "ReqTRES", "AdminComment")  # fmt: skip
REQUIRED: tuple[str, ...] = ("JobID", "User", "Submit", "Start", "End", "State", "AllocTRES")
FREE_TEXT: frozenset[str] = frozenset({"AdminComment", "Comment", "SystemComment", "JobName", "WorkDir",
                                       "Constraints", "Reason"})  # fmt: skip

# Base job states (Slurm's job_state_string): what a job that ended can be, and what one that did not.
RAN_STATES: frozenset[str] = frozenset({"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL",
                                        "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE"})  # fmt: skip
UNFINISHED_STATES: frozenset[str] = frozenset({"PENDING", "RUNNING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
                                               "REQUEUE_FED", "RESIZING", "COMPLETING", "CONFIGURING",
                                               "SIGNALING", "STAGE_OUT", "STOPPED", "SPECIAL_EXIT",
                                               "POWER_UP_NODE", "RESV_DEL_HOLD", "REVOKED"})  # fmt: skip
_JOB_ID = re.compile(r"^(?P<id>\d+)(?:_(?P<task>\d+|\[[^\]]*\]))?(?:\+\d+)?(?P<step>\.\S+)?$")
_MARKERS = {NO_VAL, INFINITE, NO_VAL64, INFINITE64}


@dataclass(frozen=True)
class _Row:
    """One sacct record, the same whichever form it came in; times are epoch seconds or None (unset)."""

    job_id: str  # as sacct prints it: 12, 12_3, 12_[3-5], 12+0, 12.batch
    raw_id: str  # the job's own id (JobIDRaw; for an array task its own number, not the array's)
    array_id: str | None
    user: str
    account: str
    submit: float | None
    start: float | None
    end: float | None
    limit_s: float | None
    state: str  # base state
    allocated: bool  # AllocTRES lists anything (a job that never ran has none, whatever its Start says)
    alloc_gpus: int
    req_gpus: int
    admin_comment: str

    @property
    def step(self) -> bool:
        return "." in self.job_id


@dataclass
class _Counts:
    """Rows that are valid but not replayed (by kind and state), and facts about the kept ones, for the notes."""

    steps: int = 0
    requeued_runs: int = 0
    unfinished: Counter[str] = field(default_factory=Counter)
    never_gpu: Counter[str] = field(default_factory=Counter)
    never_other: int = 0
    no_gpus: int = 0
    ran_not_completed: Counter[str] = field(default_factory=Counter)
    under_1s: int = 0
    with_limit: int = 0
    record_problems: list[str] = field(default_factory=list)


def load_sacct(path: PathArg, *, group_by: GroupBy = "themis", skip_bad: bool = False) -> Trace:
    """Read a ``sacct --json`` or ``sacct -P`` export (see the module docstring).

    Args:
        path: the export.
        group_by: what makes an app: "themis" (AdminComment record app, else array, else job: themisd's
            rule), "array" (array, else job), "user" or "job".
        skip_bad: skip malformed rows (counted in Trace.skipped, described in Trace.notes) instead of
            raising TraceError at the first one.
    """
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {GROUP_BY}, got {group_by!r}")
    name = str(path)
    body = "".join(open_text(path))
    if not body.strip():
        raise TraceError(name, None, None, None, "the file is empty; expected `sacct --json` or `sacct -P` output")
    is_json = body.lstrip().startswith("{")
    rows: Iterator[tuple[int, Any]] = _json_records(name, body) if is_json else _pipe_records(name, body)
    read = _from_json if is_json else _from_pipe
    counts = _Counts()
    collector = Collector(path, skip_bad)
    first_submit: dict[str, float] = {}  # job (JobIDRaw) -> its earliest Submit so far: requeues move Submit

    def parse(ctx: RowContext, record: Any) -> TraceJob | None:
        return _to_job(ctx, read(ctx, record), group_by, counts, collector, first_submit)

    collector.run(rows, parse)
    notes = _notes(counts, len(collector.jobs), collector.rows, group_by, "sacct --json" if is_json else "sacct -P")
    if not collector.jobs:
        detail = "; ".join(notes[1:] if len(notes) > 1 else notes)
        if collector.bad:
            detail += f"; {len(collector.bad)} bad row(s), first: {collector.bad[0].message}"
        raise TraceError(name, None, None, None, f"no finished GPU job to replay ({detail})")
    return collector.trace(notes)


# ------------------------------------------------------------------------------------------- the rules
def _to_job(ctx: RowContext, row: _Row, group_by: str, counts: _Counts, collector: Collector,
            first_submit: dict[str, float]) -> TraceJob | None:
    if row.step:
        counts.steps += 1
        return None
    if row.submit is not None:
        seen = first_submit.get(row.raw_id)
        if seen is None or row.submit < seen:
            first_submit[row.raw_id] = row.submit
    if row.state == "REQUEUED":  # an earlier run of a job Slurm requeued: the job is its last record
        counts.requeued_runs += 1
        return None
    if row.state in UNFINISHED_STATES or (row.start is not None and row.end is None):
        counts.unfinished[row.state] += 1
        return None
    if row.start is None or not row.allocated:  # 22.05 sets Start = End for a job cancelled while pending
        if row.req_gpus > 0 or row.alloc_gpus > 0:
            counts.never_gpu[row.state] += 1
        else:
            counts.never_other += 1
        return None
    assert row.end is not None
    if row.alloc_gpus == 0:
        counts.no_gpus += 1
        return None
    if row.submit is None:
        raise ctx.error("Submit", None, "set for a job that ran")
    if row.end < row.start:
        raise ctx.error("End", str(int(row.end)), f"at or after Start ({int(row.start)})")
    duration = row.end - row.start
    if duration < 1:
        counts.under_1s += 1
        duration = 1.0
    if row.state != "COMPLETED":
        counts.ran_not_completed[row.state] += 1
    if row.limit_s is not None:
        counts.with_limit += 1
    app_name, model = None, None
    if is_record(row.admin_comment):
        record, problems = parse_record(row.admin_comment)
        if problems:
            counts.record_problems.append(f"job {row.job_id}: {problems[0]}")
        app_name, model = record.app, record.model
    if group_by == "themis":
        if app_name:
            app = f"{row.user}/{app_name}"
        elif row.array_id is not None:
            app = f"{row.user}/array-{row.array_id}"
        else:
            app = f"{row.user}/job-{row.raw_id}"
    elif group_by == "array":
        app = f"{row.user}/array-{row.array_id}" if row.array_id is not None else f"{row.user}/job-{row.raw_id}"
    elif group_by == "user":
        app = row.user
    else:
        app = row.job_id
    start = row.start
    return TraceJob(
        job_id=row.job_id,
        app_id=app,
        user=row.user,
        arrival_s=first_submit[row.raw_id],  # its first Submit (set above): a requeue moves Submit
        gpus=row.alloc_gpus,
        duration_s=duration,
        model=collector.model(ctx, model),
        line=ctx.line,
        estimate_s=row.limit_s,
        actual_start_s=start,
        actual_end_s=start + duration,
        account=row.account,
    )


def _states(counter: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {state}" for state, n in sorted(counter.items()))


def _notes(c: _Counts, kept: int, rows: int, group_by: str, form: str) -> list[str]:
    rule = {"themis": "the AdminComment record's app, else the array, else the job (as themisd)",
            "array": "array, else job", "user": "user", "job": "job"}[group_by]  # fmt: skip
    notes = [f"sacct ({form}): {rows} row(s), {kept} job(s) replayed; apps grouped by {rule}"]
    skipped = []
    if c.unfinished:
        skipped.append(f"{sum(c.unfinished.values())} not finished ({_states(c.unfinished)})")
    if c.never_gpu:
        skipped.append(f"{sum(c.never_gpu.values())} GPU job(s) that never started ({_states(c.never_gpu)})")
    if c.never_other:
        skipped.append(f"{c.never_other} job(s) without GPUs that never started")
    if c.no_gpus:
        skipped.append(f"{c.no_gpus} job(s) that ran without GPUs")
    if c.steps:
        skipped.append(f"{c.steps} step row(s) (use sacct -X)")
    if skipped:
        notes.append("sacct: not replayed: " + "; ".join(skipped))
    if c.requeued_runs:
        notes.append(f"sacct: {c.requeued_runs} earlier run(s) of requeued jobs (REQUEUED records): each such job "
                     "is replayed from its last record and arrives at its first Submit")  # fmt: skip
    if c.ran_not_completed:
        notes.append(f"sacct: kept {sum(c.ran_not_completed.values())} job(s) that ran but did not complete, "
                     f"with the time they ran: {_states(c.ran_not_completed)}")  # fmt: skip
    if c.under_1s:
        notes.append(f"sacct: {c.under_1s} job(s) ran under 1 s (sacct's resolution): counted as 1 s")
    if kept:
        notes.append(f"sacct: time limits kept as the jobs' estimates ({c.with_limit} of {kept} set, the rest "
                     "unlimited); the simulated policies see the --estimate-error estimates, not these")  # fmt: skip
    if c.record_problems:
        notes.append(f"sacct: {len(c.record_problems)} AdminComment record(s) with problems (read as far as "
                     f"they go, as themisd does); first: {c.record_problems[0]}")  # fmt: skip
    return notes


def _job_id_parts(ctx: RowContext, field: str, value: str) -> tuple[str | None, bool]:
    """(array job id or None, is a step) of a JobID as sacct prints it."""
    m = _JOB_ID.match(value.strip())
    if m is None:
        raise ctx.error(field, value, "a Slurm job id like 12, 12_3, 12_[3-5], 12+0 or 12.batch")
    return (m.group("id") if m.group("task") is not None else None), m.group("step") is not None


def _base_state(ctx: RowContext, field: str, value: str) -> str:
    """CANCELLED from 'CANCELLED by 1001'; an unknown state is an error (the rules depend on it)."""
    parts = value.split()
    state = parts[0].upper() if parts else ""
    if state not in RAN_STATES and state not in UNFINISHED_STATES:
        raise ctx.error(field, value, "a Slurm job state (COMPLETED, FAILED, TIMEOUT, CANCELLED, PENDING, ...)")
    return state


def _gpus(ctx: RowContext, field: str, value: str) -> int:
    try:
        parse_tres(value)  # key=value items, or the error below
        return tres_gpus(value).count
    except ValueError:
        raise ctx.error(field, value, "a TRES list like 'billing=2,cpu=2,gres/gpu=2,node=1'") from None


# --------------------------------------------------------------------------------------------- sacct -P
def _pipe_records(name: str, body: str) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, {column: value}) of every data row; the header is checked here (error at line 1)."""
    lines = body.splitlines()
    first = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    assert first is not None  # the caller checked the file is not blank
    header = [h.strip() for h in lines[first].split("|")]
    seen: set[str] = set()
    for h in header:
        if h in seen:
            raise TraceError(name, first + 1, "header", h, "a column named only once")
        seen.add(h)
    missing = [h for h in REQUIRED if h not in seen]
    if missing:
        raise TraceError(name, first + 1, "header", None,
                         f"missing column(s) {', '.join(missing)}: export with sacct -P -o {','.join(FIELDS)}")  # fmt: skip
    width = len(header)
    for i in range(first + 1, len(lines)):
        raw = lines[i]
        if not raw.strip():
            continue
        cells = raw.split("|")
        if len(cells) > width and header[-1] in FREE_TEXT:  # a '|' inside the last, free-text column
            cells = [*cells[: width - 1], "|".join(cells[width - 1:])]
        if len(cells) != width:
            ctx = RowContext(name, i + 1)
            raise ctx.error("columns", str(len(cells)), f"{width} columns ({', '.join(header)})")
        yield i + 1, dict(zip(header, cells, strict=True))


def _pipe_time(ctx: RowContext, field: str, value: str) -> float | None:
    v = value.strip()
    if v.isdigit():
        return float(v) or None
    try:
        stamp = parse_time(v)
    except ValueError:
        raise ctx.error(field, value, "a time like 2026-11-03T10:21:11, Unknown or None") from None
    return None if stamp is None else float(stamp)


def _from_pipe(ctx: RowContext, rec: dict[str, str]) -> _Row:
    job_id = ctx.text("JobID", rec["JobID"])
    array_id, step = _job_id_parts(ctx, "JobID", job_id)
    raw_id = rec.get("JobIDRaw", "").strip() or job_id.split("_")[0].split(".")[0]
    user = rec["User"].strip()
    if not user and not step:  # sacct leaves User empty on step rows
        raise ctx.error("User", rec["User"], "a user name")
    limit: float | None = None
    if rec.get("Timelimit", "").strip():
        try:
            minutes_or_none = parse_duration(rec["Timelimit"])
        except ValueError:
            raise ctx.error("Timelimit", rec["Timelimit"], "a time limit like 01:00:00, 2-00:00:00 or UNLIMITED") from None
        limit = None if minutes_or_none is None or minutes_or_none <= 0 else float(minutes_or_none)
    return _Row(
        job_id=job_id,
        raw_id=raw_id,
        array_id=array_id,
        user=user,
        account=rec.get("Account", "").strip(),
        submit=_pipe_time(ctx, "Submit", rec["Submit"]),
        start=_pipe_time(ctx, "Start", rec["Start"]),
        end=_pipe_time(ctx, "End", rec["End"]),
        limit_s=limit,
        state=_base_state(ctx, "State", rec["State"]),
        allocated=bool(rec["AllocTRES"].strip()),
        alloc_gpus=_gpus(ctx, "AllocTRES", rec["AllocTRES"]),
        req_gpus=_gpus(ctx, "ReqTRES", rec["ReqTRES"]) if "ReqTRES" in rec else 0,
        admin_comment=rec.get("AdminComment", ""),
    )


# ------------------------------------------------------------------------------------------ sacct --json
def _skip_ws(body: str, i: int) -> int:
    while i < len(body) and body[i] in " \t\r\n":
        i += 1
    return i


def _json_records(name: str, body: str) -> Iterator[tuple[int, Any]]:
    """(line, job object) of every element of the top-level "jobs" list, with the line it starts on.

    The whole document is parsed first (a syntax error is reported at its line); then the top-level object is
    walked with raw_decode so each job's line is known, which json.loads alone does not tell.
    """
    try:
        doc = json.loads(body)
    except json.JSONDecodeError as exc:
        raise TraceError(name, exc.lineno, None, None, f"malformed JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise TraceError(name, None, "jobs", None, "a top-level object with a \"jobs\" list (sacct --json output)")
    errors = [e for e in doc.get("errors") or () if e]
    if errors:
        raise TraceError(name, None, "errors", text(json.dumps(errors[0]))[:200], "empty (sacct reported an error)")
    decoder = json.JSONDecoder()
    i = _skip_ws(body, 0) + 1  # past '{'
    while True:
        i = _skip_ws(body, i)
        if body[i] == "}":
            return
        key, i = decoder.raw_decode(body, i)
        i = _skip_ws(body, i) + 1  # past ':'
        i = _skip_ws(body, i)
        if key == "jobs":
            i += 1  # past '['
            while True:
                i = _skip_ws(body, i)
                if body[i] == "]":
                    i += 1
                    break
                line = body.count("\n", 0, i) + 1
                job, i = decoder.raw_decode(body, i)
                yield line, job
                i = _skip_ws(body, i)
                if body[i] == ",":
                    i += 1
        else:
            _, i = decoder.raw_decode(body, i)
        i = _skip_ws(body, i)
        if i < len(body) and body[i] == ",":
            i += 1


def _get(ctx: RowContext, obj: Any, path: str, required: bool = True) -> Any:
    """obj[a][b] for path "a.b"; a missing required key is an error naming the path."""
    value = obj
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            if required:
                raise ctx.error(path, None, "present (is this sacct --json output?)")
            return None
        value = value[key]
    return value


def _json_int(ctx: RowContext, path: str, value: Any) -> int | None:
    """A number in either shape (22.05: bare, NO_VAL/INFINITE markers; v0.0.4x: {set, infinite, number})."""
    if isinstance(value, Mapping):
        if "number" not in value:
            raise ctx.error(path, text(json.dumps(value)), "a number or {\"set\", \"infinite\", \"number\"}")
        if value.get("infinite") or value.get("set") is False:
            return None
        value = value["number"]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ctx.error(path, text(json.dumps(value)), "an integer")
    return None if value in _MARKERS else value


def _json_time(ctx: RowContext, path: str, value: Any) -> float | None:
    n = _json_int(ctx, path, value)
    if n is not None and n < 0:
        raise ctx.error(path, str(n), "epoch seconds >= 0")
    return float(n) if n else None  # 0: not set (never started / not ended)


def _json_tres(ctx: RowContext, path: str, items: Any) -> int:
    """GPUs of a tres list [{"type": "gres", "name": "gpu", "count": 2}, ...], read as a TRES string."""
    if items is None:
        return 0
    if not isinstance(items, list):
        raise ctx.error(path, text(json.dumps(items))[:80], "a list of {type, name, count}")
    parts = []
    for item in items:
        if not isinstance(item, Mapping) or not isinstance(item.get("type"), str):
            raise ctx.error(path, text(json.dumps(item))[:80], "a {type, name, count} entry")
        if item["type"] != "gres":
            continue  # cpu, mem, node, billing, energy (count null on 22.05, -2 on 25.11 when not gathered)
        label = f"gres/{item.get('name') or ''}"
        count = item.get("count")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ctx.error(f"{path} {label} count", text(json.dumps(count)), "an integer >= 0")
        parts.append(f"{label}={count}")
    return _gpus(ctx, path, ",".join(parts))


def _from_json(ctx: RowContext, job: Any) -> _Row:
    if not isinstance(job, Mapping):
        raise ctx.error("jobs[]", text(json.dumps(job))[:80], "a job object")
    job_id = _json_int(ctx, "job_id", _get(ctx, job, "job_id"))
    if job_id is None or job_id <= 0:
        raise ctx.error("job_id", text(json.dumps(job.get("job_id"))), "a positive job id")
    array_id = _json_int(ctx, "array.job_id", _get(ctx, job, "array.job_id", required=False))
    task = _json_int(ctx, "array.task_id", _get(ctx, job, "array.task_id", required=False))
    task_spec = text(_get(ctx, job, "array.task", required=False))
    if array_id and task is not None:
        shown, array = f"{array_id}_{task}", str(array_id)
    elif array_id and task_spec:
        shown, array = f"{array_id}_[{task_spec}]", str(array_id)
    else:
        shown, array = str(job_id), None
    user = _get(ctx, job, "user")
    if not isinstance(user, str) or not user.strip():
        raise ctx.error("user", text(json.dumps(user)), "a user name")
    submit = _json_time(ctx, "time.submission", _get(ctx, job, "time.submission"))
    start = _json_time(ctx, "time.start", _get(ctx, job, "time.start"))
    end = _json_time(ctx, "time.end", _get(ctx, job, "time.end"))
    limit_min = _json_int(ctx, "time.limit", _get(ctx, job, "time.limit"))
    state_words = words(_get(ctx, job, "state.current"))
    return _Row(
        job_id=shown,
        raw_id=str(job_id),
        array_id=array,
        user=user.strip(),
        account=text(_get(ctx, job, "account", required=False)).strip(),
        submit=submit,
        start=start,
        end=end,
        limit_s=None if limit_min is None or limit_min <= 0 else float(limit_min * 60),
        # 25.11 shows a requeued job's cut run as ["PENDING", "REQUEUED"] (22.05: "REQUEUED")
        state=("REQUEUED" if "REQUEUED" in (w.upper() for w in state_words[1:])
               else _base_state(ctx, "state.current", " ".join(state_words))),
        allocated=bool(_get(ctx, job, "tres.allocated")),
        alloc_gpus=_json_tres(ctx, "tres.allocated", _get(ctx, job, "tres.allocated")),
        req_gpus=_json_tres(ctx, "tres.requested", _get(ctx, job, "tres.requested", required=False)),
        admin_comment=text(_get(ctx, job, "comment.administrator", required=False)),
    )

