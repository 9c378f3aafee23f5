"""`themis progress` (argument list, errors outside a job) and `themis config check`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from themis_slurm.cli.main import cli


def test_progress_outside_a_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    res = CliRunner().invoke(cli, ["progress", "0.5"])
    assert res.exit_code == 1 and "not inside a Slurm job ($SLURM_JOB_ID is not set)" in res.output


def test_progress_runs_scontrol_with_an_argument_list(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []

    def fake_run(argv: Any, **kw: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    res = CliRunner().invoke(cli, ["progress", "42%"])
    assert res.exit_code == 0 and calls == [["scontrol", "update", "JobId=42", "Comment=themis:progress=0.42"]]
    # in an array's last task SLURM_JOB_ID is the array's own id, which Slurm reads as every task
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "42")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "7")
    res = CliRunner().invoke(cli, ["progress", "0.5"])
    assert res.exit_code == 0 and calls[-1] == ["scontrol", "update", "JobId=42_7", "Comment=themis:progress=0.5"]


@pytest.mark.parametrize("value", ["1.5", "-0.1", "abc", "nan"])
def test_progress_bad_fraction_is_usage_error(value: str) -> None:
    assert CliRunner().invoke(cli, ["progress", "--", value]).exit_code == 2


def test_progress_scontrol_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(
        argv, 1, "", "scontrol: error: Invalid job id specified"))
    res = CliRunner().invoke(cli, ["progress", "0.1", "--job", "7"])
    assert res.exit_code == 1 and "Invalid job id specified" in res.output


def test_config_check(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("mode: observe\nscheduler:\n  lease_minutes: 1\n")
    res = CliRunner().invoke(cli, ["config", "check", str(good)])
    assert res.exit_code == 0 and "OK (mode observe" in res.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("scheduler:\n  lease_minutes: -3\n")
    res = CliRunner().invoke(cli, ["config", "check", str(bad)])
    assert res.exit_code == 1 and "scheduler.lease_minutes: value -3 is not a positive number" in res.output


def test_subcommands_load_only_when_used_and_the_listing_is_their_own() -> None:
    # issue 36 item 2 (part): `themis status --help` imported the simulator, matplotlib and scipy (1.1 s)
    import importlib

    from themis_slurm.cli.main import COMMANDS

    for name, (module, attr, short) in COMMANDS.items():
        command = getattr(importlib.import_module(module), attr)
        assert command.name == name and command.get_short_help_str(limit=45) == short, name
    probe = ("import sys; from click.testing import CliRunner; from themis_slurm.cli.main import cli; "
             "r = CliRunner().invoke(cli, ['status', '--help']); assert r.exit_code == 0, r.output; "
             "heavy = [m for m in ('matplotlib', 'scipy', 'themis_slurm.sim.engine') if m in sys.modules]; "
             "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "", f"imported for `themis status --help`: {out.stdout}"
    listing = CliRunner().invoke(cli, ["--help"])
    assert listing.exit_code == 0 and all(name in listing.output for name in COMMANDS)
