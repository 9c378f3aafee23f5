"""The few slurm.conf settings the status API needs: PrivateData, the munge socket, the SlurmUser.

Why our own reader: the adapter's gres/topology parser refuses ``Include`` lines on purpose (a config
*check* must not silently skip files), but here we only look up three keys, and real slurm.conf files do
use ``Include``. So this reader follows includes (relative to slurm.conf's folder, globs allowed, a few
levels deep) and tolerates anything it does not understand: a status tool must not fail on a slurm.conf
that slurmctld accepts.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
_MAX_INCLUDE_DEPTH = 4


@dataclass(frozen=True)
class SlurmConfInfo:
    """What the API takes from slurm.conf. `private_data` holds lower-case PrivateData words."""

    path: str = ""
    private_data: frozenset[str] = field(default_factory=frozenset)
    munge_socket: str | None = None
    slurm_user: str | None = None
    error: str | None = None  # why slurm.conf could not be read (the API then says so and stays private)

    @property
    def private_jobs(self) -> bool:
        """PrivateData=jobs (or usage: apps carry usage) hides other users' jobs and apps."""
        return bool(self.private_data & {"jobs", "usage", "all"})


def resolve_path(path: str | None) -> str:
    """slurm.conf as Slurm's clients find it: the given path, else $SLURM_CONF, else the default."""
    return path or os.environ.get("SLURM_CONF") or DEFAULT_SLURM_CONF


def _strip_comment(line: str) -> str:
    out, i = [], 0
    while i < len(line):
        if line.startswith("\\#", i):
            out.append("#")
            i += 2
            continue
        if line[i] == "#":
            break
        out.append(line[i])
        i += 1
    return "".join(out)


def _pairs(text: str, base: Path, depth: int) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for raw in text.splitlines():
        tokens = _strip_comment(raw).split()
        if not tokens:
            continue
        if tokens[0].lower() == "include" and len(tokens) > 1 and depth < _MAX_INCLUDE_DEPTH:
            pattern = tokens[1] if tokens[1].startswith("/") else str(base / tokens[1])
            for inc in sorted(glob.glob(pattern)):
                try:
                    pairs += _pairs(Path(inc).read_text(), base, depth + 1)
                except OSError:
                    continue
            continue
        for tok in tokens:
            key, sep, value = tok.partition("=")
            if sep:
                pairs.append((key.lower(), value.strip('"')))
    return pairs


def parse_slurm_conf(text: str, path: str = DEFAULT_SLURM_CONF) -> SlurmConfInfo:
    """Reads PrivateData, AuthInfo socket= and SlurmUser (last occurrence wins, as in Slurm)."""
    values: dict[str, str] = {}
    for key, value in _pairs(text, Path(path).parent, 0):
        if key in ("privatedata", "authinfo", "slurmuser"):
            values[key] = value
    private = frozenset(w.strip().lower() for w in values.get("privatedata", "").split(",") if w.strip())
    socket = None
    for part in values.get("authinfo", "").split(","):
        k, sep, v = part.partition("=")
        if sep and k.strip().lower() == "socket" and v.strip():
            socket = v.strip()
    return SlurmConfInfo(path, private, socket, values.get("slurmuser") or "slurm")


def read_slurm_conf(path: str | None = None) -> SlurmConfInfo:
    """parse_slurm_conf of the file; an unreadable file gives PrivateData=all (fail closed) and the error."""
    where = resolve_path(path)
    try:
        text = Path(where).read_text()
    except OSError as e:
        return SlurmConfInfo(where, frozenset({"all"}), None, "slurm", f"cannot read {where}: {e.strerror or e}")
    return parse_slurm_conf(text, where)
