"""An owner's `scontrol requeue` of a running managed job (issue 38 item 8).

Measured on the local cluster (22.05 and 25.11): right after the owner's requeue the job is COMPLETING
(25.11 lists [PENDING, COMPLETING]; 22.05 COMPLETING with Restarts+1 and a pending job's StartTime),
then PENDING, reason BeginTime, not held; Slurm starts it by itself at BeginTime (requeue + cred_expire +
1 s) unless it is held. themisd used to hold it only once it saw it PENDING; now it holds it while it
still completes (the hold takes then, measured as the Operator on both versions). A requeue that Slurm
followed by a start while themisd was not looking (a blocked daemon) is adopted with a fresh lease.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from themis_slurm.daemon.config import Config
from themis_slurm.daemon.reconcile import RESTART_SLACK_S, reconcile
from themis_slurm.slurm.actions import ActionRefused, check_still_pending
from themis_slurm.slurm.model import ManagedJob
from themis_slurm.slurm.parse import job_from_json
from themis_slurm.slurm.snapshot import requeued_while_completing
from themis_slurm.state.rows import JobRow

NOW = 1_796_405_400.0


def _json(state: object, submit: int, start: int, restarts: int) -> dict:
    """The fields of a squeue --json record that matter here (22.05's shape; 25.11 lists states)."""
    return {
        "job_id": 18,
        "job_state": state,
        "state_reason": "None",
        "priority": 1,
        "nodes": "node2",
        "node_count": 1,
        "user_name": "themis-alice",
        "partition": "gpu",
        "submit_time": submit,
        "start_time": start,
        "end_time": 0,
        "restart_cnt": restarts,
        "tres_per_node": "gres:gpu:1",
    }


def test_a_requeue_is_seen_while_the_job_still_completes_on_both_versions() -> None:
    # 25.11, right after `scontrol requeue` by the owner: PENDING next to COMPLETING, SubmitTime not moved yet
    now = 1796405718.9
    assert requeued_while_completing(
        job_from_json(_json(["PENDING", "COMPLETING"], 1796405716, 1796405718, 1)), now
    )
    # 22.05 (measured: started at ...363, requeued at ...366.x, read at ...367.4): COMPLETING alone, Restarts 1,
    # and the StartTime of a pending job (its expected start: now), where a completing run shows its past start
    now = 1796410367.4
    assert requeued_while_completing(job_from_json(_json("COMPLETING", 1796410363, 1796410367, 1)), now)
    assert not requeued_while_completing(job_from_json(_json("COMPLETING", 1796410363, 1796410365, 1)), now)
    assert not requeued_while_completing(job_from_json(_json("COMPLETING", 1796410363, 1796410367, 0)), now)
    assert not requeued_while_completing(
        job_from_json(_json("COMPLETING", 1796410363, 1796410367, 1))
    )  # no clock
    assert not requeued_while_completing(
        job_from_json(_json(["RUNNING", "COMPLETING"], 1796405300, 1796405356, 0)), now
    )
    assert not requeued_while_completing(job_from_json(_json("RUNNING", 1796410363, 1796410367, 1)), now)


def _mj(state: str, **kw: object) -> ManagedJob:
    base = dict(
        job_id="18",
        slurm_id=18,
        app_key="themis-alice/rq",
        user="themis-alice",
        state=state,
        held=False,
        gpus=1,
        gpus_per_node=None,
        nodes=None,
        node_gpus={"node2": 1},
        gpu_ids=frozenset({4}),
        est_s=None,
        time_limit_s=None,
        profile=None,
        progress=None,
        progress_error=None,
        requeue_ok=True,
        restart_cnt=1,
        submit_time=NOW - 100,
        start_time=NOW - 100,
        required_nodes=("node2",),
        priority=1,
    )
    base.update(kw)
    return ManagedJob(**base)  # type: ignore[arg-type]


def _running_row() -> JobRow:
    return JobRow(
        "18",
        18,
        "themis-alice/rq",
        "running",
        1,
        600.0,
        NOW - 500,
        lease_start=NOW - 100,
        lease_expiry=NOW + 500,
        accounted_until=NOW - 5,
    )


def test_the_owners_requeue_is_held_at_once_while_it_completes() -> None:
    row = _running_row()
    [fix] = reconcile(NOW, {"18": _mj("COMPLETING", requeued=True)}, {"18": row}, Config())
    assert (fix.kind, fix.action, fix.before.intent) == ("requeued-outside", "hold", "waiting")
    assert "held again at once" in fix.reason
    # held already (a requeuehold): recorded as waiting, nothing sent
    [fix] = reconcile(NOW, {"18": _mj("COMPLETING", requeued=True, held=True)}, {"18": row}, Config())
    assert fix.action is None and fix.before.intent == "waiting"
    # a job that completes normally is left to finish; a job Themis is requeueing is not "outside"
    assert reconcile(NOW, {"18": _mj("COMPLETING")}, {"18": row}, Config()) == []
    warned = replace(row, intent="requeueing", requeue_time=NOW - 1)
    assert reconcile(NOW, {"18": _mj("COMPLETING", requeued=True)}, {"18": warned}, Config()) == []
    # observe mode acts on nothing
    observe = replace(Config(), mode="observe")
    assert all(
        f.action is None
        for f in reconcile(NOW, {"18": _mj("COMPLETING", requeued=True)}, {"18": row}, observe)
    )


def test_the_hold_action_takes_a_requeued_completing_job_only() -> None:
    check_still_pending(_mj("PENDING"), "PENDING")
    check_still_pending(_mj("COMPLETING", requeued=True), "COMPLETING")
    with pytest.raises(ActionRefused, match="COMPLETING in Slurm now, not PENDING"):
        check_still_pending(_mj("COMPLETING"), "COMPLETING")
    with pytest.raises(ActionRefused, match="RUNNING in Slurm now"):
        check_still_pending(_mj("COMPLETING", requeued=True), "RUNNING")


def test_a_run_that_began_while_themisd_was_not_looking_gets_a_fresh_lease() -> None:
    row = _running_row()  # last seen running at NOW - 5
    restarted = _mj("RUNNING", start_time=NOW - 5 + RESTART_SLACK_S + 20)
    [fix] = reconcile(NOW + 60, {"18": restarted}, {"18": row}, Config())
    assert fix.kind == "restarted-outside" and fix.action is None and fix.before.adopted == 1
    assert fix.before.lease_start == restarted.start_time and fix.before.intent == "running"
    # the same run as last seen (its StartTime before the last look, or within the slack): nothing to do
    assert reconcile(NOW, {"18": _mj("RUNNING", start_time=NOW - 100)}, {"18": row}, Config()) == []
    assert (
        reconcile(NOW, {"18": _mj("RUNNING", start_time=NOW - 5 + RESTART_SLACK_S)}, {"18": row}, Config())
        == []
    )
    assert (
        reconcile(
            NOW, {"18": _mj("RUNNING", start_time=NOW)}, {"18": replace(row, accounted_until=None)}, Config()
        )
        == []
    )
