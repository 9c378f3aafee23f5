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

Duration. Gavel traces give work as total_steps, not time.

- EXACT, with ``throughputs`` (Gavel's simulation_throughputs.json, as Gavel's own simulator uses it):
  duration_s = total_steps / throughputs[gpu_type][str((job_type, scale_factor))]["null"], the job's
  measured steps per second running alone on scale_factor GPUs of that type (default v100), which is the
  "ideal placement" run time a TraceJob holds. A job type the table lacks is a TraceError naming it.
- APPROXIMATE, without it: duration_s = total_steps / (steps_per_s(job family) * scale_factor), one flat
  single-GPU rate per family times linear scaling. The default table is Gavel's isolated ("null") V100
  throughput per family from scheduler/combined_throughputs.json (commit 474a31a2), rounded to 3
  significant figures. It ignores batch size and measured scaling: against the exact rates run times come
  out 0.15x to 54x off (Recommendation 7-54x, LM on 4 GPUs 0.2-0.3x, on a 160-job Gavel trace), so use it
  only for a trace's shape, never for its load. The trace's notes say which one was used.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

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
    throughputs: PathArg | Mapping[str, Any] | None = None,
    gpu_type: str = "v100",
    type_speeds: bool = False,
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
        throughputs: Gavel's simulation_throughputs.json (a path, or the parsed JSON): exact run times per
            (job type, scale factor); steps_per_s and default_steps_per_s are then unused.
        gpu_type: the throughput table's GPU type (a top-level key, e.g. v100, p100, k80).
        type_speeds: with `throughputs`, give every job its speed on each GPU type of the file relative to
            `gpu_type` (TraceJob.speeds: its measured rate there over its rate on `gpu_type`, 0 where the file
            has no rate: it cannot run there), for a cluster of several types (``themis simulate
            --gpu-types``). Off by default: on one type the speeds change nothing but make jobs of different
            types distinct kinds.
    """
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {GROUP_BY}, got {group_by!r}")
    table = _rate_table(steps_per_s, default_steps_per_s)
    measured = _measured(throughputs, gpu_type) if throughputs is not None else None
    if type_speeds and throughputs is None:
        raise ValueError("type_speeds needs throughputs (the flat rates have no GPU types)")
    others = _per_type(throughputs) if type_speeds and throughputs is not None else None
    rows = _tab_rows(path)
    first = next(rows, None)
    if first is None:
        raise TraceError(str(path), None, None, None, "the file is empty; expected tab-separated job lines")
    width, columns = _layout(str(path), first)
    collector = Collector(path, skip_bad)
    parse = _RowParser(width, columns, table, default_steps_per_s, measured, gpu_type, group_by, collector, others)
    collector.run(_chain(first, rows), parse)
    if measured is not None:
        how = (f"duration = total_steps / measured {gpu_type} steps/s of (job type, scale factor) alone, "
               "as Gavel's simulator")
        if others is not None:
            how += f"; speed on each of {', '.join(sorted(others))} = its measured rate there / on {gpu_type}"
    else:
        how = ("duration = total_steps / (flat steps/s per family x scale factor): an APPROXIMATION, 0.15x to "
               "54x off Gavel's measured rates; pass the throughputs file for exact run times")
    notes = [f"gavel: {width}-column layout; apps by {group_by}; {how}"]
    return collector.trace(notes)


def _rate_table(steps_per_s: Mapping[str, float] | None, default_steps_per_s: float | None) -> dict[str, float]:
    """DEFAULT_STEPS_PER_S with the caller's rates over it; every rate (and the default) finite and > 0."""
    table = dict(DEFAULT_STEPS_PER_S)
    table.update(steps_per_s or {})
    for key, rate in (*table.items(), ("default_steps_per_s", default_steps_per_s)):
        if rate is not None and not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"steps per second for {key!r} must be finite and > 0, got {rate!r}")
    return table


def _layout(name: str, first: tuple[int, list[str]]) -> tuple[int, tuple[str, ...]]:
    """The column count and names of the file, from its first row (module docstring: three layouts)."""
    width = len(first[1])
    if width not in LAYOUTS:
        supported = "; ".join(f"{n}: {', '.join(cols)}" for n, cols in LAYOUTS.items())
        raise TraceError(name, first[0], "columns", str(width), f"a known Gavel layout ({supported})")
    return width, LAYOUTS[width]


@dataclass
class _RowParser:
    """One Gavel row -> TraceJob, for :class:`Collector`: fields checked, duration from the measured or the
    flat rates (module docstring), the app by `group_by`."""

    width: int
    columns: tuple[str, ...]
    table: Mapping[str, float]
    default_steps_per_s: float | None
    measured: Mapping[str, float] | None
    gpu_type: str
    group_by: GroupBy
    collector: Collector
    others: Mapping[str, Mapping[str, float]] | None = None  # type -> _measured(type), for TraceJob.speeds
    pos: dict[str, int] = field(init=False)  # column -> index in a row

    def __post_init__(self) -> None:
        self.pos = {column: i for i, column in enumerate(self.columns)}

    def __call__(self, ctx: RowContext, row: list[str]) -> TraceJob:
        pos = self.pos
        check_width(ctx, row, self.width, self.columns)
        job_type = ctx.text("job_type", row[pos["job_type"]])
        ctx.choice("needs_data_dir", row[pos["needs_data_dir"]], ("0", "1"))
        total_steps = ctx.positive_int("total_steps", row[pos["total_steps"]])
        gpus = ctx.positive_int("scale_factor", row[pos["scale_factor"]])
        arrival = ctx.number("arrival_time", row[pos["arrival_time"]], minimum=0)
        if "priority_weight" in pos:
            ctx.number("priority_weight", row[pos["priority_weight"]], minimum=0, strict=True)
            ctx.number("SLO", row[pos["SLO"]])
        duration = self._duration(ctx, job_type, gpus, total_steps)
        job_id = str(ctx.line - 1)  # Gavel numbers jobs 0, 1, ... in file order
        app = f"job{job_id}" if self.group_by == "job" else job_type
        return TraceJob(
            job_id=job_id,
            app_id=app,
            user=app,
            arrival_s=arrival,
            gpus=gpus,
            duration_s=duration,
            model=self.collector.model(ctx, job_type),
            line=ctx.line,
            speeds=self._speeds(job_type, gpus),
        )

    def _speeds(self, job_type: str, gpus: int) -> tuple[tuple[str, float], ...]:
        """(type, its rate there / its rate on gpu_type) for every type of the file (0: no rate there)."""
        if self.others is None or self.measured is None:
            return ()
        key = str((job_type, gpus))
        ref = self.measured[key]
        return tuple((t, rates.get(key, 0.0) / ref) for t, rates in sorted(self.others.items()))

    def _duration(self, ctx: RowContext, job_type: str, gpus: int, total_steps: int) -> float:
        """Seconds alone on `gpus` GPUs: measured for (job type, scale factor), else the flat family rate."""
        if self.measured is not None:
            key = str((job_type, gpus))
            if key not in self.measured:
                raise ctx.error("job_type", f"{job_type} x {gpus} GPU(s)",
                                f"a (job type, scale factor) in the {self.gpu_type} throughput table")
            return total_steps / self.measured[key]
        table = self.table
        rate = table.get(job_type, table.get(job_family(job_type), self.default_steps_per_s))
        if rate is None:
            known = ", ".join(sorted(table))
            raise ctx.error("job_type", job_type,
                            f"a job type with a known steps/s ({known}); pass steps_per_s or default_steps_per_s")
        return total_steps / (rate * gpus)


def _measured(throughputs: PathArg | Mapping[str, Any], gpu_type: str) -> dict[str, float]:
    """{str((job_type, scale_factor)): steps/s alone} for `gpu_type` from Gavel's throughput JSON."""
    where = "throughputs"
    if isinstance(throughputs, Mapping):
        data: Any = throughputs
    else:
        where = str(throughputs)
        try:
            data = json.loads(Path(throughputs).read_text())
        except OSError as e:
            raise TraceError(where, None, None, None, f"cannot read the throughputs file: {e.strerror}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise TraceError(where, None, None, None,
                             f"not JSON ({e}); expected Gavel's simulation_throughputs.json") from None
    if not isinstance(data, Mapping) or not isinstance(data.get(gpu_type), Mapping):
        types = ", ".join(sorted(data)) if isinstance(data, Mapping) else ""
        raise TraceError(where, None, "gpu_type", gpu_type, f"a GPU type of the file ({types or 'none found'})")
    out: dict[str, float] = {}
    for key, entry in data[gpu_type].items():
        rate = entry.get("null") if isinstance(entry, Mapping) else None
        if isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0:
            out[key] = float(rate)
    return out


def _per_type(throughputs: PathArg | Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """:func:`_measured` of every plain GPU type of the file (not Gavel's ``*_unconsolidated`` variants,
    which are placements, not types)."""
    data = throughputs if isinstance(throughputs, Mapping) else json.loads(Path(throughputs).read_text())
    return {t: _measured(data, t) for t in data if isinstance(data[t], Mapping) and "_" not in t}


def _tab_rows(path: PathArg) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of non-blank lines, split on tabs only: commands may contain quotes and commas."""
    for number, text in enumerate(open_text(path), start=1):
        text = text.rstrip("\r\n")
        if text.strip():
            yield number, text.split("\t")


def _chain(first: tuple[int, list[str]], rest: Iterator[tuple[int, list[str]]]) -> Iterator[tuple[int, list[str]]]:
    yield first
    yield from rest
