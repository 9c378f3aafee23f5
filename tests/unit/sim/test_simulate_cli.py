"""`themis simulate`: the --json shape, files written by --out, sweeps, traces, and bad options."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from themis_slurm.cli import simulate as simulate_cli
from themis_slurm.cli.main import cli
from themis_slurm.core.arbiter import ArbiterConfig
from themis_slurm.sim.engine import SimConfig
from themis_slurm.sim.metrics import SUMMARY_KEYS

QUICK = ["simulate", "--max-jobs", "12", "--racks", "1", "--nodes-per-rack", "2", "--gpus-per-node", "4"]


def run(*args: str):
    return CliRunner().invoke(cli, [*QUICK, *args])


def test_json_shape():
    r = run("--policies", "themis,fifo", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert list(doc) == ["policies"] and list(doc["policies"]) == ["themis", "fifo"]
    for summary in doc["policies"].values():
        assert list(summary) == list(SUMMARY_KEYS)
        assert summary["max_rho"] >= summary["median_rho"] > 0


def test_table_and_out(tmp_path):
    r = run("--policies", "themis", "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert "themis" in r.output and "max rho" in r.output
    for name in ("summary.csv", "summary.json", "apps_themis.csv", "rho_cdf.png", "jct_cdf.png", "utilization.png"):
        assert (tmp_path / name).stat().st_size > 0


def test_sweep_json(tmp_path):
    r = run("--policies", "themis", "--sweep", "lease=300,900", "--json", "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    runs = json.loads(r.output)["sweep"]["runs"]
    assert [x["value"] for x in runs] == [300, 900]
    assert (tmp_path / "sweep_max_rho.png").exists() and (tmp_path / "value_300" / "summary.csv").exists()


def test_chronus_trace(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text(
        "job_id,user,num_gpu,submit_time,duration,model_name\n"
        "1,u1,1,0,100,vgg16\n2,u1,2,10,50,vgg16\n3,u2,0,20,30,resnet50\n4,u2,1,20,30,resnet50\n"
    )
    args = ["--trace", str(csv), "--format", "chronus", "--policies", "themis", "--json"]
    bad = run(*args)
    assert bad.exit_code == 2 and "--trace" in bad.output and "num_gpu" in bad.output
    ok = run(*args, "--skip-bad")
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["policies"]["themis"]["makespan_s"] > 0


@pytest.mark.parametrize(
    ("args", "option", "value"),
    [
        (["--policies", "nosuch"], "--policies", "nosuch"),
        (["--estimate-error", "gauss:2"], "--estimate-error", "gauss:2"),
        (["--fairness-knob", "1.5"], "--fairness-knob", "1.5"),
        (["--sweep", "colour=1,2"], "--sweep", "colour"),
        (["--group-by", "user"], "--group-by", "user"),
        (["--lease", "0"], "--lease", "0"),
        (["--progress-interval", "-5"], "--progress-interval", "-5"),
        (["--leftover-order", "fifo"], "--leftover-order", "fifo"),
    ],
)
def test_bad_options(args, option, value):
    r = run(*args)
    assert r.exit_code == 2
    assert option in r.output and value in r.output


def test_defaults_come_from_the_dataclasses():
    d = {p.name: p.default for p in simulate_cli.simulate.params}
    arb, sim = ArbiterConfig(), SimConfig()
    assert (d["lease"], d["fairness_knob"], d["solver"], d["seed"], d["reserve_wide_gangs"], d["keep_wide_gangs"],
            d["keep_in_place"], d["rank_at_share"], d["leftover_order"]) == (
        arb.lease_s, arb.fairness_knob, arb.solver, arb.seed, arb.reserve_wide_gangs, arb.keep_wide_gangs,
        arb.keep_in_place, arb.rank_at_share, arb.leftover_order)  # fmt: skip
    assert d["restart_cost"] == sim.restart_cost_s == arb.restart_cost_s
    assert (d["round_interval"], d["estimate_error"]) == (sim.round_interval_s, str(sim.estimate_error))


def test_knobs_reach_themis_and_the_world(monkeypatch):
    seen = []

    def fake(trace, topo, names, knobs, cfg, on_progress=None):
        seen.append((names, knobs, cfg))
        return {}

    monkeypatch.setattr(simulate_cli, "run_policies", fake)
    monkeypatch.setattr(simulate_cli.report, "format_table", lambda metrics: "")
    r = run("--policies", "themis", "--restart-cost", "12", "--lease", "900", "--seed", "4", "--reserve-wide-gangs",
            "--keep-wide-gangs", "--no-keep-in-place", "--rank-at-share", "2", "--leftover-order", "rho")
    assert r.exit_code == 0, r.output
    [(names, knobs, cfg)] = seen
    assert names == ["themis"]
    assert knobs == ArbiterConfig(lease_s=900.0, seed=4, restart_cost_s=12.0, reserve_wide_gangs=True,
                                  keep_wide_gangs=True, keep_in_place=False, rank_at_share=2.0,
                                  leftover_order="rho")
    assert (cfg.restart_cost_s, cfg.seed) == (12.0, 4)
