"""Actions and the subprocess runner: command sequences, refusals, error reporting, retries."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest

from tests.unit.slurm.fake_slurm import FakeRunner
from themis_slurm.slurm.actions import REQUEUE_SETTLE_S, ActionRefused, Actions, requeue_settle_s
from themis_slurm.slurm.model import ManagedJob
from themis_slurm.slurm.runner import SlurmCommandError, StoppedAt, SubprocessRunner, command_name

JOB = ManagedJob(
    job_id="42", slurm_id=42, app_key="alice/job-42", user="alice", state="PENDING", held=True, gpus=4,
    gpus_per_node=2, nodes=2, node_gpus={}, gpu_ids=frozenset(), est_s=None, time_limit_s=None, profile=None,
    progress=None, progress_error=None, requeue_ok=True, restart_cnt=0, submit_time=0.0, start_time=None,
    required_nodes=(), priority=0,
)
OK = {("scontrol",): "", ("scancel",): "", ("squeue",): "PENDING\n"}


def actions(answers: dict | None = None) -> tuple[Actions, FakeRunner]:
    runner = FakeRunner(answers or OK)
    return Actions(runner, timeout_s=5.0), runner


def test_start_pins_then_releases() -> None:
    a, r = actions()
    a.start(JOB, {"node3": 2, "node4": 2})
    assert r.calls == [["scontrol", "update", "JobId=42", "ReqNodeList=node[3-4]", "NumNodes=2"],
                       ["scontrol", "release", "42"]]
    assert r.timeouts == [5.0, 5.0]


def test_start_of_requeued_job_sets_start_time_now() -> None:
    a, r = actions()
    a.start(replace(JOB, restart_cnt=1), {"node1": 2, "node2": 2})
    assert r.calls[1] == ["scontrol", "update", "JobId=42", "StartTime=now"]
    assert r.calls[2] == ["scontrol", "release", "42"]


def test_start_of_just_requeued_job_waits_past_the_requeue_second() -> None:
    # slurmd fails a launch stamped in the same second as the requeue's credential revoke.
    slept: list[float] = []
    runner = FakeRunner(OK)
    a = Actions(runner, timeout_s=5.0, clock=lambda: 1000.25, sleep=slept.append)
    a.start(replace(JOB, restart_cnt=1, submit_time=1000.0), {"node1": 2, "node2": 2})
    assert slept == [pytest.approx(REQUEUE_SETTLE_S - 0.25)]
    assert runner.calls[-1] == ["scontrol", "release", "42"]


@pytest.mark.parametrize(("restart_cnt", "submit_time", "now", "wait"), [
    (0, 1000.0, 1000.0, 0.0),  # never requeued: SubmitTime is the submission, nothing to wait for
    (1, 1000.0, 1000.0, REQUEUE_SETTLE_S),
    (1, 1000.0, 1000.0 + REQUEUE_SETTLE_S, 0.0),
    (2, 1000.0, 5000.0, 0.0),
    (1, 0.0, 1000.0, 0.0),  # unknown SubmitTime
])
def test_requeue_settle_time(restart_cnt: int, submit_time: float, now: float, wait: float) -> None:
    job = replace(JOB, restart_cnt=restart_cnt, submit_time=submit_time)
    assert requeue_settle_s(job, now) == pytest.approx(wait)


def test_array_task_is_addressed_by_its_user_visible_id() -> None:
    a, r = actions()
    task = replace(JOB, job_id="40_3", slurm_id=40, gpus=1, gpus_per_node=1, nodes=1)
    a.start(task, {"node1": 1})
    assert r.calls[0][2] == "JobId=40_3" and r.calls[1] == ["scontrol", "release", "40_3"]


@pytest.mark.parametrize(("placement", "match"), [
    ({}, "at least one node"),
    ({"node1": 2, "node2": 1}, "3 GPUs, the job asks for 4"),
    ({"node1": 4}, "1 nodes, the job fixed 2"),
    ({"node1": 1, "node2": 3}, "2 GPUs on each node"),
])
def test_bad_placements_are_refused_before_any_call(placement: dict[str, int], match: str) -> None:
    a, r = actions()
    with pytest.raises(ValueError, match=match):
        a.start(JOB, placement)
    assert r.calls == []


def test_per_job_gpus_may_spread_unevenly() -> None:
    a, r = actions()
    a.start(replace(JOB, gpus=3, gpus_per_node=None, nodes=None), {"node1": 2, "node2": 1})
    assert r.calls[0][3:] == ["ReqNodeList=node[1-2]", "NumNodes=2"]


RUNNING = replace(JOB, state="RUNNING", held=False)


def test_warn_signals_the_batch_shell() -> None:
    a, r = actions()
    a.warn(RUNNING)
    assert r.calls == [["scancel", "--batch", "--signal=USR1", "--state=RUNNING", "42"]]


def test_warn_refuses_a_job_that_is_not_running() -> None:
    a, r = actions()
    with pytest.raises(ActionRefused, match="PENDING, not RUNNING"):
        a.warn(JOB)
    assert r.calls == []


def test_requeue_holds_and_clears_the_pin() -> None:
    a, r = actions({**OK, ("squeue",): "RUNNING\n"})
    a.requeue(JOB)
    assert r.calls == [["squeue", "-h", "-j", "42", "-o", "%T"], ["scontrol", "requeuehold", "42"],
                       ["scontrol", "update", "JobId=42", "ReqNodeList="]]


@pytest.mark.parametrize("state", ["COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "COMPLETING", ""])
def test_requeue_is_never_sent_to_a_job_that_has_ended(state: str) -> None:
    # Slurm requeues a finished batch job too (`scontrol requeuehold` of a COMPLETED job makes it PENDING,
    # held): a job that ended between the cycle's read and its requeue would run a second time
    a, r = actions({**OK, ("squeue",): f"{state}\n"})
    with pytest.raises(ActionRefused, match="not requeued, so it does not run again"):
        a.requeue(JOB)
    assert [c[0] for c in r.calls] == ["squeue"]


def test_requeue_of_a_job_leaving_its_nodes_after_a_requeue_is_sent() -> None:
    # COMPLETING after a requeue (`ManagedJob.requeued`): a requeue that has not shown yet, sent again
    a, r = actions({**OK, ("squeue",): "COMPLETING\n"})
    a.requeue(replace(JOB, requeued=True))
    assert [c[1] for c in r.calls] == ["-h", "requeuehold", "update"]


def test_requeue_retry_on_already_pending_job_holds_it() -> None:
    err = SlurmCommandError(["scontrol", "requeuehold", "42"], 1, "Job is pending execution for job 42")
    a, r = actions({("scontrol", "requeuehold"): err, **OK})
    a.requeue(JOB)
    assert [c[1] for c in r.calls] == ["-h", "requeuehold", "hold", "update"]


def test_requeue_other_errors_propagate_and_nothing_else_runs() -> None:
    err = SlurmCommandError(["scontrol", "requeuehold", "42"], 1, "Invalid job id specified")
    a, r = actions({("scontrol", "requeuehold"): err, **OK, ("squeue",): "RUNNING\n"})
    with pytest.raises(SlurmCommandError, match="scontrol requeuehold 42 failed .*Invalid job id"):
        a.requeue(JOB)
    assert len(r.calls) == 2


@pytest.mark.parametrize("action", ["warn", "requeue"])
def test_never_preempt_a_job_that_cannot_be_requeued(action: str) -> None:
    a, r = actions()
    with pytest.raises(ActionRefused, match="cannot be requeued"):
        getattr(a, action)(replace(RUNNING, requeue_ok=False))
    assert r.calls == []


def test_hold_first_then_clear_pin() -> None:
    a, r = actions()
    a.hold(JOB)
    assert r.calls == [["squeue", "-h", "-j", "42", "-o", "%T"], ["scontrol", "hold", "42"],
                       ["scontrol", "update", "JobId=42", "ReqNodeList="]]


@pytest.mark.parametrize("state", ["RUNNING", "COMPLETING", ""])
def test_hold_is_never_sent_to_a_job_slurm_no_longer_shows_pending(state: str) -> None:
    # issue 38 item 2: `scontrol hold` on a running job succeeds in Slurm (R with JobHeldAdmin)
    a, r = actions({**OK, ("squeue",): f"{state}\n"})
    with pytest.raises(ActionRefused, match="not PENDING: not held"):
        a.hold(JOB)
    assert [c[0] for c in r.calls] == ["squeue"]


TASK = replace(RUNNING, job_id="40_3", slurm_id=57, array_job_id=40, array_task_id=3)


def test_warn_of_an_array_task_stops_at_scancels_retry_and_counts_as_sent() -> None:
    # issue 38 item 1: with tasks still pending, slurmctld delivers the signal to A_T, then answers "try
    # again later", and scancel re-sends it for ~95 s: stopped at its first retry, the warning is sent
    def retrying(args: list[str]) -> StoppedAt:
        return StoppedAt(args, "scancel: Job is in transitional state, retrying")

    a, r = actions({**OK, ("scancel",): retrying})
    a.warn(TASK)
    assert r.calls == [["scancel", "-v", "--batch", "--signal=USR1", "--state=RUNNING", "40_3"]]
    assert r.stops == ["transitional state, retrying"]


def test_warn_of_an_array_task_still_reports_real_failures() -> None:
    err = SlurmCommandError(["scancel"], 1, "scancel: error: Kill job error on job id 40_3: Access denied")
    a, _ = actions({**OK, ("scancel",): err})
    with pytest.raises(SlurmCommandError, match="Access denied"):
        a.warn(TASK)
    a, r = actions()
    a.warn(replace(TASK, job_id="40_9", slurm_id=40, array_task_id=9))  # the last task: no retry, returns
    assert r.calls[0][-1] == "40_9"


def test_runner_stops_a_command_at_a_line_of_its_stderr(tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "retrying"
    script.write_text("#!/bin/sh\necho 'x: Job is in transitional state, retrying' >&2\nsleep 30\n")
    script.chmod(0o755)
    runner = SubprocessRunner(timeout_s=20)
    import time

    t0 = time.monotonic()
    with pytest.raises(StoppedAt, match="transitional state, retrying"):
        runner.run([str(script)], stop_at="transitional state, retrying")
    assert time.monotonic() - t0 < 5
    assert runner.run(["sh", "-c", "echo out; echo err >&2"], stop_at="nothing like it") == "out\n"
    with pytest.raises(SlurmCommandError, match="exit 3"):
        runner.run(["sh", "-c", "echo bad >&2; exit 3"], stop_at="x y z")
    with pytest.raises(SlurmCommandError, match="no answer within 1 s"):
        runner.run(["sleep", "5"], timeout=1, stop_at="x y z")


def test_release_unpinned() -> None:
    a, r = actions()
    a.release_unpinned(JOB)
    assert r.calls == [["scontrol", "update", "JobId=42", "ReqNodeList="], ["scontrol", "release", "42"]]


def test_start_failure_reports_command_and_message() -> None:
    err = SlurmCommandError(["scontrol", "update", "JobId=42"], 1,
                            "scontrol: error: Requested node configuration is not available")
    a, r = actions({("scontrol", "update"): err, **OK})
    with pytest.raises(SlurmCommandError, match="scontrol update JobId=42 failed \\(exit 1\\): .*not available"):
        a.start(JOB, {"node1": 2, "node2": 2})
    assert len(r.calls) == 1  # never released unpinned


# ----------------------------------------------------------------------------------- SubprocessRunner
PY = sys.executable


def test_runner_returns_stdout_and_counts_per_command() -> None:
    r = SubprocessRunner(env={"PATH": "/usr/bin:/bin"}, slurm_conf="/x/slurm.conf")
    out = r.run([PY, "-c", "import os; print(os.environ['SLURM_CONF'])"])
    assert out.strip() == "/x/slurm.conf" and r.slurm_conf == "/x/slurm.conf"
    assert r.stats.total_calls == 1 and r.stats.seconds[command_name([PY])] > 0


def test_runner_error_names_command_and_message() -> None:
    r = SubprocessRunner()
    with pytest.raises(SlurmCommandError) as exc:
        r.run([PY, "-c", "import sys; sys.stderr.write('slurm says no'); sys.exit(3)"])
    assert exc.value.returncode == 3 and exc.value.stderr == "slurm says no"
    assert "failed (exit 3): slurm says no" in str(exc.value) and PY in str(exc.value)
    assert r.stats.errors


def test_runner_timeout() -> None:
    r = SubprocessRunner(timeout_s=0.2)
    with pytest.raises(SlurmCommandError, match="timed out: no answer within 0.2 s"):
        r.run([PY, "-c", "import time; time.sleep(5)"])


def test_runner_missing_binary() -> None:
    with pytest.raises(SlurmCommandError, match="exit 127"):
        SubprocessRunner().run(["/nonexistent/squeue", "--json"])


def test_runner_refuses_shell_strings() -> None:
    with pytest.raises(TypeError, match="not a shell string"):
        SubprocessRunner().run("squeue --json")  # type: ignore[arg-type]


def test_user_text_is_one_argument() -> None:
    """A Comment with shell syntax reaches the command as one literal argument."""
    r = SubprocessRunner()
    nasty = "themis:app=x; rm -rf / $(reboot) `id`"
    out = r.run([PY, "-c", "import sys; print(repr(sys.argv[1:]))", nasty])
    assert out.strip() == repr([nasty])


def test_command_names_for_metrics() -> None:
    assert command_name(["/usr/bin/scontrol", "update", "JobId=1"]) == "scontrol update"
    assert command_name(["scancel", "--batch", "1"]) == "scancel"
    assert command_name(["scontrol", "-o", "show", "node"]) == "scontrol show"


def test_the_owners_node_list_is_kept_around_themis_pins() -> None:
    # issue 37: `sbatch -w node4` ran on node1: the pin replaced the owner's list, and clearing it lost it
    a, r = actions()
    job = replace(JOB, gpus=1, gpus_per_node=None, nodes=None, user_nodes=("node3", "node4"),
                  allowed_nodes=frozenset({"node3", "node4"}), limits="its node list (-w node[3-4])")
    with pytest.raises(ValueError, match="outside the nodes Slurm could start it on .its node list"):
        a.start(job, {"node1": 1})
    assert r.calls == []
    a.start(job, {"node4": 1})
    a.hold(job)
    assert r.calls[-1] == ["scontrol", "update", "JobId=42", "ReqNodeList=node[3-4]"]  # the owner's list back
