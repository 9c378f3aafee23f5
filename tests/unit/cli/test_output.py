"""Table rendering: aligned columns, -h, -P, -o with widths, and the value formatters."""

from __future__ import annotations

import click
import pytest

from themis_slurm.cli.output import Column, TableOptions, duration, render, short_state

COLS = (Column("job", "JOBID", lambda r: r["job"], True), Column("app", "APP", lambda r: r["app"]),
        Column("rho", "RHO", lambda r: r["rho"], True))
ROWS = [{"job": "7", "app": "alice/sweep", "rho": 1.234}, {"job": "12_3", "app": "bob/x", "rho": None}]


def test_aligned() -> None:
    assert render(ROWS, COLS, ("job", "app", "rho"), TableOptions()).splitlines() == [
        "JOBID  APP           RHO", "    7  alice/sweep  1.23", " 12_3  bob/x           -"]


def test_noheader_parsable_and_format() -> None:
    assert render(ROWS, COLS, ("job",), TableOptions(noheader=True)) == "    7\n 12_3"
    assert render(ROWS, COLS, ("job", "rho"), TableOptions(parsable=True)) == "JOBID|RHO\n7|1.23\n12_3|-"
    assert render(ROWS, COLS, ("job",), TableOptions(fields="app:5,job")).splitlines()[1] == "alice      7"


@pytest.mark.parametrize("spec, msg", [("nope", "unknown field 'nope'"), ("app:x", "must be a number")])
def test_bad_format_is_a_usage_error(spec: str, msg: str) -> None:
    with pytest.raises(click.UsageError, match=msg):
        render(ROWS, COLS, ("job",), TableOptions(fields=spec))


def test_formatters() -> None:
    assert [duration(x) for x in (5, 65, 3725, 90061, None)] == ["0:05", "1:05", "1:02:05", "1-01:01:01", None]
    assert short_state("PENDING") == "PD" and short_state("RUNNING") == "R"
