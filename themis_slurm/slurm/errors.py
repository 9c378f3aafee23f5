"""Exceptions raised by the Slurm read-side parsers.

Admins fix configuration files by hand, so a parse error must point at the exact place: file, line, the
field and the value that was rejected, and what would have been accepted. Output of Slurm commands has no
file of its own; `SlurmOutputError` names the command/source instead.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad line in a Slurm configuration file (gres.conf, topology.conf).

    The message reads like a compiler diagnostic: ``gres.conf:12: File='/dev/nv[0-': expected a device
    path or hostlist-style range like /dev/nvidia[0-3]``. The parts stay available as attributes so
    callers (the gres-conf tool, the daemon's config check) can format them differently.
    """

    def __init__(self, path: str, line: int, field: str, value: str, expected: str) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.value = value
        self.expected = expected
        super().__init__(f"{path}:{line}: {field}={value!r}: expected {expected}")


class SlurmOutputError(ValueError):
    """Output of a Slurm command (squeue/sinfo --json, scontrol -o) that cannot be understood.

    ``source`` names what was parsed (e.g. ``squeue --json``), ``where`` the record (e.g. ``job 42``).
    """

    def __init__(self, source: str, where: str, problem: str) -> None:
        self.source = source
        self.where = where
        self.problem = problem
        super().__init__(f"{source}: {where}: {problem}" if where else f"{source}: {problem}")
