"""The query commands import only what they use (#36 item 2): `themis status` goes in `watch` loops, so it must
not load the simulator, the plotting stack, the solver, the API server or the daemon.

Each command runs as a new process, as a user runs it, with ``python -X importtime`` (which lists every
module the process imported) against a live API server over the unit tests' world; the test checks the
command's answer and the set of modules, never a time (benchmarks/cli_latency.py measures the times).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from api import world  # tests/unit/api (tests/unit is on sys.path under pytest)

from themis_slurm.api import ApiServer
from themis_slurm.cli import client
from themis_slurm.daemon import config

REPO = Path(__file__).resolve().parents[3]
SHIPPED_YAML = REPO / "themis_slurm" / "site" / "themis.yaml"

#: Never imported by a query over HTTP, with or without a config file.
HEAVY = (
    "numpy",
    "scipy",
    "matplotlib",
    "themis_slurm.sim",
    "themis_slurm.policies",
    "themis_slurm.hw",
    "themis_slurm.api.server",
    "themis_slurm.api.views",
    "themis_slurm.state.reader",
    "themis_slurm.state.store",
    "themis_slurm.daemon.planning",
    "themis_slurm.daemon.loop",
    "http.server",
)
#: Also not imported where there is no config file to read (a login node; the loader brings in the core's
#: configuration types).
WITHOUT_CONFIG = HEAVY + ("themis_slurm.core", "themis_slurm.daemon", "yaml")


#: What the `themis` console script runs.
ENTRY = "import sys; sys.argv[0] = 'themis'; from themis_slurm.cli.main import main; main()"


def imported(args: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Runs `themis ARGS` in a new interpreter; its result and every module it imported."""
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", ENTRY, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
        cwd=REPO,
    )
    mods = {
        line.rpartition("|")[2].strip() for line in res.stderr.splitlines() if line.startswith("import time:")
    }
    return res, mods - {"package"}  # the header line's last column


def loaded(mods: set[str], banned: tuple[str, ...]) -> list[str]:
    return sorted(m for m in mods if any(m == b or m.startswith(b + ".") for b in banned))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    conf = tmp_path / "slurm.conf"
    conf.write_text(world.SLURM_CONF_PRIVATE)  # its munge socket is nowhere: no credential, aggregates
    return dict(
        os.environ, PYTHONPATH=str(REPO), SLURM_CONF=str(conf), THEMISD_CONFIG=str(tmp_path / "absent.yaml")
    )


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["status"], "GPUs:"),
        (["apps"], "APP"),
        (["jobs"], "JOBID"),
        (["explain", "10"], "not visible to you"),  # without a credential: the API's answer, exit 1
        (["status", "--help"], "--watch"),
        (["progress", "--help"], "FRACTION"),
    ],
)
def test_query_commands_import_only_what_they_use(
    server: ApiServer, env: dict[str, str], args: list[str], expect: str
) -> None:
    if "--help" not in args:
        args = [*args, "--url", server.url]
    res, mods = imported(args, env)
    assert expect in res.stdout + res.stderr, res.stderr[-2000:]
    assert "themis_slurm.cli.main" in mods  # the import list was read
    assert loaded(mods, WITHOUT_CONFIG) == []


def test_status_with_a_config_file_imports_the_loader_but_not_the_rest(
    server: ApiServer, env: dict[str, str]
) -> None:
    res, mods = imported(["status", "--url", server.url], dict(env, THEMISD_CONFIG=str(SHIPPED_YAML)))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "themis_slurm.daemon.config" in mods  # the file is read by themisd's own loader
    assert loaded(mods, HEAVY) == []


def test_the_clients_defaults_are_the_daemons() -> None:
    assert client.DEFAULT_CONFIG == config.DEFAULT_PATH
    assert config.ApiConfig().listen == client.DEFAULT_LISTEN
