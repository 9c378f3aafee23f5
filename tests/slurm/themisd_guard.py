"""Finding a running themisd: tests that expect held jobs to stay held, or that start their own themisd,
cannot share the cluster with another themisd (it would start or requeue their jobs)."""

from __future__ import annotations

from pathlib import Path


def running_themisd(mentioning: str = "") -> str | None:
    """A running themisd whose command line mentions `mentioning`, as "pid N: cmdline", or None."""
    for p in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if ("themis_slurm.daemon.main" in cmd or "bin/themisd" in cmd) and mentioning in cmd:
            return f"pid {p.name}: {cmd.strip()}"
    return None
