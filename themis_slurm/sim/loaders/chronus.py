"""Loader for the Tiresias/Chronus job CSV (e.g. ChronusArtifact's trace_job_Philly_MIX1.csv).

Header (S-Lab-System-Group/ChronusArtifact, code/data/exp/trace_job_Philly_MIX1.csv)::

    job_id,user,num_gpu,submit_time,iterations,model_name,duration,interval,expect_time_list,
    expect_value_list,best_effort,job_type

Required here: job_id, num_gpu, submit_time, duration; user and model_name are used when present (the
Tiresias CSV has no user column).

Accounts (the top of the tenancy tree, ``TraceJob.account``): an ``account`` or ``vc`` column when the file
has one; otherwise the ``user`` column. In the Philly-derived files that column holds a Philly virtual
cluster (``vc_6214e9``), a team with its own quota in Philly, which is what a Slurm account is; the files
name no finer user, so each virtual cluster is an account with one user of the same name. Without either
column the account is ``""``. iterations, interval and the four deadline/SLO columns of the Chronus paper
are accepted but ignored (they are not needed for fairness work) and so are not validated beyond the column
count. Rows with num_gpu == 0 exist in the Philly MIX1 file (184 of them): they are invalid, because a job
that gangs no GPU has no place in a GPU scheduler; load with ``skip_bad=True`` to drop them.
"""

from __future__ import annotations

import math
from typing import Literal

from themis_slurm.sim.loaders._common import (
    Collector,
    PathArg,
    RowContext,
    check_header,
    check_width,
    header_and_rows,
)
from themis_slurm.sim.trace import Trace, TraceError, TraceJob

REQUIRED: tuple[str, ...] = ("job_id", "num_gpu", "submit_time", "duration")
OPTIONAL: tuple[str, ...] = (
    "user",
    "account",
    "vc",
    "model_name",
    "iterations",
    "interval",
    "expect_time_list",
    "expect_value_list",
    "best_effort",
    "job_type",
)
GroupBy = Literal["job", "user", "user+model"]
GROUP_BY: tuple[str, ...] = ("job", "user", "user+model")


def load_chronus(
    path: PathArg,
    *,
    group_by: GroupBy = "user+model",
    time_unit_s: float = 1.0,
    skip_bad: bool = False,
) -> Trace:
    """Read a Tiresias/Chronus CSV.

    Args:
        path: the CSV file.
        group_by: what makes an app. Default "user+model": Themis's app is a group of jobs working towards one
            goal (e.g. a hyperparameter sweep). In the Philly-derived files a "user" is a whole virtual
            cluster (a team; about 2,800 jobs on all models each in MIX1), far coarser than an app, while
            "job" makes every job its own app and so removes the very level Themis is fair between. One
            team training one model is the closest proxy for a sweep that the columns allow. (Caveat: such
            groups span the whole trace rather than one burst.)
        time_unit_s: seconds per unit of submit_time and duration. The source does not state the unit (the
            Chronus simulator uses both columns in the same unit), so it is an option; 1.0 = seconds.
        skip_bad: skip invalid rows (counted in Trace.skipped, described in Trace.notes) instead of raising
            TraceError at the first one.
    """
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {GROUP_BY}, got {group_by!r}")
    if not (math.isfinite(time_unit_s) and time_unit_s > 0):
        raise ValueError(f"time_unit_s must be finite and > 0, got {time_unit_s!r}")
    name = str(path)
    line, header, rows = header_and_rows(path)
    pos = check_header(name, line, header, REQUIRED, OPTIONAL)
    if group_by != "job" and "user" not in pos:
        raise TraceError(name, line, "header", None, f"a user column, needed by group_by={group_by!r}")
    if group_by == "user+model" and "model_name" not in pos:
        raise TraceError(name, line, "header", None, "a model_name column, needed by group_by='user+model'")
    if "account" in pos and "vc" in pos:
        raise TraceError(name, line, "header", "vc", "a second account column (give account or vc, not both)")
    account_col = "account" if "account" in pos else "vc" if "vc" in pos else "user" if "user" in pos else None
    collector = Collector(path, skip_bad)

    def parse(ctx: RowContext, row: list[str]) -> TraceJob:
        check_width(ctx, row, len(header), header)
        job_id = ctx.text("job_id", row[pos["job_id"]])
        user = ctx.text("user", row[pos["user"]]) if "user" in pos else ""
        gpus = ctx.positive_int("num_gpu", row[pos["num_gpu"]])
        submit = ctx.number("submit_time", row[pos["submit_time"]], minimum=0)
        duration = ctx.number("duration", row[pos["duration"]], minimum=0, strict=True)
        raw_model = ctx.text("model_name", row[pos["model_name"]]) if "model_name" in pos else None
        account = row[pos[account_col]].strip() if account_col is not None else ""
        if group_by == "job":
            app = job_id
        elif group_by == "user":
            app = user
        else:
            app = f"{user}:{raw_model}"
        return TraceJob(
            job_id=job_id,
            app_id=app,
            user=user or app,
            arrival_s=submit * time_unit_s,
            gpus=gpus,
            duration_s=duration * time_unit_s,
            model=collector.model(ctx, raw_model),
            line=ctx.line,
            account=account,
        )

    collector.run(rows, parse)
    notes = [f"chronus: apps grouped by {group_by}; {time_unit_s:g} s per time unit"]
    if "model_name" not in pos:
        notes.append("chronus: no model_name column; every job has model None")
    if account_col == "user":
        notes.append("chronus: accounts from the user column (a Philly virtual cluster: one account, one user)")
    elif account_col is None:
        notes.append("chronus: no user or account column; every job has account ''")
    return collector.trace(notes)
