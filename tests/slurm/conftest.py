"""Fixtures for the tests that run against a REAL local Slurm cluster (slurm_conf/cluster.sh).

The cluster is shared: CI's tests/run.sh brings it up before pytest, a developer may keep one running, and
other tools may submit jobs to it at the same time. So the fixtures here never stop it and only cancel the
jobs the tests themselves submitted. Every Slurm command is run from an argument list (never a shell
string), as root or, through ``runuser``, as one of the unprivileged test users that cluster.sh creates.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SH = REPO / "slurm_conf" / "cluster.sh"
CLUSTER_DIR = Path(os.environ.get("THEMIS_CLUSTER_DIR", "/var/tmp/themis-cluster"))
ALICE = "themis-alice"
BOB = "themis-bob"

# job_state values of `squeue --json` (openapi v0.0.38) after which a job will not run again by itself.
FINISHED_STATES = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                             "PREEMPTED", "BOOT_FAIL", "DEADLINE"})


def _flat(value: Any) -> Any:
    """A v0.0.40+ number object ``{"set": .., "infinite": .., "number": ..}`` as 22.05 printed it."""
    if isinstance(value, dict) and "number" in value and "set" in value:
        if value.get("infinite"):
            return 4294967295
        return value["number"] if value.get("set") else 0
    return value


def flat_job(job: dict[str, Any]) -> dict[str, Any]:
    """A squeue --json job of any version in the v0.0.38 (22.05) shape the tests assert on.

    25.11 (data_parser v0.0.44) wraps numbers in objects and prints job_state as a list of words
    (["PENDING"], ["RUNNING", "COMPLETING"]): the base state wins, as 22.05 printed it.
    """
    out = {k: _flat(v) for k, v in job.items()}
    code = job.get("exit_code")
    if isinstance(code, dict) and "return_code" in code:  # 25.11: {"status": [..], "return_code": N, "signal"}
        rc, sig = _flat(code.get("return_code")) or 0, _flat((code.get("signal") or {}).get("id")) or 0
        out["exit_code"] = (rc << 8) | sig  # 22.05 printed the raw wait status
    state = job.get("job_state")
    if isinstance(state, list):
        flags = {"COMPLETING", "REQUEUED", "REQUEUE_HOLD", "CONFIGURING"}
        words = [str(w) for w in state]
        shown = next((w for w in ("COMPLETING",) if w in words), None)
        out["job_state"] = shown or next((w for w in words if w not in flags), words[0] if words else "")
    return out


class SlurmCommandError(RuntimeError):
    """A Slurm command the test expected to succeed failed; carries its output for the report."""


@dataclass
class Cluster:
    """Handle on the running local cluster, with helpers that keep the tests short.

    ``submitted`` collects the id of every job submitted through :meth:`sbatch`, so the per-test cleanup
    cancels exactly those and never somebody else's job on the shared cluster.
    """

    dir: Path
    env: dict[str, str]
    nodes: int
    gpus: int
    racks: int
    slurm: str = "22.05"  # the Slurm version of the cluster
    types: tuple[str, ...] = ("a100",)  # GPU types, cycled over the nodes (cluster.sh up --types)
    submitted: list[int] = field(default_factory=list)

    @property
    def spare_port(self) -> int:
        """A slurmctld port for a throwaway second cluster (cluster.sh's THEMIS_CLUSTER_PORT): 1000 above
        this one's, so that the two passes of tests/run.sh, each on its own cluster, never share one."""
        return int(self.env.get("THEMIS_CLUSTER_PORT", "26817")) + 1000

    @property
    def jobs_dir(self) -> Path:
        """World-writable sticky folder (1777) where test jobs write their output."""
        return self.dir / "jobs"

    def run(self, args: Sequence[str], user: str | None = None, timeout: float = 30,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Runs ``args`` (as ``user`` through runuser when given) with SLURM_CONF set; never raises on exit codes.

        The working directory is the jobs folder because sbatch copies it into the job and the test users
        cannot write (or even enter) the repository.
        """
        cmd = list(args) if user is None else ["runuser", "-u", user, "--", *args]
        return subprocess.run(cmd, env=self.env, cwd=self.jobs_dir, capture_output=True, text=True,
                              timeout=timeout, input=input, check=False)

    def check(self, args: Sequence[str], user: str | None = None, timeout: float = 30) -> str:
        """Like :meth:`run` but the command must succeed; returns its stdout."""
        res = self.run(args, user=user, timeout=timeout)
        if res.returncode != 0:
            raise SlurmCommandError(f"{' '.join(args)} (user {user or 'root'}) exited {res.returncode}: "
                                    f"{res.stderr.strip() or res.stdout.strip()}")
        return res.stdout

    def type_of(self, node: str) -> str:
        """The GPU type of `node` (nodeN: the types cycled over the nodes, as cluster.sh writes them)."""
        return self.types[(int(node.removeprefix("node")) - 1) % len(self.types)]

    def sbatch_result(self, *options: str, user: str | None = ALICE, script: str | None = None,
                      wrap: str | None = "sleep 300") -> subprocess.CompletedProcess[str]:
        """Submits a batch job and returns the raw result (for tests that expect a rejection).

        ``script`` (a whole job script, passed on stdin) wins over ``wrap``. Output goes to
        DIR/jobs/<jobid>.out unless the options say otherwise.
        """
        args = ["sbatch", "--parsable", f"--output={self.jobs_dir}/%j.out", *options]
        if script is None and wrap is not None:
            args.append(f"--wrap={wrap}")
        res = self.run(args, user=user, input=script)
        if res.returncode == 0:
            self.submitted.append(int(res.stdout.strip().split(";")[0].split("_")[0]))
        return res

    def sbatch(self, *options: str, user: str | None = ALICE, script: str | None = None,
               wrap: str | None = "sleep 300") -> int:
        """Submits a batch job that must be accepted; returns its job id."""
        res = self.sbatch_result(*options, user=user, script=script, wrap=wrap)
        if res.returncode != 0:
            raise SlurmCommandError(f"sbatch {' '.join(options)} failed: {res.stderr.strip()}")
        return self.submitted[-1]

    def jobs(self) -> list[dict[str, Any]]:
        """All jobs slurmctld knows, finished ones too (25.11 hides them without --states=all), in one RPC.

        Records are in 22.05's shape whatever the version (see `flat_job`), so one assertion fits both.
        """
        return [flat_job(j) for j in json.loads(self.check(["squeue", "--all", "--states=all", "--json"]))["jobs"]]

    def job(self, job_id: int) -> dict[str, Any]:
        """The ``squeue --json`` record of one job (raises KeyError when slurmctld no longer has it)."""
        for j in self.jobs():
            if j["job_id"] == job_id:
                return j
        raise KeyError(f"job {job_id} not in squeue")

    def array_tasks(self, array_job_id: int) -> list[dict[str, Any]]:
        """The records of one job array's tasks (a pending array may still be a single record)."""
        return [j for j in self.jobs() if j.get("array_job_id") == array_job_id]

    def wait_job(self, job_id: int, states: str | Iterable[str], reason: str | None = None,
                 timeout: float = 20.0) -> dict[str, Any]:
        """Polls until the job is in one of ``states`` (and, when given, has state_reason ``reason``)."""
        wanted = {states} if isinstance(states, str) else set(states)
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while True:
            try:
                last = self.job(job_id)
                if last["job_state"] in wanted and (reason is None or last["state_reason"] == reason):
                    return last
            except KeyError:
                last = {}
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} not in {sorted(wanted)} (reason {reason}) after {timeout}s; "
                                   f"last seen: {last.get('job_state')} / {last.get('state_reason')}")
            time.sleep(0.2)

    def wait_file(self, path: Path, timeout: float = 20.0, contains: str = "") -> str:
        """Polls until ``path`` exists (and contains ``contains``); returns its text."""
        deadline = time.monotonic() + timeout
        while True:
            if path.exists():
                text = path.read_text()
                if contains in text:
                    return text
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} did not appear (with {contains!r}) within {timeout}s")
            time.sleep(0.1)

    def pin_and_release(self, job_id: int, nodes: str, node_count: int) -> None:
        """What themisd does to start a job: pin it to ``nodes``, then release it (as root)."""
        self.check(["scontrol", "update", f"JobId={job_id}", f"ReqNodeList={nodes}", f"NumNodes={node_count}"])
        self.check(["scontrol", "release", str(job_id)])

    def cancel_submitted(self) -> None:
        """Cancels every job this test submitted (finished ones are ignored by scancel)."""
        if self.submitted:
            self.run(["scancel", *map(str, self.submitted)])
            self.submitted.clear()


def _skip_reason() -> str | None:
    """Why the Slurm tests cannot run here, or None when they can (then cluster.sh may install Slurm)."""
    if os.environ.get("THEMIS_SKIP_SLURM") == "1":
        return "THEMIS_SKIP_SLURM=1"
    if os.geteuid() != 0:
        return "the local Slurm cluster needs root (cluster.sh starts daemons and acts as test users)"
    if not CLUSTER_SH.exists():
        return f"{CLUSTER_SH} is missing"
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        return "Slurm is not installed and apt-get is not available to install it"
    if wanted_slurm() == "25.11":
        dist = Path(os.environ.get("THEMIS_SLURM_DIST", REPO.parent / "shared" / "slurm"))
        if not Path("/opt/slurm-25.11/sbin/slurmctld").exists() and not list(dist.glob("slurm-25.11.*.tar.xz")):
            return (f"Slurm 25.11 is not available: no /opt/slurm-25.11 and no slurm-25.11.*.tar.xz in {dist} "
                    "(../shared/slurm, or set THEMIS_SLURM_DIST)")
    elif wanted_slurm() != "22.05":
        return f"THEMIS_SLURM_VERSION={wanted_slurm()!r}: the local cluster offers 22.05 and 25.11"
    return None


def _read_shape(cluster_dir: Path) -> dict[str, str]:
    """The shape cluster.sh recorded in DIR/shape ("nodes=4 gpus=4 racks=2 slurm=25.11")."""
    text = (cluster_dir / "shape").read_text().split()
    return dict(item.split("=", 1) for item in text)


def wanted_slurm() -> str:
    """The Slurm version the suite runs against: $THEMIS_SLURM_VERSION (22.05 or 25.11), default 22.05."""
    return os.environ.get("THEMIS_SLURM_VERSION", "22.05")


def pytest_report_header(config: pytest.Config) -> str:
    return f"Slurm tests against Slurm {wanted_slurm()} (THEMIS_SLURM_VERSION)"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Every real-cluster test report names the Slurm version, so a failure says which one it was."""
    outcome = yield
    report = outcome.get_result()
    if item.get_closest_marker("slurm") is not None:
        report.nodeid = f"{report.nodeid} [Slurm {wanted_slurm()}]"


@pytest.fixture(scope="session")
def cluster_session() -> Cluster:
    """Brings the cluster up if it is not (``cluster.sh up`` is a no-op when it is) and describes it.

    A failing ``up`` fails the tests rather than skipping them: on a root Debian machine it is a real bug.
    """
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    version = wanted_slurm()
    args = [str(CLUSTER_SH), "up", "--slurm", version]
    shape = CLUSTER_DIR / "shape"
    if shape.exists() and _read_shape(CLUSTER_DIR).get("slurm", "22.05") != version:
        args.append("--force")  # the other version is up: one cluster at a time
    res = subprocess.run(args, capture_output=True, text=True, timeout=1800, check=False)
    if res.returncode != 0:
        pytest.fail(f"slurm_conf/cluster.sh up failed ({res.returncode}):\n{res.stderr}")
    # stdout: "export SLURM_CONF=<path>", after "export PATH=<slurm bin>:<slurm sbin>:$PATH" for 25.11.
    exports = dict(line.removeprefix("export ").split("=", 1) for line in res.stdout.strip().splitlines()
                   if line.startswith("export "))
    conf = exports["SLURM_CONF"]
    cluster_dir = Path(conf).parent.parent
    # the other version's binaries must not shadow this one's (a shell that eval'd 25.11's env before)
    plain = ":".join(d for d in os.environ.get("PATH", "").split(":") if not d.startswith("/opt/slurm-25.11/"))
    os.environ["PATH"] = exports["PATH"].replace("$PATH", plain) if "PATH" in exports else plain
    env = dict(os.environ, SLURM_CONF=conf)
    os.environ["SLURM_CONF"] = conf
    info = _read_shape(cluster_dir)
    return Cluster(dir=cluster_dir, env=env, nodes=int(info["nodes"]), gpus=int(info["gpus"]),
                   racks=int(info["racks"]), slurm=info.get("slurm", "22.05"),
                   types=tuple(info.get("types", "a100").split(",")))


@pytest.fixture
def cluster(cluster_session: Cluster) -> Iterator[Cluster]:
    """The session cluster, with the jobs a test submitted cancelled after it (pass or fail)."""
    yield cluster_session
    cluster_session.cancel_submitted()
