"""The Debian package, installed, on the real cluster: its themisd, its `themis`, its job_submit.lua and the
SPANK plugin its install built (issue #36 item 1). The commands under test are the installed ones; this checkout
only provides the test harness.

.ci/run (debian/ci-smoke.sh) builds the package (debian/build-deb.sh), installs it, brings up a cluster per
Slurm version from the package's files and runs this file on each:

    THEMIS_SITE_FILES=/usr/share/themis-slurm \\
    THEMIS_SPANK_SO=/usr/lib/themis-slurm/spank/22.05/spank_themis.so \\
    THEMIS_SLURM_VERSION=22.05 pytest -m slurm tests/slurm/test_package_e2e.py

(25.11: `themis-spank-build /opt/slurm-25.11/include` first, as an admin of a Slurm built from source does.)
The tests skip, saying why, where the package is not installed or the cluster was not brought up from it
(and fail instead under THEMIS_PACKAGE_TEST=1, as in CI).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from themis_slurm import __version__

if TYPE_CHECKING:  # conftest is not an importable module at run time; pytest injects the fixtures
    from conftest import Cluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SHARE = Path("/usr/share/themis-slurm")
PLUGIN_ROOT = Path("/usr/lib/themis-slurm/spank")
THEMIS, THEMISD = "/usr/bin/themis", "/usr/bin/themisd"
ALICE = "themis-alice"
OPERATOR = "themis"  # the package's system account; cluster.sh makes it a Slurm Operator


def skip_or_fail(reason: str) -> None:
    """CI (THEMIS_PACKAGE_TEST=1, debian/ci-smoke.sh) installed the package for these tests: a skip would hide a
    broken install, so there it fails."""
    if os.environ.get("THEMIS_PACKAGE_TEST") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def package_status() -> str:
    res = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Status} ${Version}", "themis-slurm"],
        capture_output=True,
        text=True,
        check=False,
    )
    return res.stdout.strip() if res.returncode == 0 else ""


@pytest.fixture(scope="module")
def installed() -> None:
    status = package_status()
    if not status.startswith("install ok installed"):
        skip_or_fail(
            "the themis-slurm package is not installed (.ci/run builds and installs it: "
            "debian/build-deb.sh, then apt-get install ./dist/themis-slurm_*.deb)"
        )


@pytest.fixture
def from_package(installed: None, cluster: Cluster) -> Path:
    """The cluster runs the package's job_submit.lua and the plugin the package's install built."""
    plugin = PLUGIN_ROOT / cluster.slurm / "spank_themis.so"
    stack = (cluster.dir / "etc" / "plugstack.conf").read_text().strip()
    lua = (cluster.dir / "etc" / "job_submit.lua").read_bytes()
    if stack != f"required {plugin}" or lua != (SHARE / "slurm" / "job_submit.lua").read_bytes():
        skip_or_fail(
            f"the cluster in {cluster.dir} was not brought up from the package (plugstack.conf: {stack!r}; "
            f"give THEMIS_SITE_FILES={SHARE} THEMIS_SPANK_SO={plugin} to cluster.sh up)"
        )
    return plugin


def test_the_package_installs_what_a_site_needs(installed: None, cluster: Cluster) -> None:
    assert package_status() == f"install ok installed {__version__}"
    for link in (THEMIS, THEMISD):
        assert os.path.realpath(link).startswith("/opt/themis-slurm/bin/"), link
    out = cluster.run([THEMIS, "--version"], user=ALICE)  # every user may run the CLI
    assert out.returncode == 0 and __version__ in out.stdout, out.stderr
    out = cluster.run([THEMISD, "--check-config", "/etc/themis/themis.yaml"])
    assert out.returncode == 0, out.stdout + out.stderr
    conffiles = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Conffiles}", "themis-slurm"], capture_output=True, text=True, check=True
    ).stdout
    assert "/etc/themis/themis.yaml" in conffiles and "/etc/default/themisd" in conffiles
    for unit in ("themisd.service", "themisd-failopen.service", "themisd-failopen.timer"):
        assert (Path("/lib/systemd/system") / unit).is_file(), unit
        assert not list(Path("/etc/systemd/system").glob(f"*.wants/{unit}")), f"{unit} enabled by the package"
    # the site files are this version's (the package wrote them with its own `themis site-files`)
    res = subprocess.run(
        [THEMIS, "site-files", "--dest", str(SHARE)], capture_output=True, text=True, check=False
    )
    assert res.returncode == 0 and res.stdout == "" and " unchanged" in res.stderr, res.stderr
    for rel in ("slurm/job_submit.lua", "themis.yaml", "spank/spank_themis.c"):
        assert (SHARE / rel).read_bytes() == (REPO / "themis_slurm" / "site" / rel).read_bytes(), rel
    assert pwd.getpwnam(OPERATOR).pw_dir == "/var/lib/themis"


def _spare_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def daemon_dir(cluster: Cluster) -> Iterator[Path]:
    """themisd's folder, owned by its account (pytest's tmp_path is root-only)."""
    folder = Path(tempfile.mkdtemp(prefix="themisd-deb-", dir=cluster.dir / "tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


JOB = """#!/bin/bash
themis progress 0.5
sleep 20
echo done > {out}/deb-smoke-$SLURM_JOB_ID
"""


def test_smoke_from_the_package(from_package: Path, cluster: Cluster, daemon_dir: Path) -> None:
    """sbatch --themis-* through the package's plugin and job_submit.lua; the package's themisd grants the job;
    the package's `themis` reports progress from inside it and shows it to its owner; it completes once."""
    port = _spare_port()
    lua = daemon_dir / "themis_job_submit.conf.lua"  # a copy: the shared cluster's stays as it is
    lua.write_text((cluster.dir / "etc" / "themis_job_submit.conf.lua").read_text())
    cfg = daemon_dir / "themis.yaml"
    cfg.write_text(
        f"mode: enforce\npoll_interval_s: 1\nstate_dir: {daemon_dir / 'state'}\n"
        "scheduler:\n  lease_minutes: 1\n  grace_s: 3\n  min_runtime_s: 0\n"
        f"slurm:\n  slurm_conf: {cluster.env['SLURM_CONF']}\n  job_submit_conf: {lua}\n  backend: cli\n"
        f"failopen:\n  heartbeat_file: {daemon_dir / 'heartbeat'}\n"
        f"metrics:\n  listen: ''\napi:\n  listen: 127.0.0.1:{port}\n"
    )
    pw = pwd.getpwnam(OPERATOR)
    for p in [daemon_dir, *daemon_dir.rglob("*")]:
        os.chown(p, pw.pw_uid, pw.pw_gid)
    job = cluster.sbatch(
        "-p",
        "gpu",
        "--gres=gpu:1",
        "--themis-app=deb-smoke",
        "--themis-est=2m",
        script=JOB.format(out=cluster.jobs_dir),
        wrap=None,
    )
    held = cluster.wait_job(job, "PENDING")
    assert held["admin_comment"].startswith("themis:v1;app=deb-smoke;"), held["admin_comment"]
    log = daemon_dir / "themisd.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [THEMISD, "run", "--config", str(cfg)],
            env=cluster.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd="/",
            user=pw.pw_uid,
            group=pw.pw_gid,
            extra_groups=[],
        )
    try:
        cluster.wait_job(job, "RUNNING", timeout=60)
        deadline = time.monotonic() + 15
        while (
            not cluster.job(job)["comment"].startswith("themis:progress=0.5") and time.monotonic() < deadline
        ):
            time.sleep(0.5)
        assert cluster.job(job)["comment"].startswith("themis:progress=0.5")
        url = f"http://127.0.0.1:{port}"
        status = cluster.run([THEMIS, "status", "--url", url], user=ALICE)
        assert status.returncode == 0 and f"{ALICE}/deb-smoke" in status.stdout, status.stdout + status.stderr
        deadline = (
            time.monotonic() + 15
        )  # the API reads Slurm at most every few seconds: it may still say starting
        while True:
            why = cluster.run([THEMIS, "explain", str(job), "--url", url], user=ALICE)
            if "running on node" in why.stdout or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert why.returncode == 0 and "running on node" in why.stdout, why.stdout + why.stderr
        assert cluster.wait_file(cluster.jobs_dir / f"deb-smoke-{job}", timeout=60).strip() == "done"
        assert cluster.wait_job(job, "COMPLETED", timeout=30)["restart_cnt"] == 0
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    assert proc.returncode == 0, log.read_text()[-3000:]
