"""Running Slurm client commands: argument lists only, a timeout on every call, counted and timed.

Why a class of its own: every Slurm call the daemon makes goes through one object, so (1) no code path
can build a shell string from user-controlled fields such as Comment or job names, (2) a hung slurmctld
costs at most one timeout per call instead of freezing the scheduler, (3) the calls per cycle and their
latency are counted for metrics and for the "bounded RPCs per cycle" promise admins care about, and
(4) unit tests swap in a fake that answers from canned output.
"""

from __future__ import annotations

import os
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

    def run(self, argv: Sequence[str], timeout: float | None = None) -> str:
        """Run ``argv``; return stdout; raise SlurmCommandError on any failure."""
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

    def run(self, argv: Sequence[str], timeout: float | None = None) -> str:
        if isinstance(argv, str) or not argv:
            raise TypeError("argv must be a non-empty list of arguments, not a shell string")
        args = [str(a) for a in argv]
        if self.bin_dir and "/" not in args[0]:
            args[0] = os.path.join(self.bin_dir, args[0])
        name = command_name(argv)
        t0 = self._clock()
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
