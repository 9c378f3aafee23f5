"""job_submit.lua compiles with the Luas slurmctld embeds (5.1 in Debian's 22.05, 5.3 in the 25.11 build), before
any cluster runs it: a script that fails to load leaves slurmctld running the previous one, silently."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPTS = [Path(__file__).resolve().parents[3] / "themis_slurm" / "site" / "slurm" / name
           for name in ("job_submit.lua", "themis_job_submit.conf.lua")]


@pytest.mark.parametrize("version", ["5.1", "5.3"])
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_lua_compiles(script: Path, version: str) -> None:
    luac = shutil.which(f"luac{version}")
    if luac is None:
        pytest.skip(f"luac{version} not installed (apt-get install lua{version}; tests/run.sh does it)")
    res = subprocess.run([luac, "-p", str(script)], capture_output=True, text=True, timeout=30, check=False)
    assert res.returncode == 0, res.stderr
