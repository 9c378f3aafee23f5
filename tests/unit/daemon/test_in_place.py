"""The daemon-only in-place renewal: a migration onto the home of a preempted holder of the same app."""

from __future__ import annotations

from dataclasses import replace

from themis_slurm.core.decision import Decision, Grant, Preemption, PreemptionCause, RenewalCause
from themis_slurm.core.workload import Job
from themis_slurm.daemon.config import Config
from themis_slurm.daemon.planning import instead_of_migrations, intents_after
from themis_slurm.state.rows import JobRow


def _row(jid: str, intent: str = "running") -> JobRow:
    return JobRow(jid, int(jid), "alice/a", intent, 2, 100.0, 0.0, lease_start=0.0, lease_expiry=10.0)


def test_a_moved_holder_landing_on_a_lost_holders_gpus_renews_that_holder() -> None:
    x_home, y_home = frozenset({0, 1}), frozenset({2, 3})
    d = Decision(now=10.0,
                 grants=(Grant("1", "alice/a", y_home, {"n1": 2}, "node", 610.0, "auction", migrated=True),),
                 preemptions=(Preemption("1", "alice/a", x_home, cause=PreemptionCause.MOVED),
                              Preemption("2", "alice/a", y_home, cause=PreemptionCause.LOST)))
    rows = {"1": _row("1"), "2": _row("2")}
    jobs = {j: Job(j, "alice/a", 2, 3600.0, profile="vgg16") for j in ("1", "2")}
    got = instead_of_migrations(d, rows, jobs)
    assert set(got) == {"2"}
    ip = got["2"]
    assert (ip.renewal.cause, ip.renewal.gpus, ip.renewal.lease_expiry, ip.instead_of) == \
        (RenewalCause.IN_PLACE, y_home, 610.0, "1")
    new = intents_after(d, rows, Config(), 10.0, got)
    assert new["1"].intent == "warning"  # the daemon does not migrate: X is preempted now
    assert (new["2"].intent, new["2"].lease_start, new["2"].lease_expiry) == ("running", 10.0, 610.0)
    # another app's job, or another kind (size or profile: Job.kind, as in the core's keep-in-place), is not
    # a stand-in; nor is a job the round did not see
    assert instead_of_migrations(d, rows, {**jobs, "2": Job("2", "bob/b", 2, 3600.0, profile="vgg16")}) == {}
    assert instead_of_migrations(d, rows, {**jobs, "2": replace(jobs["2"], profile="resnet50")}) == {}
    assert instead_of_migrations(d, rows, {**jobs, "2": Job("2", "alice/a", 1, 3600.0, profile="vgg16")}) == {}
    assert instead_of_migrations(d, rows, {"1": jobs["1"]}) == {}


def test_a_moved_job_keeps_its_destination_through_warning_and_requeue() -> None:
    # issue 38 item 14: a job moved to other GPUs lost its destination and waited a whole lease
    from themis_slurm.core.topology import Topology
    from themis_slurm.daemon.reconcile import reconcile
    from themis_slurm.slurm.model import ManagedJob, Snapshot
    from themis_slurm.state.held import held_for_granted

    topo = Topology.uniform(racks=1, nodes_per_rack=2, gpus_per_node=4, islands_per_node=2)
    home, dest = frozenset({0, 1}), frozenset({4, 5})
    d = Decision(now=10.0, grants=(Grant("1", "alice/a", dest, {"node2": 2}, "island", 610.0, "auction",
                                         migrated=True),),
                 preemptions=(Preemption("1", "alice/a", home, cause=PreemptionCause.MOVED),
                              Preemption("2", "alice/a", frozenset({2, 3}), cause=PreemptionCause.LOST)))
    rows = {"1": _row("1"), "2": replace(_row("2"), planned_nodes={"node1": 2}, planned_gpus=frozenset({2, 3}))}
    new = intents_after(d, rows, Config(), 10.0, {})
    assert (new["1"].intent, dict(new["1"].planned_nodes), new["1"].planned_gpus) == ("warning", {"node2": 2}, dest)
    assert (new["2"].intent, dict(new["2"].planned_nodes)) == ("warning", {})  # lost: no destination

    def mj(jid: str, state: str, gpus: frozenset[int]) -> ManagedJob:
        return ManagedJob(job_id=jid, slurm_id=int(jid), app_key="alice/a", user="alice", state=state,
                          held=state == "PENDING", gpus=2, gpus_per_node=None, nodes=None, node_gpus={},
                          gpu_ids=gpus, est_s=None, time_limit_s=None, profile=None, progress=None,
                          progress_error=None, requeue_ok=True, restart_cnt=0, submit_time=0.0, start_time=None,
                          required_nodes=(), priority=0)

    free = frozenset(range(8)) - home - frozenset({2, 3})
    snap = Snapshot(20.0, topo, free, frozenset(), frozenset(), (mj("1", "RUNNING", home),), 2)
    assert held_for_granted(snap, [replace(new["1"], intent="warned")]) == {"1": dest}  # not offered meanwhile
    after = reconcile(30.0, {"1": mj("1", "PENDING", frozenset())}, {"1": replace(new["1"], intent="warned")},
                      Config())
    [fix] = after
    assert fix.kind == "requeued" and fix.before is not None
    assert (fix.before.intent, dict(fix.before.planned_nodes), fix.before.grant_time) == ("granted", {"node2": 2}, 30.0)
