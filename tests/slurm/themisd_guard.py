"""Finding a themisd that drives a given cluster: tests that expect held jobs to stay held, or that start
their own themisd, cannot share that cluster with another themisd (it would start or requeue their jobs).

Only a themisd on the same cluster matters: tests/run.sh runs the Slurm 22.05 and 25.11 passes at the same
time, each on its own local cluster, and a themisd of one must not make the other's tests skip.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_CONFIG = "/etc/themis/themis.yaml"  # themisd's default --config (themis_slurm/daemon/config.py)
DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"  # Slurm's default when SLURM_CONF is unset


def _argv(pid: Path) -> list[str]:
    return [a.decode(errors="replace") for a in (pid / "cmdline").read_bytes().split(b"\0") if a]


def _drives(pid: Path, argv: list[str], slurm_conf: str) -> bool:
    """Whether the themisd process `pid` (with `argv`) works on the cluster of `slurm_conf`: its
    environment's SLURM_CONF, or its config file's ``slurm_conf``, names that file."""
    try:
        env = dict(v.split("=", 1) for v in (pid / "environ").read_bytes().decode(errors="replace").split("\0")
                   if "=" in v)
    except OSError:
        env = {}
    if env.get("SLURM_CONF", DEFAULT_SLURM_CONF) == slurm_conf:
        return True
    config = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--config"), None)
    config = config or next((a.split("=", 1)[1] for a in argv if a.startswith("--config=")), DEFAULT_CONFIG)
    try:
        return slurm_conf in (pid / "cwd" / config).read_text(errors="replace")  # an absolute one wins
    except OSError:
        return False


def running_themisd(slurm_conf: str, mentioning: str = "") -> str | None:
    """A running themisd on the cluster of `slurm_conf` whose command line mentions `mentioning`, as
    "pid N: cmdline", or None."""
    for p in Path("/proc").glob("[0-9]*"):
        try:
            argv = _argv(p)
        except OSError:
            continue
        cmd = " ".join(argv)
        if ("themis_slurm.daemon.main" in cmd or "bin/themisd" in cmd) and mentioning in cmd \
                and _drives(p, argv, slurm_conf):
            return f"pid {p.name}: {cmd.strip()}"
    return None
