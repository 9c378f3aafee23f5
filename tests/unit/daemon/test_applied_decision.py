"""Issue 38 item 10: "a one-GPU array task moved in the round it was granted".

The probe's log had ``grant 228_0 nodes=node4:1`` and ``preempt 228_0 reason=lease expired; moved to other
GPUs`` in one round. Reproduced here: when another app's job (restricted to one node) wins the home of
array task X in the auction, the core moves X onto the home of task Y of the same array and preempts Y
(it lost). themisd never migrates: it renews Y in place and preempts X (`instead_of_migrations`). But it
logged and recorded the core's decision, so X showed as granted on Y's GPUs and "moved" in the same round
(and Y as preempted and renewed), while X was only preempted. `as_applied` is what is logged and recorded.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from themis_slurm.core.arbiter import ArbiterConfig, run_round
from themis_slurm.core.decision import Decision, Grant, GrantSource, Preemption, PreemptionCause, RenewalCause
from themis_slurm.core.state import ClusterState
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App, Job, Lease
from themis_slurm.daemon import loop
from themis_slurm.daemon.config import Config
from themis_slurm.daemon.planning import as_applied, instead_of_migrations, intents_after
from themis_slurm.state.rows import JobRow

from .conftest import run

ARRAY = "alice/array-228"
NOW = 10_000.0


def _array_round() -> ClusterState:
    """8 one-GPU tasks of an array hold the 8 GPUs of two nodes (7 leases expire now); bob's two jobs wait,
    one of them allowed on node2 only (its GPU type, say)."""
    done = {0: 29.0, 1: 10.0, 2: 26.0, 3: 16.0, 4: 0.0, 5: 0.0, 6: 0.0, 7: 0.0}
    tasks = tuple(Job(f"228_{k}", ARRAY, 1, 300.0, done=done[k], submit=100.0) for k in range(8))
    bob = (Job("301", "bob/typed", 1, 2327.0, done=49.0, profile="high", elastic=True, submit=6133.0,
               allowed_nodes=frozenset({"node2"})),
           Job("302", "bob/typed", 1, 2033.0, done=22.5, profile="high", submit=650.0,
               allowed_nodes=frozenset({"node1"})))  # fmt: skip
    leases = tuple(
        Lease(f"228_{k}", frozenset({k}), NOW - 600, NOW + 300 if k == 4 else NOW) for k in range(8)
    )
    apps = (
        App(ARRAY, "alice", 100.0, tasks, contention=1.75),
        App("bob/typed", "bob", 8440.0, bob, contention=1.47),
    )
    return ClusterState(Topology.uniform(1, 2, 4, 2), NOW, frozenset(), leases, apps)


def _rows(state: ClusterState) -> dict[str, JobRow]:
    held = {lease.job_id for lease in state.leases}
    return {j.id: JobRow(j.id, 228, j.app_id, "running" if j.id in held else "waiting", j.gpus, j.work, 0.0,
                         lease_start=NOW - 600 if j.id in held else None,
                         lease_expiry=NOW if j.id in held else None)
            for a in state.apps for j in a.jobs}  # fmt: skip


@pytest.mark.parametrize("solver", ["fast", "exact"])
def test_a_task_moved_onto_a_lost_tasks_gpus_is_recorded_as_preempted_not_granted(solver: str) -> None:
    state = _array_round()
    # order_slack 0: the array's tasks in the order that makes this round (the slack lets 301 wait)
    d = run_round(state, ArbiterConfig(solver=solver, lease_s=45, restart_cost_s=3, order_slack=0.0))
    # the core's decision: 301 takes task 5's GPU, task 5 moves onto task 0's, task 0 loses
    assert [(g.job_id, sorted(g.gpus), g.migrated) for g in d.grants] == [
        ("301", [5], False),
        ("228_5", [0], True),
    ]
    assert {(p.job_id, p.cause) for p in d.preemptions} == {
        ("228_5", PreemptionCause.MOVED),
        ("228_0", PreemptionCause.LOST),
    }
    rows = _rows(state)
    in_place = instead_of_migrations(d, rows, {j.id: j for a in state.apps for j in a.jobs})
    assert {y: ip.instead_of for y, ip in in_place.items()} == {"228_0": "228_5"}
    applied = as_applied(d, in_place)
    # what themisd does: 301 starts on GPU 5, task 0 renews on GPU 0, task 5 is preempted (waits: no destination)
    assert [(g.job_id, sorted(g.gpus)) for g in applied.grants] == [("301", [5])]
    assert [(p.job_id, sorted(p.gpus), p.cause) for p in applied.preemptions] == [
        ("228_5", [5], PreemptionCause.LOST)
    ]
    granted = {g.job_id for g in applied.grants}
    assert not granted & {p.job_id for p in applied.preemptions}  # nobody granted and preempted in one round
    assert applied.apps is d.apps and applied.renewals == d.renewals
    cfg = Config()
    assert intents_after(applied, rows, cfg, NOW, in_place) == intents_after(d, rows, cfg, NOW, in_place)
    new = intents_after(applied, rows, cfg, NOW, in_place)
    assert (new["228_5"].intent, dict(new["228_5"].planned_nodes)) == ("warning", {})
    assert (
        new["228_0"].intent == "running"
        and new["228_0"].lease_expiry == in_place["228_0"].renewal.lease_expiry
    )
    assert as_applied(d, {}) is d


def test_the_daemon_logs_and_records_the_round_as_carried_out(
    make_daemon, slurm, monkeypatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Through the loop: the round that moves X onto Y's GPUs (Y lost) logs no grant for X, X's preemption as
    lost, and records neither X's grant nor Y's preemption; X gets SIGUSR1, Y keeps running."""
    d = make_daemon()
    ids = [slurm.submit("alice", "arr", 1, 10_000.0) for _ in range(3)]
    run(d, slurm, 30)
    rows = d.store.jobs()
    assert all(rows[j].intent == "running" for j in ids), {j: rows[j].intent for j in ids}
    x, y = ids[0], ids[1]
    real = loop.run_round

    def moved(state: ClusterState, cfg: ArbiterConfig) -> Decision:
        base = real(state, cfg)
        homes = {lease.job_id: lease.gpus for lease in state.leases}
        if x not in homes or y not in homes or state.now < min(lease.expiry for lease in state.leases):
            return base
        app = next(a.id for a in state.apps if any(j.id == x for j in a.jobs))
        nodes = state.topology.nodes_of(homes[y])
        return replace(base, grants=(Grant(x, app, homes[y], nodes, "gpu", state.now + 60, GrantSource.LEFTOVER,
                                           migrated=True),),
                       renewals=tuple(r for r in base.renewals if r.job_id not in (x, y)),
                       preemptions=(Preemption(x, app, homes[x], PreemptionCause.MOVED),
                                    Preemption(y, app, homes[y], PreemptionCause.LOST)))  # fmt: skip

    monkeypatch.setattr(loop, "run_round", moved)
    slurm.calls.clear()
    caplog.clear()  # only the cycles below (an earlier test may have left the logger at INFO)
    with caplog.at_level(logging.INFO, logger="themisd"):
        for _ in range(20):  # until the leases expire and the round runs
            rep = d.cycle()
            slurm.advance(5)
            if rep.decision is not None and rep.preemptions:
                break
    assert rep.decision is not None and rep.preemptions == 1, rep
    text = caplog.text
    assert f"grant app=alice/arr job={x} " not in text, text
    assert f"preempt app=alice/arr job={x} gpus=1 reason=lease expired and lost the auction" in text, text
    assert f"renew app=alice/arr job={y} in place instead of moving job {x}" in text, text
    rid = d.store.query("SELECT MAX(id) FROM rounds")[0][0]
    got = {
        (r["job_id"], r["action"], r["cause"])
        for r in d.store.query(
            "SELECT job_id, action, cause FROM decisions WHERE round_id = ? AND job_id IS NOT NULL", (rid,)
        )
    }
    assert (x, "grant", None) not in got and not any(j == y and a == "preemption" for j, a, _ in got), got
    assert (x, "preemption", "lost") in got and (y, "renewal", RenewalCause.IN_PLACE.value) in got, got
    assert ("warn", x) in slurm.calls and ("warn", y) not in slurm.calls
    assert d.store.job(y).intent == "running" and d.store.job(x).intent in ("warned", "warning")
