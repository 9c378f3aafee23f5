"""Would Slurm start a held job if released? From the job's own record (squeue --json / scontrol)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from themis_slurm.slurm.eligibility import blocked_reason, ineligible, pending_dependencies
from themis_slurm.slurm.model import ManagedJob
from themis_slurm.slurm.options import has_user_hold
from themis_slurm.slurm.parse import job_from_json
from themis_slurm.slurm.records import SlurmJob

NOW = 1_800_000_000


def slurm_job(**kw: object) -> SlurmJob:
    base = job_from_json({"job_id": 7, "job_state": "PENDING", "state_reason": "JobHeldUser", "priority": 0,
                          "partition": "gpu", "tres_per_node": "gres:gpu:1", "user_name": "alice"})
    return replace(base, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("dep", "expected"), [
    ("", []),
    ("(null)", []),
    ("afterok:50(unfulfilled)", [("afterok:50", "unfulfilled")]),
    ("afterany:55(unfulfilled),afterok:56(failed)", [("afterany:55", "unfulfilled"), ("afterok:56", "failed")]),
    ("afterok:5(satisfied)?afterok:6(unfulfilled)", [("afterok:6", "unfulfilled")]),
    ("singleton", [("singleton", "unfulfilled")]),
])
def test_pending_dependencies(dep: str, expected: list[tuple[str, str]]) -> None:
    assert pending_dependencies(dep) == expected


def test_reasons_from_the_record() -> None:
    assert blocked_reason(slurm_job(), NOW) is None
    assert "BeginTime" in (blocked_reason(slurm_job(eligible_time=NOW + 600), NOW) or "")
    assert blocked_reason(slurm_job(eligible_time=NOW - 1), NOW) is None
    # after a requeue BeginTime is Slurm's own (now + cred_expire); the start action resets it
    assert blocked_reason(slurm_job(eligible_time=NOW + 60, restart_cnt=1), NOW) is None
    assert blocked_reason(slurm_job(dependency="afterok:50(unfulfilled)"), NOW) == "Dependency: waits for afterok:50"
    assert "DependencyNeverSatisfied" in (blocked_reason(slurm_job(dependency="afterok:5(failed)"), NOW) or "")
    assert "held by its owner" in (blocked_reason(slurm_job(comment="themis:progress=0.1,hold=user"), NOW) or "")
    assert blocked_reason(slurm_job(state="RUNNING", dependency="afterok:1(unfulfilled)"), NOW) is None


@pytest.mark.parametrize(("comment", "held"), [
    ("themis:hold=user", True), ("THEMIS: app=x , HOLD = User ;note", True), ("themis:app=x;hold=user", False),
    ("hold=user", False), ("themis:hold=admin", False), ("", False),
])
def test_user_hold_option(comment: str, held: bool) -> None:
    assert has_user_hold(comment) is held


def test_squeue_fields_are_read() -> None:
    j = job_from_json({"job_id": 9, "job_state": "PENDING", "eligible_time": NOW + 5, "dependency": "afterok:1",
                       "array_job_id": 9, "array_max_tasks": 2, "array_task_string": "0-3%2"})
    assert (j.eligible_time, j.dependency, j.array_max_tasks) == (NOW + 5, "afterok:1", 2)
    new = job_from_json({"job_id": 9, "job_state": ["PENDING"], "eligible_time": {"set": True, "number": NOW},
                         "array_max_tasks": {"set": True, "number": 0}})
    assert new.eligible_time == NOW and new.array_max_tasks is None


def task(i: int, state: str = "PENDING", blocked: str | None = None) -> ManagedJob:
    return ManagedJob(job_id=f"40_{i}", slurm_id=40 + (i if state != "PENDING" else 0), app_key="a/arr", user="a",
                      state=state, held=state == "PENDING", gpus=1, gpus_per_node=None, nodes=None, node_gpus={},
                      gpu_ids=frozenset(), est_s=None, time_limit_s=None, profile=None, progress=None,
                      progress_error=None, requeue_ok=True, restart_cnt=0, submit_time=0.0, start_time=None,
                      required_nodes=(), priority=0, array_job_id=40, array_task_id=i, array_max_tasks=2,
                      blocked=blocked)


def test_throttle_counts_running_and_granted_tasks() -> None:
    jobs = [task(0, "RUNNING"), task(1), task(2), task(3)]
    assert set(ineligible(jobs)) == {"40_2", "40_3"}
    assert set(ineligible(jobs, busy={"40_1"})) == {"40_2", "40_3"}
    assert set(ineligible(jobs, busy={"40_3"})) == {"40_1", "40_2"}
    assert set(ineligible([task(0, "RUNNING"), task(1, "RUNNING"), task(2)])) == {"40_2"}
    blocked = ineligible([task(1, blocked="Dependency: waits for x"), task(2), task(3)])
    assert blocked == {"40_1": "Dependency: waits for x"}
