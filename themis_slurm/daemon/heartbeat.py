"""themisd's heartbeat: one small file, rewritten after every cycle, that says themisd is alive.

Why a file: what must read it runs where themisd's database and API are of no use. job_submit.lua runs
inside slurmctld (no network, microseconds per submission: one small read), and the fail-open watchdog
(`themisd failopen`, a systemd timer) must work while themisd is dead or wedged. Both compare the time in
the file with their own clock: older than ``failopen.after_s`` and managed jobs go back to plain Slurm
(docs/admin-guide.md, "When themisd is gone: fail-open").

The file holds one line ``<unix time> <pid> <host>``; it is written to a temporary name and renamed, so a
reader sees the old line or the new one, never half of one. It is world-readable (slurmctld runs as the
SlurmUser) and says nothing about users or jobs. A missing file counts as an old heartbeat.
"""

from __future__ import annotations

import math
import os
import socket
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Heartbeat:
    """One reading of the file."""

    time: float
    pid: int | None
    host: str

    def age(self, now: float) -> float:
        return max(0.0, now - self.time)


def write_heartbeat(path: str | Path, now: float, pid: int | None = None, host: str | None = None) -> None:
    """Atomically replaces the file with ``now pid host`` (mode 0644; the folder is made 0755 if missing).

    Raises OSError; the caller logs it (a heartbeat that cannot be written means fail-open will act).
    """
    p = Path(path)
    p.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}")
    line = f"{now:.3f} {os.getpid() if pid is None else pid} {host or socket.gethostname()}\n"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, line.encode())
        os.fchmod(fd, 0o644)  # whatever the umask: slurmctld (another user) reads it
    finally:
        os.close(fd)
    os.replace(tmp, p)


def read_heartbeat(path: str | Path) -> Heartbeat | None:
    """The heartbeat in the file, or None when it is missing, unreadable or malformed (all: not alive)."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return None
    parts = text.split()
    if not parts:
        return None
    try:
        t = float(parts[0])
    except ValueError:
        return None
    if not math.isfinite(t):
        return None
    pid = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
    return Heartbeat(t, pid, parts[2] if len(parts) > 2 else "")


def heartbeat_age(path: str | Path, now: float) -> float:
    """Seconds since themisd's last heartbeat; infinity when there is none."""
    hb = read_heartbeat(path)
    return math.inf if hb is None else hb.age(now)
