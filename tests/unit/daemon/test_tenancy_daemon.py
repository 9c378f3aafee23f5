"""themisd's cycle with tenancy on (issue 33 item 2): the tree read through the backend's runner at start,
every refresh_s and after a reload (SIGHUP), the apps' clocks fed with their nested shares, the rounds
given the tree, and each app's account stored."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from tests.unit.slurm.fake_slurm import FakeRunner
from themis_slurm.daemon.config import TenancyConfig
from themis_slurm.daemon.loop import Daemon
from themis_slurm.daemon.planning import build_round
from themis_slurm.slurm.runner import SlurmCommandError
from themis_slurm.slurm.shares import SHOW_CONFIG, SSHARE

from .conftest import TREE, run, tenancy_config
from .fake_slurm import FakeSlurm


def sshares(r: FakeRunner) -> int:
    return sum(1 for c in r.calls if c[0] == "sshare")


def test_the_cycle_uses_slurms_tree_and_stores_each_apps_account(
    tmp_path: Path,
    slurm: FakeSlurm,
    runner: FakeRunner,
    make_daemon: Callable[..., Daemon],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "themisd")
    for app in ("x", "y"):
        slurm.submit("alice", app, 1, 600.0, account="A")
    slurm.submit("bob", "z", 1, 600.0, account="A")
    slurm.submit("carol", "w", 1, 600.0, account="B")
    d = make_daemon(tenancy_config(tmp_path, levels="auto"))
    d.cycle()
    apps = d.store.apps()
    # A 3/4 split by alice and bob; alice's two apps 3/16 each; bob's 3/8; carol's (B) 1/4
    assert {k: a.clock_current for k, a in apps.items()} == pytest.approx(
        {"alice/x": 16 / 3, "alice/y": 16 / 3, "bob/z": 8 / 3, "carol/w": 4.0}
    )
    assert {k: a.account for k, a in apps.items()} == {
        "alice/x": "A",
        "alice/y": "A",
        "bob/z": "A",
        "carol/w": "B",
    }
    tree_lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tenancy:")]
    assert tree_lines == ["tenancy: account -> user -> app, 2 accounts, 3 users (shares from slurm)"]
    # the round's state carries the tree and each app its account
    inp = build_round(
        slurm.snapshot(), d.store.jobs(), d.store.apps(active_only=True), d.cfg, slurm.now, tenancy=d._tree
    )
    assert inp.state.tenancy == d._tree and inp.state.tenancy.account_shares == {"A": 3.0, "B": 1.0}
    assert {a.id: a.account for a in inp.state.apps} == {
        "alice/x": "A",
        "alice/y": "A",
        "bob/z": "A",
        "carol/w": "B",
    }
    assert runner.timeouts[-1] == d.cfg.slurm.action_timeout_s  # Slurm reads bounded by the action timeout


def test_refresh_every_refresh_s_and_after_a_reload(
    tmp_path: Path, slurm: FakeSlurm, runner: FakeRunner, make_daemon: Callable[..., Daemon]
) -> None:
    slurm.submit("alice", "x", 1, 3600.0, account="A")
    d = make_daemon(tenancy_config(tmp_path, levels="auto", refresh_s=60.0))
    run(d, slurm, 55.0)  # 11 cycles of 5 s
    assert sshares(runner) == 1
    run(d, slurm, 10.0)
    assert sshares(runner) == 2  # 60 s after the first read
    d.reload(replace(d.cfg, tenancy=TenancyConfig(levels="auto", refresh_s=60.0)))  # SIGHUP
    d.cycle()
    assert sshares(runner) == 3


def test_reload_to_the_app_level_stops_reading_and_counts_apps(
    tmp_path: Path, slurm: FakeSlurm, runner: FakeRunner, make_daemon: Callable[..., Daemon]
) -> None:
    slurm.submit("alice", "x", 1, 3600.0, account="A")
    slurm.submit("alice", "y", 1, 3600.0, account="A")
    slurm.submit("carol", "w", 1, 3600.0, account="B")
    d = make_daemon(tenancy_config(tmp_path, levels="auto"))
    d.cycle()
    assert d.store.apps()["carol/w"].clock_current == pytest.approx(4.0)
    calls = len(runner.calls)
    d.reload(replace(d.cfg, tenancy=TenancyConfig(levels=("app",))))
    slurm.advance(5.0)
    d.cycle()
    assert {a.clock_current for a in d.store.apps().values()} == {3.0}
    assert not [c for c in runner.calls[calls:] if c[0] in ("sshare",) or c[:3] == list(SHOW_CONFIG)]


def test_slurm_failing_at_start_falls_back_then_catches_up(
    tmp_path: Path,
    slurm: FakeSlurm,
    runner: FakeRunner,
    make_daemon: Callable[..., Daemon],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "themisd")
    runner.answers[SSHARE] = SlurmCommandError(list(SSHARE), None, "no answer within 10 s")
    for app in ("x", "y"):
        slurm.submit("alice", app, 1, 3600.0, account="A")
    slurm.submit("carol", "w", 1, 3600.0, account="B")
    d = make_daemon(tenancy_config(tmp_path, levels="auto"))
    d.cycle()
    # user -> app with equal shares: alice 1/2 over two apps, carol 1/2
    assert {k: a.clock_current for k, a in d.store.apps().items()} == {
        "alice/x": 4.0,
        "alice/y": 4.0,
        "carol/w": 2.0,
    }
    assert any(
        r.levelname == "ERROR" and "cannot read Slurm's account tree" in r.getMessage()
        for r in caplog.records
    )
    runner.answers[SSHARE] = TREE
    run(d, slurm, 35.0)  # retried after 30 s
    assert d.store.apps()["carol/w"].clock_current == pytest.approx(4.0)  # B's 1/4 now
