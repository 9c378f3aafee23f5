"""Fail-open (issue 38 item 6): once themisd's heartbeat is too old, the watchdog hands its held jobs to
plain Slurm; nothing happens while it is fresh; themisd coming back holds or adopts them again."""

from __future__ import annotations

import math
import os
import stat
import time
from dataclasses import replace
from pathlib import Path

from themis_slurm.daemon.config import FailOpenConfig
from themis_slurm.daemon.failopen import fail_open
from themis_slurm.daemon.heartbeat import heartbeat_age, read_heartbeat, write_heartbeat
from themis_slurm.daemon.loop import Daemon
from themis_slurm.state.store import Store

from .conftest import daemon_config, run
from .fake_slurm import FakeSlurm


def test_heartbeat_round_trip_and_bad_files(tmp_path: Path) -> None:
    p = tmp_path / "run" / "heartbeat"
    assert heartbeat_age(p, 100.0) == math.inf  # missing: not alive
    old = os.umask(0o077)
    try:
        write_heartbeat(p, 1000.5, pid=42, host="ctld1")
    finally:
        os.umask(old)
    assert stat.S_IMODE(p.stat().st_mode) == 0o644  # slurmctld (another user) reads it
    hb = read_heartbeat(p)
    assert hb is not None and (hb.time, hb.pid, hb.host) == (1000.5, 42, "ctld1")
    assert heartbeat_age(p, 1010.5) == 10.0
    assert [f.name for f in p.parent.iterdir()] == ["heartbeat"]  # no temporary left behind
    for junk in ("", "soon 1 x", "nan 1 x", "\xff\xfe"):
        p.write_text(junk, errors="surrogateescape") if junk != "\xff\xfe" else p.write_bytes(b"\xff\xfe")
        assert read_heartbeat(p) is None and heartbeat_age(p, 0.0) == math.inf


def _setup(tmp_path: Path, topo, after_s: float = 600.0):  # type: ignore[no-untyped-def]
    slurm = FakeSlurm(topo)
    cfg = daemon_config(tmp_path / "state")
    cfg = replace(cfg, failopen=FailOpenConfig(heartbeat_file=str(tmp_path / "heartbeat"), after_s=after_s))
    return slurm, cfg


def test_nothing_is_released_while_themisd_is_alive(tmp_path: Path, topo) -> None:  # type: ignore[no-untyped-def]
    slurm, cfg = _setup(tmp_path, topo)
    jobs = [slurm.submit("alice", "a", 4, 600.0) for _ in range(3)]
    write_heartbeat(cfg.failopen.heartbeat_file, slurm.now - 30)
    rep = fail_open(slurm, cfg, slurm.now)
    assert not rep.acting and rep.released == [] and slurm.calls == [] and "alive" in rep.summary()
    assert all(slurm.jobs[j].held for j in jobs)


def test_off_means_never(tmp_path: Path, topo) -> None:  # type: ignore[no-untyped-def]
    slurm, cfg = _setup(tmp_path, topo, after_s=0)
    slurm.submit("alice", "a", 4, 600.0)
    rep = fail_open(slurm, cfg, slurm.now)  # no heartbeat at all, and still nothing
    assert not rep.acting and slurm.calls == [] and "off" in rep.summary()


def test_gone_themisd_hands_held_jobs_to_slurm_and_coming_back_adopts_them(tmp_path: Path, topo) -> None:  # type: ignore[no-untyped-def]
    slurm, cfg = _setup(tmp_path, topo)
    d = Daemon(cfg, slurm, Store(cfg.db_path))
    hog = [slurm.submit("alice", "hog", 4, 5000.0, gpus_per_node=4) for _ in range(2)]
    run(d, slurm, 10)
    write_heartbeat(cfg.failopen.heartbeat_file, slurm.now)
    waiting = [slurm.submit("bob", "b", 1, 600.0) for _ in range(3)]
    mine = slurm.submit("carol", "c", 1, 600.0, blocked="held by its owner (hold=user in its Comment)")
    # themisd dies; 11 minutes later the watchdog runs
    slurm.advance(660.0)
    for j in hog:  # make room: the hogs end while themisd is gone
        slurm.cancel(j, "COMPLETED")
    rep = fail_open(slurm, cfg, slurm.now)
    assert rep.acting and sorted(rep.released) == sorted(waiting) and rep.kept == [mine]
    assert "FAIL-OPEN" in rep.summary()
    slurm.advance(1.0)  # Slurm's own scheduler starts them
    assert all(slurm.jobs[j].state == "RUNNING" for j in waiting) and slurm.jobs[mine].held
    again = slurm.submit("bob", "b", 1, 600.0)  # released while themisd is still away: pending, unheld
    slurm.jobs[again].held = False
    starts = dict(slurm.starts_seen)
    # themisd comes back: running jobs are adopted (never started twice), the pending one is held again
    d.cycle()
    rows = d.store.jobs()
    assert all(rows[j].intent == "running" and rows[j].adopted for j in waiting)
    assert slurm.jobs[again].held or slurm.jobs[again].state == "RUNNING"
    assert {j: slurm.starts_seen[j] for j in waiting} == {j: starts[j] for j in waiting}


def test_the_service_beats_after_every_cycle_it_could_record(tmp_path: Path, topo) -> None:  # type: ignore[no-untyped-def]
    from themis_slurm.daemon.service import Service

    slurm, cfg = _setup(tmp_path, topo)
    svc = Service(replace(cfg, poll_interval_s=0.1), tmp_path / "themis.yaml", slurm)
    svc.run(max_cycles=2)
    hb = read_heartbeat(cfg.failopen.heartbeat_file)
    assert hb is not None and hb.pid == os.getpid() and hb.age(time.time()) < 60


def test_a_standby_themisd_takes_over_when_the_active_one_is_gone(tmp_path: Path, topo) -> None:  # type: ignore[no-untyped-def]
    # issue 38 item 6: a backup controller's themisd waits on the shared state lock, then continues the
    # same state (the same reconciliation as after a crash): nothing lost, nothing started twice
    import threading

    from themis_slurm.daemon.service import AlreadyRunning, Service, state_lock

    slurm, cfg = _setup(tmp_path, topo)
    cfg = replace(cfg, poll_interval_s=0.1)
    active = Daemon(cfg, slurm, Store(cfg.db_path))
    jobs = [slurm.submit("alice", "a", 4, 5000.0, gpus_per_node=4) for _ in range(2)]
    run(active, slurm, 10)
    assert all(slurm.jobs[j].state == "RUNNING" for j in jobs)
    active.store.close()
    standby = Service(cfg, tmp_path / "themis.yaml", slurm, standby=True)
    release, locked = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        with state_lock(cfg.state_dir):  # the active themisd, on the other host
            locked.set()
            release.wait(10)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    assert locked.wait(5)
    try:
        try:
            with state_lock(cfg.state_dir):  # without --standby: refused, as before
                raise AssertionError("a second themisd got the lock")
        except AlreadyRunning as e:
            assert "holds" in str(e) and " on " in str(e)  # pid and host of the holder
        done = threading.Event()
        t = threading.Thread(target=lambda: (standby.run(max_cycles=3), done.set()))
        t.start()
        assert not done.wait(1.5), "the standby must wait while the lock is held"
        release.set()  # the active one dies (the kernel drops its lock)
        assert done.wait(10), "the standby did not take over"
        t.join()
    finally:
        release.set()
        holder.join()
    store = Store(cfg.db_path)
    try:
        rows = store.jobs()
        assert all(rows[j].intent == "running" for j in jobs)  # the same state, continued
    finally:
        store.close()
    assert all(slurm.starts_seen[j] == 1 for j in jobs)


def test_a_standby_asked_to_stop_exits_cleanly(tmp_path: Path, topo) -> None:  # type: ignore[no-untyped-def]
    import threading

    from themis_slurm.daemon.service import Service, state_lock

    slurm, cfg = _setup(tmp_path, topo)
    standby = Service(cfg, tmp_path / "themis.yaml", slurm, standby=True)
    with state_lock(cfg.state_dir):
        result: list[int] = []
        t = threading.Thread(target=lambda: result.append(standby.run(max_cycles=1)))
        t.start()
        time.sleep(1.2)
        standby.stop()
        t.join(5)
        assert result == [0] and slurm.snapshots == 0  # never cycled
