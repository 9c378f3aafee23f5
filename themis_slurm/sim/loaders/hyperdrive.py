"""Loader for the Themis authors' Philly/hyperdrive trace CSV.

Format (kshiteejm/mltiply, traces/philly_hyperdrive_workload.csv; see docs: themis-facts.md, "Workload used
by the authors"): header ``experiment-id,job-id,start-time,run-time,num-gpus``, one row per job, values
separated by ', '. Example row::

    1781, application_1529109938017_0075, 2018-06-16 04:51:49, 7953.0, 1

The experiment is the app (a hyperparameter sweep); job ids are YARN application ids and must be unique in
the file; start-time is a timestamp (naive = UTC; a plain number of seconds is accepted too); run-time is in
seconds and is taken as the run time on num-gpus GPUs with ideal placement. The file has no model column:
jobs get model None (set models afterwards, e.g. workload_paper.assign_models, as the authors did).
"""

from __future__ import annotations

import math
from dataclasses import replace

from themis_slurm.sim.loaders._common import (
    Collector,
    PathArg,
    RowContext,
    check_header,
    check_width,
    header_and_rows,
)
from themis_slurm.sim.trace import Trace, TraceJob

COLUMNS: tuple[str, ...] = ("experiment-id", "job-id", "start-time", "run-time", "num-gpus")


def load_hyperdrive(path: PathArg, *, app_interval_s: float | None = None, skip_bad: bool = False) -> Trace:
    """Read a hyperdrive trace.

    Args:
        path: the CSV file.
        app_interval_s: when set, the apps arrive this many seconds apart in order of first appearance in the
            file and every job arrives with its app; this is how the Themis authors replayed the trace (apps
            100 time units apart) since the raw timestamps span months. When None, a job arrives at its
            start-time minus the earliest start-time in the file.
        skip_bad: skip invalid rows (counted in Trace.skipped and described in Trace.notes) instead of
            raising TraceError at the first one.
    """
    if app_interval_s is not None and not (math.isfinite(app_interval_s) and app_interval_s >= 0):
        raise ValueError(f"app_interval_s must be finite and >= 0, got {app_interval_s!r}")
    name = str(path)
    line, header, rows = header_and_rows(path)
    pos = check_header(name, line, header, COLUMNS)
    collector = Collector(path, skip_bad)

    starts: dict[int, float] = {}  # raw start-time by line, rebased once every row is read

    def parse(ctx: RowContext, row: list[str]) -> TraceJob:
        check_width(ctx, row, len(header), header)
        app = ctx.text("experiment-id", row[pos["experiment-id"]])
        job_id = ctx.text("job-id", row[pos["job-id"]])
        start = ctx.timestamp_s("start-time", row[pos["start-time"]])
        run_time = ctx.number("run-time", row[pos["run-time"]], minimum=0, strict=True)
        gpus = ctx.positive_int("num-gpus", row[pos["num-gpus"]])
        starts[ctx.line] = start
        return TraceJob(job_id, app, app, 0.0, gpus, run_time, None, ctx.line)

    collector.run(rows, parse)
    notes = ["hyperdrive: no model column; every job has model None"]
    if app_interval_s is not None:
        order = {app: i for i, app in enumerate(dict.fromkeys(j.app_id for j in collector.jobs))}
        collector.jobs = [replace(j, arrival_s=order[j.app_id] * app_interval_s) for j in collector.jobs]
        notes.append(f"apps arrive {app_interval_s:g} s apart in order of first appearance; jobs arrive with their app")
    elif collector.jobs:
        origin = min(starts[_line(j)] for j in collector.jobs)
        collector.jobs = [replace(j, arrival_s=starts[_line(j)] - origin) for j in collector.jobs]
        notes.append("arrival = start-time - earliest start-time")
    return collector.trace(notes)


def _line(job: TraceJob) -> int:
    assert job.line is not None  # every loaded job carries its line
    return job.line
