"""Tests of the Gavel trace loader, on hand-made lines in Gavel's column orders."""

from __future__ import annotations

from pathlib import Path

import pytest

from themis_slurm.sim.loaders import LOADERS, load_gavel, load_trace
from themis_slurm.sim.loaders.gavel import DEFAULT_STEPS_PER_S, job_family
from themis_slurm.sim.trace import TraceError

# job_type, command, working_directory, num_steps_arg, needs_data_dir, total_steps, scale_factor,
# priority_weight, SLO, arrival_time  (gavel scheduler/traces/physical_cluster/small_test.trace)
ROWS10 = [
    ["ResNet-50 (batch size 64)", "python3 main.py -a resnet50 -b 64 %s/data", "workloads/imagenet", "--num_minibatches", "1", "1380", "2", "1", "-1.000000", "0"],
    ["LM (batch size 20)", 'python main.py --data "%s/wikitext2"', "workloads/lm", "--steps", "1", "9620", "1", "1", "-1.000000", "50.5"],
    ["Transformer (batch size 128)", "python3 train.py -batch_size 128", "workloads/translation", "-step", "0", "874", "4", "1", "2.5", "10"],
]


def lines(rows: list[list[str]]) -> str:
    return "".join("\t".join(row) + "\n" for row in rows)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "small.trace"
    path.write_text(text)
    return path


def test_ten_column_layout(tmp_path: Path) -> None:
    trace = load_gavel(write(tmp_path, lines(ROWS10)))
    assert [j.job_id for j in trace] == ["0", "2", "1"]
    by_id = {j.job_id: j for j in trace}
    assert (by_id["0"].app_id, by_id["0"].gpus, by_id["0"].model, by_id["0"].arrival_s) == ("job0", 2, "resnet50", 0.0)
    assert by_id["0"].duration_s == pytest.approx(1380 / (1.38 * 2))
    assert by_id["1"].duration_s == pytest.approx(9620 / 96.2) and by_id["1"].model is None
    assert by_id["2"].duration_s == pytest.approx(874 / (8.74 * 4)) and by_id["2"].arrival_s == 10.0
    assert any("LM (batch size 20) (1 jobs)" in n for n in trace.notes)


def test_nine_and_seven_column_layouts(tmp_path: Path) -> None:
    nine = [row[:2] + row[3:] for row in ROWS10]
    assert [j.gpus for j in load_gavel(write(tmp_path, lines(nine)))] == [2, 4, 1]
    # job_type, command, num_steps_arg, needs_data_dir, total_steps, arrival_time, scale_factor (traces/msr)
    seven = [[r[0], r[1], r[3], r[4], r[5], r[9], r[6]] for r in ROWS10]
    trace = load_gavel(write(tmp_path, lines(seven)))
    assert [(j.gpus, j.arrival_s) for j in trace] == [(2, 0.0), (4, 10.0), (1, 50.5)]


def test_options(tmp_path: Path) -> None:
    path = write(tmp_path, lines(ROWS10))
    trace = load_gavel(path, steps_per_s={"LM (batch size 20)": 10.0, "ResNet-50": 2.0})
    by_id = {j.job_id: j for j in trace}
    assert by_id["1"].duration_s == pytest.approx(962.0) and by_id["0"].duration_s == pytest.approx(345.0)
    grouped = load_trace(path, "gavel", group_by="job_type")
    assert grouped.apps() == ("ResNet-50 (batch size 64)", "Transformer (batch size 128)", "LM (batch size 20)")
    with pytest.raises(ValueError):
        load_gavel(path, steps_per_s={"LM": 0.0})
    with pytest.raises(ValueError):
        load_gavel(path, group_by="user")  # type: ignore[arg-type]


def test_unknown_family_needs_a_rate(tmp_path: Path) -> None:
    row = [["BERT (batch size 8)", "python3 run.py", "w", "--steps", "0", "500", "1", "1", "-1", "0"]]
    path = write(tmp_path, lines(ROWS10 + row))
    with pytest.raises(TraceError, match=r":4: field job_type: value 'BERT \(batch size 8\)' is not a job type"):
        load_gavel(path)
    trace = load_gavel(path, default_steps_per_s=5.0)
    assert {j.job_id: j.duration_s for j in trace}["3"] == pytest.approx(100.0)


def _bad(index: int, value: str) -> list[str]:
    row = list(ROWS10[0])
    row[index] = value
    return row


BAD_ROWS = [
    (ROWS10[0][:9], "columns", "9"),
    (_bad(0, ""), "job_type", ""),
    (_bad(4, "2"), "needs_data_dir", "2"),
    (_bad(5, "0"), "total_steps", "0"),
    (_bad(5, "1e3"), "total_steps", "1e3"),
    (_bad(6, "x"), "scale_factor", "x"),
    (_bad(6, "0"), "scale_factor", "0"),
    (_bad(7, "0"), "priority_weight", "0"),
    (_bad(8, "none"), "SLO", "none"),
    (_bad(9, "-1"), "arrival_time", "-1"),
    (_bad(9, "inf"), "arrival_time", "inf"),
]


@pytest.mark.parametrize(("row", "field", "value"), BAD_ROWS)
def test_bad_row_fails_with_location(tmp_path: Path, row: list[str], field: str, value: str) -> None:
    path = write(tmp_path, lines([*ROWS10, row]))
    with pytest.raises(TraceError) as info:
        load_gavel(path)
    assert (info.value.line, info.value.field, info.value.value) == (4, field, value)
    assert str(info.value).startswith(f"{path}:4: field {field}: value {value!r} is not ")


@pytest.mark.parametrize(("row", "field", "value"), BAD_ROWS)
def test_bad_row_skipped(tmp_path: Path, row: list[str], field: str, value: str) -> None:
    trace = load_gavel(write(tmp_path, lines([*ROWS10, row])), skip_bad=True)
    assert (trace.skipped, len(trace), trace.bad_rows[0].field) == (1, 3, field)


def test_unknown_layout_and_empty(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r":1: field columns: value '5' is not a known Gavel layout"):
        load_gavel(write(tmp_path, "a\tb\tc\td\te\n"))
    with pytest.raises(TraceError, match="the file is empty"):
        load_gavel(write(tmp_path, "\n"))


def test_family_and_registry() -> None:
    assert job_family("ResNet-50 (batch size 64)") == "ResNet-50" and job_family("CycleGAN") == "CycleGAN"
    assert set(DEFAULT_STEPS_PER_S) == {"ResNet-18", "ResNet-50", "Transformer", "LM", "Recommendation", "CycleGAN", "A3C"}
    assert set(LOADERS) == {"hyperdrive", "chronus", "gavel", "sacct"}
    with pytest.raises(ValueError, match="unknown trace format 'philly'"):
        load_trace("x", "philly")
