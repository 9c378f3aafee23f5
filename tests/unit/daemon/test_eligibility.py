"""Only jobs Slurm would start get GPUs: BeginTime, dependencies, the owner's hold, the array throttle, and
limits learned from a release that timed out. Before this, such jobs were granted, sat pending until the
release timed out, were held and granted again about 2 s later: GPUs idle in a loop."""

from __future__ import annotations

from collections.abc import Callable

from themis_slurm.daemon.loop import Daemon

from .conftest import run
from .fake_slurm import FakeSlurm


def starts(slurm: FakeSlurm, job: str) -> int:
    return sum(1 for c in slurm.calls if c == ("start", job))


def test_blocked_jobs_are_never_granted_and_others_run(slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    d = make_daemon()
    blocked = {
        slurm.submit("alice", "later", 4, 500.0, gpus_per_node=4, est_s=500.0,
                     blocked="BeginTime: not before 2026-12-01 12:00:00"): "BeginTime",
        slurm.submit("alice", "dep", 4, 500.0, gpus_per_node=4, est_s=500.0,
                     blocked="Dependency: waits for afterok:7"): "Dependency",
        slurm.submit("bob", "mine", 4, 500.0, gpus_per_node=4, est_s=500.0,
                     blocked="held by its owner (hold=user in its Comment)"): "held by its owner",
    }
    other = slurm.submit("bob", "ok", 4, 500.0, gpus_per_node=4, est_s=500.0)
    run(d, slurm, 120)
    for jid in blocked:
        assert starts(slurm, jid) == 0, f"{jid} was released although Slurm would not start it"
        assert d.store.job(jid).intent == "waiting"
    assert slurm.jobs[other].state == "RUNNING"
    grants = d.store.query("SELECT job_id FROM decisions WHERE action = 'grant'")
    assert {r[0] for r in grants} == {other}
    # they count towards nobody's allocation: the apps with only blocked jobs are not in the rounds
    apps = {r[0] for r in d.store.query("SELECT DISTINCT app_key FROM decisions WHERE action = 'app'")}
    assert apps == {"bob/ok"}


def test_a_job_becomes_eligible_when_its_block_goes(slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    d = make_daemon()
    jid = slurm.submit("alice", "later", 2, 300.0, est_s=300.0, blocked="BeginTime: not before soon")
    run(d, slurm, 30)
    assert starts(slurm, jid) == 0
    slurm.jobs[jid].blocked = None
    run(d, slurm, 30)
    assert starts(slurm, jid) == 1 and slurm.jobs[jid].state == "RUNNING"


def test_array_throttle_caps_grants(slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    d = make_daemon()
    tasks = [slurm.submit("alice", "arr", 1, 2000.0, est_s=2000.0, array_job_id=500, array_task_id=i,
                          array_max_tasks=2) for i in range(6)]
    max_busy = 0
    for _ in range(40):
        d.cycle()
        busy = [t for t in tasks if slurm.jobs[t].state == "RUNNING"
                or (d.store.job(t) and d.store.job(t).intent in ("granted", "starting"))]
        max_busy = max(max_busy, len(busy))
        slurm.advance(5)
    running = [t for t in tasks if slurm.jobs[t].state == "RUNNING"]
    assert len(running) == 2 and max_busy == 2
    assert not [c for c in slurm.calls if c[0] == "hold"], "no release timed out"
    assert sorted(running) == sorted(tasks[:2])  # in task order, as Slurm would start them


def test_limit_seen_after_release_stops_the_loop(slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    d = make_daemon(release_timeout_s=10.0)  # 60 s leases
    jid = slurm.submit("alice", "capped", 2, 300.0, est_s=300.0, limit_reason="AssocGrpGRES")
    run(d, slurm, 70)
    # one release, one timeout; then not granted again within the lease (60 s)
    assert starts(slurm, jid) == 1
    assert d.store.job(jid).intent == "waiting"
    events = d.store.query("SELECT kind FROM events WHERE job_id = ? AND kind = 'release-timeout'", (jid,))
    assert len(events) == 1


def test_a_learned_limit_survives_a_restart(slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    # issue 38 item 8: the limit a timed-out release taught was kept in memory only
    d = make_daemon(release_timeout_s=10.0)  # 60 s leases
    jid = slurm.submit("alice", "capped", 2, 300.0, est_s=300.0, limit_reason="AssocGrpGRES")
    run(d, slurm, 30)
    assert starts(slurm, jid) == 1 and jid in d.store.learned()
    again = make_daemon(release_timeout_s=10.0)  # a restart: the same store
    run(again, slurm, 20)
    assert starts(slurm, jid) == 1, "granted again right after a restart"
    run(again, slurm, 60)  # the lease is over: it may be tried again, and the record is gone
    assert jid not in again.store.learned() or again.store.learned()[jid][1] > slurm.now


def test_jobs_are_granted_only_where_slurm_could_start_them(slurm: FakeSlurm,
                                                             make_daemon: Callable[..., Daemon]) -> None:
    # issue 37: a job was pinned by its GPU count alone; Slurm refused, themisd retried for 30 s
    d = make_daemon()
    typed = [slurm.submit("alice", "t", 2, 300.0, est_s=300.0, allowed_nodes=frozenset({"node2"})) for _ in range(2)]
    anywhere = slurm.submit("bob", "a", 2, 300.0, est_s=300.0)
    nowhere = slurm.submit("bob", "n", 1, 300.0, est_s=300.0, allowed_nodes=frozenset())
    run(d, slurm, 20)
    assert all(slurm.jobs[j].state == "RUNNING" and set(slurm.jobs[j].node_gpus) == {"node2"} for j in typed)
    assert slurm.jobs[anywhere].state == "RUNNING" and set(slurm.jobs[anywhere].node_gpus) == {"node1"}
    assert slurm.jobs[nowhere].state == "PENDING" and starts(slurm, nowhere) == 0
    assert d.store.query("SELECT COUNT(*) FROM events WHERE kind = 'release-timeout'")[0][0] == 0
    assert all(starts(slurm, j) == 1 for j in [*typed, anywhere])
