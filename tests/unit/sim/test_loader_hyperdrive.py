"""Tests of the hyperdrive (Themis authors' Philly trace) loader."""

from __future__ import annotations

from pathlib import Path

import pytest

from themis_slurm.sim.loaders import load_hyperdrive, load_trace
from themis_slurm.sim.trace import TraceError

HEADER = "experiment-id,job-id,start-time,run-time,num-gpus\n"
GOOD = (
    "1781, application_1_0075, 2018-06-16 04:51:49, 7953.0, 1\n"
    "1781, application_1_0042, 2018-06-16 04:48:01, 3309.0, 1\n"
    "957, application_2_9791, 2018-06-16 05:00:00, 236.0, 8\n"
    "1070, application_2_1366, 2018-06-16 04:49:01, 4697.0, 4\n"
)


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_good_rows_with_timestamps(tmp_path: Path) -> None:
    trace = load_hyperdrive(write(tmp_path, HEADER + GOOD))
    assert trace.skipped == 0
    assert [j.job_id for j in trace] == ["application_1_0042", "application_2_1366", "application_1_0075", "application_2_9791"]
    first = trace.jobs[0]
    assert (first.app_id, first.arrival_s, first.duration_s, first.gpus, first.model, first.line) == (
        "1781", 0.0, 3309.0, 1, None, 3,
    )
    assert trace.jobs[-1].arrival_s == 719.0  # 05:00:00 - 04:48:01
    assert trace.apps() == ("1781", "1070", "957")
    assert any("no model column" in n for n in trace.notes)


def test_app_interval(tmp_path: Path) -> None:
    trace = load_hyperdrive(write(tmp_path, HEADER + GOOD), app_interval_s=100.0)
    assert trace.app_arrivals() == {"1781": 0.0, "957": 100.0, "1070": 200.0}
    assert {j.arrival_s for j in trace.by_app()["1781"]} == {0.0}
    with pytest.raises(ValueError):
        load_hyperdrive(write(tmp_path, HEADER + GOOD), app_interval_s=-1.0)


def test_columns_in_any_order_and_numeric_start(tmp_path: Path) -> None:
    text = "num-gpus,run-time,start-time,job-id,experiment-id\n2,10,1000,j1,e1\n1,20,1060,j2,e1\n"
    trace = load_trace(write(tmp_path, text), "hyperdrive")
    assert [(j.job_id, j.arrival_s, j.gpus) for j in trace] == [("j1", 0.0, 2), ("j2", 60.0, 1)]


BAD_ROWS = [
    ("1781, a9, 2018-06-16 04:51:49, 7953.0\n", "columns", "4"),
    (", a9, 2018-06-16 04:51:49, 7953.0, 1\n", "experiment-id", ""),
    ("1781, , 2018-06-16 04:51:49, 7953.0, 1\n", "job-id", ""),
    ("1781, a9, 2018-13-45 04:51:49, 7953.0, 1\n", "start-time", "2018-13-45 04:51:49"),
    ("1781, a9, yesterday, 7953.0, 1\n", "start-time", "yesterday"),
    ("1781, a9, 2018-06-16 04:51:49, abc, 1\n", "run-time", "abc"),
    ("1781, a9, 2018-06-16 04:51:49, 0, 1\n", "run-time", "0"),
    ("1781, a9, 2018-06-16 04:51:49, -5, 1\n", "run-time", "-5"),
    ("1781, a9, 2018-06-16 04:51:49, nan, 1\n", "run-time", "nan"),
    ("1781, a9, 2018-06-16 04:51:49, 7953.0, 0\n", "num-gpus", "0"),
    ("1781, a9, 2018-06-16 04:51:49, 7953.0, 1.5\n", "num-gpus", "1.5"),
    ("1781, a9, 2018-06-16 04:51:49, 7953.0, \n", "num-gpus", ""),
    ("1781, application_1_0075, 2018-06-16 04:51:49, 7953.0, 1\n", "job id", "application_1_0075"),
]


@pytest.mark.parametrize(("row", "field", "value"), BAD_ROWS)
def test_bad_row_fails_with_location(tmp_path: Path, row: str, field: str, value: str) -> None:
    path = write(tmp_path, HEADER + GOOD + row)
    with pytest.raises(TraceError) as info:
        load_hyperdrive(path)
    error = info.value
    assert (error.line, error.field, error.value) == (6, field, value)
    assert str(error).startswith(f"{path}:6: field {field}: value {value!r} is not ")


@pytest.mark.parametrize(("row", "field", "value"), BAD_ROWS)
def test_bad_row_skipped(tmp_path: Path, row: str, field: str, value: str) -> None:
    trace = load_hyperdrive(write(tmp_path, HEADER + GOOD + row + GOOD.replace("application", "other")), skip_bad=True)
    assert trace.skipped == 1 and len(trace) == 8
    assert (trace.bad_rows[0].line, trace.bad_rows[0].field) == (6, field)
    assert any(n.startswith("skipped 1 bad row(s) of 9; first: ") for n in trace.notes)


def test_first_bad_row_is_reported(tmp_path: Path) -> None:
    rows = "e, j1, 2018-06-16 04:51:49, 10, 0\ne, j2, 2018-06-16 04:51:49, -1, 1\n"
    with pytest.raises(TraceError, match=r":2: field num-gpus"):
        load_hyperdrive(write(tmp_path, HEADER + rows + GOOD))
    trace = load_hyperdrive(write(tmp_path, HEADER + rows + GOOD), skip_bad=True)
    assert trace.skipped == 2 and [b.line for b in trace.bad_rows] == [2, 3]


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("experiment-id,job-id,start-time,run-time,num-gpus,user\n", "field header: value 'user' is not a known column"),
        ("experiment-id,job-id,start-time,run-time\n", "field header: missing column\\(s\\) num-gpus"),
        ("experiment-id,job-id,job-id,start-time,run-time,num-gpus\n", "field header: value 'job-id' is not a column named only once"),
    ],
)
def test_bad_header(tmp_path: Path, header: str, message: str) -> None:
    with pytest.raises(TraceError, match=":1: " + message):
        load_hyperdrive(write(tmp_path, header + GOOD), skip_bad=True)


def test_empty_and_header_only(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="the file is empty"):
        load_hyperdrive(write(tmp_path, ""))
    with pytest.raises(TraceError, match="the file is empty"):
        load_hyperdrive(write(tmp_path, "\n\n"))
    with pytest.raises(TraceError, match="header but no job rows"):
        load_hyperdrive(write(tmp_path, HEADER))


def test_all_rows_bad(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no valid job rows \\(1 bad"):
        load_hyperdrive(write(tmp_path, HEADER + "e, j, 2018-06-16 04:51:49, 10, 0\n"), skip_bad=True)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(HEADER.encode() + b"\xff\xfe, j, 2018-06-16 04:51:49, 10, 1\n")
    with pytest.raises(TraceError, match="not UTF-8"):
        load_hyperdrive(path)
