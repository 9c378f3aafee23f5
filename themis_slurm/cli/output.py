"""Tables the squeue/sinfo/sprio way: aligned columns, ``-h`` no header, ``-o`` field list, ``-P`` parsable.

A command declares its columns once (field name, header, how to show a value, alignment); the options then
pick and render them. ``-o`` takes comma-separated field names, each optionally with a width
(``job,app:30,rho``), like ``squeue -O``; an unknown field is a usage error (exit 2) that lists the known
ones. ``-P`` prints ``|``-separated values with the header line unless ``-h`` (like ``sacct -P``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click

Value = Callable[[Mapping[str, Any]], Any]


@dataclass(frozen=True)
class Column:
    """One field of a table: `name` for -o, `header` to print, `value` from a row, right-aligned numbers."""

    name: str
    header: str
    value: Value
    right: bool = False
    help: str = ""


@dataclass(frozen=True)
class TableOptions:
    noheader: bool = False
    parsable: bool = False
    fields: str | None = None


def pick(columns: Sequence[Column], default: Sequence[str], spec: str | None) -> list[tuple[Column, int | None]]:
    """Columns chosen by `spec` (``-o``) or the default names; click.UsageError on an unknown field."""
    by_name = {c.name: c for c in columns}
    out: list[tuple[Column, int | None]] = []
    items = [s.strip() for s in spec.split(",")] if spec else list(default)
    for item in items:
        name, _, width = item.partition(":")
        name = name.strip().lower()
        if name not in by_name:
            raise click.UsageError(f"unknown field {name!r} in --format; fields: {', '.join(by_name)}")
        if width and not width.isdigit():
            raise click.UsageError(f"width of field {name!r} in --format must be a number, not {width!r}")
        out.append((by_name[name], int(width) if width else None))
    if not out:
        raise click.UsageError(f"--format names no field; fields: {', '.join(by_name)}")
    return out


def render(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column], default: Sequence[str],
           opts: TableOptions) -> str:
    """The table as text (no trailing newline); an empty table still has its header unless -h."""
    chosen = pick(columns, default, opts.fields)
    cells = [[cell(c.value(r)) for c, _ in chosen] for r in rows]
    header = [c.header for c, _ in chosen]
    if opts.parsable:
        lines = [] if opts.noheader else ["|".join(header)]
        lines += ["|".join(row) for row in cells]
        return "\n".join(lines)
    widths = []
    for i, (_, fixed) in enumerate(chosen):
        widths.append(fixed if fixed else max([len(header[i])] + [len(row[i]) for row in cells]))
    lines = [] if opts.noheader else [_line(header, chosen, widths)]
    lines += [_line(row, chosen, widths) for row in cells]
    return "\n".join(lines)


def _line(values: Sequence[str], chosen: Sequence[tuple[Column, int | None]], widths: Sequence[int]) -> str:
    parts = []
    for v, (c, fixed), w in zip(values, chosen, widths, strict=True):
        v = v[:w] if fixed else v
        parts.append(v.rjust(w) if c.right else v.ljust(w))
    return "  ".join(parts).rstrip()


def cell(v: Any) -> str:
    """How a raw value prints: None as '-', floats with 2 decimals, bools yes/no."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return "-" if not math.isfinite(v) else f"{v:.2f}"
    return str(v)


# ------------------------------------------------------------------------------------ value formatters
def clock(t: float | None) -> str | None:
    """Local wall-clock time of a Unix time (HH:MM:SS), as squeue prints times of today."""
    return None if t is None else time.strftime("%H:%M:%S", time.localtime(t))


def duration(s: float | None) -> str | None:
    """Seconds as Slurm prints elapsed times: M:SS, H:MM:SS, or D-HH:MM:SS."""
    if s is None or not math.isfinite(s):
        return None
    s = int(round(max(0.0, s)))
    d, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{sec:02d}"
    if h:
        return f"{h}:{m:02d}:{sec:02d}"
    return f"{m}:{sec:02d}"


def nodes_text(nodes: Mapping[str, int] | None) -> str | None:
    """``node1:2,node3:4`` (GPUs per node) or None."""
    if not nodes:
        return None
    return ",".join(f"{n}:{c}" for n, c in sorted(nodes.items()))


def rho_text(rho: float | None) -> str | None:
    return None if rho is None else f"{rho:.2f}"


SHORT_STATES = {"PENDING": "PD", "RUNNING": "R", "COMPLETING": "CG", "COMPLETED": "CD", "SUSPENDED": "S",
                "CONFIGURING": "CF", "REQUEUED": "RQ", "CANCELLED": "CA", "FAILED": "F", "UNKNOWN": "?"}


def short_state(state: str | None) -> str:
    """squeue's two-letter job state codes."""
    return SHORT_STATES.get(state or "UNKNOWN", (state or "?")[:2])
