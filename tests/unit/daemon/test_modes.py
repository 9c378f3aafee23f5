"""Observe mode touches nothing; handing back releases everything and stops holding; operations bits."""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from themis_slurm.daemon.handback import handback, read_job_submit_mode, write_job_submit_mode
from themis_slurm.daemon.loop import Daemon
from themis_slurm.daemon.sdnotify import Notifier
from themis_slurm.daemon.service import AlreadyRunning, Service, state_lock

from .conftest import daemon_config, run
from .fake_slurm import FakeSlurm

REPO = Path(__file__).resolve().parents[3]
LUA_CONF = REPO / "themis_slurm" / "site" / "slurm" / "themis_job_submit.conf.lua"


def test_observe_mode_records_decisions_and_touches_nothing(
        tmp_path: Path, slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    cfg = replace(daemon_config(tmp_path / "state"), mode="observe")
    d = make_daemon(cfg)
    hog = slurm.submit("alice", "hog", 8, 5000.0, est_s=5000.0, held=False)
    slurm.schedule()
    late = slurm.submit("bob", "late", 2, 100.0, est_s=100.0, held=False)  # Slurm cannot start it: full
    waiting = slurm.submit("bob", "held", 2, 100.0, est_s=100.0)  # held by someone else: left alone
    run(d, slurm, 300)
    assert slurm.calls == [], "observe mode never calls a Slurm action"
    assert slurm.jobs[hog].state == "RUNNING" and slurm.jobs[waiting].held
    rounds = d.store.query("SELECT mode, preemptions FROM rounds")
    assert rounds and all(r[0] == "observe" for r in rounds)
    assert sum(r[1] for r in rounds) >= 1, "it records the preemptions it would make"
    assert len(rounds) <= 8, "rounds at lease pace, not every cycle"
    assert d.store.job(late).intent == "waiting"


def test_handback_releases_every_managed_job_and_turns_job_submit_off(
        tmp_path: Path, slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    lua = tmp_path / "themis_job_submit.conf.lua"
    lua.write_text(LUA_CONF.read_text())
    (tmp_path / "job_submit.lua").write_text("-- script\n")
    base = daemon_config(tmp_path / "state")
    cfg = replace(base, slurm=replace(base.slurm, job_submit_conf=str(lua)))
    d = make_daemon(cfg)
    jobs = [slurm.submit("alice", "a", 4, 1000.0, gpus_per_node=4, est_s=1000.0) for _ in range(4)]
    run(d, slurm, 20)
    assert sum(slurm.jobs[j].state == "RUNNING" for j in jobs) == 2
    d.cycle()  # a round that pinned and released is not needed for the test; the rest are held
    slurm.auto_schedule = False
    rep = handback(slurm, cfg, d.store)
    assert rep.mode_before == "enforce"
    assert read_job_submit_mode(lua) == "off"
    assert "mode = \"off\"" in lua.read_text() and "-- Seconds between re-reads" in lua.read_text()
    pending = [j for j in jobs if slurm.jobs[j].state == "PENDING"]
    assert sorted(rep.released) == sorted(pending)
    assert all(not slurm.jobs[j].held and not slurm.jobs[j].required_nodes for j in pending)
    assert d.store.jobs() == {}, "intents forgotten"
    slurm.auto_schedule = True
    for _ in range(3):
        slurm.advance(1000)
    assert all(j in slurm.completed for j in jobs), "Slurm runs every job by itself"


def test_job_submit_mode_file_errors(tmp_path: Path) -> None:
    p = tmp_path / "c.lua"
    p.write_text("return {\n  -- mode = \"observe\"\n  reload_seconds = 5,\n}\n")
    assert read_job_submit_mode(p) is None
    with pytest.raises(ValueError, match="no `mode"):
        write_job_submit_mode(p, "off")
    assert read_job_submit_mode(tmp_path / "missing.lua") is None


def test_state_lock_keeps_a_second_daemon_and_handback_out(tmp_path: Path) -> None:
    with state_lock(str(tmp_path)), pytest.raises(AlreadyRunning, match="stop it first"), state_lock(str(tmp_path)):
        pass
    with state_lock(str(tmp_path)):
        pass  # released again


def test_sd_notify_ready_and_watchdog(tmp_path: Path, slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind(path)
        srv.settimeout(0.3)
        cfg = replace(daemon_config(tmp_path / "state"), poll_interval_s=0.05)
        svc = Service(cfg, tmp_path / "x.yaml", slurm, Notifier(path))
        svc.run(max_cycles=2)
        msgs = []
        while True:
            try:
                msgs.append(srv.recv(4096).decode())
            except TimeoutError:
                break
    assert msgs[0].startswith("READY=1")
    assert any(m.startswith("WATCHDOG=1") for m in msgs)
    assert msgs[-1] == "STOPPING=1"
    assert not Notifier("").notify("READY=1"), "no socket: a no-op"
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    assert Notifier(path).watchdog_interval_s() == 15.0


def test_metrics_after_cycles(slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    d = make_daemon()
    slurm.add_unmanaged("node2", 1)
    for _ in range(3):
        slurm.submit("alice", "a", 2, 1000.0, est_s=1000.0)
    slurm.submit("bob", "b", 4, 1000.0, gpus_per_node=4, est_s=1000.0)
    run(d, slurm, 100)
    m = d.metrics
    assert m.value("themis_apps") == 2
    assert m.value("themis_gpus", {"state": "unmanaged"}) == 1
    assert m.value("themis_gpus", {"state": "leased"}) == 6
    assert m.value("themis_rounds_total", {"mode": "enforce"}) >= 1
    assert m.value("themis_rho_count") >= 2 and m.value("themis_rho_worst") > 0
    assert m.value("themis_decisions_total", {"action": "grant", "mode": "enforce"}) >= 3
    assert m.value("themis_slurm_calls_total") > 0
    assert m.value("themis_cycle_duration_seconds_count") == 20
