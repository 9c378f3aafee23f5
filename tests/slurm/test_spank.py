"""The SPANK plugin on the real cluster: `sbatch --themis-*` (themis_slurm/site/spank, installed by cluster.sh).

* each option, on the command line, in #SBATCH lines and from SBATCH_THEMIS_*, reaches the trusted
  AdminComment record; the command line wins over #SBATCH, which wins over the environment;
* a bad value is refused by the client before anything is submitted, naming option, value and what is
  accepted; the same value sent by a client WITHOUT the plugin's checks (a user's own plugin, through their
  own slurm.conf: nothing stops them) is refused by job_submit.lua;
* `--themis-*` and `--comment=themis:` together are refused; salloc/srun stay refused in a managed partition;
* `sbatch --help` (and salloc's, srun's) lists the options.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # conftest is not importable at run time; pytest injects the fixtures
    from conftest import Cluster

pytestmark = pytest.mark.slurm

ALICE = "themis-alice"
EXPECT_EST = "expected a duration above 0 and at most 365 days"


def _held(cluster: Cluster, job_id: int) -> dict:
    return cluster.wait_job(job_id, "PENDING", reason="JobHeldUser", timeout=10)


def _alice_jobs(cluster: Cluster) -> set[int]:
    return {j["job_id"] for j in cluster.jobs() if j.get("user_name") == ALICE}


@pytest.mark.parametrize("client", ["sbatch", "salloc", "srun"])
def test_help_lists_the_options(cluster: Cluster, client: str) -> None:
    out = cluster.check([client, "--help"], user=ALICE)
    for opt, arg in (("app", "name"), ("model", "model"), ("sens", "class"), ("est", "duration")):
        assert f"--themis-{opt}={arg}" in out, out[-1500:]
    assert "Themis estimate of the run time" in out


@pytest.mark.parametrize(
    ("options", "record"),
    [
        (["--themis-app=bert"], "themis:v1;app=bert;model=;sens=;est="),
        (["--themis-model=ResNet50"], "themis:v1;app=;model=resnet50;sens=;est="),
        (["--themis-sens=high"], "themis:v1;app=;model=;sens=high;est="),
        (["--themis-est=1-12:00:00"], "themis:v1;app=;model=;sens=;est=129600"),
        (["--themis-app=sweep.2", "--themis-model=vgg16", "--themis-est=90m"],
         "themis:v1;app=sweep.2;model=vgg16;sens=;est=5400"),
    ],
)
def test_each_option_reaches_the_record(cluster: Cluster, options: list[str], record: str) -> None:
    job_id = cluster.sbatch("--gres=gpu:1", *options)
    job = _held(cluster, job_id)
    assert job["admin_comment"] == record
    assert job["comment"] in ("", None)   # --comment stays the user's (and the site's)


def test_sbatch_lines_and_precedence(cluster: Cluster) -> None:
    script = "#!/bin/sh\n#SBATCH --gres=gpu:1\n#SBATCH --themis-app=fromscript --themis-est=2h\nsleep 300\n"
    job_id = cluster.sbatch(script=script, wrap=None)
    assert _held(cluster, job_id)["admin_comment"] == "themis:v1;app=fromscript;model=;sens=;est=7200"
    job_id = cluster.sbatch("--themis-app=fromcli", script=script, wrap=None)
    assert _held(cluster, job_id)["admin_comment"] == "themis:v1;app=fromcli;model=;sens=;est=7200"


def test_environment_variables(cluster: Cluster) -> None:
    env = ["env", "SBATCH_THEMIS_APP=fromenv", "SBATCH_THEMIS_SENS=low"]
    res = cluster.run([*env, "sbatch", "--parsable", "--gres=gpu:1", f"--output={cluster.jobs_dir}/%j.out",
                       "--wrap=sleep 300"], user=ALICE)
    assert res.returncode == 0, res.stderr
    cluster.submitted.append(int(res.stdout.strip()))
    assert _held(cluster, cluster.submitted[-1])["admin_comment"] == "themis:v1;app=fromenv;model=;sens=low;est="
    # the command line wins over the environment
    res = cluster.run([*env, "sbatch", "--parsable", "--gres=gpu:1", "--themis-app=cli", "--wrap=sleep 300",
                       f"--output={cluster.jobs_dir}/%j.out"], user=ALICE)
    assert res.returncode == 0, res.stderr
    cluster.submitted.append(int(res.stdout.strip()))
    assert _held(cluster, cluster.submitted[-1])["admin_comment"] == "themis:v1;app=cli;model=;sens=low;est="
    # a bad value in the environment is refused, naming the variable
    before = _alice_jobs(cluster)
    res = cluster.run(["env", "SBATCH_THEMIS_EST=soon", "sbatch", "--gres=gpu:1", "--wrap=true"], user=ALICE)
    assert res.returncode != 0
    assert "themis: invalid option --themis-est=soon (from SBATCH_THEMIS_EST): " + EXPECT_EST in res.stderr
    assert _alice_jobs(cluster) <= before   # no new job (finished ones may leave squeue meanwhile)


@pytest.mark.parametrize(
    ("option", "shown"),
    [
        ("--themis-app=-x", "--themis-app=-x: expected a name of 1 to 64 letters"),
        ("--themis-app=" + "a" * 65, "--themis-app=" + "a" * 37 + "...: expected a name"),
        ("--themis-model=gpt5", "--themis-model=gpt5: expected one of vgg11, vgg16"),
        ("--themis-sens=extreme", "--themis-sens=extreme: expected one of high, medium, low, none"),
        ("--themis-est=0s", "--themis-est=0s: " + EXPECT_EST),
        ("--themis-est=400d", "--themis-est=400d: " + EXPECT_EST),
        ("--themis-est=abc", "--themis-est=abc: " + EXPECT_EST),
    ],
)
def test_bad_value_is_refused_at_the_client(cluster: Cluster, option: str, shown: str) -> None:
    before = _alice_jobs(cluster)
    res = cluster.sbatch_result("--gres=gpu:1", option)
    assert res.returncode != 0
    assert f"themis: invalid option {shown}" in res.stderr, res.stderr
    assert "Batch job submission failed" not in res.stderr   # the client refused it: nothing was sent
    assert _alice_jobs(cluster) <= before   # no new job (finished ones may leave squeue meanwhile)


def test_model_with_sens_is_refused_at_the_client(cluster: Cluster) -> None:
    res = cluster.sbatch_result("--gres=gpu:1", "--themis-model=vgg16", "--themis-sens=high")
    assert res.returncode != 0
    assert "--themis-model and --themis-sens are mutually exclusive" in res.stderr
    assert "Batch job submission failed" not in res.stderr


def test_both_ways_at_once_is_refused(cluster: Cluster) -> None:
    res = cluster.sbatch_result("--gres=gpu:1", "--themis-app=a", "--comment=themis:app=b")
    assert res.returncode != 0 and "both as --themis-* and in --comment" in res.stderr
    # a comment without Themis options is the user's own text
    job_id = cluster.sbatch("--gres=gpu:1", "--themis-app=a", "--comment=my notes")
    job = _held(cluster, job_id)
    assert job["admin_comment"] == "themis:v1;app=a;model=;sens=;est=" and job["comment"] == "my notes"


@pytest.mark.parametrize("client", [["salloc", "--immediate=5"], ["srun", "--immediate=5"]])
def test_interactive_clients_stay_refused(cluster: Cluster, client: list[str]) -> None:
    res = cluster.run([*client, "-p", "gpu", "--gres=gpu:1", "--themis-app=x", "true"], user=ALICE)
    assert res.returncode != 0 and "must be batch jobs" in res.stderr


# ------------------------------------------------------------------------------------ a client without checks
ROGUE_C = r"""
/* A user's own SPANK plugin: sends whatever ROGUE_ENV says (NAME=VALUE|NAME=VALUE) as spank_job_env. */
#include <stdlib.h>
#include <string.h>
#include <slurm/spank.h>
SPANK_PLUGIN(rogue, 1);
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    char buf[4096], *save = NULL, *item;
    const char *spec = getenv("ROGUE_ENV");
    (void)ac; (void)av;
    if (spank_context() != S_CTX_ALLOCATOR || !spec)
        return 0;
    strncpy(buf, spec, sizeof(buf) - 1);
    buf[sizeof(buf) - 1] = 0;
    for (item = strtok_r(buf, "|", &save); item; item = strtok_r(NULL, "|", &save)) {
        char *eq = strchr(item, '=');
        if (!eq)
            continue;
        *eq = 0;
        spank_job_control_setenv(sp, item, eq + 1, 1);
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def rogue_conf(cluster_session: Cluster) -> Iterator[Path]:
    """A slurm.conf any user could write: the cluster's, with their own plugstack.conf (no Themis checks)."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (apt-get install gcc)")
    inc = "/opt/slurm-25.11/include" if cluster_session.slurm == "25.11" else "/usr/include"
    work = cluster_session.jobs_dir / f"rogue-{uuid.uuid4().hex[:8]}"
    work.mkdir(mode=0o755)
    (work / "rogue.c").write_text(ROGUE_C)
    subprocess.run(["cc", "-Wall", "-fPIC", "-shared", f"-I{inc}", "-o", str(work / "rogue.so"),
                    str(work / "rogue.c")], check=True, capture_output=True, timeout=60)
    (work / "plugstack.conf").write_text(f"required {work / 'rogue.so'}\n")
    conf = Path(cluster_session.env["SLURM_CONF"])
    lines = [f"PlugStackConfig={work / 'plugstack.conf'}" if line.startswith("PlugStackConfig=") else line
             for line in conf.read_text().splitlines()]
    (work / "slurm.conf").write_text("\n".join(lines) + "\n")
    for p in work.iterdir():
        p.chmod(0o755)
    yield work / "slurm.conf"
    shutil.rmtree(work, ignore_errors=True)


def _rogue_sbatch(cluster: Cluster, conf: Path, spec: str, *options: str) -> subprocess.CompletedProcess[str]:
    res = cluster.run(["env", f"SLURM_CONF={conf}", f"ROGUE_ENV={spec}", "sbatch", "--parsable", "--gres=gpu:1",
                       f"--output={cluster.jobs_dir}/%j.out", *options, "--wrap=sleep 300"], user=ALICE)
    if res.returncode == 0:
        cluster.submitted.append(int(res.stdout.strip()))
    return res


def test_without_the_plugin_the_options_do_not_exist(cluster: Cluster, rogue_conf: Path) -> None:
    res = cluster.run(["env", f"SLURM_CONF={rogue_conf}", "sbatch", "--gres=gpu:1", "--themis-app=x",
                       "--wrap=true"], user=ALICE)
    assert res.returncode != 0 and "themis-app" in res.stderr


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("THEMIS_OPTIONS=est=abc", "invalid option --themis-est=abc: " + EXPECT_EST),
        ("THEMIS_OPTIONS=app=-x", "invalid option --themis-app=-x: expected a name"),
        ("THEMIS_OPTIONS=model=gpt5", "invalid option --themis-model=gpt5: expected one of"),
        ("THEMIS_OPTIONS=sens=extreme", "invalid option --themis-sens=extreme: expected one of"),
        ("THEMIS_OPTIONS=model=vgg16,sens=high", "--themis-model and --themis-sens are mutually exclusive"),
        ("THEMIS_OPTIONS=app=x,priority=99", "unknown option 'priority'"),
        ("THEMIS_OPTIONS=app=a|SPANK_THEMIS_OPTIONS=app=b", "the Themis options were sent twice"),
    ],
)
def test_server_refuses_what_a_client_without_checks_sends(cluster: Cluster, rogue_conf: Path, spec: str,
                                                          message: str) -> None:
    before = _alice_jobs(cluster)
    res = _rogue_sbatch(cluster, rogue_conf, spec)
    assert res.returncode != 0, res.stdout
    assert "error: themis: " in res.stderr and message in res.stderr, res.stderr
    assert "Batch job submission failed" in res.stderr   # slurmctld refused it
    assert _alice_jobs(cluster) <= before   # no new job (finished ones may leave squeue meanwhile)


def test_server_accepts_good_options_from_any_client(cluster: Cluster, rogue_conf: Path) -> None:
    res = _rogue_sbatch(cluster, rogue_conf, "THEMIS_OPTIONS=app=own , est=1h30m")
    assert res.returncode == 0, res.stderr
    assert _held(cluster, cluster.submitted[-1])["admin_comment"] == "themis:v1;app=own;model=;sens=;est=5400"
