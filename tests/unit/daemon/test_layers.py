"""Layering: each package, imported alone in a fresh interpreter (all its modules), pulls in only the
packages below it. No package reaches up, so there is no import cycle, hidden (inside a function) or not.

The order, lowest first (docs: the report of issue #13; issue #35 added state):
    core                      pure mechanism: imports no other themis_slurm package
    gc_pause                  the collector paused around a round (imports nothing of ours)
    jobkit                    helpers for training jobs (standard library only: imports nothing of ours)
    slurm, policies, reasons  Slurm adapter; policies over the core; the one renderer of round outcomes
    tenant_levels             the account/user tree with numbers, for the API and the metrics (core)
    state                     themisd's state: schema, typed rows, intents, the store and its read-only view,
                              one round's record, the GPUs held for granted jobs, the round's input and the
                              finish-time estimates made from it (core, slurm, tenant_levels)
    sim, hw                   simulator (core, policies; slurm's read-side parsers for sacct exports);
                              NVML probing (slurm)
    api                       the status API's views and server: reads typed rows through state
    daemon                    themisd: config (the one loader of themis.yaml), planning, loop; starts the API
                              (daemon/service.py, the one module of the daemon that imports it)
    cli                       the `themis` command: the API views over the daemon's config
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "gc_pause": set(),
    "jobkit": set(),
    "slurm": {"core"},
    "policies": {"core"},
    "reasons": {"core"},
    "tenant_levels": {"core"},
    "state": {"core", "slurm", "tenant_levels"},
    "sim": {"core", "policies", "slurm", "gc_pause"},  # loaders/sacct.py: AdminComment record, TRES, time parsers
    "hw": {"core", "slurm"},
    "api": {"core", "slurm", "reasons", "tenant_levels", "state"},
    "daemon": {"core", "slurm", "reasons", "tenant_levels", "state", "api", "gc_pause"},
    "cli": {"core", "slurm", "policies", "reasons", "tenant_levels", "state", "sim", "hw", "api", "daemon",
            "gc_pause", "jobkit"},
}

PROBE = """
import importlib, json, pkgutil, sys
name = sys.argv[1]
mod = importlib.import_module("themis_slurm." + name)
for m in pkgutil.walk_packages(getattr(mod, "__path__", []), mod.__name__ + "."):
    importlib.import_module(m.name)
print(json.dumps(sorted({n.split(".")[1] for n in sys.modules if n.startswith("themis_slurm.")} - {name})))
"""


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_lower_layers(package: str) -> None:
    out = subprocess.run([sys.executable, "-c", PROBE, package], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    imported = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert imported <= ALLOWED[package], f"themis_slurm.{package} imports {sorted(imported - ALLOWED[package])}"


def test_every_package_has_a_layer() -> None:
    import pkgutil

    import themis_slurm

    names = {m.name for m in pkgutil.iter_modules(themis_slurm.__path__)}
    assert names == set(ALLOWED)


def test_the_daemon_imports_the_api_only_where_it_starts_it() -> None:
    """themisd reads and writes its state through themis_slurm.state, never through the API's modules: the one
    import of the API is daemon/service.py's, which starts the server (a module's imports, hidden or not)."""
    import ast
    from pathlib import Path

    import themis_slurm.daemon

    importers = set()
    for path in Path(themis_slurm.daemon.__path__[0]).glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "themis_slurm.api" or n.startswith("themis_slurm.api.") for n in names):
                importers.add(path.name)
    assert importers == {"service.py"}
