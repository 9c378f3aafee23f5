"""--format gavel with Gavel's measured throughputs: run time = total_steps / steps/s of (job type, GPUs).

The shared trace (../shared/traces/gavel, Gavel's own generator and throughputs, MIT) checks a few jobs by
hand; the error cases use a small in-repo table.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from themis_slurm.sim.loaders import load_trace
from themis_slurm.sim.loaders.gavel import load_gavel
from themis_slurm.sim.trace import TraceError

SHARED = Path(__file__).resolve().parents[4] / "shared" / "traces" / "gavel"
TRACE, THROUGHPUTS = SHARED / "dev120_seed7.trace", SHARED / "simulation_throughputs.json"


@pytest.fixture(scope="module")
def exact():
    if not (TRACE.is_file() and THROUGHPUTS.is_file()):
        pytest.skip(f"Gavel's trace and throughputs are not in {SHARED} (../shared/traces is optional)")
    return load_trace(TRACE, "gavel", throughputs=THROUGHPUTS)


# (line-1, total_steps, scale factor, v100 steps/s alone copied from simulation_throughputs.json) -> the
# run time Gavel's generator drew (whole hours: it picks a duration and multiplies by the throughput).
HAND = [
    ("0", 152940, 1, 10.620893339463915, 4 * 3600),   # Transformer (batch size 32)
    ("3", 95634, 1, 13.2825697082565, 2 * 3600),       # Recommendation (batch size 1024)
    ("5", 344117, 4, 95.58814453205626, 1 * 3600),     # ResNet-18 (batch size 64) on 4 GPUs
    ("6", 1037137, 4, 96.0312451685392, 3 * 3600),     # LM (batch size 40) on 4 GPUs
    ("15", 34293, 4, 4.763045770199511, 2 * 3600),     # Transformer (batch size 256) on 4 GPUs
    ("82", 951653, 2, 132.17413449742747, 2 * 3600),   # LM (batch size 20) on 2 GPUs
]


@pytest.mark.parametrize(("job_id", "steps", "gpus", "rate", "hours_s"), HAND, ids=[h[0] for h in HAND])
def test_run_times_are_gavels(exact, job_id: str, steps: int, gpus: int, rate: float, hours_s: int) -> None:
    job = next(j for j in exact if j.job_id == job_id)
    assert job.gpus == gpus
    assert job.duration_s == pytest.approx(steps / rate, rel=1e-12)
    assert job.duration_s == pytest.approx(hours_s, abs=1.0)


def test_notes_say_which_run_times(exact) -> None:
    assert len(exact) == 120
    assert any("measured v100 steps/s" in n for n in exact.notes)
    flat = load_trace(TRACE, "gavel")
    assert any("APPROXIMATION" in n for n in flat.notes)
    ratio = [f.duration_s / e.duration_s for f, e in zip(flat, exact, strict=True)]
    assert min(ratio) < 0.5 and max(ratio) > 5   # how far off the flat rates are on this trace


def _table(tmp_path: Path, data: object) -> Path:
    p = tmp_path / "tp.json"
    p.write_text(json.dumps(data))
    return p


ROW = "ResNet-50 (batch size 64)\tpython3 main.py\timagenet\t--num_steps\t1\t1000\t2\t1\t-1\t0\n"


def test_missing_job_type_names_it(tmp_path: Path) -> None:
    trace = tmp_path / "t.trace"
    trace.write_text(ROW)
    tp = _table(tmp_path, {"v100": {"('ResNet-50 (batch size 64)', 1)": {"null": 2.0}}})
    with pytest.raises(TraceError, match=r"ResNet-50 \(batch size 64\) x 2 GPU\(s\).*v100 throughput table"):
        load_gavel(trace, throughputs=tp)
    ok = _table(tmp_path, {"v100": {"('ResNet-50 (batch size 64)', 2)": {"null": 4.0}}})
    assert [j.duration_s for j in load_gavel(trace, throughputs=ok)] == [250.0]


def test_bad_throughputs_file(tmp_path: Path) -> None:
    trace = tmp_path / "t.trace"
    trace.write_text(ROW)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TraceError, match="not JSON"):
        load_gavel(trace, throughputs=bad)
    with pytest.raises(TraceError, match="gpu_type.*a100.*k80, v100"):
        load_gavel(trace, throughputs=_table(tmp_path, {"v100": {}, "k80": {}}), gpu_type="a100")


def test_simulate_cli_uses_the_throughputs(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from themis_slurm.cli.main import cli

    trace = tmp_path / "t.trace"
    trace.write_text(ROW)
    tp = _table(tmp_path, {"v100": {"('ResNet-50 (batch size 64)', 2)": {"null": 4.0}}})
    base = ["simulate", "--racks", "1", "--nodes-per-rack", "1", "--gpus-per-node", "4", "--policies", "fifo",
            "--json", "--trace", str(trace)]
    ok = CliRunner().invoke(cli, [*base, "--format", "gavel", "--throughputs", str(tp)])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["policies"]["fifo"]["makespan_s"] == pytest.approx(250.0)
    wrong = CliRunner().invoke(cli, [*base, "--format", "chronus", "--throughputs", str(tp)])
    assert wrong.exit_code == 2 and "--throughputs" in wrong.output and "only applies to --format gavel" in wrong.output
    alone = CliRunner().invoke(cli, [*base, "--format", "gavel", "--gpu-type", "k80"])
    assert alone.exit_code == 2 and "needs --throughputs" in alone.output
