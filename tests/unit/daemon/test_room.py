"""CPUs and memory before a grant (issue 37, daemon/room.py): no job is pinned where Slurm lacks the room.

Before, three ``--gres=gpu:1 -c 12`` jobs on an idle cluster of 16-CPU nodes were all pinned to one node:
one ran, the other two waited for their release to time out while three nodes sat idle. FakeSlurm starts
a pinned job only where its CPUs and memory are free, as slurmctld does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from themis_slurm.core.decision import Decision, Grant, GrantSource, Preemption, PreemptionCause
from themis_slurm.core.topology import Topology
from themis_slurm.daemon import room
from themis_slurm.daemon.loop import Daemon
from themis_slurm.daemon.planning import build_round
from themis_slurm.state.rows import JobRow
from themis_slurm.state.store import Store

from .conftest import daemon_config
from .fake_slurm import FakeSlurm

NODES = ("node1", "node2", "node3", "node4")


@pytest.fixture
def four() -> FakeSlurm:
    """4 nodes x 4 GPUs, 16 CPUs and 16 GiB each."""
    s = FakeSlurm(Topology.uniform(racks=1, nodes_per_rack=4, gpus_per_node=4, islands_per_node=2))
    s.node_cpus = dict.fromkeys(s.topo.node_gpus, 16)
    s.node_mem = dict.fromkeys(s.topo.node_gpus, 16384)
    return s


@pytest.fixture
def daemon(tmp_path: Path, four: FakeSlurm):
    cfg = daemon_config(tmp_path / "state")
    store = Store(cfg.db_path)
    yield Daemon(cfg, four, store)
    store.close()


def _cycles(d: Daemon, s: FakeSlurm, n: int) -> None:
    for _ in range(n):
        d.cycle()
        s.advance(5)


def _no_release_timeout(s: FakeSlurm) -> None:
    assert not [c for c in s.calls if c[0] == "hold"], s.calls


def test_three_cpu_heavy_jobs_start_on_their_first_grant_on_three_nodes(daemon: Daemon, four: FakeSlurm) -> None:
    jobs = [four.submit("alice", "a", 1, 3000.0, cpus_per_node=12) for _ in range(3)]
    _cycles(daemon, four, 2)
    running = {j: four.jobs[j].node_gpus for j in jobs}
    assert all(four.jobs[j].state == "RUNNING" for j in jobs), running
    assert len({tuple(n) for n in running.values()}) == 3, running  # three different nodes
    assert sorted(c[1] for c in four.calls if c[0] == "start") == sorted(jobs)  # one start each
    _no_release_timeout(four)


def test_a_memory_heavy_job_goes_where_the_memory_is_free(daemon: Daemon, four: FakeSlurm) -> None:
    """Unmanaged jobs hold 12 GiB on node1-3; a 1-GPU job asking for 8 GiB fits node4 only."""
    for n in NODES[:3]:
        four.jobs[four.add_unmanaged(n, 1)].mem_per_node = 12288
    j = four.submit("alice", "a", 1, 3000.0, mem_per_node=8192)
    _cycles(daemon, four, 2)
    assert four.jobs[j].state == "RUNNING" and four.jobs[j].node_gpus == {"node4": 1}
    _no_release_timeout(four)


def test_gangs_never_share_a_node_they_do_not_fit_together(daemon: Daemon, four: FakeSlurm) -> None:
    """Eight 2-GPU jobs needing 10 CPUs each: at most one per 16-CPU node, so four run, one per node."""
    jobs = [four.submit(u, u[0], 2, 3000.0, cpus_per_node=10) for u in ("alice", "bob") for _ in range(4)]
    _cycles(daemon, four, 3)
    running = [four.jobs[j] for j in jobs if four.jobs[j].state == "RUNNING"]
    assert len(running) == 4 and sorted(n for r in running for n in r.node_gpus) == list(NODES)
    started = {c[1] for c in four.calls if c[0] == "start"}
    assert started == {r.job_id for r in running}  # nothing released that Slurm could not start
    _cycles(daemon, four, 6)  # past release_timeout_s (20 s)
    _no_release_timeout(four)


def test_jobs_without_needs_are_untouched(four: FakeSlurm, tmp_path: Path) -> None:
    """The round's state is the very same object when no waiting job needs CPUs or memory."""
    for _ in range(3):
        four.submit("alice", "a", 1, 600.0)
    snap = four.snapshot()
    rows = {m.job_id: JobRow(m.job_id, m.slurm_id, m.app_key, "waiting", 1, 600.0, 0.0) for m in snap.managed}
    inp = build_round(snap, rows, {}, daemon_config(tmp_path), snap.time)
    state, cut = room.narrowed(inp.state, snap, rows, inp.waiting, inp.expired)
    assert state is inp.state and cut == {}


def test_waiting_jobs_are_cut_to_the_nodes_with_room(four: FakeSlurm, tmp_path: Path) -> None:
    for n in ("node1", "node2"):
        four.jobs[four.add_unmanaged(n, 1)].cpus_per_node = 8
    big = four.submit("alice", "a", 1, 600.0, cpus_per_node=12)
    small = four.submit("alice", "a", 1, 600.0, cpus_per_node=4)
    snap = four.snapshot()
    rows = {m.job_id: JobRow(m.job_id, m.slurm_id, m.app_key, "waiting", 1, 600.0, 0.0) for m in snap.managed
            if m.job_id in (big, small)}
    inp = build_round(snap, rows, {}, daemon_config(tmp_path), snap.time)
    state, cut = room.narrowed(inp.state, snap, rows, inp.waiting, inp.expired)
    assert cut == {big: frozenset({"node3", "node4"})}  # `small` fits everywhere: left alone
    jobs = {j.id: j for a in state.apps for j in a.jobs}
    assert jobs[big].allowed_nodes == {"node3", "node4"} and jobs[small].allowed_nodes is None


def _grant(four: FakeSlurm, jid: str, node: str, k: int) -> Grant:
    g = four.topo.node_gpus[node][k]
    return Grant(jid, "alice/a", frozenset({g}), {node: 1}, "gpu", 60.0, GrantSource.LEFTOVER)


def test_a_grant_that_does_not_fit_is_moved_at_the_same_level_or_found_short(four: FakeSlurm, tmp_path: Path) -> None:
    a, b, c = (four.submit("alice", "a", 1, 600.0, cpus_per_node=12) for _ in range(3))
    snap = four.snapshot()
    rows = {m.job_id: JobRow(m.job_id, m.slurm_id, m.app_key, "waiting", 1, 600.0, 0.0) for m in snap.managed}
    inp = build_round(snap, rows, {}, daemon_config(tmp_path), snap.time)
    decision = Decision(now=snap.time, grants=(_grant(four, a, "node1", 0), _grant(four, b, "node1", 1)))
    checked = room.check(decision, inp.state, snap, rows)
    assert not checked.short and set(checked.moved) == {b}
    (ga, gb) = checked.decision.grants
    assert ga.nodes == {"node1": 1} and set(gb.nodes) != {"node1"} and gb.level == "island"
    # every other GPU granted (or reserved): nowhere to move the second one, so it is short
    others = frozenset(inp.state.free) - ga.gpus - _grant(four, b, "node1", 1).gpus
    full = Decision(now=snap.time, grants=decision.grants, reserved_gpus=others)
    checked = room.check(full, inp.state, snap, rows)
    assert checked.short == {b: frozenset({"node2", "node3", "node4"})} and len(checked.decision.grants) == 1
    assert c not in checked.short  # c was not granted


def test_a_preempted_job_frees_its_cpus_for_the_grant_on_its_gpus(four: FakeSlurm, tmp_path: Path) -> None:
    old = four.submit("bob", "b", 1, 600.0, cpus_per_node=12)
    four.jobs[old].held = False
    four.schedule()
    node = next(iter(four.jobs[old].node_gpus))
    new = four.submit("alice", "a", 1, 600.0, cpus_per_node=12)
    snap = four.snapshot()
    rows = {old: JobRow(old, int(old), "bob/b", "running", 1, 600.0, 0.0),
            new: JobRow(new, int(new), "alice/a", "waiting", 1, 600.0, 0.0)}
    inp = build_round(snap, rows, {}, daemon_config(tmp_path), snap.time)
    onto = Grant(new, "alice/a", four.jobs[old].gpu_ids, {node: 1}, "gpu", 60.0, GrantSource.AUCTION)
    kept = room.check(Decision(now=snap.time, grants=(onto,)), inp.state, snap, rows)
    assert kept.moved  # without the preemption node1 has 4 CPUs free: moved elsewhere
    freed = Decision(now=snap.time, grants=(onto,),
                     preemptions=(Preemption(old, "bob/b", four.jobs[old].gpu_ids, PreemptionCause.LOST),))
    assert room.check(freed, inp.state, snap, rows).decision.grants == (onto,)


def test_a_node_no_waiting_job_fits_leaves_the_round_and_nobody_is_cut(four: FakeSlurm, tmp_path: Path) -> None:
    """node1's CPUs are taken (15 of 16) and every waiting job needs 4 or more: its 3 free GPUs are not
    offered, and no job's allowed nodes change (they keep the memoised placement)."""
    four.jobs[four.add_unmanaged("node1", 1)].cpus_per_node = 15
    for c in (4, 8):
        four.submit("alice", "a", 1, 600.0, cpus_per_node=c)
    snap = four.snapshot()
    rows = {m.job_id: JobRow(m.job_id, m.slurm_id, m.app_key, "waiting", 1, 600.0, 0.0) for m in snap.managed
            if m.user == "alice"}
    inp = build_round(snap, rows, {}, daemon_config(tmp_path), snap.time)
    state, cut = room.narrowed(inp.state, snap, rows, inp.waiting, inp.expired)
    assert cut == {} and inp.state.free - state.free == frozenset(four.topo.node_gpus["node1"][1:])
    assert all(j.allowed_nodes is None for a in state.apps for j in a.jobs)


def test_rounds_do_not_repeat_while_nothing_changes(daemon: Daemon, four: FakeSlurm) -> None:
    """Taking a full node's GPUs out of the round must not change the round's signature (free GPUs, waiting
    jobs as round_due sees them), or a round would run at every cycle."""
    for n in NODES:
        four.jobs[four.add_unmanaged(n, 1)].cpus_per_node = 10
    four.submit("alice", "a", 1, 600.0, cpus_per_node=8)  # fits nowhere now
    reports = [daemon.cycle() for _ in range(4)]
    assert [r.trigger is not None for r in reports] == [True, False, False, False]


def test_a_round_runs_when_cpus_free_up_on_a_node(daemon: Daemon, four: FakeSlurm) -> None:
    """CPU-only jobs (no GPUs) hold 10 CPUs on every node, so a job asking for 8 fits nowhere; when the one on
    node3 ends, no GPU is freed (the free GPUs and the waiting jobs are as before) but the job now fits
    there: a round runs and the job starts on node3. Before, nothing triggered a round until a lease expired."""
    cpu_jobs = {}
    for n in NODES:
        cpu_jobs[n] = four.add_unmanaged(n, 0)
        four.jobs[cpu_jobs[n]].cpus_per_node = 10
    j = four.submit("alice", "a", 1, 600.0, cpus_per_node=8)
    reports = []
    for _ in range(3):
        reports.append(daemon.cycle())
        four.advance(5)
    assert [r.trigger is not None for r in reports] == [True, False, False]
    assert four.jobs[j].state == "PENDING"
    four.cancel(cpu_jobs["node3"], "COMPLETED")
    report = daemon.cycle()
    assert report.trigger is not None
    _cycles(daemon, four, 2)
    assert four.jobs[j].state == "RUNNING" and four.jobs[j].node_gpus == {"node3": 1}
    _no_release_timeout(four)
