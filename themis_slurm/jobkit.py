"""Helpers for training jobs that run under Themis: its lease warning, the restart count, progress reports.

Themis grants GPUs as leases. When a lease is not renewed, themisd sends SIGUSR1 to the job's batch shell
(``scancel --batch --signal=USR1``), waits ``scheduler.grace_s`` seconds, then requeues the job held
(``scontrol requeuehold``); the job starts again later, from the top of its batch script, with the same
JobId and ``SLURM_RESTART_COUNT`` one higher (docs/user-guide.md, "When a lease expires"). A training job
that survives this needs four things, which this module gives it:

* `LeaseWarning`: a SIGUSR1 handler that only sets a flag. The training loop looks at the flag between
  steps, so the checkpoint it then writes is a consistent state (weights, optimizer, step), never one
  taken in the middle of an optimizer step, which is where a handler that saved by itself could land.
* `restart_count` / `job_id`: which run this is, and the id that addresses this job alone (an array task
  as ``ARRAY_TASK``: the bare id of an array's last task would address every task of the array).
* `ProgressReporter`: ``themis:progress=F`` in the job's own Comment (``scontrol update``, which a job's
  owner may run), the report themisd reads at every poll to refine the job's remaining work. Rate-limited,
  because every report is an RPC to slurmctld; best effort, because a failed report must not stop training.
* `run_until_requeued` (``python -m themis_slurm.jobkit run -- CMD ...``): a launcher for the batch script
  (``exec`` it, so that it *is* the batch shell that Themis signals). It forwards the warning once to CMD
  (e.g. ``srun torchrun ...``; srun forwards SIGUSR1 to its tasks) and, once warned, does not end the job
  when CMD exits: a batch script that exits ends the job COMPLETED, and Themis would take the remaining
  work as done. It waits for the requeue instead.

Standard library only, and nothing else of themis_slurm: a training environment can import it from an
installed themis-slurm (``pip install --no-deps themis-slurm`` is enough) or from a copy of this file.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

#: The signal themisd sends when a lease ends (slurm/actions.py ``warn``).
WARNING_SIGNAL = signal.SIGUSR1
#: Exit status of the launcher when it was warned but no requeue came (EX_TEMPFAIL of sysexits.h).
EXIT_NOT_REQUEUED = 75
SCONTROL_TIMEOUT_S = 30.0

Runner = Callable[..., Any]  # subprocess.run's shape, replaceable in tests


def _log(message: str) -> None:
    print(f"themis jobkit: {message}", file=sys.stderr, flush=True)


def parse_signal(name: str | int | signal.Signals) -> signal.Signals:
    """``"USR1"``, ``"SIGUSR1"``, ``10`` or ``signal.SIGUSR1`` -> ``signal.SIGUSR1``; ValueError naming the
    value otherwise."""
    if isinstance(name, signal.Signals):
        return name
    text = str(name).strip().upper()
    try:
        return (
            signal.Signals(int(text))
            if text.isdigit()
            else signal.Signals[text if text.startswith("SIG") else "SIG" + text]
        )
    except (KeyError, ValueError):
        raise ValueError(
            f"signal {name!r}: expected a signal name such as USR1 or SIGUSR1, or its number"
        ) from None


# ----------------------------------------------------------------------------------------------- the warning
class LeaseWarning:
    """Becomes `warned` when the lease warning (SIGUSR1) arrives; the training loop checks it between steps.

    The handler only records the time of the first signal: Themis may send the warning more than once (it
    re-sends one that may not have gone out, at least once by design), and a handler that did real work could
    run while the loop is half-way through an optimizer step.
    """

    def __init__(
        self, signum: signal.Signals = WARNING_SIGNAL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.signum = signum
        self._clock = clock
        self._at: float | None = None
        self._count = 0
        self._previous: Any = None
        self._installed = False

    @classmethod
    def install(cls, signum: str | int | signal.Signals = WARNING_SIGNAL) -> LeaseWarning:
        """A LeaseWarning whose handler is installed for `signum` (main thread only, as Python requires); the
        handler it replaced stays available as `previous`."""
        warning = cls(parse_signal(signum))
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError(
                "LeaseWarning.install: Python installs signal handlers only from the main "
                "thread: call it before starting threads, in the training process's main thread"
            )
        warning._previous = signal.signal(warning.signum, warning.handle)
        warning._installed = True
        return warning

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """The signal handler (also callable directly, e.g. to chain it from another handler)."""
        self._count += 1
        if self._at is None:
            self._at = self._clock()

    def uninstall(self) -> None:
        """Put back the handler that was there before `install`."""
        if self._installed:
            signal.signal(self.signum, self._previous if self._previous is not None else signal.SIG_DFL)
            self._installed = False

    @property
    def previous(self) -> Any:
        """The handler `install` replaced (a callable, ``signal.SIG_DFL`` or ``signal.SIG_IGN``), e.g. a
        framework's own checkpoint-and-requeue handler, to be called at a step boundary instead of wherever
        the signal lands (docs/examples/lightning)."""
        return self._previous

    @property
    def warned(self) -> bool:
        """True once the warning arrived: checkpoint, then stop (the requeue ends this run)."""
        return self._at is not None

    @property
    def received(self) -> int:
        """How many warnings arrived (Themis may repeat one)."""
        return self._count

    def seconds_since(self) -> float | None:
        """Seconds since the first warning, None before it (the grace period runs from it)."""
        return None if self._at is None else self._clock() - self._at


# ------------------------------------------------------------------------------------------- the Slurm job
def restart_count(env: Mapping[str, str] | None = None) -> int:
    """How many times Slurm restarted this job (``SLURM_RESTART_COUNT``; 0 for the first run or outside
    Slurm). A value that is not a whole number >= 0 is an error naming the variable and the value."""
    env = os.environ if env is None else env
    raw = env.get("SLURM_RESTART_COUNT", "").strip()
    if not raw:
        return 0
    if not raw.isdigit():
        raise ValueError(f"SLURM_RESTART_COUNT={raw!r}: expected a whole number >= 0")
    return int(raw)


def job_id(env: Mapping[str, str] | None = None) -> str | None:
    """The id that addresses this job alone: ``ARRAY_TASK`` in an array task, else ``SLURM_JOB_ID``; None
    outside a Slurm job."""
    env = os.environ if env is None else env
    array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return env.get("SLURM_JOB_ID") or None


def progress_comment(fraction: float) -> str:
    """The Comment themisd parses (``themis:progress=F``), as ``themis progress`` writes it."""
    return f"themis:progress={round(fraction, 4):g}"


# ---------------------------------------------------------------------------------------- progress reports
@dataclass
class ProgressReporter:
    """Reports ``done / total`` of the job's work to Themis, at most every `min_interval_s` seconds.

    Only forward: themisd ignores a report lower than the last it accepted, so a lower one (a run that
    resumed from a checkpoint older than its last report) is not sent. Outside a Slurm job it does nothing.
    A failing ``scontrol`` is logged once and otherwise ignored: training goes on.
    """

    total: float
    min_interval_s: float = 60.0
    job: str | None = None  # default: `job_id()` of the environment
    clock: Callable[[], float] = time.monotonic
    run: Runner = subprocess.run
    sent: float | None = None  # the last fraction sent
    _sent_at: float | None = field(default=None, repr=False)
    _failed: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.total, int | float) and math.isfinite(self.total) and self.total > 0):
            raise ValueError(
                f"ProgressReporter total={self.total!r}: expected a number above 0 (the job's whole work)"
            )
        if not (math.isfinite(self.min_interval_s) and self.min_interval_s >= 0):
            raise ValueError(
                f"ProgressReporter min_interval_s={self.min_interval_s!r}: expected a number >= 0"
            )
        if self.job is None:
            self.job = job_id()
        if self.job is not None and not re.fullmatch(r"\d+(_\d+)?", self.job):
            raise ValueError(f"ProgressReporter job={self.job!r}: expected a Slurm job id (123 or 123_4)")

    def report(self, done: float, force: bool = False) -> bool:
        """Report that `done` of `total` is done; True when a report was sent. `force` ignores the interval
        (e.g. right after a checkpoint, or at the end), never the only-forward rule."""
        if self.job is None or not math.isfinite(done):
            return False
        fraction = min(1.0, max(0.0, done / self.total))
        if self.sent is not None and round(fraction, 4) <= round(self.sent, 4):
            return False
        now = self.clock()
        if not force and self._sent_at is not None and now - self._sent_at < self.min_interval_s:
            return False
        argv = ["scontrol", "update", f"JobId={self.job}", f"Comment={progress_comment(fraction)}"]
        try:
            res = self.run(
                argv,
                capture_output=True,
                text=True,
                timeout=SCONTROL_TIMEOUT_S,
                check=False,
                stdin=subprocess.DEVNULL,
            )
            ok, why = (
                res.returncode == 0,
                (res.stderr or res.stdout or "").strip() or f"exit {res.returncode}",
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            ok, why = False, str(exc)
        self._sent_at = now  # a failure waits the interval too: no RPC storm against a slurmctld in trouble
        if not ok:
            if not self._failed:
                _log(f"progress report failed ({' '.join(argv)}): {why}; training goes on")
                self._failed = True
            return False
        self.sent = fraction
        return True


# ---------------------------------------------------------------------------------------------- the launcher
@dataclass
class Launch:
    """What `run_until_requeued` did: the command's exit status, whether the warning came, what to exit with."""

    returncode: int | None
    warned: bool
    exit_status: int


def _status(returncode: int) -> int:
    """A Popen returncode as a shell reports it (-N: killed by signal N -> 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def run_until_requeued(
    argv: Sequence[str],
    signum: signal.Signals = WARNING_SIGNAL,
    forward: signal.Signals | None = WARNING_SIGNAL,
    requeue_after_s: float = 600.0,
    env: Mapping[str, str] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    runner: Runner = subprocess.run,
    popen: Callable[..., Any] = subprocess.Popen,
) -> Launch:
    """Run `argv`; on `signum` forward `forward` to it once (None: do not forward); when it exits, end with
    its status, unless the warning came: then wait for the requeue to end this run.

    Themis requeues a warned job ``grace_s`` after the warning, which ends this process. Should no requeue
    come within `requeue_after_s` of the command's exit (themisd gone, or a signal sent by hand), the job
    requeues itself (``scontrol requeue``: a job's owner may; a running themisd holds it again), so that a
    warned job is never left idle until its time limit; failing that it exits `EXIT_NOT_REQUEUED`.
    """
    if not argv:
        raise ValueError("run_until_requeued: no command given (expected e.g. srun torchrun train.py)")
    if not (math.isfinite(requeue_after_s) and requeue_after_s >= 0):
        raise ValueError(f"requeue_after_s={requeue_after_s!r}: expected a number of seconds >= 0")
    warning = LeaseWarning.install(signum)
    child: Any = None
    forwarded = False

    def on_warning(sig: int, frame: FrameType | None) -> None:
        nonlocal forwarded
        warning.handle(sig, frame)
        if forward is not None and child is not None and child.poll() is None and not forwarded:
            forwarded = True  # once: a second SIGUSR1 would interrupt torchrun's own graceful shutdown
            with contextlib.suppress(OSError):  # it exited meanwhile
                child.send_signal(forward)

    signal.signal(warning.signum, on_warning)
    try:
        if not warning.warned:
            child = popen(list(argv), env=None if env is None else dict(env))
            if warning.warned:  # the warning came while the command was starting: it never saw it
                on_warning(warning.signum, None)
            returncode = child.wait()
        else:
            returncode = None
        if not warning.warned:
            return Launch(returncode, False, _status(returncode))
        _log(
            f"lease warning ({warning.signum.name}) received; {argv[0]} exited "
            f"{'-' if returncode is None else _status(returncode)}: waiting for Themis's requeue"
        )
        sleep(requeue_after_s)
        jid = job_id(env)
        if jid is not None:
            _log(f"no requeue within {requeue_after_s:g} s: requeueing job {jid} myself")
            try:
                res = runner(
                    ["scontrol", "requeue", jid],
                    capture_output=True,
                    text=True,
                    timeout=SCONTROL_TIMEOUT_S,
                    check=False,
                    stdin=subprocess.DEVNULL,
                )
                failed = "" if res.returncode == 0 else (res.stderr or res.stdout or "").strip()
            except (OSError, subprocess.TimeoutExpired) as exc:
                failed = str(exc)
            if failed:
                _log(f"scontrol requeue {jid} failed: {failed}")
            else:
                sleep(SCONTROL_TIMEOUT_S)  # the requeue ends this process
        _log("no requeue came: exiting")
        return Launch(returncode, True, EXIT_NOT_REQUEUED)
    finally:
        warning.uninstall()


def main(args: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m themis_slurm.jobkit",
        description="Tools for batch scripts of jobs that run under Themis (docs/user-guide.md).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run",
        help="run a command; forward the lease warning to it; once warned, wait for "
        "the requeue instead of ending the job (exec this from the batch script)",
    )
    run.add_argument(
        "--signal", default="USR1", help="the warning signal to catch (default USR1, as Themis sends)"
    )
    run.add_argument(
        "--forward",
        default="USR1",
        help="the signal to send the command when warned (default USR1; 'none': do not)",
    )
    run.add_argument(
        "--requeue-after",
        type=float,
        default=600.0,
        metavar="S",
        help="requeue the job itself when no requeue came S seconds after the command exited (default 600)",
    )
    run.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ...")
    ns = parser.parse_args(args)
    argv: list[str] = []
    try:
        argv = ns.argv[1:] if ns.argv[:1] == ["--"] else ns.argv
        forward = None if ns.forward.strip().lower() == "none" else parse_signal(ns.forward)
        done = run_until_requeued(argv, parse_signal(ns.signal), forward, ns.requeue_after)
    except ValueError as exc:
        parser.error(str(exc))
    except FileNotFoundError as exc:
        _log(f"cannot run {argv[0]!r}: {exc.strerror}")
        return 127
    return done.exit_status


if __name__ == "__main__":
    sys.exit(main())
