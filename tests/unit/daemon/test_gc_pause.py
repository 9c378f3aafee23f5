"""The cyclic collector is paused while themisd runs a round (themis_slurm/gc_pause.py), and always comes
back as it was."""

from __future__ import annotations

import gc
from collections.abc import Callable

import pytest

import themis_slurm.daemon.loop as daemon_loop
from themis_slurm.daemon.loop import Daemon
from themis_slurm.gc_pause import collector_paused

from .conftest import run
from .fake_slurm import FakeSlurm


def test_paused_inside_restored_after() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # nested: still off, and the outer block switches it back on
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_restored_after_an_exception() -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("round failed")
    assert gc.isenabled()


def test_left_off_when_the_caller_had_it_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_themisd_runs_rounds_with_the_collector_paused(
    monkeypatch: pytest.MonkeyPatch, slurm: FakeSlurm, make_daemon: Callable[..., Daemon]
) -> None:
    seen: list[bool] = []
    real = daemon_loop.run_round

    def watch(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(daemon_loop, "run_round", watch)
    d = make_daemon()
    slurm.submit("alice", "a", 4, 1000.0, gpus_per_node=4, est_s=1000.0)
    run(d, slurm, 20)
    assert seen and not any(seen)
    assert gc.isenabled()
