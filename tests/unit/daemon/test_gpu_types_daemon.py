"""themisd on a cluster of several GPU types (issue #37 part 2, item 5): each node's type from the Gres Slurm
reports, themis.yaml ``gpu_types:`` (per type and per model class) validated and carried to the core, and the
work a running job does counted at its speed on the type it holds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from themis_slurm.core.topology import Topology
from themis_slurm.daemon.config import ConfigError, load_for_client, parse
from themis_slurm.daemon.loop import Daemon
from themis_slurm.slurm.scontrol import parse_scontrol_nodes
from themis_slurm.slurm.snapshot import build_topology
from themis_slurm.state.jobs import core_job

from .conftest import daemon_config, run
from .fake_slurm import FakeSlurm

SPEC = {"rack1": {"node1": [[0, 1, 2, 3]], "node2": [[0, 1, 2, 3]]}}
#: node1 an a100 node, node2 an h100 node: without speeds the first is first in topology order
MIXED = Topology.from_spec(SPEC, {"node1": "a100", "node2": "h100"})


def test_gpu_types_per_type_and_per_class() -> None:
    cfg = parse({"gpu_types": {"h100": 1.0, "A100": {"default": 0.6, "transformer-dp": 0.5}}})
    assert dict(cfg.type_speeds) == {"h100": 1.0, "a100": 0.6}
    assert dict(cfg.class_speeds) == {"transformer-dp": {"a100": 0.5}}
    terms = cfg.round_terms
    assert terms.type_speeds == cfg.type_speeds and terms.class_speeds == cfg.class_speeds
    assert parse({}).type_speeds == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [({"a100": -1}, "gpu_types.a100 must be a number >= 0, got -1"),
     ({"a100": {"moe": "x"}}, "gpu_types.a100.moe must be a number >= 0, got 'x'"),
     ([1], "gpu_types must be a mapping")],
)  # fmt: skip
def test_bad_gpu_types_name_the_key(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=f"themis.yaml: {message}"):
        parse({"gpu_types": value})


def test_the_client_keeps_gpu_types(tmp_path: Path) -> None:
    f = tmp_path / "themis.yaml"
    f.write_text("gpu_types:\n  a100: 0.6\n")
    cfg, notes = load_for_client(f)
    assert dict(cfg.type_speeds) == {"a100": 0.6} and notes == ()


def test_each_nodes_type_comes_from_its_gres() -> None:
    text = "\n".join([
        "NodeName=node1 State=IDLE Gres=gpu:a100:4 GresUsed=gpu:a100:0(IDX:N/A) Partitions=gpu",
        "NodeName=node2 State=IDLE Gres=gpu:h100:4 GresUsed=gpu:h100:0(IDX:N/A) Partitions=gpu",
        "NodeName=node3 State=IDLE Gres=gpu:a100:2,gpu:h100:2 GresUsed=gpu:0(IDX:N/A) Partitions=gpu",
    ])  # fmt: skip
    topo, warnings = build_topology(parse_scontrol_nodes(text), None, None)
    assert topo.node_type == {"node1": "a100", "node2": "h100", "node3": ""} and topo.heterogeneous
    assert warnings == ["node3 has GPUs of several types (a100, h100): its GPUs are counted as of no type "
                        "(speed 1.0)"]  # fmt: skip
    one, _ = build_topology(parse_scontrol_nodes(text.split("\n")[0]), None, None)
    assert not one.heterogeneous


def test_a_jobs_class_brings_its_speeds(slurm: FakeSlurm) -> None:
    cfg = parse({"gpu_types": {"a100": {"transformer-dp": 0.5}}})
    jid = slurm.submit("alice", "a", 2, 100.0, profile="transformer-dp")
    mj = next(m for m in slurm.snapshot().managed if m.job_id == jid)
    assert core_job(mj, 200.0, 0.0, True, 0.0, 0.0, speeds_by_class=cfg.class_speeds).speeds == (
        ("a100", 0.5),
    )
    assert core_job(mj, 200.0, 0.0, True, 0.0, 0.0).speeds == ()


@pytest.fixture
def topo() -> Topology:
    return MIXED


def _run_one(
    make_daemon: Callable[..., Daemon], slurm: FakeSlurm, tmp_path: Path, yaml: dict
) -> tuple[str, float]:
    """One 4-GPU job on the mixed fixture: (the node it ran on, done/service)."""
    cfg = daemon_config(tmp_path / "state")
    site = parse({"gpu_types": yaml}) if yaml else cfg
    d = make_daemon(replace(cfg, type_speeds=site.type_speeds, class_speeds=site.class_speeds))
    jid = slurm.submit("alice", "a", 4, 3000.0, est_s=600.0)
    run(d, slurm, 60.0)
    row = d.store.job(jid)
    assert row is not None and row.service_s > 0, "the job ran"
    nodes = {
        slurm.topo.gpus[g].node for g in next(m for m in slurm.snapshot().managed if m.job_id == jid).gpu_ids
    }
    return nodes.pop(), row.done_service / row.service_s


def test_themisd_starts_a_job_on_the_faster_type_and_counts_its_speed(
    make_daemon: Callable[..., Daemon], slurm: FakeSlurm, tmp_path: Path
) -> None:
    """With a100 at 0.5 a 4-GPU job goes to the h100 node (node2) and counts 1.0 of its service as done; with
    no gpu_types both types are alike and it takes node1, the first."""
    assert _run_one(make_daemon, slurm, tmp_path, {"a100": 0.5}) == ("node2", pytest.approx(1.0))


def test_without_gpu_types_both_types_are_alike(
    make_daemon: Callable[..., Daemon], slurm: FakeSlurm, tmp_path: Path
) -> None:
    assert _run_one(make_daemon, slurm, tmp_path, {}) == ("node1", pytest.approx(1.0))


def test_a_job_on_the_slower_type_counts_its_speed(
    make_daemon: Callable[..., Daemon], slurm: FakeSlurm, tmp_path: Path
) -> None:
    """h100 at 0.5 and the job's class (the default, low) never on a100 (speed 0): it runs on the h100 node
    and counts half its service as done."""
    assert _run_one(make_daemon, slurm, tmp_path, {"h100": 0.5, "a100": {"low": 0.0}}) == (
        "node2",
        pytest.approx(0.5),
    )
