"""Running Slurm client commands: argument lists only, a timeout on every call, counted and timed.

Why a class of its own: every Slurm call the daemon makes goes through one object, so (1) no code path
can build a shell string from user-controlled fields such as Comment or job names, (2) a hung slurmctld
costs at most one timeout per call instead of freezing the scheduler, (3) the calls per cycle and their
latency are counted for metrics and for the "bounded RPCs per cycle" promise admins care about, and
(4) unit tests swap in a fake that answers from canned output.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

DEFAULT_TIMEOUT_S = 30.0


class SlurmCommandError(RuntimeError):
    """A Slurm command failed (non-zero exit, timeout, or missing binary).

    The message names the command and carries Slurm's own message, e.g.
    ``scontrol requeuehold 42 failed (exit 1): scontrol: error: Requested operation is presently disabled``.
    """

    def __init__(self, argv: Sequence[str], returncode: int | None, stderr: str) -> None:
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        how = "timed out" if returncode is None else f"failed (exit {returncode})"
        super().__init__(f"{' '.join(self.argv)} {how}: {self.stderr or '(no message)'}")


class StoppedAt(SlurmCommandError):
    """The command printed the line it was to be stopped at (``stop_at``) and was stopped there.

    For commands whose own retry loop would otherwise run on: scancel re-sends a signal for ~95 s when
    slurmctld answers "try again later", which it does for an array task after delivering it (actions.py).
    """

    def __init__(self, argv: Sequence[str], line: str) -> None:
        super().__init__(argv, None, line)
        self.line = line


@dataclass
class CallStats:
    """Calls and total wall time per command name (``squeue``, ``scontrol update``, ...)."""

    calls: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    def add(self, name: str, seconds: float, failed: bool) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        if failed:
            self.errors[name] = self.errors.get(name, 0) + 1


def command_name(argv: Sequence[str]) -> str:
    """Metric label: the binary plus the scontrol verb (``scontrol update``), never user data."""
    if not argv:
        return ""
    name = os.path.basename(argv[0])
    if name == "scontrol":
        verb = next((a for a in argv[1:] if not a.startswith("-")), "")
        return f"{name} {verb}".strip()
    return name


class Runner(Protocol):
    """What the snapshot reader and the actions need from a command runner."""

    stats: CallStats

    def run(self, argv: Sequence[str], timeout: float | None = None, stop_at: str | None = None) -> str:
        """Run ``argv``; return stdout; raise SlurmCommandError on any failure, StoppedAt when a line of
        its stderr contains ``stop_at`` (the command is then ended at once)."""
        ...


class SubprocessRunner:
    """Runs Slurm commands with `subprocess.run` (no shell), ``SLURM_CONF`` set when given."""

    def __init__(self, slurm_conf: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 env: Mapping[str, str] | None = None, bin_dir: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.env = dict(os.environ if env is None else env)
        if slurm_conf:
            self.env["SLURM_CONF"] = slurm_conf
        self.timeout_s = timeout_s
        self.bin_dir = bin_dir
        self.stats = CallStats()
        self._clock = clock

    @property
    def slurm_conf(self) -> str:
        """The slurm.conf the commands use (Slurm's compiled-in default when SLURM_CONF is unset)."""
        return self.env.get("SLURM_CONF") or "/etc/slurm/slurm.conf"

    def run(self, argv: Sequence[str], timeout: float | None = None, stop_at: str | None = None) -> str:
        if isinstance(argv, str) or not argv:
            raise TypeError("argv must be a non-empty list of arguments, not a shell string")
        args = [str(a) for a in argv]
        if self.bin_dir and "/" not in args[0]:
            args[0] = os.path.join(self.bin_dir, args[0])
        name = command_name(argv)
        t0 = self._clock()
        if stop_at is not None:
            return self._run_watching(argv, args, name, t0, self.timeout_s if timeout is None else timeout, stop_at)
        try:
            res = subprocess.run(args, env=self.env, capture_output=True, text=True, check=False,
                                 timeout=self.timeout_s if timeout is None else timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            self.stats.add(name, self._clock() - t0, True)
            raise SlurmCommandError(argv, None, f"no answer within {exc.timeout:g} s") from None
        except OSError as exc:
            self.stats.add(name, self._clock() - t0, True)
            raise SlurmCommandError(argv, 127, str(exc)) from None
        self.stats.add(name, self._clock() - t0, res.returncode != 0)
        if res.returncode != 0:
            raise SlurmCommandError(argv, res.returncode, res.stderr or res.stdout)
        return res.stdout

    def _run_watching(self, argv: Sequence[str], args: list[str], name: str, t0: float, timeout: float,
                      stop_at: str) -> str:
        """`run`, reading stderr as it comes: ended at the first line containing `stop_at` (StoppedAt)."""
        try:
            proc = subprocess.Popen(args, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    stdin=subprocess.DEVNULL)
        except OSError as exc:
            self.stats.add(name, self._clock() - t0, True)
            raise SlurmCommandError(argv, 127, str(exc)) from None
        out, err, seen, late = bytearray(), bytearray(), None, False
        deadline = time.monotonic() + timeout
        with proc, selectors.DefaultSelector() as sel:
            assert proc.stdout is not None and proc.stderr is not None
            sel.register(proc.stdout, selectors.EVENT_READ, out)
            sel.register(proc.stderr, selectors.EVENT_READ, err)
            while sel.get_map() and seen is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    late = True
                    break
                for key, _ in sel.select(left):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    key.data.extend(chunk)
                    if key.data is err:
                        seen = next((ln for ln in err.decode(errors="replace").splitlines() if stop_at in ln),
                                    None)
            if proc.poll() is None:
                proc.kill()
            rc = proc.wait()
        text = err.decode(errors="replace") or out.decode(errors="replace")
        self.stats.add(name, self._clock() - t0, seen is not None or late or rc != 0)
        if seen is not None:
            raise StoppedAt(argv, seen.strip())
        if late:
            raise SlurmCommandError(argv, None, f"no answer within {timeout:g} s" + (f": {text}" if text else ""))
        if rc != 0:
            raise SlurmCommandError(argv, rc, text)
        return out.decode(errors="replace")
