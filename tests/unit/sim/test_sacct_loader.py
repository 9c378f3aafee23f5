"""The `--format sacct` loader on real exports from the local cluster's slurmdbd (tests/fixtures/sacct,
captured by its capture.sh on Slurm 22.05 and 25.11), on bad variants of those rows, and the
"slurm (actual)" metrics computed from Slurm's own start and end times."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from themis_slurm.cli.main import cli
from themis_slurm.core.topology import Topology
from themis_slurm.sim.loaders import load_trace
from themis_slurm.sim.loaders.sacct import load_sacct
from themis_slurm.sim.metrics import ACTUAL, actual_metrics
from themis_slurm.sim.trace import Trace, TraceError, TraceJob

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "sacct"
A, B = "themis-alice", "themis-bob"

# What capture.sh ran, as each version numbered it: job id -> (app, user, GPUs, run time s, limit s, model,
# submit -> start s). Checked by hand against the -P files (Start/End columns).
EXPECTED = {
    "2205": {
        "2": (f"{A}/job-2", A, 1, 2.0, None, None, 1.0),
        "3": (f"{B}/job-3", B, 8, 3.0, 600.0, None, 1.0),
        "5": (f"{A}/bert", A, 2, 2.0, 600.0, "resnet50", 3.0),
        "8": (f"{A}/job-8", A, 1, 1.0, 300.0, None, 1.0),
        "9": (f"{B}/job-9", B, 1, 66.0, 60.0, None, 1.0),
        "10": (f"{A}/job-10", A, 2, 2.0, 600.0, None, 1.0),
        "4_0": (f"{A}/array-4", A, 1, 1.0, 300.0, None, 1.0),
        "4_1": (f"{A}/array-4", A, 1, 1.0, 300.0, None, 1.0),
        "4_2": (f"{A}/array-4", A, 1, 1.0, 300.0, None, 1.0),
        "6_0": (f"{B}/sweep", B, 1, 1.0, 600.0, None, 3.0),
        "6_1": (f"{B}/sweep", B, 1, 1.0, 600.0, None, 3.0),
    },
    "2511": {
        "1": (f"{A}/job-1", A, 1, 2.0, None, None, 3.0),
        "2": (f"{B}/job-2", B, 8, 3.0, 600.0, None, 3.0),
        "4": (f"{A}/bert", A, 2, 2.0, 600.0, "resnet50", 3.0),
        "7": (f"{A}/job-7", A, 1, 1.0, 300.0, None, 6.0),
        "8": (f"{B}/job-8", B, 1, 84.0, 60.0, None, 6.0),
        "9": (f"{A}/job-9", A, 2, 2.0, 600.0, None, 6.0),
        "3_0": (f"{A}/array-3", A, 1, 1.0, 300.0, None, 3.0),
        "3_1": (f"{A}/array-3", A, 1, 1.0, 300.0, None, 3.0),
        "3_2": (f"{A}/array-3", A, 1, 1.0, 300.0, None, 3.0),
        "5_0": (f"{B}/sweep", B, 1, 1.0, 600.0, None, 3.0),
        "5_1": (f"{B}/sweep", B, 1, 1.0, 600.0, None, 3.0),
    },
}
NOTES = (
    "sacct: not replayed: 2 not finished (1 PENDING, 1 RUNNING); 1 GPU job(s) that never started (1 CANCELLED); "
    "1 job(s) that ran without GPUs",
    "sacct: kept 3 job(s) that ran but did not complete, with the time they ran: 1 CANCELLED, 1 FAILED, 1 TIMEOUT",
    "sacct: time limits kept as the jobs' estimates (10 of 11 set, the rest unlimited); the simulated policies "
    "see the --estimate-error estimates, not these",
)
CASES = [(v, form) for v in EXPECTED for form in ("json", "txt")]


def fixture(version: str, form: str) -> Path:
    return FIX / f"sacct_{version}.{form}"


def write(tmp_path: Path, text: str, name: str = "t.txt") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize(("version", "form"), CASES)
def test_real_exports_give_the_jobs_that_ran(version: str, form: str) -> None:
    trace = load_trace(fixture(version, form), "sacct")
    arrival0 = min(j.arrival_s for j in trace.jobs)
    got = {j.job_id: (j.app_id, j.user, j.gpus, j.duration_s, j.estimate_s, j.model,
                      j.actual_start_s - j.arrival_s) for j in trace.jobs}  # type: ignore[operator]  # fmt: skip
    assert got == EXPECTED[version]
    for j in trace.jobs:
        assert j.arrival_s - arrival0 <= 1  # capture.sh submitted them all within a second
        assert j.actual_end_s == j.actual_start_s + j.duration_s  # type: ignore[operator]
    form_name = "sacct --json" if form == "json" else "sacct -P"
    assert trace.notes[0] == (f"sacct ({form_name}): 15 row(s), 11 job(s) replayed; apps grouped by the "
                              "AdminComment record's app, else the array, else the job (as themisd)")  # fmt: skip
    assert trace.notes[1:] == NOTES
    assert trace.skipped == 0


@pytest.mark.parametrize("version", list(EXPECTED))
def test_json_and_pipe_agree(version: str) -> None:
    a, b = (load_sacct(fixture(version, f)) for f in ("json", "txt"))
    # the -P fixtures were captured before Account joined FIELDS: compare without it (test_sim_tenancy.py)
    assert sorted((replace(j, line=None, account="") for j in a.jobs), key=lambda j: j.job_id) == sorted(
        (replace(j, line=None) for j in b.jobs), key=lambda j: j.job_id)  # fmt: skip


@pytest.mark.parametrize("version", list(EXPECTED))
def test_json_lines_point_at_the_job(version: str) -> None:
    path = fixture(version, "json")
    lines = path.read_text().splitlines()
    for j in load_sacct(path).jobs:
        assert j.line is not None and lines[j.line - 1].strip() == "{"
        raw = j.job_id.split("_")[0] if "_" not in j.job_id else None
        block = "\n".join(lines[j.line - 1:j.line + 400])
        if raw:
            assert f'"job_id": {raw},' in block


@pytest.mark.parametrize("version", list(EXPECTED))
def test_step_rows_are_counted_not_replayed(version: str) -> None:
    trace = load_sacct(FIX / f"sacct_steps_{version}.txt")
    assert len(trace) == 2 and all("." not in j.job_id for j in trace.jobs)
    assert "sacct: not replayed: 2 step row(s) (use sacct -X)" in trace.notes


@pytest.mark.parametrize(("group_by", "apps"), [
    ("user", {A, B}),
    ("job", None),
    ("array", {f"{A}/job-2", f"{B}/job-3", f"{A}/job-5", f"{A}/job-8", f"{B}/job-9", f"{A}/job-10",
               f"{A}/array-4", f"{B}/array-6"}),
])  # fmt: skip
def test_group_by(group_by: str, apps: set[str] | None) -> None:
    trace = load_sacct(fixture("2205", "txt"), group_by=group_by)  # type: ignore[arg-type]
    got = {j.app_id for j in trace.jobs}
    assert got == (apps if apps is not None else {j.job_id for j in trace.jobs})
    with pytest.raises(ValueError, match="group_by"):
        load_sacct(fixture("2205", "txt"), group_by="model")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------- bad input: -P
def pipe_lines() -> list[str]:
    return fixture("2205", "txt").read_text().splitlines()


def with_cell(row: int, column: str, value: str) -> str:
    lines = pipe_lines()
    header = lines[0].split("|")
    cells = lines[row].split("|")
    cells[header.index(column)] = value
    lines[row] = "|".join(cells)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("column", "value", "expected"), [
    ("Start", "yesterday", "a time like 2026-11-03T10:21:11"),
    ("Submit", "2026-13-01T00:00:00", "a time like"),
    ("AllocTRES", "cpu=1,gres/gpu=two", "a TRES list"),
    ("AllocTRES", "cpu", "a TRES list"),
    ("State", "EXPLODED", "a Slurm job state"),
    ("Timelimit", "soon", "a time limit"),
    ("JobID", "job-2", "a Slurm job id"),
    ("User", "", "a user name"),
    ("End", "2026-12-01T15:58:40", "at or after Start"),
])  # fmt: skip
def test_bad_pipe_rows_name_line_field_and_value(tmp_path: Path, column: str, value: str, expected: str) -> None:
    path = write(tmp_path, with_cell(1, column, value))
    with pytest.raises(TraceError) as err:
        load_sacct(path)
    e = err.value
    assert (e.line, e.field) == (2, column) and expected in e.expected
    assert f"{path}:2: field {column}" in str(e)
    if column not in ("End", "User"):
        assert repr(value) in str(e)


def test_bad_rows_are_skipped_and_counted(tmp_path: Path) -> None:
    path = write(tmp_path, with_cell(2, "AllocTRES", "gres/gpu=-1"))  # job 3, the 8-GPU gang
    trace = load_sacct(path, skip_bad=True)
    assert "3" not in {j.job_id for j in trace.jobs} and len(trace) == 10 and trace.skipped == 1
    assert any(n.startswith(f"skipped 1 bad row(s) of 15; first: {path}:3: field AllocTRES") for n in trace.notes)


def test_pipe_header_problems(tmp_path: Path) -> None:
    lines = pipe_lines()
    no_alloc = "\n".join("|".join(c for i, c in enumerate(ln.split("|")) if i != 8) for ln in lines)
    with pytest.raises(TraceError, match=r":1: field header: missing column\(s\) AllocTRES: export with sacct -P -o JobID,"):
        load_sacct(write(tmp_path, no_alloc))
    with pytest.raises(TraceError, match="a column named only once"):
        load_sacct(write(tmp_path, lines[0] + "|User\n" + lines[1] + "|x\n"))
    with pytest.raises(TraceError, match=r":2: field columns: value '3' is not 11 columns"):
        load_sacct(write(tmp_path, lines[0] + "\n2|2|themis-alice\n"))
    with pytest.raises(TraceError, match="the file is empty"):
        load_sacct(write(tmp_path, "\n\n"))


def test_a_pipe_inside_the_last_free_text_column_is_kept(tmp_path: Path) -> None:
    text = with_cell(3, "AdminComment", "themis:v1;app=bert|v2;model=resnet50;sens=;est=120")  # job 5
    job = {j.job_id: j for j in load_sacct(write(tmp_path, text)).jobs}["5"]
    assert job.app_id == f"{A}/bert|v2"


def test_extra_columns_are_ignored_and_epoch_times_read(tmp_path: Path) -> None:
    text = ("JobID|User|Submit|Start|End|State|AllocTRES|Partition\n"
            "7|u|1000|1010|1070|COMPLETED|cpu=2,gres/gpu:a100=2,gres/gpu=2|gpu\n")  # fmt: skip
    [job] = load_sacct(write(tmp_path, text)).jobs
    assert (job.gpus, job.arrival_s, job.duration_s, job.estimate_s, job.app_id) == (2, 1000, 60, None, "u/job-7")


def test_a_requeued_job_arrives_at_its_first_submit(tmp_path: Path) -> None:
    """As 22.05's `sacct -D` printed job 184 (tests/slurm/test_accounting.py captures it live): the run cut by
    the requeue is a REQUEUED record whose Submit is the job's; the last record's Submit is the requeue."""
    text = ("JobID|JobIDRaw|User|Submit|Start|End|State|AllocTRES\n"
            "184|184|u|1000|1001|1003|REQUEUED|cpu=1,gres/gpu=1\n"
            "184|184|u|1003|1007|1011|COMPLETED|cpu=1,gres/gpu=1\n"
            "185|185|u|1002|1004|1010|COMPLETED|cpu=1,gres/gpu=2\n")  # fmt: skip
    trace = load_sacct(write(tmp_path, text))
    got = {j.job_id: (j.arrival_s, j.duration_s, j.actual_start_s, j.actual_end_s) for j in trace.jobs}
    assert got == {"184": (1000.0, 4.0, 1007.0, 1011.0), "185": (1002.0, 6.0, 1004.0, 1010.0)}
    assert ("sacct: 1 earlier run(s) of requeued jobs (REQUEUED records): each such job is replayed from its "
            "last record and arrives at its first Submit") in trace.notes
    # without -D sacct prints the last record only: the job then arrives at its requeue
    last_only = load_sacct(write(tmp_path, "\n".join(ln for ln in text.splitlines() if "REQUEUED" not in ln)))
    assert {j.job_id: j.arrival_s for j in last_only.jobs} == {"184": 1003.0, "185": 1002.0}


def test_a_record_with_problems_is_read_as_far_as_it_goes(tmp_path: Path) -> None:
    trace = load_sacct(write(tmp_path, with_cell(3, "AdminComment", "themis:v1;app=bert;model=;sens=;est=soon")))
    assert {j.job_id: j.app_id for j in trace.jobs}["5"] == f"{A}/bert"
    assert any("1 AdminComment record(s) with problems" in n and "est='soon'" in n for n in trace.notes)
    other = load_sacct(write(tmp_path, with_cell(3, "AdminComment", "not a record")))
    assert {j.job_id: j.app_id for j in other.jobs}["5"] == f"{A}/job-5"


def test_a_job_shorter_than_a_second_counts_as_one(tmp_path: Path) -> None:
    text = with_cell(1, "End", "2026-12-01T15:58:42")  # job 2: Start == End
    trace = load_sacct(write(tmp_path, text))
    job = {j.job_id: j for j in trace.jobs}["2"]
    assert job.duration_s == 1.0
    assert "sacct: 1 job(s) ran under 1 s (sacct's resolution): counted as 1 s" in trace.notes


def test_no_allocation_means_never_started_whatever_start_says(tmp_path: Path) -> None:
    """Seen on 22.05: a job cancelled in the second it was submitted has Start = End and no AllocTRES."""
    text = with_cell(4, "Start", "2026-12-01T15:58:42")  # job 7, cancelled while pending
    assert "|2026-12-01T15:58:42|2026-12-01T15:58:42|Partition_Limit|CANCELLED by 0||" in text
    trace = load_sacct(write(tmp_path, text))
    assert "7" not in {j.job_id for j in trace.jobs} and trace.notes[1] == NOTES[0]


def test_nothing_to_replay_is_an_error(tmp_path: Path) -> None:
    lines = pipe_lines()
    only = "\n".join([lines[0], *(ln for ln in lines if "|PENDING|" in ln or "|RUNNING|" in ln)])
    with pytest.raises(TraceError, match=r"no finished GPU job to replay \(sacct: not replayed: 2 not finished"):
        load_sacct(write(tmp_path, only))


# ----------------------------------------------------------------------------------- bad input: JSON
def json_doc(version: str) -> dict:
    return json.loads(fixture(version, "json").read_text())


@pytest.mark.parametrize("version", list(EXPECTED))
@pytest.mark.parametrize(("path", "value", "field", "expected"), [
    (("time", "start"), "soon", "time.start", "an integer"),
    (("time", "limit"), {"set": True}, "time.limit", "a number or"),
    (("tres", "allocated"), "gres/gpu=2", "tres.allocated", "a list of"),
    (("state", "current"), ["MELTED"], "state.current", "a Slurm job state"),
    (("user",), None, "user", "a user name"),
])  # fmt: skip
def test_bad_json_fields(tmp_path: Path, version: str, path: tuple[str, ...], value: object, field: str,
                         expected: str) -> None:  # fmt: skip
    doc = json_doc(version)
    target = doc["jobs"][1]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    p = write(tmp_path, json.dumps(doc, indent=2), "t.json")
    with pytest.raises(TraceError) as err:
        load_sacct(p)
    assert err.value.field == field and expected in err.value.expected
    line = p.read_text().splitlines()[err.value.line - 1]  # type: ignore[operator]
    assert line.strip() == "{" and err.value.line > 3  # the second job's opening line


def test_bad_json_documents(tmp_path: Path) -> None:
    text = fixture("2511", "json").read_text()
    with pytest.raises(TraceError, match=r"t.json:\d+: malformed JSON"):
        load_sacct(write(tmp_path, text[: len(text) // 2], "t.json"))
    with pytest.raises(TraceError, match="a top-level object with a \"jobs\" list"):
        load_sacct(write(tmp_path, '{"meta": {}}', "t.json"))
    doc = json_doc("2205")
    del doc["jobs"][0]["time"]
    with pytest.raises(TraceError, match=r"t.json:\d+: field time.submission: present"):
        load_sacct(write(tmp_path, json.dumps(doc), "t.json"))
    doc = json_doc("2205")
    doc["jobs"][0]["tres"]["allocated"][-1]["count"] = "2"
    with pytest.raises(TraceError, match="field tres.allocated gres/gpu count: value '\"2\"' is not an integer"):
        load_sacct(write(tmp_path, json.dumps(doc), "t.json"))
    doc["errors"] = [{"description": "Nothing found"}]
    with pytest.raises(TraceError, match="sacct reported an error"):
        load_sacct(write(tmp_path, json.dumps(doc), "t.json"))


@pytest.mark.parametrize(("version", "cut_state"), [("2205", "REQUEUED"), ("2511", ["PENDING", "REQUEUED"])])
def test_json_requeued_run_gives_the_first_submit(tmp_path: Path, version: str, cut_state: object) -> None:
    """A requeued job as `sacct --json -D` lists it (both shapes, as seen live: tests/slurm/test_accounting.py):
    its cut run first, of state REQUEUED (25.11: ["PENDING", "REQUEUED"]), then the run that ended."""
    doc = json_doc(version)
    job = doc["jobs"][1]
    cut = json.loads(json.dumps(job))
    cut["state"]["current"] = cut_state
    first = job["time"]["submission"]
    number = isinstance(first, dict)  # 25.11: {"set", "infinite", "number"}
    earlier = (first["number"] if number else first) - 100
    cut["time"]["submission"] = {**first, "number": earlier} if number else earlier
    doc["jobs"].insert(1, cut)
    trace = load_sacct(write(tmp_path, json.dumps(doc, indent=1), "t.json"))
    plain = {j.job_id: j for j in load_sacct(fixture(version, "json")).jobs}
    got = {j.job_id: j for j in trace.jobs}
    jid = str(job["job_id"])
    assert got[jid].arrival_s == plain[jid].arrival_s - 100 and got[jid].duration_s == plain[jid].duration_s
    assert any(n.startswith("sacct: 1 earlier run(s) of requeued jobs") for n in trace.notes), trace.notes


def test_bad_json_job_skipped_with_skip_bad(tmp_path: Path) -> None:
    doc = json_doc("2511")
    doc["jobs"][1]["time"]["end"] = 5  # before its start
    trace = load_sacct(write(tmp_path, json.dumps(doc, indent=1), "t.json"), skip_bad=True)
    assert trace.skipped == 1 and len(trace) == 10 and "2" not in {j.job_id for j in trace.jobs}


# ----------------------------------------------------------------------------- actual times, report
def test_shift_keeps_actual_times_and_scale_drops_them() -> None:
    trace = load_sacct(fixture("2205", "txt"))
    shifted = trace.shifted()
    for a, b in zip(trace.jobs, shifted.jobs, strict=True):
        t0 = trace.jobs[0].arrival_s
        assert (b.arrival_s, b.actual_start_s, b.actual_end_s) == (
            a.arrival_s - t0, a.actual_start_s - t0, a.actual_end_s - t0)  # type: ignore[operator]  # fmt: skip
    scaled = shifted.scaled(duration_factor=2)
    assert not any(j.has_actual for j in scaled.jobs) and "actual start/end times were dropped" in scaled.notes[-1]
    assert [j.estimate_s for j in scaled.jobs] == [None if j.estimate_s is None else 2 * j.estimate_s
                                                   for j in shifted.jobs]  # fmt: skip
    with pytest.raises(ValueError, match="both actual_start_s and actual_end_s"):
        TraceJob("x", "a", "u", 0, 1, 10, actual_start_s=1)
    with pytest.raises(ValueError, match="end >= start"):
        TraceJob("x", "a", "u", 0, 1, 10, actual_start_s=5, actual_end_s=4)


def test_actual_metrics_by_hand() -> None:
    """One 4-GPU machine. App a: 4 GPUs 0-10 s. App b: submitted at 0, ran on 2 GPUs 10-20 s.

    N = 2 over [0, 10), 1 over [10, 20). a: contention 2, share 4/2 = 2 GPUs, T_id = 40/2 = 20, T_sh = 10,
    rho 0.5. b: contention (2*10 + 1*10)/20 = 1.5, share min(peak 2, 4/1.5) = 2, T_id = 20/2 = 10, T_sh = 20,
    rho 2. Busy GPU time 40 + 20 = 60 GPU-s over 4 GPUs x 20 s = 75 %.
    """
    trace = Trace((TraceJob("1", "a", "u", 0, 4, 10, actual_start_s=0, actual_end_s=10),
                   TraceJob("2", "b", "v", 0, 2, 10, actual_start_s=10, actual_end_s=20)), "hand")  # fmt: skip
    m = actual_metrics(trace, Topology.uniform(1, 1, 4, 1))
    assert m is not None and m.policy == ACTUAL
    apps = {a.app_id: a for a in m.apps}
    assert (apps["a"].contention, apps["a"].t_id, apps["a"].rho, apps["a"].peak_gpus) == (2.0, 20.0, 0.5, 4)
    assert (apps["b"].contention, apps["b"].t_id, apps["b"].rho) == (1.5, 10.0, 2.0)
    s = m.summary
    assert (s.max_rho, s.makespan_s, s.utilization, s.mean_jct_s, s.mean_app_completion_s) == (2.0, 20.0, 0.75, 15.0, 15.0)
    # job 2 waited 10 s and ran 10 s: slowdown 2 (its run as Slurm timed it), job 1's 1
    assert (s.median_jct_s, s.p95_jct_s, s.mean_slowdown) == (15.0, pytest.approx(19.5), 1.5)
    assert math.isnan(s.preemptions) and math.isnan(s.wall_s)
    assert (m.util_times, m.util_busy) == ((0.0, 10.0, 20.0), (4, 2, 0))
    no_actual = Trace((TraceJob("1", "a", "u", 0, 4, 10),), "plain")
    assert actual_metrics(no_actual, Topology.uniform(1, 1, 4, 1)) is None


QUICK = ["simulate", "--racks", "2", "--nodes-per-rack", "2", "--gpus-per-node", "4", "--policies", "themis,fifo"]


def test_cli_reports_slurm_actual_beside_the_policies(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, [*QUICK, "--trace", str(fixture("2511", "json")), "--format", "sacct", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)["policies"]
    assert list(doc) == ["themis", "fifo", ACTUAL]
    assert doc[ACTUAL]["preemptions"] is None and doc[ACTUAL]["makespan_s"] == 90.0  # submit to the TIMEOUT's end
    table = CliRunner().invoke(cli, [*QUICK, "--trace", str(fixture("2205", "txt")), "--format", "sacct",
                                     "--group-by", "user", "--out", str(tmp_path)])  # fmt: skip
    assert table.exit_code == 0, table.output
    row = next(ln for ln in table.output.splitlines() if ln.startswith(ACTUAL))
    assert row.split()[-2:] == ["-", "-"]  # preemptions and wall time: not in the record
    assert (tmp_path / "apps_slurm_actual_.csv").exists()
    assert json.loads((tmp_path / "summary.json").read_text())["policies"][ACTUAL]["events"] is None


def test_cli_checks_the_sacct_group_by() -> None:
    r = CliRunner().invoke(cli, [*QUICK, "--trace", str(fixture("2205", "txt")), "--format", "sacct",
                                 "--group-by", "job_type"])  # fmt: skip
    assert r.exit_code == 2 and "'job_type' for --format sacct; allowed: themis, array, user, job" in r.output
