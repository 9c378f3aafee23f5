"""Layering: each package, imported alone in a fresh interpreter (all its modules), pulls in only the
packages below it. No package reaches up, so there is no import cycle, hidden (inside a function) or not.

The order, lowest first (docs: the report of issue #13):
    core                      pure mechanism: imports no other themis_slurm package
    gc_pause                  the collector paused around a round (imports nothing of ours)
    slurm, policies, reasons  Slurm adapter; policies over the core; the one renderer of round outcomes
    tenant_levels             the account/user tree with numbers, for the API and the metrics (core)
    sim, hw                   simulator (core, policies; slurm's read-side parsers for sacct exports);
                              NVML probing (slurm)
    api                       the status API's views and server: reads the store as plain rows; what it needs
                              of the daemon (finish-time estimates) is injected; GPUs held for granted jobs
                              are defined here (api.cluster.held_for_granted) and used by the daemon too
    daemon                    themisd: config (the one loader of themis.yaml), store, planning, loop; hosts the API
    cli                       the `themis` command: wires the API views to the daemon's config and estimator
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "gc_pause": set(),
    "slurm": {"core"},
    "policies": {"core"},
    "reasons": {"core"},
    "tenant_levels": {"core"},
    "sim": {"core", "policies", "slurm", "gc_pause"},  # loaders/sacct.py: AdminComment record, TRES, time parsers
    "hw": {"core", "slurm"},
    "api": {"core", "slurm", "reasons", "tenant_levels"},
    "daemon": {"core", "slurm", "reasons", "tenant_levels", "api", "gc_pause"},
    "cli": {"core", "slurm", "policies", "reasons", "tenant_levels", "sim", "hw", "api", "daemon", "gc_pause"},
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
