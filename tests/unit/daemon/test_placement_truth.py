"""Slurm picks GPU indices inside a node: a plan that did not come true is logged and counted, never reported."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from themis_slurm.daemon.loop import Daemon

from .conftest import run
from .fake_slurm import FakeSlurm


def mismatches(d: Daemon, changed: str) -> float:
    return d.metrics.registry.get_sample_value("themis_placement_mismatch_total", {"level_changed": changed}) or 0.0


def test_planned_island_but_slurm_gives_other_indices(slurm: FakeSlurm, make_daemon: Callable[..., Daemon],
                                                      caplog: pytest.LogCaptureFixture) -> None:
    slurm.add_unmanaged("node1", 1)  # GPU 0 of node1
    slurm.add_unmanaged("node2", 4)  # node2 full
    d = make_daemon()
    caplog.set_level(logging.INFO, logger="themisd")
    jid = slurm.submit("alice", "a", 2, 1000.0, est_s=1000.0)
    run(d, slurm, 20)
    job = slurm.jobs[jid]
    assert job.state == "RUNNING"
    planned = d.store.job(jid).planned_gpus
    assert planned == frozenset({2, 3}), "Themis plans the free NVLink island"
    assert job.gpu_ids == frozenset({1, 2}), "the fake Slurm takes the lowest free indices, across islands"
    assert mismatches(d, "true") == 1.0
    text = caplog.text
    assert f"placed app=alice/a job={jid} gpus=node1:1,node1:2 level=node, not as planned (island level" in text
    assert "planned_level=island" in text and "level=island" not in text.replace("planned_level=island", "")


def test_plan_that_came_true_is_not_counted(slurm: FakeSlurm, make_daemon: Callable[..., Daemon]) -> None:
    d = make_daemon()
    jid = slurm.submit("alice", "a", 2, 1000.0, est_s=1000.0)
    run(d, slurm, 20)
    assert slurm.jobs[jid].state == "RUNNING"
    assert mismatches(d, "true") == 0.0 and mismatches(d, "false") == 0.0
