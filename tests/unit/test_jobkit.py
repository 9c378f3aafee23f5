"""themis_slurm.jobkit: the lease warning, the restart count, progress reports and the batch-script launcher.

The signal tests send real signals to this process (and to real child processes); the waits in them are
bounded only so that a broken build fails instead of hanging.
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from themis_slurm import jobkit
from themis_slurm.cli.progress import progress_comment as cli_progress_comment
from themis_slurm.slurm.options import parse_progress

REPO = Path(__file__).resolve().parents[2]


def wait_until(check: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(0.01)


@pytest.fixture
def usr1_restored() -> Any:
    before = signal.getsignal(signal.SIGUSR1)
    yield
    signal.signal(signal.SIGUSR1, before)


# ----------------------------------------------------------------------------------------------- the module
def test_the_module_needs_the_standard_library_only() -> None:
    """A training environment may hold a copy of the file alone: no third-party or themis_slurm import."""
    tree = ast.parse((REPO / "themis_slurm" / "jobkit.py").read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported - set(sys.stdlib_module_names)


# ---------------------------------------------------------------------------------------------- the warning
def test_the_warning_sets_a_flag_and_nothing_else(usr1_restored: None) -> None:
    warning = jobkit.LeaseWarning.install()
    assert not warning.warned and warning.received == 0 and warning.seconds_since() is None
    os.kill(os.getpid(), signal.SIGUSR1)
    wait_until(lambda: warning.warned, "the handler ran")
    os.kill(os.getpid(), signal.SIGUSR1)  # Themis may send it again: still one warning, counted twice
    wait_until(lambda: warning.received == 2, "the second signal")
    since = warning.seconds_since()
    assert warning.warned and since is not None and since >= 0


def test_uninstall_puts_the_previous_handler_back(usr1_restored: None) -> None:
    seen: list[int] = []
    signal.signal(signal.SIGUSR1, lambda s, f: seen.append(s))
    warning = jobkit.LeaseWarning.install("USR1")
    warning.uninstall()
    os.kill(os.getpid(), signal.SIGUSR1)
    wait_until(lambda: seen, "the previous handler ran")
    assert not warning.warned and seen == [signal.SIGUSR1]


def test_install_outside_the_main_thread_says_why() -> None:
    errors: list[BaseException] = []

    def target() -> None:
        try:
            jobkit.LeaseWarning.install()
        except RuntimeError as e:
            errors.append(e)

    t = threading.Thread(target=target)
    t.start()
    t.join()
    assert errors and "main thread" in str(errors[0])


@pytest.mark.parametrize("name", ["USR1", "usr1", "SIGUSR1", str(int(signal.SIGUSR1)), signal.SIGUSR1])
def test_signal_names(name: Any) -> None:
    assert jobkit.parse_signal(name) is signal.SIGUSR1


@pytest.mark.parametrize("name", ["FOO", "", "999"])
def test_a_bad_signal_name_is_named(name: str) -> None:
    with pytest.raises(ValueError, match=f"signal {name!r}: expected a signal name"):
        jobkit.parse_signal(name)


# -------------------------------------------------------------------------------------------- the Slurm job
def test_restart_count() -> None:
    assert jobkit.restart_count({}) == 0
    assert jobkit.restart_count({"SLURM_RESTART_COUNT": "0"}) == 0
    assert jobkit.restart_count({"SLURM_RESTART_COUNT": " 3 "}) == 3


@pytest.mark.parametrize("value", ["x", "-1", "1.5"])
def test_a_bad_restart_count_names_the_variable_and_value(value: str) -> None:
    with pytest.raises(ValueError, match=f"SLURM_RESTART_COUNT='{value}': expected a whole number >= 0"):
        jobkit.restart_count({"SLURM_RESTART_COUNT": value})


def test_job_id_addresses_an_array_task_alone() -> None:
    assert jobkit.job_id({}) is None
    assert jobkit.job_id({"SLURM_JOB_ID": "42"}) == "42"
    assert (
        jobkit.job_id({"SLURM_JOB_ID": "45", "SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "5"})
        == "40_5"
    )


@pytest.mark.parametrize("fraction", [0.0, 0.00004, 0.42, 1 / 3, 0.99999, 1.0])
def test_the_progress_comment_is_what_themisd_reads(fraction: float) -> None:
    comment = jobkit.progress_comment(fraction)
    assert cli_progress_comment is jobkit.progress_comment  # `themis progress` writes it the same way
    value, error = parse_progress(comment)
    assert error is None and value == pytest.approx(fraction, abs=5e-5)


# ---------------------------------------------------------------------------------------- progress reports
class FakeScontrol:
    def __init__(self, returncode: int = 0, raises: Exception | None = None) -> None:
        self.calls: list[list[str]] = []
        self.returncode, self.raises = returncode, raises

    def __call__(self, argv: list[str], **kwargs: Any) -> Any:
        self.calls.append(argv)
        if self.raises is not None:
            raise self.raises
        return SimpleNamespace(
            returncode=self.returncode, stdout="", stderr="slurm_update error: Invalid job id"
        )


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_reports_are_rate_limited_and_only_forward() -> None:
    run, clock = FakeScontrol(), Clock()
    p = jobkit.ProgressReporter(total=200, min_interval_s=30, job="17", clock=clock, run=run)
    assert p.report(50)
    assert run.calls == [["scontrol", "update", "JobId=17", "Comment=themis:progress=0.25"]]
    clock.t += 10
    assert not p.report(60)  # within the interval
    assert p.report(60, force=True)  # a checkpoint's report goes out at once
    clock.t += 60
    assert not p.report(40)  # backwards (a resumed run): themisd would ignore it
    assert not p.report(60)  # no news
    assert p.report(500)  # past the end: done
    assert [c[-1] for c in run.calls] == ["Comment=themis:progress=0.25", "Comment=themis:progress=0.3",
                                          "Comment=themis:progress=1"]  # fmt: skip


def test_reports_outside_a_slurm_job_do_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(var, raising=False)
    run = FakeScontrol()
    assert not jobkit.ProgressReporter(total=10, run=run).report(5)
    assert run.calls == []


def test_the_job_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "40")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "5")
    monkeypatch.setenv("SLURM_JOB_ID", "45")
    run = FakeScontrol()
    jobkit.ProgressReporter(total=10, run=run).report(5)
    assert run.calls == [["scontrol", "update", "JobId=40_5", "Comment=themis:progress=0.5"]]


@pytest.mark.parametrize("failure", [FakeScontrol(returncode=1), FakeScontrol(raises=FileNotFoundError("scontrol")),
                                     FakeScontrol(raises=subprocess.TimeoutExpired("scontrol", 30))])  # fmt: skip
def test_a_failed_report_is_logged_once_and_training_goes_on(failure: FakeScontrol,
                                                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    clock = Clock()
    p = jobkit.ProgressReporter(total=10, min_interval_s=5, job="17", clock=clock, run=failure)
    assert not p.report(1)
    assert not p.report(2)  # a failure waits the interval too: no RPC storm
    clock.t += 5
    assert not p.report(3)
    assert len(failure.calls) == 2 and p.sent is None
    assert capsys.readouterr().err.count("progress report failed") == 1


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"total": 0}, "total=0: expected a number above 0"),
    ({"total": float("nan")}, "total=nan: expected a number above 0"),
    ({"total": 10, "min_interval_s": -1}, "min_interval_s=-1: expected a number >= 0"),
    ({"total": 10, "job": "12; rm"}, "job='12; rm': expected a Slurm job id"),
])  # fmt: skip
def test_bad_reporter_settings_are_named(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        jobkit.ProgressReporter(**kwargs)


# ---------------------------------------------------------------------------------------------- the launcher
CHILD = """
import pathlib, signal, sys, time
folder = pathlib.Path(sys.argv[1])
got = []
signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
(folder / "ready").touch()
deadline = time.monotonic() + 60
while not (folder / "go").exists() and time.monotonic() < deadline:
    time.sleep(0.01)
(folder / "got").write_text(str(len(got)))
sys.exit(int(sys.argv[2]))
"""


class Recorder:
    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self.runs: list[list[str]] = []

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)

    def run(self, argv: list[str], **kwargs: Any) -> Any:
        self.runs.append(argv)
        return SimpleNamespace(returncode=0, stdout="", stderr="")


def launch_and_warn(
    tmp_path: Path, code: int, warnings: int, **kwargs: Any
) -> tuple[jobkit.Launch, Recorder]:
    """Run CHILD under the launcher in this process; send this process `warnings` SIGUSR1 once it is ready."""
    rec = Recorder()

    def warn() -> None:
        wait_until(lambda: (tmp_path / "ready").exists(), "the child started")
        for _ in range(warnings):
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.05)
        (tmp_path / "go").touch()

    t = threading.Thread(target=warn)
    t.start()
    try:
        done = jobkit.run_until_requeued([sys.executable, "-c", CHILD, str(tmp_path), str(code)], sleep=rec.sleep,
                                         runner=rec.run, **kwargs)  # fmt: skip
    finally:
        t.join()
    return done, rec


def test_without_a_warning_the_launcher_ends_as_its_command(tmp_path: Path, usr1_restored: None) -> None:
    done, rec = launch_and_warn(tmp_path, 3, warnings=0)
    assert done == jobkit.Launch(returncode=3, warned=False, exit_status=3)
    assert (tmp_path / "got").read_text() == "0" and rec.sleeps == [] and rec.runs == []


def test_a_warning_is_forwarded_once_and_the_job_waits_for_the_requeue(tmp_path: Path,
                                                                       usr1_restored: None) -> None:  # fmt: skip
    done, rec = launch_and_warn(
        tmp_path, 0, warnings=2, requeue_after_s=120, env={**os.environ, "SLURM_JOB_ID": "9"}
    )
    assert (tmp_path / "got").read_text() == "1"  # forwarded once: a second would break torchrun's shutdown
    assert done == jobkit.Launch(returncode=0, warned=True, exit_status=jobkit.EXIT_NOT_REQUEUED)
    # it waited for Themis's requeue, then requeued the job itself, then waited for that requeue
    assert rec.sleeps == [120, jobkit.SCONTROL_TIMEOUT_S]
    assert rec.runs == [["scontrol", "requeue", "9"]]
    assert signal.getsignal(signal.SIGUSR1) is not None  # the handler was put back (the fixture's check)


def test_forward_none_keeps_the_warning_from_the_command(tmp_path: Path, usr1_restored: None) -> None:
    done, _ = launch_and_warn(tmp_path, 0, warnings=1, forward=None, env={k: v for k, v in os.environ.items()
                                                                            if not k.startswith("SLURM_")})  # fmt: skip
    assert (tmp_path / "got").read_text() == "0"
    assert done.warned and done.exit_status == jobkit.EXIT_NOT_REQUEUED


def test_a_command_killed_by_a_signal_ends_as_a_shell_reports_it(usr1_restored: None) -> None:
    done = jobkit.run_until_requeued(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]
    )
    assert done == jobkit.Launch(returncode=-signal.SIGTERM, warned=False, exit_status=128 + signal.SIGTERM)


def test_the_command_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "themis_slurm.jobkit", *args], capture_output=True, text=True,
                              timeout=60, check=False, env=env, cwd=tmp_path)  # fmt: skip

    assert run("run", "--", sys.executable, "-c", "raise SystemExit(5)").returncode == 5
    assert run("run", sys.executable, "-c", "pass").returncode == 0
    res = run("run", "--")
    assert res.returncode == 2 and "no command given" in res.stderr
    res = run("run", "--signal", "FOO", "--", "true")
    assert res.returncode == 2 and "signal 'FOO'" in res.stderr
    res = run("run", "--requeue-after", "-1", "--", "true")
    assert res.returncode == 2 and "requeue_after_s=-1.0" in res.stderr
    res = run("run", "--", str(tmp_path / "missing"))
    assert res.returncode == 127 and "cannot run" in res.stderr


def test_a_failing_self_requeue_is_logged_and_the_launcher_exits(tmp_path: Path, usr1_restored: None,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    rec = Recorder()

    def no_scontrol(argv: list[str], **kwargs: Any) -> Any:
        rec.runs.append(argv)
        raise FileNotFoundError(2, "No such file or directory", "scontrol")

    done = jobkit.run_until_requeued([sys.executable, "-c", "import os, signal; os.kill(os.getppid(), signal.SIGUSR1)"],
                                     requeue_after_s=5, env={"SLURM_JOB_ID": "9", "PATH": os.environ["PATH"]},
                                     sleep=rec.sleep, runner=no_scontrol, forward=None)  # fmt: skip
    assert done == jobkit.Launch(returncode=0, warned=True, exit_status=jobkit.EXIT_NOT_REQUEUED)
    assert rec.runs == [["scontrol", "requeue", "9"]] and rec.sleeps == [
        5
    ]  # no wait for a requeue never sent
    assert "scontrol requeue 9 failed" in capsys.readouterr().err
