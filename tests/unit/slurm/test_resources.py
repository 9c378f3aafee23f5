"""CPUs, memory and features of jobs and nodes (issue 37): the three parsers agree on real 22.05 and 25.11
output (tests/fixtures/slurm/*_needs_*, README there), the constraint evaluator, the static narrowing."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from themis_slurm.core.topology import Topology
from themis_slurm.slurm import constraints
from themis_slurm.slurm.openapi import number, text
from themis_slurm.slurm.parse import parse_sinfo_json, parse_squeue_json
from themis_slurm.slurm.pyslurm_backend import job_from_pyslurm, node_from_pyslurm
from themis_slurm.slurm.records import SlurmJob
from themis_slurm.slurm.resources import mebibytes, per_gpu, per_node_needs
from themis_slurm.slurm.scontrol import parse_scontrol_jobs, parse_scontrol_nodes
from themis_slurm.slurm.snapshot import memory_consumed, never_fits, node_room, placement_limits

from .test_pyslurm_backend import GPU, FakeJob, FakeNode

#: the held jobs of the fixtures in submission order (README): per-node (CPUs, MiB) and the constraint
EXPECTED = [
    ((12, 12288), ""),  # -c 12 (DefMemPerCPU 1024)
    ((8, 8192), ""),  # --gres=gpu:2 --cpus-per-gpu=4
    ((6, 6144), ""),  # --mincpus=6
    ((6, 6144), ""),  # -N 2 -n 4 --ntasks-per-node=2 -c 3: 2 tasks x 3 CPUs on each node
    ((1, 4096), ""),  # --mem=4G
    ((2, 1024), ""),  # -c 2 --mem-per-cpu=512
    ((1, 4096), ""),  # --gres=gpu:2 --mem-per-gpu=2G
    ((1, 1024), "h100&ib"),
    ((1, 1024), "(a100|h100)&ib"),
    ((3, 3072), ""),  # -n 3
]
RUNNING = (4, 3072)  # themis-bob's job on node2: -c 4 --mem=3G



def _ours(jobs: list[SlurmJob]) -> tuple[SlurmJob, list[SlurmJob]]:
    mine = sorted((j for j in jobs if j.partition == "debug" and j.state in ("PENDING", "RUNNING")
                   and j.user_name in ("themis-alice", "themis-bob")), key=lambda j: j.job_id)
    return mine[0], mine[1:]


@pytest.mark.parametrize("version", ["2205", "2511"])
def test_json_and_scontrol_read_the_same_needs(fixture_text, utc, version: str) -> None:
    for parsed in (parse_squeue_json(fixture_text(f"squeue_needs_{version}.json")),
                   parse_scontrol_jobs(fixture_text(f"scontrol_show_job_needs_{version}.txt"))):
        running, held = _ours(parsed)
        assert (running.cpus_per_node, running.mem_per_node) == RUNNING
        assert [((j.cpus_per_node, j.mem_per_node), j.constraint) for j in held] == EXPECTED


def _tres(req: str) -> Any:
    """pyslurm's TrackableResources for a TRES string: ``.cpu`` / ``.mem`` (MiB) with ``.count``, ``.gres``."""
    class Count:
        def __init__(self, n: int) -> None:
            self.count = n

    class Tres:
        pass

    t = Tres()
    t.gres = {}  # type: ignore[attr-defined]
    for item in req.split(","):
        k, _, v = item.partition("=")
        if k == "cpu":
            t.cpu = Count(int(v))  # type: ignore[attr-defined]
        elif k == "mem":
            t.mem = Count(mebibytes(v) or 0)  # type: ignore[attr-defined]
        elif k.startswith("gres/"):
            t.gres[k[5:]] = GPU(int(v), None)  # type: ignore[attr-defined]
    return t


def pyslurm_job(j: dict[str, Any]) -> FakeJob:
    """What pyslurm 25.11 shows of one squeue 25.11 job (measured: no cpus_per_gpu, no memory_per_gpu, the
    per-GPU figure of --mem-per-gpu in memory_per_node, constraints as a list)."""
    nodes = number(j["node_count"]) or 1
    per_node = text(j["tres_per_node"])
    gpn = int(per_node.rsplit(":", 1)[-1]) if per_node else 0
    fake = FakeJob(number(j["job_id"]), state=text(j["job_state"]), user_name=j["user_name"], partition=j["partition"],
                   num_nodes=nodes, gres_per_node={"gres/gpu": gpn} if gpn else {}, requested_tres=_tres(j["tres_req_str"]),
                   admin_comment=None, priority=number(j["priority"]))
    fake.cpus = number(j["cpus"])  # type: ignore[attr-defined]
    fake.min_cpus_per_node = number(j["minimum_cpus_per_node"])  # type: ignore[attr-defined]
    fake.memory_per_node = number(j["memory_per_node"])  # type: ignore[attr-defined]
    fake.memory_per_cpu = number(j["memory_per_cpu"])  # type: ignore[attr-defined]
    fake.cpus_per_gpu = fake.memory_per_gpu = None  # type: ignore[attr-defined]
    fake.constraints = [j["features"]] if j["features"] else []  # type: ignore[attr-defined]
    return fake


def test_pyslurm_reads_the_same_needs_as_squeue_2511(fixture_text) -> None:
    doc = json.loads(fixture_text("squeue_needs_2511.json"))
    from_json = {j.job_id: j for j in parse_squeue_json(doc)}
    running, held = _ours(list(from_json.values()))
    for want in (running, *held):
        raw = next(j for j in doc["jobs"] if number(j["job_id"]) == want.job_id)
        got = job_from_pyslurm(pyslurm_job(raw))
        assert (got.cpus_per_node, got.mem_per_node, got.constraint) == \
            (want.cpus_per_node, want.mem_per_node, want.constraint), want.job_id


@pytest.mark.parametrize(("json_file", "kv_file"), [("sinfo_needs_2205.json", "scontrol_show_node_needs_2205.txt"),
                                                    ("scontrol_show_nodes_needs_2511.json",
                                                     "scontrol_show_node_needs_2511.txt")])
def test_nodes_cpus_memory_and_features_agree(fixture_text, json_file: str, kv_file: str) -> None:
    js = {n.name: n for n in parse_sinfo_json(fixture_text(json_file))}
    kv = {n.name: n for n in parse_scontrol_nodes(fixture_text(kv_file))}
    fields = ("cpus", "cpus_alloc", "memory", "memory_alloc", "features")
    for name in js:
        assert [getattr(js[name], f) for f in fields] == [getattr(kv[name], f) for f in fields], name
    n2 = js["node2"]
    assert (n2.cpus, n2.cpus_alloc, n2.memory, n2.memory_alloc) == (16, 4, 16384, 3072)
    assert n2.features == {"a100", "ib"} and js["node3"].features == {"h100"}
    fake = FakeNode("node2", total_cpus=16, allocated_cpus=4, real_memory=16384, allocated_memory=3072,
                    active_features=["a100", "ib"])
    py = node_from_pyslurm(fake)
    assert [getattr(py, f) for f in fields] == [getattr(n2, f) for f in fields]
    assert node_room(n2, memory_consumed=True) == node_room(py, memory_consumed=True)
    assert (node_room(n2, True).cpus, node_room(n2, True).mem, node_room(n2, False).mem) == (12, 13312, None)


def test_sinfo_groups_give_per_node_totals(fixture_text) -> None:
    """25.11's grouped sinfo JSON: a group's CPU total covers all its nodes, so the per-node figure is used."""
    nodes = {n.name: n for n in parse_sinfo_json(fixture_text("sinfo_2511.json"))}
    assert {n.cpus for n in nodes.values()} == {16}


def test_memory_consumed_from_the_config() -> None:
    assert memory_consumed("SelectType              = select/cons_tres\nSelectTypeParameters    = CR_CORE_MEMORY\n")
    assert not memory_consumed("SelectTypeParameters    = CR_CORE\n") and not memory_consumed("")


# ------------------------------------------------------------------------------------------- sizes
@pytest.mark.parametrize(("text_", "mib"), [("4G", 4096), ("512M", 512), ("2048", 2048), ("1T", 1024**2),
                                            ("1.5G", 1536), ("", None), ("(null)", None), ("0", 0)])
def test_mebibytes(text_: str, mib: int | None) -> None:
    assert mebibytes(text_) == mib


def test_bad_sizes_and_per_gpu_figures_name_the_value() -> None:
    with pytest.raises(ValueError, match="memory size '4Q'"):
        mebibytes("4Q")
    with pytest.raises(ValueError, match="'x' is not a whole number"):
        per_gpu("gres/gpu:x")
    assert per_gpu("gres:gpu:4") == per_gpu("gres/gpu:4") == per_gpu("gres/gpu:a100:4") == 4
    assert per_gpu("") is None and per_gpu("gres/shard:2") is None


def test_needs_without_memory_fields_leave_memory_to_slurm() -> None:
    """CR_Core (the fixtures of squeue_2205.json): no memory field set, the request shows the node's memory."""
    assert per_node_needs(nodes=1, gpus_per_node=1, gpus_total=1, cpus=1, min_cpus_per_node=1, cpus_per_gpu=None,
                          mem_per_node=None, mem_per_cpu=None, mem_per_gpu=None,
                          req_tres="cpu=1,mem=16G,node=1") == (1, 0)


# ------------------------------------------------------------------------------------------- constraints
FEATS = {"node1": frozenset({"a100"}), "node2": frozenset({"a100", "ib"}), "node3": frozenset({"h100"}),
         "node4": frozenset({"h100", "ib"})}
ALL = tuple(FEATS)


@pytest.mark.parametrize(("expr", "nodes"), [
    ("h100&ib", {"node4"}), ("ib", {"node2", "node4"}), ("a100|h100", set(ALL)), ("(a100|h100)&ib", {"node2", "node4"}),
    ("a100&ib|h100", {"node2", "node3", "node4"}),  # & binds tighter than |
    ("a100&(ib|h100)", {"node2"}), ("a100&h100", set()), ("nvme", set()),
])
def test_constraints_evaluated_exactly(expr: str, nodes: set[str]) -> None:
    assert constraints.matching(expr, FEATS, ALL) == nodes


@pytest.mark.parametrize("expr", ["", "a100*2", "[a100|h100]", "[a100*2&h100*2]", "a100,ib", "!ib"])
def test_constraints_not_evaluated_narrow_nothing(expr: str) -> None:
    assert constraints.matching(expr, FEATS, ALL) is None


@pytest.mark.parametrize(("expr", "msg"), [("a100&", "ends where a feature name"), ("(a100|ib", "not closed"),
                                           ("a100)", "unexpected ')'"), ("&ib", "'&' where a feature name")])
def test_malformed_constraints_are_named(expr: str, msg: str) -> None:
    with pytest.raises(ValueError, match=re.escape(msg)) as err:
        constraints.parse(expr)
    assert repr(expr) in str(err.value)


# ------------------------------------------------------------------------------------------- placement
def test_constraint_cpus_and_memory_narrow_the_allowed_nodes(fixture_text) -> None:
    nodes = {n.name: n for n in parse_sinfo_json(fixture_text("sinfo_needs_2205.json"))}
    topo = Topology.uniform(racks=1, nodes_per_rack=4, gpus_per_node=4, islands_per_node=2)
    _, held = _ours(parse_squeue_json(fixture_text("squeue_needs_2205.json")))
    typed = held[7]  # --constraint=h100&ib
    assert placement_limits(typed, (), topo, nodes) == (frozenset({"node4"}), "features h100&ib")
    big = held[0].__class__(**{**held[0].__dict__, "cpus_per_node": 20, "partition": "gpu"})
    allowed, why = placement_limits(big, (), topo, nodes)
    assert allowed == frozenset() and why == "20 CPUs per node"
    assert never_fits(big, allowed, why, topo, None) == (
        "can never run here: it asks for 1 GPUs and there are 0 on the nodes 20 CPUs per node allows (0 node(s))")
    huge_mem = held[0].__class__(**{**held[0].__dict__, "mem_per_node": 32768, "partition": "gpu"})
    assert placement_limits(huge_mem, (), topo, nodes) == (frozenset(), "32G of memory per node")
    fits = held[0].__class__(**{**held[0].__dict__, "partition": "gpu"})  # 12 CPUs, 12 GiB: any node when empty
    assert placement_limits(fits, (), topo, nodes) == (None, "")
    nowhere = held[7].__class__(**{**held[7].__dict__, "constraint": "a100&h100", "partition": "gpu"})
    allowed, why = placement_limits(nowhere, (), topo, nodes)
    assert allowed == frozenset() and never_fits(nowhere, allowed, why, topo, None).startswith("can never run here")
    counted = held[7].__class__(**{**held[7].__dict__, "constraint": "[a100|h100]", "partition": "gpu"})
    assert placement_limits(counted, (), topo, nodes) == (None, "")  # left to Slurm
