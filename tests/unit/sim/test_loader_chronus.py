"""Tests of the Tiresias/Chronus CSV loader."""

from __future__ import annotations

from pathlib import Path

import pytest

from themis_slurm.sim.loaders import load_chronus
from themis_slurm.sim.trace import TraceError

HEADER = (
    "job_id,user,num_gpu,submit_time,iterations,model_name,duration,interval,"
    "expect_time_list,expect_value_list,best_effort,job_type\n"
)
GOOD = (
    "0,vc_a,1,8555,5049,vgg16,747,14,1105,10,0,strict\n"
    "1,vc_b,1,832,296,mobilenet_v2,98,8,128,10,0,strict\n"
    "2,vc_a,4,14341,3621,vgg16,30,17,14341,10,1,best\n"
    "3,vc_a,8,16962,5458,inception_v3,158,5,318,10,0,strict\n"
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trace_job.csv"
    path.write_text(text)
    return path


def test_good_rows_default_grouping(tmp_path: Path) -> None:
    trace = load_chronus(write(tmp_path, HEADER + GOOD))
    assert [j.job_id for j in trace] == ["1", "0", "2", "3"]
    assert trace.apps() == ("vc_b:mobilenet_v2", "vc_a:vgg16", "vc_a:inception_v3")
    first = trace.jobs[0]
    assert (first.user, first.arrival_s, first.duration_s, first.gpus, first.model, first.line) == (
        "vc_b", 832.0, 98.0, 1, None, 3,
    )
    assert [j.model for j in trace] == [None, "vgg16", "vgg16", "inception3"]
    assert any("mobilenet_v2 (1 jobs)" in n for n in trace.notes)


@pytest.mark.parametrize(
    ("group_by", "apps"),
    [
        ("job", ("1", "0", "2", "3")),
        ("user", ("vc_b", "vc_a")),
        ("user+model", ("vc_b:mobilenet_v2", "vc_a:vgg16", "vc_a:inception_v3")),
    ],
)
def test_group_by(tmp_path: Path, group_by: str, apps: tuple[str, ...]) -> None:
    assert load_chronus(write(tmp_path, HEADER + GOOD), group_by=group_by).apps() == apps  # type: ignore[arg-type]


def test_time_unit(tmp_path: Path) -> None:
    trace = load_chronus(write(tmp_path, HEADER + GOOD), time_unit_s=60.0)
    assert (trace.jobs[0].arrival_s, trace.jobs[0].duration_s) == (832 * 60.0, 98 * 60.0)
    with pytest.raises(ValueError):
        load_chronus(write(tmp_path, HEADER + GOOD), time_unit_s=0.0)
    with pytest.raises(ValueError):
        load_chronus(write(tmp_path, HEADER + GOOD), group_by="team")  # type: ignore[arg-type]


def test_tiresias_header_without_user(tmp_path: Path) -> None:
    text = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n7,2,10,100,resnet50,30,5\n"
    trace = load_chronus(write(tmp_path, text), group_by="job")
    assert [(j.app_id, j.user, j.gpus, j.model) for j in trace] == [("7", "7", 2, "resnet50")]
    with pytest.raises(TraceError, match=":1: field header: a user column"):
        load_chronus(write(tmp_path, text))


BAD_ROWS = [
    ("9,vc_a,1,10,5,vgg16,7,1,1,10,0\n", "columns", "11"),
    ("9,vc_a,0,10,5,vgg16,7,1,1,10,0,strict\n", "num_gpu", "0"),
    ("9,vc_a,-2,10,5,vgg16,7,1,1,10,0,strict\n", "num_gpu", "-2"),
    ("9,vc_a,two,10,5,vgg16,7,1,1,10,0,strict\n", "num_gpu", "two"),
    ("9,vc_a,1,-10,5,vgg16,7,1,1,10,0,strict\n", "submit_time", "-10"),
    ("9,vc_a,1,,5,vgg16,7,1,1,10,0,strict\n", "submit_time", ""),
    ("9,vc_a,1,10,5,vgg16,0,1,1,10,0,strict\n", "duration", "0"),
    ("9,vc_a,1,10,5,vgg16,x,1,1,10,0,strict\n", "duration", "x"),
    ("9,,1,10,5,vgg16,7,1,1,10,0,strict\n", "user", ""),
    ("9,vc_a,1,10,5,,7,1,1,10,0,strict\n", "model_name", ""),
    (",vc_a,1,10,5,vgg16,7,1,1,10,0,strict\n", "job_id", ""),
    ("2,vc_a,1,10,5,vgg16,7,1,1,10,0,strict\n", "job id", "2"),
]


@pytest.mark.parametrize(("row", "field", "value"), BAD_ROWS)
def test_bad_row_fails_with_location(tmp_path: Path, row: str, field: str, value: str) -> None:
    path = write(tmp_path, HEADER + GOOD + row)
    with pytest.raises(TraceError) as info:
        load_chronus(path)
    assert (info.value.line, info.value.field, info.value.value) == (6, field, value)
    assert str(info.value).startswith(f"{path}:6: field {field}: value {value!r} is not ")


@pytest.mark.parametrize(("row", "field", "value"), BAD_ROWS)
def test_bad_row_skipped(tmp_path: Path, row: str, field: str, value: str) -> None:
    trace = load_chronus(write(tmp_path, HEADER + GOOD + row), skip_bad=True)
    assert (trace.skipped, len(trace)) == (1, 4)
    assert (trace.bad_rows[0].line, trace.bad_rows[0].field, trace.bad_rows[0].value) == (6, field, value)


def test_skip_counts_and_first_reasons(tmp_path: Path) -> None:
    bad = "".join(f"{10 + i},vc_a,0,10,5,vgg16,7,1,1,10,0,strict\n" for i in range(5))
    trace = load_chronus(write(tmp_path, HEADER + GOOD + bad), skip_bad=True)
    assert trace.skipped == 5 and len(trace.bad_rows) == 5
    note = next(n for n in trace.notes if n.startswith("skipped"))
    assert note.startswith("skipped 5 bad row(s) of 9; first: ")
    assert note.count("field num_gpu: value '0' is not a positive integer") == 3 and note.endswith("...")


def test_bad_header_and_empty(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=":1: field header: value 'gpus' is not a known column"):
        load_chronus(write(tmp_path, HEADER.replace("num_gpu", "gpus") + GOOD))
    with pytest.raises(TraceError, match="missing column\\(s\\) duration"):
        load_chronus(write(tmp_path, "job_id,user,num_gpu,submit_time,model_name\n1,a,1,1,vgg16\n"))
    with pytest.raises(TraceError, match="the file is empty"):
        load_chronus(write(tmp_path, ""))
    with pytest.raises(TraceError, match="header but no job rows"):
        load_chronus(write(tmp_path, HEADER))


def test_quoted_fields_and_bom(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("\ufeff" + HEADER + '5,"vc_x",1,3,5,"resnet152",9,1,"1,2","10,20",0,strict\n', encoding="utf-8")
    (job,) = load_chronus(path).jobs
    assert (job.user, job.model) == ("vc_x", "resnet152")
