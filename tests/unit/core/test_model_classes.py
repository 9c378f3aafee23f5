"""Placement profiles as data (issue #36 item 3): the built-in table with a source for every class, the
modern classes' numbers recomputed from their measurement where there is one, and a site's own class reaching
the core as a Profile on its jobs: scored, placed and simulated exactly like a built-in class with its factors.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from themis_slurm.core.arbiter import ArbiterConfig
from themis_slurm.core.fairness import job_throughput
from themis_slurm.core.placement import (
    DEFAULT_PROFILE,
    LEVEL_NAMES,
    PROFILES,
    SENS_CLASSES,
    Profile,
    get_profile,
    site_profile,
)
from themis_slurm.core.topology import Level, Topology
from themis_slurm.core.workload import Job
from themis_slurm.sim.engine import SimConfig, Simulator
from themis_slurm.sim.trace import Trace, TraceJob
from themis_slurm.slurm.option_grammar import valid_model_name

from .test_golden_decisions import Recorder

GAVEL = Path(__file__).resolve().parents[4] / "shared" / "traces" / "gavel" / "simulation_throughputs.json"
MODERN = ("transformer-dp", "transformer-tp", "moe", "finetune")


def test_every_built_in_class_says_where_its_numbers_come_from() -> None:
    for name, prof in PROFILES.items():
        assert prof.name == name and valid_model_name(name), name
        assert prof.about, f"{name}: no description for the user guide"
        if name in SENS_CLASSES:
            assert "our round numbers" in prof.source
        else:
            assert prof.source.startswith(("measured: ", "estimate: ")), f"{name}: {prof.source!r}"
    assert set(MODERN) <= set(PROFILES)
    assert [PROFILES[n].source.split(":")[0] for n in MODERN] == [
        "measured",
        "estimate",
        "estimate",
        "estimate",
    ]


def test_the_built_in_table_cannot_be_changed() -> None:
    with pytest.raises(TypeError):
        PROFILES["mine"] = Profile("mine", (1.0, 1.0, 1.0, 1.0))  # type: ignore[index]
    assert "mine" not in PROFILES


def test_the_modern_classes_are_ordered_by_how_much_they_communicate() -> None:
    dp, tp, moe, ft = (PROFILES[n].factors for n in MODERN)
    for level in Level:
        assert tp[level] <= moe[level] <= PROFILES["none"].factors[level]
        assert tp[level] <= dp[level]
    assert ft == PROFILES["low"].factors  # compute-bound: the ResNet-like class
    assert tp[Level.NODE] < 1.0 and dp[Level.NODE] == 1.0  # tensor parallelism feels PCIe between islands


def test_transformer_dp_is_gavels_measurement() -> None:
    """The median of Gavel's 15 cross-server / one-server throughput ratios of its data-parallel Transformer on
    V100s, and cross-rack as the square, which is what the authors' own profiles show within 0.01."""
    if not GAVEL.is_file():
        pytest.skip(f"Gavel's throughputs are not at {GAVEL} (../shared/traces is optional)")
    data = json.loads(GAVEL.read_text())
    ratios = [
        u["null"] / data["v100"][k]["null"]
        for k, u in data["v100_unconsolidated"].items()
        if k.startswith("('Transformer") and not k.endswith(", 1)")
    ]
    assert len(ratios) == 15
    rack = round(statistics.median(ratios), 2)
    assert PROFILES["transformer-dp"].factors == (1.0, 1.0, rack, round(rack * rack, 2))
    assert (round(min(ratios), 2), round(max(ratios), 2)) == (0.28, 0.77)  # the range its source quotes
    for name, prof in PROFILES.items():
        if prof.source.startswith("measured: Themis"):
            assert abs(prof.factors[Level.CLUSTER] - prof.factors[Level.RACK] ** 2) <= 0.01 + 1e-9, name


def test_a_sites_class_travels_as_data() -> None:
    mine = Profile("mine", (1.0, 0.9, 0.5, 0.25), "site: themis.yaml models.mine")
    loud = Profile("vgg16", (1.0, 1.0, 0.9, 0.8), "site: themis.yaml models.vgg16")
    site = {"mine": mine, "vgg16": loud}
    assert site_profile("Mine", site) is mine
    assert site_profile("vgg16", site) is loud  # an override wins over the built-in
    assert site_profile("ResNet50", site) == "resnet50"  # a built-in name the site leaves alone stays a name
    assert site_profile("gpt9", site) is None and site_profile(None, site) is None
    assert site_profile("vgg16", {}) == "vgg16"
    assert get_profile(mine) is mine and get_profile(None) is PROFILES[DEFAULT_PROFILE]
    with pytest.raises(ValueError, match="unknown placement profile 'mine'"):
        get_profile("mine")  # the built-in table never learns a site's class
    assert tuple(level.name.lower() for level in Level) == LEVEL_NAMES


def test_throughput_uses_the_sites_factors() -> None:
    topo = Topology.uniform(racks=2, nodes_per_rack=2, gpus_per_node=4, islands_per_node=2)
    mine = Profile("mine", (1.0, 0.9, 0.5, 0.25))
    job = Job("j", "a", 4, 1000.0, profile=mine)
    node0 = sorted(topo.node_gpus)[0]
    spans = {Level.ISLAND: topo.node_gpus[node0][:2], Level.NODE: topo.node_gpus[node0][1:3]}
    for level, gpus in spans.items():
        assert job_throughput(job, frozenset(gpus), topo) == pytest.approx(len(gpus) * mine.factor(level))
    rack_nodes = sorted(next(iter(topo.rack_nodes.values())))
    across = frozenset(g for n in rack_nodes for g in topo.node_gpus[n][:1])
    assert job_throughput(job, across, topo) == pytest.approx(2 * 0.5)


def _decisions(default_profile: str, profiles: dict[str, Profile]) -> list[dict]:
    """Every round's digest of a small Slurm-shaped simulation whose jobs give no model (so the default
    profile decides every job's placement sensitivity)."""
    shapes = [1, 2, 4, 8, 16, 4, 1, 8, 2, 12]
    jobs = tuple(
        TraceJob(
            f"j{k}",
            f"team{k % 4}",
            f"team{k % 4}",
            200.0 * k,
            shapes[k % len(shapes)],
            1500.0 + 311.0 * (k % 5),
        )
        for k in range(24)
    )
    rec = Recorder(ArbiterConfig(lease_s=600, seed=5, restart_cost_s=60, solver="auto"))
    sim = SimConfig(node_shaped=False, restart_cost_s=60, default_profile=default_profile, profiles=profiles)
    Simulator(Trace(jobs, "gangs"), Topology.uniform(2, 3, 4, islands_per_node=2), rec, sim).run()
    return rec.log


def test_a_site_class_is_scored_and_placed_as_a_built_in_one_with_its_factors() -> None:
    vgg = _decisions("vgg16", {})
    mine = Profile("mine", PROFILES["vgg16"].factors, "site")
    assert _decisions("mine", {"mine": mine}) == vgg  # the same numbers, the same decisions
    none = _decisions("none", {})
    assert none != vgg  # the class matters in this workload
    flat = Profile("vgg16", PROFILES["none"].factors, "site")
    assert _decisions("vgg16", {"vgg16": flat}) == none  # a site's override of a built-in name is used


def test_sim_config_refuses_an_unknown_default_profile() -> None:
    with pytest.raises(ValueError, match="unknown placement profile 'mine'"):
        SimConfig(default_profile="mine")
    assert SimConfig(default_profile="mine", profiles={"mine": Profile("mine", (1.0, 1.0, 1.0, 1.0))})


def test_traces_may_name_the_modern_classes() -> None:
    from themis_slurm.sim.trace import PROFILE_MODELS, TRACE_MODELS, normalize_model

    assert normalize_model("transformer-dp") == "transformer-dp" and normalize_model(" MoE ") == "moe"
    assert normalize_model("Transformer (batch size 16)") is None  # Gavel's job type names no class
    assert normalize_model("ResNet-50 (batch size 64)") == "resnet50"
    assert set(MODERN) <= TRACE_MODELS
    assert len(PROFILE_MODELS) == 10  # the paper's workload draws from its ten
    assert TraceJob("j", "a", "u", 0.0, 2, 60.0, "finetune").model == "finetune"
    with pytest.raises(ValueError, match="model 'high' is not a profile name"):
        TraceJob("j", "a", "u", 0.0, 2, 60.0, "high")
