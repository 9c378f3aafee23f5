"""`themis` commands and the status API on the REAL local cluster: real munge credentials, real Slurm.

The state database is written with the daemon's Store for real jobs of two users (alice's running under a
lease, bob's waiting), the API server reads it and takes its snapshot from Slurm itself, and identities come
from munge credentials made as the two test users (``runuser ... munge -n``, argument lists). The served
slurm.conf is a copy of the cluster's with ``PrivateData=jobs`` added (the API only reads it).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from themisd_guard import running_themisd  # tests/slurm is on sys.path under pytest

from themis_slurm.api import ApiServer, start_api_server
from themis_slurm.api.slurmconf import read_slurm_conf
from themis_slurm.state.rows import AppRow, JobRow
from themis_slurm.state.store import Store

if TYPE_CHECKING:  # conftest is not importable at run time; pytest injects the fixtures
    from conftest import Cluster

pytestmark = pytest.mark.slurm
ALICE, BOB = "themis-alice", "themis-bob"
THEMIS = [sys.executable, "-m", "themis_slurm.cli.main"]
REPO = Path(__file__).resolve().parents[2]


def credential(cluster: Cluster, user: str) -> str:
    sock = read_slurm_conf(cluster.env["SLURM_CONF"]).munge_socket
    return cluster.check(["munge", "-n", "--socket", str(sock)], user=user).strip()


def get(url: str, cred: str | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url, headers={"Authorization": f"MUNGE {cred}"} if cred else {})
    try:
        with urllib.request.urlopen(req, timeout=20) as res:
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture
def world(cluster: Cluster, tmp_path: Path) -> Iterator[tuple[ApiServer, int, int]]:
    """Alice's 2-GPU job running (pinned + released, as themisd does), bob's 4-GPU job held; an API on them."""
    other = running_themisd(cluster.env["SLURM_CONF"])
    if other:
        pytest.skip(f"another themisd would start the held test jobs ({other})")
    a = cluster.sbatch("-p", "gpu", "--gres=gpu:2", "--comment=themis:app=e2e", user=ALICE)
    b = cluster.sbatch("-p", "gpu", "--gres=gpu:4", user=BOB)
    cluster.wait_job(b, "PENDING")
    cluster.pin_and_release(a, "node1", 1)
    cluster.wait_job(a, "RUNNING")
    now = time.time()
    store = Store(tmp_path / "state" / "themis.db")
    ka, kb = f"{ALICE}/e2e", f"{BOB}/job-{b}"
    with store.tx():
        for key, rho in ((ka, 1.2), (kb, 2.0)):
            store.put_app(AppRow(key, key.split("/")[0], now - 30, now - 30, now, 30.0, 2.0, rho=rho))
        store.put_job(JobRow(str(a), a, ka, "running", 2, 1200.0, now - 30, lease_start=now - 5,
                             lease_expiry=now + 55, planned_nodes={"node1": 2}, accounted_until=now))
        store.put_job(JobRow(str(b), b, kb, "waiting", 4, 2400.0, now - 30))
        rid = store.add_round(now - 5, "enforce", "16 free GPU(s), 2 waiting job(s)", "exact", 16, 1, 0, 0, 0.01)
        store.add_decision(rid, now - 5, ka, str(a), "grant", "auction: bid (rank 2), won 2 GPU(s)", 2.5, 1.2,
                           1.0, 2, {"node1": 2}, now + 55)
        store.add_decision(rid, now - 5, ka, None, "app", "bid (rank 2), won 2 GPU(s)", 2.5, 1.2, 1.0, 2)
        store.add_decision(rid, now - 5, kb, None, "app", "bid (rank 1) but won nothing", 2.0, 2.0, None, 0)
    store.close()
    etc = Path(cluster.env["SLURM_CONF"]).parent
    for name in ("gres.conf", "topology.conf"):  # the snapshot reads them next to the slurm.conf it is given
        (tmp_path / name).write_text((etc / name).read_text())
    conf = tmp_path / "slurm.conf"
    conf.write_text((etc / "slurm.conf").read_text() + "\nPrivateData=jobs\n")
    srv = start_api_server(tmp_path / "state" / "themis.db", "127.0.0.1:0", str(conf), partitions=("gpu",))
    yield srv, a, b
    srv.stop()


def test_privacy_with_real_munge_credentials(cluster: Cluster, world: tuple[ApiServer, int, int]) -> None:
    srv, a, b = world
    _, alice = get(f"{srv.url}/v1/jobs", credential(cluster, ALICE))
    assert alice["meta"]["viewer"]["user"] == ALICE and alice["meta"]["viewer"]["scope"] == "own"
    assert [j["job"] for j in alice["jobs"]] == [str(a)]
    assert alice["jobs"][0]["state"] == "RUNNING"
    _, bob = get(f"{srv.url}/v1/jobs", credential(cluster, BOB))
    assert [j["job"] for j in bob["jobs"]] == [str(b)] and bob["jobs"][0]["state"] == "PENDING"
    _, anon = get(f"{srv.url}/v1/cluster")
    assert anon["apps"] == [] and anon["aggregates"]["apps"] == 2 and anon["gpus"]["total"] == cluster.nodes * cluster.gpus
    assert "no munge credential" in anon["meta"]["viewer"]["note"]
    # a credential is good for one request: munged refuses the replay
    cred = credential(cluster, ALICE)
    get(f"{srv.url}/v1/jobs", cred)
    _, replay = get(f"{srv.url}/v1/jobs", cred)
    assert replay["jobs"] == [] and "Replayed" in replay["meta"]["viewer"]["note"]
    # bob may not explain alice's job, and cannot tell it from an unknown one
    status, doc = get(f"{srv.url}/v1/jobs/{a}/explain", credential(cluster, BOB))
    assert status == 404 and "not visible to you" in doc["error"]


def themis(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*THEMIS, *args], capture_output=True, text=True, env=env, timeout=60, check=False)


def test_every_command_as_root(cluster: Cluster, world: tuple[ApiServer, int, int]) -> None:
    srv, a, b = world
    env = dict(cluster.env, THEMISD_CONFIG="/nonexistent.yaml")
    res = themis("status", "--url", srv.url, env=env)
    assert res.returncode == 0, res.stderr
    assert f"{cluster.nodes * cluster.gpus} GPUs:" in res.stdout and "RACK" in res.stdout and f"{ALICE}/e2e" in res.stdout
    res = themis("jobs", "--url", srv.url, "-o", "job,user,st,intent,gpus", "-P", "-h", env=env)
    assert res.stdout.splitlines() == [f"{a}|{ALICE}|R|running|2", f"{b}|{BOB}|PD|waiting|4"]
    doc = json.loads(themis("apps", "--url", srv.url, "--json", env=env).stdout)
    assert [x["app"] for x in doc["apps"]] == [f"{BOB}/job-{b}", f"{ALICE}/e2e"]
    topo = themis("topology", "--url", srv.url, "-h", env=env).stdout.splitlines()
    assert len(topo) == cluster.nodes and f"[0:{a} 1:{a}] [2:. 3:.]" in topo[0]


def test_explain_running_waiting_unknown(cluster: Cluster, world: tuple[ApiServer, int, int]) -> None:
    srv, a, b = world
    env = dict(cluster.env, THEMISD_CONFIG="/nonexistent.yaml")
    out = themis("explain", str(a), "--url", srv.url, env=env).stdout
    assert "Why:       running on node1:2 under a lease" in out and "Lease:" in out
    assert "Slurm gave it node1 GPU 0,1 (island level)" in out  # the real indices, not the plan
    out = themis("explain", str(b), "--url", srv.url, env=env).stdout
    assert "Why:       waiting: in round 1" in out and "bid (rank 1) but won nothing" in out
    res = themis("explain", "99999999", "--url", srv.url, env=env)
    assert res.returncode == 1 and "job 99999999 is not managed by Themis" in res.stderr


def test_daemon_down(cluster: Cluster) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = themis("status", "--url", f"http://127.0.0.1:{port}", env=dict(os.environ, **cluster.env))
    assert res.returncode == 1
    assert f"themisd not reachable at http://127.0.0.1:{port}" in res.stderr


@pytest.mark.slow
def test_cli_installed_as_documented_works_for_every_user(cluster: Cluster, world: tuple[ApiServer, int, int],
                                                          tmp_path_factory: pytest.TempPathFactory) -> None:
    """docs/admin-guide.md section 1, run with root's umask 027: status, explain and progress as alice.

    Before, the guide's `python3 -m venv /opt/themis` took root's python3 (here pyenv's, under /root) and
    root's umask, which left the CLI root-only; and only themisd was linked onto PATH.
    """
    srv, a, b = world
    prefix = Path(tempfile.mkdtemp(prefix="themis-opt-", dir="/opt"))
    try:
        install = (f"umask 027 && {INSTALL_LINES.format(prefix=prefix, repo=REPO)}")
        # flock: pip builds in the checkout (build/, egg-info), where another pass's demo may install meanwhile
        res = subprocess.run(["flock", str(REPO), "bash", "-euc", install], capture_output=True, text=True,
                             timeout=900, check=False)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        themis_bin = str(prefix / "bin" / "themis")
        # the installed wheel carried the site files (package data), written where the guide says
        for rel in ("themis.yaml", "systemd/themisd.service", "slurm/job_submit.lua", "spank/themis-spank-build"):
            assert (prefix / "site" / rel).is_file(), rel
        env = dict(cluster.env, THEMISD_CONFIG="/nonexistent.yaml")
        out = cluster.run([themis_bin, "status", "--url", srv.url], user=ALICE)
        assert out.returncode == 0 and f"{ALICE}/e2e" in out.stdout, out.stderr
        out = cluster.run([themis_bin, "explain", str(a), "--url", srv.url], user=ALICE)
        assert out.returncode == 0 and "running on node1:2" in out.stdout, out.stderr
        job_env = ["env", f"SLURM_CONF={env['SLURM_CONF']}", f"SLURM_JOB_ID={a}", themis_bin, "progress", "0.25"]
        out = cluster.run(job_env, user=ALICE)
        assert out.returncode == 0, out.stdout + out.stderr
        assert cluster.job(a)["comment"].startswith("themis:progress=0.25")
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


# The install commands of docs/admin-guide.md section 1 for the CLI and daemon, with the prefix and the
# package source filled in (the test installs from this checkout, the guide from PyPI). Keep them in step:
# test_install_lines_match_the_admin_guide checks it.
INSTALL_LINES = ("umask 022 && /usr/bin/python3 -m venv {prefix} && {prefix}/bin/pip install -q {repo} "
                 "&& chmod -R a+rX {prefix} && {prefix}/bin/themis site-files --dest {prefix}/site")


def test_install_lines_match_the_admin_guide() -> None:
    guide = (REPO / "docs" / "admin-guide.md").read_text()
    for line in ("umask 022", "/usr/bin/python3 -m venv /opt/themis", "/opt/themis/bin/pip install themis-slurm",
                 "chmod -R a+rX /opt/themis", "ln -s /opt/themis/bin/themis /usr/bin/themis",
                 "/opt/themis/bin/themis site-files --dest /opt/themis/site"):
        assert line in guide, line
