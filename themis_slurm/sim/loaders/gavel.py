"""Loader for Gavel's tab-separated job traces (stanford-futuredata/gavel, scheduler/traces/).

Gavel trace lines have no header; the column order is that of ``parse_trace`` in Gavel's scheduler/utils.py.
Three layouts exist in that repository; the layout is chosen by the column count of the first row, and every
row must then have that count:

- 10 columns (current): job_type, command, working_directory, num_steps_arg, needs_data_dir, total_steps,
  scale_factor, priority_weight, SLO, arrival_time. Seen in the repository's
  scheduler/traces/physical_cluster/*.trace (e.g. small_test.trace @19a0dd25) and in ``parse_trace`` of
  later Gavel versions (as copied by Gavel-derived schedulers).
- 9 columns (scheduler/utils.py ``parse_trace`` @05786c3c and @52d9895a, before working_directory):
  job_type, command, num_steps_arg, needs_data_dir, total_steps, scale_factor, priority_weight, SLO,
  arrival_time
- 7 columns (the shipped traces/msr/seed=*/*.trace files, e.g. seed=0/0e4a51.trace at commit 42ca27dc):
  job_type, command, num_steps_arg, needs_data_dir, total_steps, arrival_time, scale_factor. This order is
  inferred from the data (the sixth column is non-decreasing with values like 44477.0, the seventh is 1/2/4).

Mapping: scale_factor is the job's GPU count; job_type (e.g. 'ResNet-50 (batch size 64)') maps to a placement
profile where one exists (only ResNet-50 does; the others get model None); arrival_time is in seconds.

Duration (ASSUMPTION): Gavel traces give work as total_steps, not time. duration_s = total_steps /
(steps_per_s(job family) * scale_factor), i.e. single-GPU throughput times linear scaling, which is the
"ideal placement" run time a TraceJob holds. The default single-GPU steps/s table is Gavel's own isolated
("null") V100 throughput per job family from scheduler/combined_throughputs.json (commit 474a31a2), rounded
to 3 significant figures. It ignores batch size (later Gavel tables are per batch size and per scale
factor), so durations are indicative; pass ``steps_per_s`` to use better numbers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from typing import Literal

from themis_slurm.sim.loaders._common import Collector, PathArg, RowContext, check_width, open_text
from themis_slurm.sim.trace import Trace, TraceError, TraceJob

LAYOUTS: dict[int, tuple[str, ...]] = {
    10: (
        "job_type",
        "command",
        "working_directory",
        "num_steps_arg",
        "needs_data_dir",
        "total_steps",
        "scale_factor",
        "priority_weight",
        "SLO",
        "arrival_time",
    ),
    9: (
        "job_type",
        "command",
        "num_steps_arg",
        "needs_data_dir",
        "total_steps",
        "scale_factor",
        "priority_weight",
        "SLO",
        "arrival_time",
    ),
    7: ("job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps", "arrival_time", "scale_factor"),
}

# Single-GPU steps per second by Gavel job family (V100, isolated). Source: stanford-futuredata/gavel,
# scheduler/combined_throughputs.json @474a31a2, key v100 -> family -> "null". See the module docstring.
DEFAULT_STEPS_PER_S: dict[str, float] = {
    "ResNet-18": 46.8,
    "ResNet-50": 1.38,
    "Transformer": 8.74,
    "LM": 96.2,
    "Recommendation": 0.430,
    "CycleGAN": 3.68,
    "A3C": 7.24,
}

GroupBy = Literal["job", "job_type"]
GROUP_BY: tuple[str, ...] = ("job", "job_type")
_SUFFIX = re.compile(r"\s*\([^)]*\)\s*$")


def job_family(job_type: str) -> str:
    """'ResNet-50 (batch size 64)' -> 'ResNet-50': the key of the steps/s table."""
    return _SUFFIX.sub("", job_type).strip()


def load_gavel(
    path: PathArg,
    *,
    steps_per_s: Mapping[str, float] | None = None,
    default_steps_per_s: float | None = None,
    group_by: GroupBy = "job",
    skip_bad: bool = False,
) -> Trace:
    """Read a Gavel trace.

    Args:
        path: the .trace file.
        steps_per_s: single-GPU steps per second by full job_type or by family (full name wins); overrides
            and extends DEFAULT_STEPS_PER_S.
        default_steps_per_s: for job families in neither table; when None such a row is a TraceError.
        group_by: "job" (default): Gavel has no notion of app, so every job is its own app; "job_type":
            jobs of the same job_type form one app.
        skip_bad: skip invalid rows (counted and noted) instead of raising TraceError at the first one.
    """
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {GROUP_BY}, got {group_by!r}")
    table = dict(DEFAULT_STEPS_PER_S)
    table.update(steps_per_s or {})
    for key, rate in (*table.items(), ("default_steps_per_s", default_steps_per_s)):
        if rate is not None and not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"steps per second for {key!r} must be finite and > 0, got {rate!r}")
    name = str(path)
    rows = _tab_rows(path)
    first = next(rows, None)
    if first is None:
        raise TraceError(name, None, None, None, "the file is empty; expected tab-separated job lines")
    width = len(first[1])
    if width not in LAYOUTS:
        supported = "; ".join(f"{n}: {', '.join(cols)}" for n, cols in LAYOUTS.items())
        raise TraceError(name, first[0], "columns", str(width), f"a known Gavel layout ({supported})")
    columns = LAYOUTS[width]
    pos = {column: i for i, column in enumerate(columns)}
    collector = Collector(path, skip_bad)

    def parse(ctx: RowContext, row: list[str]) -> TraceJob:
        check_width(ctx, row, width, columns)
        job_type = ctx.text("job_type", row[pos["job_type"]])
        ctx.choice("needs_data_dir", row[pos["needs_data_dir"]], ("0", "1"))
        total_steps = ctx.positive_int("total_steps", row[pos["total_steps"]])
        gpus = ctx.positive_int("scale_factor", row[pos["scale_factor"]])
        arrival = ctx.number("arrival_time", row[pos["arrival_time"]], minimum=0)
        if "priority_weight" in pos:
            ctx.number("priority_weight", row[pos["priority_weight"]], minimum=0, strict=True)
            ctx.number("SLO", row[pos["SLO"]])
        rate = table.get(job_type, table.get(job_family(job_type), default_steps_per_s))
        if rate is None:
            known = ", ".join(sorted(table))
            raise ctx.error(
                "job_type", job_type, f"a job type with a known steps/s ({known}); pass steps_per_s or default_steps_per_s"
            )
        job_id = str(ctx.line - 1)  # Gavel numbers jobs 0, 1, ... in file order
        app = f"job{job_id}" if group_by == "job" else job_type
        return TraceJob(
            job_id=job_id,
            app_id=app,
            user=app,
            arrival_s=arrival,
            gpus=gpus,
            duration_s=total_steps / (rate * gpus),
            model=collector.model(ctx, job_type),
            line=ctx.line,
        )

    collector.run(_chain(first, rows), parse)
    notes = [
        f"gavel: {width}-column layout; apps by {group_by}; duration = total_steps / (steps_per_s * scale_factor),"
        " an assumption (see loaders/gavel.py)"
    ]
    return collector.trace(notes)


def _tab_rows(path: PathArg) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of non-blank lines, split on tabs only: commands may contain quotes and commas."""
    for number, text in enumerate(open_text(path), start=1):
        text = text.rstrip("\r\n")
        if text.strip():
            yield number, text.split("\t")


def _chain(first: tuple[int, list[str]], rest: Iterator[tuple[int, list[str]]]) -> Iterator[tuple[int, list[str]]]:
    yield first
    yield from rest
