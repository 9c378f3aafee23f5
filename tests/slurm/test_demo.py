"""The README's first command, shortened: demo/run.sh --quick then demo/stop.sh on the real local cluster.

Slow (about two minutes): it starts themisd, submits four apps from two users and waits for them. It skips
when another themisd is running on the cluster (two daemons on one cluster would fight over the same held
jobs). Its API and metrics listen on free ports: the other Slurm version's pass of tests/run.sh may run its
demo at the same time. It checks
that the demo shows what Themis is for: a lease that expires and moves to a worse-off app (SIGUSR1, requeue,
resume from the checkpoint), a lease renewed in place, and the worst rho falling over the rounds.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from themisd_guard import running_themisd  # tests/slurm is on sys.path under pytest

if TYPE_CHECKING:  # conftest is not importable at run time; pytest injects the fixtures
    from conftest import Cluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_demo_quick(cluster_session: Cluster) -> None:
    other = running_themisd(cluster_session.env["SLURM_CONF"])
    if other:
        pytest.skip(f"another themisd is running on the cluster ({other})")
    # not pytest's tmp_path: the test users must read the job script in it (pytest's folders are 0700)
    demo_dir = Path(f"/var/tmp/themis-demo-test-{os.getpid()}")
    env = dict(os.environ, DEMO_DIR=str(demo_dir), DEMO_API_PORT=str(free_port()),
               DEMO_METRICS_PORT=str(free_port()))
    try:
        res = subprocess.run([str(REPO / "demo" / "run.sh"), "--quick"], capture_output=True, text=True,
                             env=env, timeout=600, check=False)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        out = res.stdout
        for app in ("themis-alice/array-", "themis-alice/bert", "themis-bob/big", "themis-bob/sweep"):
            assert app in out.split("== Summary")[1]
        assert "GPU utilisation:" in out and "themis explain" in out and "/metrics" in out
        assert "finished" in out and "still" not in out.split("== Summary")[0].splitlines()[-1]
        summary = out.split("== Summary")[1]

        def count(pattern: str) -> int:
            m = re.search(pattern, summary)
            assert m, f"{pattern!r} not in the summary:\n{summary}"
            return int(m.group(1))

        assert count(r"Leases that changed hands: (\d+) round") >= 1, summary
        assert re.search(r"lease not renewed for themis-bob/\S+ job \S+ .*-> themis-alice/", summary), summary
        assert count(r"Renewed in place: (\d+) lease") >= 1, summary
        assert count(r"SIGUSR1 warnings seen by the jobs: (\d+)") >= 1, summary
        assert count(r"resumed from a checkpoint: (\d+) run") >= 1, summary
        m = re.search(r"Worst rho fell: ([\d.]+) at round (\d+) -> ([\d.]+) at round (\d+)", summary)
        assert m and float(m.group(3)) < float(m.group(1)) and int(m.group(4)) > int(m.group(2)), summary
        assert "--themis-app=" in out   # the workload uses the plugin's options
    finally:
        stop = subprocess.run([str(REPO / "demo" / "stop.sh")], capture_output=True, text=True, env=env,
                              timeout=120, check=False)
    assert stop.returncode == 0, stop.stderr
    assert not demo_dir.exists()
    # ours is gone (other tests may run their own meanwhile)
    assert running_themisd(cluster_session.env["SLURM_CONF"], str(demo_dir)) is None


@pytest.mark.parametrize("how", ["environment", "config file"])
def test_demo_refuses_a_cluster_another_themisd_drives(cluster_session: Cluster, tmp_path: Path, how: str) -> None:
    """One themisd per cluster: a themisd on this cluster (by its SLURM_CONF, or by its config file's
    slurm_conf, relative to its working directory) stops the demo before it starts anything; one on
    another cluster of the machine does not count (tests/run.sh runs two clusters side by side)."""
    conf = cluster_session.env["SLURM_CONF"]
    (tmp_path / "themis.yaml").write_text(f"slurm:\n  slurm_conf: {conf}\n")
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    if how == "environment":
        env["SLURM_CONF"] = conf
    # a stand-in themisd: its command line names bin/themisd, as a real one's does
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "/opt/x/bin/themisd", "run"]
    argv += ["--config", "themis.yaml"] if how == "config file" else []
    fake = subprocess.Popen(argv, env=env, cwd=tmp_path)
    cmdline = Path(f"/proc/{fake.pid}/cmdline")
    deadline = time.monotonic() + 10
    while b"bin/themisd" not in cmdline.read_bytes() and time.monotonic() < deadline:  # until it has exec'd
        time.sleep(0.05)
    demo_dir = Path(f"/var/tmp/themis-demo-refused-{os.getpid()}")
    try:
        assert running_themisd(conf, "/opt/x/bin/themisd") is not None
        assert running_themisd("/elsewhere/slurm.conf", "/opt/x/bin/themisd") is None
        res = subprocess.run([str(REPO / "demo" / "run.sh"), "--quick"], capture_output=True, text=True,
                             env=dict(os.environ, DEMO_DIR=str(demo_dir)), timeout=300, check=False)
        assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
        assert f"another themisd is running on this cluster (pid {fake.pid}:" in res.stderr
        assert "3/5" not in res.stdout and not (demo_dir / "themisd.pid").exists()
    finally:
        fake.kill()
        fake.wait()
        shutil.rmtree(demo_dir, ignore_errors=True)
