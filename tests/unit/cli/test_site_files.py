"""`themis site-files`: the site files are package data, written where the admin says, never over an edit
without --force; the wheel carries them; the SPANK build script builds against each Slurm's headers."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from themis_slurm.cli.main import cli
from themis_slurm.cli.site_files import SITE, WHERE, shipped

REPO = Path(__file__).resolve().parents[3]


def run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, ["site-files", *args])
    return res.exit_code, res.stdout, res.stderr


def test_every_shipped_file_has_a_place_and_every_place_a_file() -> None:
    names = shipped()
    assert {
        "themis.yaml",
        "systemd/themisd.service",
        "slurm/job_submit.lua",
        "spank/Makefile",
        "spank/themis-spank-build",
        "grafana-dashboard.json",
    } <= set(names)
    for rel in names:
        assert rel in WHERE or rel.split("/")[0] + "/" in WHERE, rel
    for key in WHERE:
        assert any(n == key or (key.endswith("/") and n.startswith(key)) for n in names), key


def test_writes_everything_then_leaves_identical_files_alone(tmp_path: Path) -> None:
    dest = tmp_path / "site"
    code, out, err = run("--dest", str(dest))
    assert code == 0, err
    for rel in shipped():
        assert (dest / rel).read_bytes() == (SITE / rel).read_bytes(), rel
        assert f"wrote {dest / rel}" in out
    assert (dest / "spank" / "themis-spank-build").stat().st_mode & 0o777 == 0o755
    assert (dest / "themis.yaml").stat().st_mode & 0o777 == 0o644
    code, out, err = run("--dest", str(dest))
    assert code == 0 and out == "" and err.strip() == f"{dest}: {len(shipped())} unchanged"


def test_an_edited_file_is_kept_unless_forced(tmp_path: Path) -> None:
    run("--dest", str(tmp_path))
    conf = tmp_path / "slurm" / "themis_job_submit.conf.lua"
    edited = conf.read_text().replace('mode = "enforce"', 'mode = "observe"')
    assert edited != conf.read_text()
    conf.write_text(edited)
    code, out, err = run("--dest", str(tmp_path))
    assert code == 0 and conf.read_text() == edited
    assert f"kept {conf}: it differs from this version's" in err and "1 kept" in err
    code, out, err = run("--dest", str(tmp_path), "--force")
    assert code == 0 and f"replaced {conf}" in out
    assert conf.read_bytes() == (SITE / "slurm" / "themis_job_submit.conf.lua").read_bytes()
    assert (conf.parent / (conf.name + ".themis-old")).read_text() == edited


def test_list_and_usage() -> None:
    code, out, _ = run("--list")
    assert code == 0 and len(out.splitlines()) == len(shipped())
    assert "/etc/themis/themis.yaml" in out and "next to slurm.conf" in out
    code, _, err = run()
    assert code == 2 and "give --dest DIR (or --list)" in err


@pytest.mark.parametrize("include", ["/usr/include", "/opt/slurm-25.11/include"])
def test_spank_build_script(tmp_path: Path, include: str) -> None:
    if (
        not (Path(include) / "slurm" / "spank.h").is_file()
        or not shutil.which("cc")
        or not shutil.which("make")
    ):
        pytest.skip(
            f"no Slurm headers in {include} (libslurm-dev; 25.11: slurm_conf/cluster.sh up --slurm 25.11) "
            "or no cc/make"
        )
    script = SITE / "spank" / "themis-spank-build"
    res = subprocess.run(
        [str(script), include],
        env={"PATH": "/usr/bin:/bin", "PLUGIN_ROOT": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    version = res.stdout.split("for Slurm ")[1].split(";")[0]
    assert res.stdout.splitlines()[-1] == f"required {tmp_path}/{version}/spank_themis.so"
    assert (tmp_path / version / "spank_themis.so").is_file()
    assert not (SITE / "spank" / "build").exists()  # built out of the tree: the sources may be read-only


def test_spank_build_script_says_what_is_missing(tmp_path: Path) -> None:
    res = subprocess.run(
        [str(SITE / "spank" / "themis-spank-build"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 1 and f"no Slurm headers in {tmp_path} (slurm/spank.h)" in res.stderr


@pytest.mark.slow
def test_the_wheel_carries_the_site_files(tmp_path: Path) -> None:
    # flock: pip builds in the checkout (build/, egg-info), as tests/slurm/test_cli_e2e.py's install does
    argv = [
        "flock",
        str(REPO),
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "-w",
        str(tmp_path),
        str(REPO),
    ]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    (wheel,) = tmp_path.glob("themis_slurm-*.whl")
    with zipfile.ZipFile(wheel) as z:
        inside = {
            n.removeprefix("themis_slurm/site/") for n in z.namelist() if n.startswith("themis_slurm/site/")
        }
        assert inside == set(shipped())
        info = z.getinfo("themis_slurm/site/spank/themis-spank-build")
        assert (info.external_attr >> 16) & 0o111  # executable in the wheel too
