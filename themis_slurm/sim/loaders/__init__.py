"""Trace loaders: one module per source format, all returning a themis_slurm.sim.trace.Trace.

``load_trace(path, fmt, **options)`` dispatches by format name; every loader accepts ``skip_bad`` and
raises TraceError (file:line, field, value) on bad input. See each module for its format and options.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from themis_slurm.sim.loaders._common import PathArg
from themis_slurm.sim.loaders.chronus import load_chronus
from themis_slurm.sim.loaders.gavel import load_gavel
from themis_slurm.sim.loaders.hyperdrive import load_hyperdrive
from themis_slurm.sim.loaders.sacct import load_sacct
from themis_slurm.sim.trace import Trace

LOADERS: dict[str, Callable[..., Trace]] = {
    "hyperdrive": load_hyperdrive,
    "chronus": load_chronus,
    "gavel": load_gavel,
    "sacct": load_sacct,
}


def load_trace(path: PathArg, fmt: str, **options: Any) -> Trace:
    """Load ``path`` with the loader named ``fmt`` (a key of LOADERS), passing ``options`` to it."""
    try:
        loader = LOADERS[fmt]
    except KeyError:
        raise ValueError(f"unknown trace format {fmt!r}; known: {', '.join(sorted(LOADERS))}") from None
    return loader(path, **options)


__all__ = ["LOADERS", "load_chronus", "load_gavel", "load_hyperdrive", "load_sacct", "load_trace"]
