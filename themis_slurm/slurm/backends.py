"""Choosing the Slurm backend: ``cli`` (`CliBackend`), ``pyslurm`` (`PyslurmBackend`) or ``auto``.

``auto`` takes pyslurm only when all of this holds, checked in this order, and otherwise the CLI, with
the reason in the returned log line:

1. pyslurm is installed (found without importing it);
2. pyslurm's release matches the running Slurm's major.minor: pyslurm X.Y.Z is built for Slurm X.Y and
   libslurm's ABI changes between releases. Slurm's version is ``scontrol --version`` through the
   `Runner` (``slurm 25.11.7`` -> ``25.11``), pyslurm's the installed distribution's, read before the
   import because importing a pyslurm built for another libslurm can fail or crash;
3. slurm.conf exists (`AdapterConfig.slurm_conf`, else ``$SLURM_CONF``, else /etc/slurm/slurm.conf):
   ``import pyslurm`` reads it and ends the whole process when it cannot;
4. ``import pyslurm`` works, after ``SLURM_CONF`` was set in ``os.environ`` from the config.

``pyslurm`` forces it and raises `BackendUnavailable` naming the first check that failed (step 3 only
when a path was given explicitly: a configless client may still find its configuration).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import sys
import time
from collections.abc import Callable

from themis_slurm.slurm.backend import CliBackend
from themis_slurm.slurm.model import AdapterConfig, SlurmBackend
from themis_slurm.slurm.runner import Runner, SlurmCommandError, SubprocessRunner

BACKEND_KINDS = ("auto", "cli", "pyslurm")
PYSLURM_HINT = "pip install themis-slurm[pyslurm]"
SLURM_VERSION = ("scontrol", "--version")
DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"


class BackendUnavailable(RuntimeError):
    """The requested backend cannot be used here; the message says why and what to do."""


def major_minor(version: str) -> str | None:
    """``"slurm 25.11.7"`` / ``"slurm-wlm 22.05.8"`` / ``"25.11.2"`` -> ``"25.11"``; None without a version."""
    m = re.search(r"(\d+)\.(\d+)", version or "")
    return f"{int(m.group(1))}.{int(m.group(2)):02d}" if m else None


def slurm_version(runner: Runner, timeout_s: float | None = None) -> str:
    """The installed Slurm's version as ``scontrol --version`` prints it (``25.11.7``)."""
    out = runner.run(list(SLURM_VERSION), timeout_s).strip()
    m = re.search(r"\d+\.\d+(?:\.\d+)?", out)
    if not m:
        raise ValueError(f"scontrol --version printed {out!r}: no version in it")
    return m.group(0)


def pyslurm_installed() -> bool:
    """True when ``import pyslurm`` would find a module (without importing it)."""
    if "pyslurm" in sys.modules:
        return sys.modules["pyslurm"] is not None
    try:
        return importlib.util.find_spec("pyslurm") is not None
    except (ImportError, ValueError):
        return False


def pyslurm_dist_version() -> str | None:
    """The installed pyslurm distribution's version, read from its metadata (no import)."""
    try:
        return importlib.metadata.version("pyslurm")
    except importlib.metadata.PackageNotFoundError:
        return None


def _mismatch(pyslurm: str, slurm: str) -> str:
    return (f"pyslurm {pyslurm} is built for Slurm {major_minor(pyslurm)} but this Slurm is {slurm} "
            f"(scontrol --version): pyslurm's major.minor must match Slurm's")


def _try_pyslurm(config: AdapterConfig, runner: Runner, clock: Callable[[], float],
                 strict_conf: bool) -> tuple[SlurmBackend | None, str]:
    """(PyslurmBackend, why it fits) or (None, why not)."""
    from themis_slurm.slurm.pyslurm_backend import PyslurmBackend  # imports no pyslurm by itself

    if not pyslurm_installed():
        return None, f"pyslurm is not installed ({PYSLURM_HINT})"
    try:
        slurm = slurm_version(runner, config.timeout_s)
    except (SlurmCommandError, ValueError) as exc:
        return None, f"cannot tell the installed Slurm's version to match pyslurm against: {exc}"
    have = pyslurm_dist_version()
    if have is not None and major_minor(have) != major_minor(slurm):
        return None, _mismatch(have, slurm)
    explicit = config.slurm_conf or os.environ.get("SLURM_CONF")
    conf = explicit or DEFAULT_SLURM_CONF
    if (explicit or strict_conf) and not os.path.isfile(conf):
        return None, (f"no slurm.conf at {conf}: importing pyslurm would end the process "
                      "(set slurm_conf or SLURM_CONF)")
    try:
        backend = PyslurmBackend(runner, config, clock)  # sets SLURM_CONF, then imports pyslurm
    except (ImportError, OSError) as exc:
        return None, f"pyslurm does not import: {exc}"
    have = backend.version if have is None else have
    if major_minor(have) != major_minor(slurm):
        return None, _mismatch(have, slurm)
    return backend, f"pyslurm {have} matches Slurm {slurm}"


def make_backend(kind: str, config: AdapterConfig | None = None, runner: Runner | None = None,
                 clock: Callable[[], float] = time.time) -> tuple[SlurmBackend, str]:
    """The backend for ``kind`` (``auto``, ``cli`` or ``pyslurm``) and one log line ``"<kind>: <reason>"``.

    Both backends share ``runner`` (default: a `SubprocessRunner` for the config), which also runs the
    version check and pyslurm's CLI fallbacks. Raises `BackendUnavailable` for a forced ``pyslurm`` that
    cannot be used, ValueError for an unknown kind.
    """
    if kind not in BACKEND_KINDS:
        raise ValueError(f"unknown Slurm backend {kind!r}: expected one of {', '.join(BACKEND_KINDS)}")
    config = config or AdapterConfig()
    runner = runner or SubprocessRunner(config.slurm_conf, config.timeout_s)
    if kind == "cli":
        return CliBackend(runner, config, clock), "cli: requested"
    backend, why = _try_pyslurm(config, runner, clock, strict_conf=kind == "auto")
    if backend is not None:
        return backend, f"pyslurm: {why}"
    if kind == "pyslurm":
        raise BackendUnavailable(f"Slurm backend pyslurm cannot be used: {why}")
    return CliBackend(runner, config, clock), f"cli: {why}"
