"""Snapshot reading with a fake runner: call budget, topology, GPU accounting, apps, tolerance."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.unit.slurm.fake_slurm import FakeRunner, conf_dir, job, node, sinfo, squeue
from themis_slurm.slurm.backend import CliBackend
from themis_slurm.slurm.model import AdapterConfig, Snapshot
from themis_slurm.slurm.runner import SlurmCommandError

ALL_NODES = [node(f"node{i}") for i in range(1, 5)]


def backend(tmp_path: Path, jobs: list[dict], nodes: list[dict] | None = None, **conf: str | None) -> tuple[
        CliBackend, FakeRunner]:
    path = conf_dir(tmp_path, **conf)  # type: ignore[arg-type]
    runner = FakeRunner({("squeue",): squeue(*jobs), ("sinfo",): sinfo(*(nodes or ALL_NODES))})
    return CliBackend(runner, AdapterConfig(slurm_conf=str(path)), clock=lambda: 123.0), runner


def snap(tmp_path: Path, jobs: list[dict], nodes: list[dict] | None = None, **conf: str | None) -> Snapshot:
    return backend(tmp_path, jobs, nodes, **conf)[0].snapshot()


def by_id(s: Snapshot) -> dict[str, object]:
    return {j.job_id: j for j in s.managed}


def test_topology_from_conf_files(tmp_path: Path) -> None:
    s = snap(tmp_path, [])
    topo = s.topology
    assert topo.size == 16 and topo.racks == ("rack1", "rack2")
    assert topo.rack_nodes == {"rack1": ("node1", "node2"), "rack2": ("node3", "node4")}
    for n in topo.nodes:
        assert [[topo.gpus[g].index for g in topo.island_gpus[i]] for i in topo.node_islands[n]] == [[0, 1], [2, 3]]
    assert s.free == frozenset(range(16)) and not s.unmanaged and not s.unavailable
    assert s.time == 123.0 and s.warnings == ()


def test_two_calls_regardless_of_job_count(tmp_path: Path) -> None:
    jobs = [job(100 + i) for i in range(200)]
    b, runner = backend(tmp_path, jobs)
    s = b.snapshot()
    assert len(s.managed) == 200
    assert s.slurm_calls == 4  # and the reservations and the limits' config, read at most every READ_EVERY_S
    assert [c[:3] for c in runner.calls] == [["squeue", "--all", "--states=all"], ["sinfo", "--all", "--json"],
                                             ["scontrol", "show", "reservation"], ["scontrol", "show", "config"]]
    assert all(t == 30.0 for t in runner.timeouts)
    assert b.snapshot().slurm_calls == 2


def test_config_files_read_once_and_again_after_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b, _ = backend(tmp_path, [])
    opened: list[str] = []
    real_open = open

    def spy(path: str, *a: object, **k: object):  # type: ignore[no-untyped-def]
        opened.append(os.path.basename(str(path)))
        return real_open(path, *a, **k)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", spy)
    t1 = b.snapshot().topology
    b.snapshot()
    assert sorted(opened) == ["gres.conf", "topology.conf"]
    (tmp_path / "topology.conf").write_text("SwitchName=rackA Nodes=node[1-4]\n")
    os.utime(tmp_path / "topology.conf", ns=(1, 10**18))
    t2 = b.snapshot().topology
    assert t1.racks == ("rack1", "rack2") and t2.racks == ("rackA",)


def test_no_conf_files_gives_one_island_per_node_and_one_rack(tmp_path: Path) -> None:
    s = snap(tmp_path, [], gres=None, topology=None)
    assert s.topology.size == 16 and s.topology.racks == ("cluster",)
    assert all(len(v) == 1 for v in s.topology.node_islands.values())
    assert any("gres.conf not found" in w for w in s.warnings)


def test_only_managed_partition_nodes_are_in_the_topology(tmp_path: Path) -> None:
    nodes = [*ALL_NODES[:3], node("node4", partitions=("debug",))]
    s = snap(tmp_path, [], nodes)
    assert s.topology.nodes == ("node1", "node2", "node3") and s.topology.size == 12


def test_running_managed_job_gpu_ids(tmp_path: Path) -> None:
    j = job(10, state="RUNNING", nodes="node[2-3]", node_count=2, gres="gres:gpu:2",
            gres_detail=["gpu:a100:2(IDX:2-3)", "gpu:a100:2(IDX:0-1)"], priority=1)
    n2 = node("node2", state="mixed", used="gpu:a100:2(IDX:2-3)")
    n3 = node("node3", state="mixed", used="gpu:a100:2(IDX:0-1)")
    s = snap(tmp_path, [j], [ALL_NODES[0], n2, n3, ALL_NODES[3]])
    mj = s.managed[0]
    topo = s.topology
    expected = {topo.gpu_id("node2", 2), topo.gpu_id("node2", 3), topo.gpu_id("node3", 0), topo.gpu_id("node3", 1)}
    assert mj.gpu_ids == expected and mj.node_gpus == {"node2": 2, "node3": 2}
    assert mj.gpus == 4 and mj.gpus_per_node == 2 and mj.nodes == 2 and mj.state == "RUNNING"
    assert not mj.held and s.managed_used == expected
    assert s.free == frozenset(range(16)) - expected and not s.unmanaged


def test_unmanaged_jobs_and_jobs_without_record(tmp_path: Path) -> None:
    debug = job(20, state="RUNNING", partition="debug", nodes="node1", gres_detail=["gpu:a100:1(IDX:0)"],
                record=None)
    norecord = job(21, state="RUNNING", nodes="node1", gres_detail=["gpu:a100:1(IDX:1)"], record=None)
    n1 = node("node1", state="mixed", used="gpu:a100:2(IDX:0-1)")
    s = snap(tmp_path, [debug, norecord], [n1, *ALL_NODES[1:]])
    assert s.managed == ()
    assert s.unmanaged == {0, 1} and not ({0, 1} & s.free)


def test_node_gres_used_alone_blocks_gpus(tmp_path: Path) -> None:
    """A GPU used per the node but by no job we can see (record skipped, other cluster view) is not free."""
    n1 = node("node1", state="mixed", used="gpu:a100:1(IDX:3)")
    s = snap(tmp_path, [], [n1, *ALL_NODES[1:]])
    assert 3 not in s.free and 3 in s.unmanaged


def test_used_count_without_indices_is_conservative(tmp_path: Path) -> None:
    n1 = node("node1", state="mixed", used="gpu:a100:2(IDX:N/A)")
    s = snap(tmp_path, [], [n1, *ALL_NODES[1:]])
    assert not ({0, 1, 2, 3} & s.free) and {0, 1, 2, 3} <= s.unavailable
    assert any("node1" in w for w in s.warnings)


@pytest.mark.parametrize(("state", "flags"), [("idle", ["DRAIN"]), ("down", []), ("idle", ["RESERVED"]),
                                              ("idle", ["MAINTENANCE"]), ("mixed", ["DRAIN"])])
def test_unavailable_nodes(tmp_path: Path, state: str, flags: list[str]) -> None:
    used = "gpu:a100:1(IDX:0)" if state == "mixed" else "gpu:a100:0(IDX:N/A)"
    n4 = node("node4", state=state, flags=flags, used=used)
    s = snap(tmp_path, [], [*ALL_NODES[:3], n4])
    ids = set(s.topology.node_gpus["node4"])
    assert not (ids & s.free)
    in_use = {s.topology.gpu_id("node4", 0)} if state == "mixed" else set()
    assert s.unavailable == ids - in_use and s.unmanaged == in_use


def test_node_going_down_between_snapshots(tmp_path: Path) -> None:
    b, runner = backend(tmp_path, [])
    before = b.snapshot()
    runner.answers[("sinfo",)] = sinfo(*ALL_NODES[:3], node("node4", state="down", flags=["NOT_RESPONDING"]))
    after = b.snapshot()
    node4 = set(after.topology.node_gpus["node4"])
    assert after.topology == before.topology  # same ids: the daemon's bookkeeping stays valid
    assert after.unavailable == node4 and not (node4 & after.free)


def test_app_keys(tmp_path: Path) -> None:
    jobs = [
        job(30, record="themis:v1;app=sweep1;model=;sens=;est=3600"),
        job(31, record="themis:v1;app=sweep1;model=;sens=;est=3600"),
        job(32, user="bob", record="themis:v1;app=sweep1;model=;sens=;est="),
        job(33),
        job(40, array_job_id=40, array_task_string="0-1,3%2"),
        job(41, array_job_id=40, array_task_id=2, state="RUNNING", nodes="node1",
            gres_detail=["gpu:a100:1(IDX:0)"], priority=5),
        job(50, array_job_id=50, array_task_string="0-1", record="themis:v1;app=tagged;model=;sens=;est="),
    ]
    s = snap(tmp_path, jobs)
    apps = {j.job_id: j.app_key for j in s.managed}
    assert apps == {
        "30": "alice/sweep1", "31": "alice/sweep1", "32": "bob/sweep1", "33": "alice/job-33",
        "40_0": "alice/array-40", "40_1": "alice/array-40", "40_3": "alice/array-40", "40_2": "alice/array-40",
        "50_0": "alice/tagged", "50_1": "alice/tagged",
    }
    jobs_ = by_id(s)
    assert jobs_["40_3"].slurm_id == 40 and jobs_["40_3"].array_task_id == 3  # type: ignore[attr-defined]
    assert jobs_["40_2"].slurm_id == 41  # type: ignore[attr-defined]
    assert jobs_["30"].est_s == 3600.0 and jobs_["32"].est_s is None  # type: ignore[attr-defined]


@pytest.mark.parametrize(("spec", "record", "counted"), [
    ("0-5%6", "throttle=1", 1),  # the owner raised it (Slurm applied it before job_submit.lua refused)
    ("0-5", "throttle=1", 1),    # ... or removed it
    ("0-5%1", "throttle=4", 1),  # lowered: Slurm enforces its own, and so does Themis
    ("0-5%3", "", 3),            # no record of one (older job_submit.lua): Slurm's
    ("0-5", "throttle=x", None),  # a bad record field: a warning, and Slurm's (none)
])
def test_an_arrays_throttle_is_never_above_the_recorded_one(tmp_path: Path, spec: str, record: str,
                                                              counted: int | None) -> None:
    rec = "themis:v1;app=;model=;sens=;est=" + (f";{record}" if record else "")
    record_ = job(70, array_job_id=70, array_task_string=spec, record=rec)
    record_["array_max_tasks"] = int(spec.partition("%")[2] or 0)  # squeue --json's copy of the throttle
    s = snap(tmp_path, [record_])
    assert {j.array_max_tasks for j in s.managed} == {counted}
    assert any("throttle='x'" in w for w in s.warnings) == (record == "throttle=x")


def test_finished_jobs_are_ignored(tmp_path: Path) -> None:
    s = snap(tmp_path, [job(60, state="COMPLETED"), job(61, state="CANCELLED"), job(62, state="COMPLETING",
                                                                                     nodes="node1")])
    assert [j.job_id for j in s.managed] == ["62"]
    # ... but how managed ones ended is kept (estimate calibration learns from COMPLETED ones)
    assert s.finished == {"60": "COMPLETED", "61": "CANCELLED"}


def test_finished_array_tasks_and_unmanaged_jobs(tmp_path: Path) -> None:
    s = snap(tmp_path, [job(81, state="COMPLETED", array_job_id=80, array_task_id=1),
                        job(82, state="TIMEOUT", array_job_id=80, array_task_id=2),
                        job(90, state="COMPLETED", record=None), job(91, state="COMPLETED", partition="debug")])
    assert s.finished == {"80_1": "COMPLETED", "80_2": "TIMEOUT"}, "only managed jobs, by the id users see"


def test_fields(tmp_path: Path) -> None:
    j = job(70, record="themis:v1;app=a;model=resnet50;sens=;est=7200", comment="themis:progress=0.25",
            restart_cnt=2, required_nodes="node[1-2]", requeue=False, gres="", tres_per_job="gres:gpu:3")
    mj = snap(tmp_path, [j]).managed[0]
    assert (mj.profile, mj.progress, mj.progress_error) == ("resnet50", 0.25, None)
    assert mj.restart_cnt == 2 and mj.required_nodes == ("node1", "node2") and not mj.requeue_ok
    assert mj.held and mj.priority == 0 and mj.time_limit_s == 3600.0 and mj.submit_time == 1000.0
    assert mj.gpus == 3 and mj.gpus_per_node is None and mj.nodes is None and mj.start_time is None


def test_malformed_strings_never_crash(tmp_path: Path) -> None:
    jobs = [job(80, record="themis:v1;app=a;est=soon", comment="themis:progress=lots"),
            job(81, record="themis:v9;whatever")]
    s = snap(tmp_path, jobs)
    j80, j81 = s.managed
    assert j80.app_key == "alice/a" and j80.est_s is None and j80.progress is None
    assert j80.progress_error is not None and "progress='lots'" in j80.progress_error
    assert j81.app_key == "alice/job-81"
    assert len(s.warnings) == 3 and any("job 81" in w for w in s.warnings)


def test_unparseable_job_record_is_skipped_with_warning(tmp_path: Path) -> None:
    bad = job(90, nodes="node[1-")
    s = snap(tmp_path, [bad, job(91)])
    assert [j.job_id for j in s.managed] == ["91"]
    assert any("skipped a job record" in w for w in s.warnings)


def test_sinfo_without_gres_used_falls_back_to_scontrol(tmp_path: Path) -> None:
    path = conf_dir(tmp_path)
    nodes = [{k: v for k, v in node(f"node{i}").items() if k != "gres_used"} for i in range(1, 5)]
    lines = "\n".join(f"NodeName=node{i} State=IDLE Gres=gpu:a100:4(S:0-1) GresUsed=gpu:a100:{int(i == 1)}"
                      f"(IDX:{'0' if i == 1 else 'N/A'}) Partitions=gpu,debug" for i in range(1, 5))
    runner = FakeRunner({("squeue",): squeue(), ("sinfo",): sinfo(*nodes), ("scontrol", "show", "node"): lines})
    b = CliBackend(runner, AdapterConfig(slurm_conf=str(path)))
    s = b.snapshot()
    # first cycle: sinfo (no gres_used), scontrol --json (not answered), scontrol -d -o
    assert s.slurm_calls == 6 and 0 in s.unmanaged and s.topology.size == 16  # and the reservations, limits
    assert b.snapshot().slurm_calls == 2, "later cycles go straight to what worked"


def test_grouped_sinfo_uses_scontrol_json_and_stays_at_two_calls(tmp_path: Path) -> None:
    """23.11+ sinfo --json groups nodes without per-node indices; scontrol show nodes --json has them."""
    path = conf_dir(tmp_path)
    grouped = json.dumps({"sinfo": [], "meta": {}, "errors": []})
    runner = FakeRunner({("squeue",): squeue(), ("sinfo",): grouped,
                         ("scontrol", "show", "nodes", "--json"): sinfo(*ALL_NODES)})
    b = CliBackend(runner, AdapterConfig(slurm_conf=str(path)))
    assert b.snapshot().slurm_calls == 5  # and the reservations and the limits' config
    runner.calls.clear()
    s = b.snapshot()
    assert s.slurm_calls == 2 and [c[:2] for c in runner.calls] == [["squeue", "--all"], ["scontrol", "show"]]
    assert s.topology.size == 16


def test_slurm_failure_propagates(tmp_path: Path) -> None:
    path = conf_dir(tmp_path)
    err = SlurmCommandError(["squeue", "--all", "--json"], 1, "slurm_load_jobs error: Unable to contact slurm controller")
    runner = FakeRunner({("squeue",): err, ("sinfo",): sinfo(*ALL_NODES)})
    with pytest.raises(SlurmCommandError, match="squeue --all --json failed .*Unable to contact"):
        CliBackend(runner, AdapterConfig(slurm_conf=str(path))).snapshot()


def test_gres_conf_count_mismatch_warns(tmp_path: Path) -> None:
    nodes = [*ALL_NODES[:3], node("node4", gres="gpu:a100:8(S:0-1)")]
    s = snap(tmp_path, [], nodes)
    assert len(s.topology.node_gpus["node4"]) == 8 and len(s.topology.node_islands["node4"]) == 1
    assert any("node4" in w and "8" in w for w in s.warnings)


MIXED = [node("node1"), node("node2"), node("node3", gres="gpu:h100:4(S:0-1)"),
         node("node4", gres="gpu:h100:4(S:0-1)", partitions=("gpu2",))]


def test_where_slurm_could_start_a_job(tmp_path: Path) -> None:
    # issue 37: GPU type, the owner's -w (from the record: the pin replaces ReqNodeList) and -x, partition
    typed = job(80, gres="gres:gpu:h100:2")
    untyped = job(81)
    pinned = job(82, record="themis:v1;app=;model=;sens=;est=;nodes=node[2-3]")
    excluded = job(83)
    excluded["excluded_nodes"] = "node1"
    other_part = job(84, partition="gpu2")
    s = snap(tmp_path, [typed, untyped, pinned, excluded, other_part], MIXED, gres=None)
    jobs_ = by_id(s)
    assert (jobs_["80"].allowed_nodes, jobs_["80"].limits) == (frozenset({"node3"}), "GPU type h100")  # type: ignore[attr-defined]
    assert jobs_["81"].allowed_nodes is None  # untyped: any type, any managed node  # type: ignore[attr-defined]
    assert jobs_["82"].allowed_nodes == frozenset({"node2", "node3"})  # type: ignore[attr-defined]
    assert jobs_["82"].user_nodes == ("node2", "node3") and "-w node[2-3]" in jobs_["82"].limits  # type: ignore[attr-defined]
    assert jobs_["83"].allowed_nodes == frozenset({"node2", "node3"})  # type: ignore[attr-defined]
    assert "-x node1" in jobs_["83"].limits  # type: ignore[attr-defined]
    assert "84" not in jobs_  # its partition is not managed (node4 is not even in the topology)
    plain = snap(tmp_path, [job(85)])  # one partition of every node, one type: nothing narrowed
    assert by_id(plain)["85"].allowed_nodes is None and by_id(plain)["85"].limits == ""  # type: ignore[attr-defined]


@pytest.mark.parametrize(("gres", "extra", "why"), [
    ("gres:gpu:64", {}, "asks for 64 GPUs and there are 16 on the managed nodes"),
    ("gres:gpu:h100:4", {}, "asks for 4 GPUs and there are 0 on the nodes GPU type h100 allows"),
    ("gres:gpu:2", {"excluded_nodes": "node[1-4]"}, "there are 0 on the nodes excluded nodes"),
    ("gres:gpu:8", {"node_count": 1}, "1 node(s) with 8 GPUs each and 0 node(s) have that many"),
])
def test_a_job_that_can_never_run_is_not_eligible_at_once(tmp_path: Path, gres: str, extra: dict, why: str) -> None:
    # issue 37: a job asking 64 GPUs of a 16-GPU cluster was ranked first by rho forever
    j = job(90, gres=gres)
    j.update(extra)
    s = snap(tmp_path, [j])
    [mj] = s.managed
    assert mj.blocked is not None and mj.blocked.startswith("can never run here") and why in mj.blocked
    assert any(w.startswith("job 90 (alice): can never run here") for w in s.warnings)
