"""A simulated cluster of several GPU types (issue #37 part 2): --gpu-types, Gavel's per-type rates, jobs that
run at their speed on the type they get, T_id over types after the fact, and ftf over types."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from themis_slurm.cli.main import cli
from themis_slurm.policies import make_policy
from themis_slurm.policies.ftf_perf import TypedRow, isolated_rate, typed_min_max
from themis_slurm.sim.engine import simulate
from themis_slurm.sim.gpu_mix import GpuMix, mixed_cluster, parse_gpu_mix
from themis_slurm.sim.loaders.gavel import load_gavel
from themis_slurm.sim.metrics import compute
from themis_slurm.sim.trace import TraceJob

GAVEL = Path("/work/shared/traces/gavel")


def test_parse_the_mix_and_build_a_cluster_of_it() -> None:
    mix = parse_gpu_mix("V100:8, k80:4:0.25")
    assert mix == (GpuMix("v100", 8, None), GpuMix("k80", 4, 0.25))
    topo = mixed_cluster(mix, nodes_per_rack=1, gpus_per_node=4)
    assert topo.heterogeneous and dict(topo.type_gpus) == {"v100": 8, "k80": 4}
    assert topo.type_nodes["v100"] == ("v100-node1", "v100-node2") and topo.racks == (
        "v100-rack1",
        "v100-rack2",
        "k80-rack1",
    )
    assert dict(topo.type_speeds) == {"k80": 0.25}


@pytest.mark.parametrize(
    ("text", "message"),
    [("v100", "is not type:gpus"), ("v100:x", "is not a whole number"), ("v100:0", "gpus must be >= 1"),
     ("v100:4,v100:4", "given twice"), ("k80:4:-1", "speed must be > 0"), ("k80:4:f", "is not a number")],
)  # fmt: skip
def test_a_bad_mix_names_the_entry(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_gpu_mix(text)
    r = CliRunner().invoke(cli, ["simulate", "--max-jobs", "4", "--gpu-types", text])
    assert r.exit_code == 2 and "--gpu-types" in r.output


def test_nodes_must_hold_whole_types() -> None:
    with pytest.raises(ValueError, match="k80: 6 GPUs is not a whole number of 4-GPU nodes"):
        mixed_cluster(parse_gpu_mix("v100:4,k80:6"), 2, 4)


def test_a_job_runs_at_its_speed_on_the_type_it_gets() -> None:
    """One 1-GPU job of 1000 s (on the reference type) that may only run on k80 at a quarter of the speed
    ends after 4000 s; T_id after the fact is on k80 too, so its rho is 1."""
    topo = mixed_cluster(parse_gpu_mix("v100:4,k80:4"), 1, 4)
    job = TraceJob("j", "a", "u", 0.0, 1, 1000.0, speeds=(("v100", 0.0), ("k80", 0.25)))
    res = simulate([job], topo, make_policy("fifo"))
    assert res.jobs[0].finish == pytest.approx(4000.0)
    app = compute(res).apps[0]
    assert app.rho == pytest.approx(1.0)


def test_every_policy_places_a_job_on_its_fastest_free_type() -> None:
    topo = mixed_cluster(parse_gpu_mix("k80:4:0.25,v100:4"), 1, 4)
    job = TraceJob("j", "a", "u", 0.0, 2, 1000.0)
    for name in ("themis", "fifo", "ftf", "slurm", "tiresias"):
        res = simulate([job], topo, make_policy(name))
        assert res.jobs[0].finish == pytest.approx(1000.0), name  # on v100: k80 would take 4000 s


def test_gavel_speeds_are_the_measured_rates_over_the_reference_type(tmp_path: Path) -> None:
    rates = {"v100": {"('ResNet-18 (batch size 32)', 1)": {"null": 10.0}},
             "k80": {"('ResNet-18 (batch size 32)', 1)": {"null": 2.5}},
             "p100": {},
             "v100_unconsolidated": {"('ResNet-18 (batch size 32)', 1)": {"null": 9.0}}}  # fmt: skip
    trace = tmp_path / "t.trace"
    trace.write_text(
        "ResNet-18 (batch size 32)\tpython3 main.py\tcifar10\t--num_steps\t1\t1000\t1\t1\t-1\t0\n"
    )
    t = load_gavel(trace, throughputs=rates, type_speeds=True)
    assert t.jobs[0].duration_s == pytest.approx(100.0)
    assert t.jobs[0].speeds == (("k80", 0.25), ("p100", 0.0), ("v100", 1.0))
    assert load_gavel(trace, throughputs=rates).jobs[0].speeds == ()  # off by default
    with pytest.raises(ValueError, match="type_speeds needs throughputs"):
        load_gavel(trace, type_speeds=True)


def test_ftf_over_types_gives_each_app_the_type_it_gains_most_on() -> None:
    """Two apps of equal need: A runs 4x slower on type 1, B the same on both: the optimum gives A type 0."""
    rows = [TypedRow("A", 1000.0, 4000.0, 0.0, 0.0, 4.0, (1.0, 0.25)),
            TypedRow("B", 1000.0, 4000.0, 0.0, 0.0, 4.0, (1.0, 1.0))]  # fmt: skip
    got, r = typed_min_max(rows, [4.0, 4.0])
    assert got["A"][0] == pytest.approx(4.0, abs=1e-6) and got["B"][1] == pytest.approx(4.0, abs=1e-6)
    assert r == pytest.approx(1.0, rel=1e-3)
    assert isolated_rate((1.0, 0.25), (4.0, 4.0), 0.5, 4.0) == pytest.approx(2.5)
    assert isolated_rate((1.0, 0.25), (4.0, 4.0), 0.5, 1.0) == pytest.approx(1.0)  # its fastest GPU only


@pytest.mark.slow
def test_the_gavel_trace_on_a_mixed_cluster_runs_every_policy_on_types() -> None:
    if not (GAVEL / "dev120_seed7.trace").is_file():
        pytest.skip(f"{GAVEL} is absent (the shared Gavel traces)")
    r = CliRunner().invoke(cli, ["simulate", "--trace", str(GAVEL / "dev120_seed7.trace"), "--format", "gavel",
                                 "--throughputs", str(GAVEL / "simulation_throughputs.json"), "--gpu-types",
                                 "v100:8,p100:4,k80:4", "--nodes-per-rack", "2", "--max-jobs", "30",
                                 "--policies", "themis,ftf,fifo", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)["policies"]
    assert set(doc) == {"themis", "ftf", "fifo"} and all(math.isfinite(p["max_rho"]) for p in doc.values())
