"""``themis progress FRACTION``: a running job tells Themis how far it is (better finish-time estimates).

It writes ``themis:progress=F`` into the job's own Comment (``scontrol update JobId=$SLURM_JOB_ID
Comment=...``), which job owners may do; themisd reads it on its next cycle. The Comment is replaced, so
any free text in it is lost (the trusted AdminComment record is not touched). Run as an argument list:
nothing user-supplied ever reaches a shell.

Inside an array task the job is addressed as ``ARRAYID_TASKID`` (`jobkit.job_id`): the last task of
an array runs under the array's own JobId, and an update of that bare id is applied by Slurm to every task
of the array, so one task's report would become every task's.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys

import click

from themis_slurm.jobkit import job_id as own_job_id
from themis_slurm.jobkit import progress_comment  # the one writer of the Comment, shared with training jobs

TIMEOUT_S = 30.0


def _fraction(ctx: click.Context, param: click.Parameter, value: str) -> float:
    text = value.strip()
    try:
        f = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        f = math.nan
    if not math.isfinite(f) or not 0.0 <= f <= 1.0:
        raise click.BadParameter(f"{value!r} is not a fraction in [0, 1] (e.g. 0.42) or a percentage (42%)")
    return f


@click.command("progress")
@click.argument("fraction", callback=_fraction, metavar="FRACTION")
@click.option("--job", "job_id", default=None, metavar="JOBID",
              help="Job to report for (default: the job this runs in: $SLURM_JOB_ID, or "
                   "${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID} in an array task).")
def progress(fraction: float, job_id: str | None) -> None:
    """Report that this job has done FRACTION (0..1, or 42%) of its work; run it inside the job."""
    job_id = job_id or own_job_id()
    if not job_id:
        click.echo("themis progress: error: not inside a Slurm job ($SLURM_JOB_ID is not set): run it from "
                   "your job script, or give --job JOBID", err=True)
        sys.exit(1)
    if not re.fullmatch(r"\d+(_\d+)?", job_id):
        click.echo(f"themis progress: error: job id {job_id!r} is not a Slurm job id", err=True)
        sys.exit(1)
    argv = ["scontrol", "update", f"JobId={job_id}", f"Comment={progress_comment(fraction)}"]
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
                             stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        click.echo("themis progress: error: scontrol not found: is the Slurm client installed here?", err=True)
        sys.exit(1)
    except subprocess.TimeoutExpired:
        click.echo(f"themis progress: error: scontrol did not answer within {TIMEOUT_S:g} s: is slurmctld up?",
                   err=True)
        sys.exit(1)
    if res.returncode != 0:
        click.echo(f"themis progress: error: {' '.join(argv)} failed: "
                   f"{(res.stderr or res.stdout).strip() or res.returncode}", err=True)
        sys.exit(1)
    click.echo(f"job {job_id}: progress {fraction:.1%} reported")
