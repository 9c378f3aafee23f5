"""Model classes on the real cluster (issue #36 item 3): the modern built-in classes and a site's own class
reach the trusted record through both ways in (the SPANK plugin's ``--themis-model`` and ``--comment``), an
unknown name is refused naming the option and listing every accepted class, and themisd places and counts a
job of the site's class with themis.yaml's factors (its store and ``themis explain`` say so), while a name
job_submit.lua accepts but themis.yaml does not define runs as the default class, said in the log, in
``themis explain`` and by ``themis config check``.

The site's lists are set on the shared cluster for these tests only: ``extra_models`` in job_submit.lua's
config, ``models=`` on the plugin's plugstack.conf line (both restored afterwards; ``cluster.sh up``
restores them too if a test dies).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import test_daemon_e2e as e2e  # tests/slurm is on sys.path under pytest
from test_daemon_e2e import Watch, _reload_lua, make_themisd

from themis_slurm.slurm.option_grammar import MODELS

if TYPE_CHECKING:
    from conftest import Cluster

pytestmark = pytest.mark.slurm
daemon_dir = e2e.daemon_dir  # the fixture: a folder themisd's account can reach

SITE = "site-llm"  # defined in themis.yaml and listed by job_submit.lua and the plugin
LUA_ONLY = "lua-only"  # listed by job_submit.lua and the plugin, not defined in themis.yaml
FACTORS = {"island": 1.0, "node": 0.9, "rack": 0.45, "cluster": 0.35}  # unlike any built-in class
ACCEPTED = "expected one of " + ", ".join((*MODELS, SITE, LUA_ONLY))
THEMIS = [sys.executable, "-m", "themis_slurm.cli.main"]


@pytest.fixture
def site_lists(cluster: Cluster) -> Iterator[None]:
    """The cluster's job_submit.lua config lists the site's classes, and so does the plugin's line."""
    conf = cluster.dir / "etc" / "themis_job_submit.conf.lua"
    stack = cluster.dir / "etc" / "plugstack.conf"
    conf_text, stack_text = conf.read_text(), stack.read_text()
    assert "extra_models = {}," in conf_text and "spank_themis.so" in stack_text
    try:
        conf.write_text(
            conf_text.replace("extra_models = {},", f'extra_models = {{ "{SITE}", "{LUA_ONLY}" }},')
        )
        stack.write_text(stack_text.strip() + f" models={SITE},{LUA_ONLY}\n")
        _reload_lua(cluster)
        yield
    finally:
        conf.write_text(conf_text)
        stack.write_text(stack_text)
        _reload_lua(cluster)


def _record(cluster: Cluster, job_id: int) -> str:
    return cluster.wait_job(job_id, "PENDING", reason="JobHeldUser", timeout=10)["admin_comment"]


@pytest.mark.usefixtures("site_lists")
def test_classes_reach_the_record_and_unknown_names_are_refused(cluster: Cluster) -> None:
    for options, model in (
        (["--themis-model=transformer-tp"], "transformer-tp"),
        (["--comment=themis:model=MoE"], "moe"),
        ([f"--themis-model={SITE.upper()}"], SITE),
        ([f"--comment=themis:model={SITE},est=1h"], SITE),
    ):
        rec = _record(cluster, cluster.sbatch("--gres=gpu:1", *options))
        assert rec.startswith(f"themis:v1;app=;model={model};sens=;est="), (options, rec)
    # at the client (the plugin, from its plugstack.conf list): nothing is submitted
    res = cluster.sbatch_result("--gres=gpu:1", "--themis-model=gpt9")
    assert res.returncode != 0 and f"themis: invalid option --themis-model=gpt9: {ACCEPTED}\n" in res.stderr
    assert "Batch job submission failed" not in res.stderr, res.stderr
    # in slurmctld (job_submit.lua, from its config's extra_models)
    res = cluster.sbatch_result("--gres=gpu:1", "--comment=themis:model=gpt9")
    assert res.returncode != 0 and f"themis: invalid option model=gpt9 in --comment: {ACCEPTED}" in res.stderr


def test_without_the_lists_a_sites_class_is_refused(cluster: Cluster) -> None:
    res = cluster.sbatch_result("--gres=gpu:1", f"--themis-model={SITE}")
    assert res.returncode != 0 and f"--themis-model={SITE}: expected one of vgg11" in res.stderr
    assert "googlenet, transformer-dp, transformer-tp, moe, finetune\n" in res.stderr  # built-in names only
    res = cluster.sbatch_result("--gres=gpu:1", f"--comment=themis:model={SITE}")
    assert res.returncode != 0 and f"invalid option model={SITE} in --comment" in res.stderr


def _explain(cfg: Path, job_id: int, env: dict[str, str]) -> tuple[str, dict]:
    """`themis explain` from themisd's state database (the test config serves no API): text and JSON."""

    def run(*extra: str) -> str:
        return subprocess.run([*THEMIS, "explain", str(job_id), "--config", str(cfg), *extra],
                              capture_output=True, text=True, env=env, timeout=60, check=True).stdout

    return run(), json.loads(run("--json"))


@pytest.mark.slow
@pytest.mark.usefixtures("site_lists")
def test_themisd_places_and_counts_a_sites_class(cluster: Cluster, daemon_dir: Path) -> None:
    if [j for j in cluster.jobs() if j["job_state"] in ("PENDING", "RUNNING")]:
        pytest.skip("the shared cluster runs other jobs")
    site = cluster.sbatch("-N2", "--gres=gpu:1", f"--themis-model={SITE}", "--themis-est=5m")
    other = cluster.sbatch("-N2", "--gres=gpu:1", f"--comment=themis:model={LUA_ONLY},est=5m")
    models = "{" + SITE + ": {factors: {" + ", ".join(f"{k}: {v}" for k, v in FACTORS.items()) + "}}}"
    d = make_themisd(daemon_dir, cluster, models=models)
    d.start()
    w = Watch(cluster, d)
    store = w.open_store()
    try:

        def counted(_: object) -> bool:  # both ran on their two nodes for a few seconds of themisd's cycles
            rows = [store.job(str(j)) for j in (site, other)]
            return all(r is not None and r.service_s >= 2 * 4.0 for r in rows)

        w.until("both jobs to run and be counted", counted, 90)
        env = dict(cluster.env)
        text, doc = _explain(d.config, site, env)
        other_text, other_doc = _explain(d.config, other, env)
        row, other_row = store.job(str(site)), store.job(str(other))
    finally:
        d.stop()
    assert row is not None and other_row is not None
    level = doc["job"]["placement"]["level"]
    assert level in ("rack", "cluster"), doc["job"]["placement"]  # one GPU on each of two nodes
    # themisd counted the job's work with themis.yaml's factor for where it ran
    assert row.done_service / row.service_s == pytest.approx(FACTORS[level])
    assert doc["profile"] == {
        "asked": SITE,
        "name": SITE,
        "factors": FACTORS,
        "defined_by": "themis.yaml",
        "source": f"site: {d.config} models.{SITE} (defines a class)",
        "note": "",
        "type_speeds": {},  # no gpu_types: in this themis.yaml
    }
    assert (
        f"Class:     {SITE} (themis.yaml): island 1.00, node 0.90, rack 0.45, cluster 0.35; now placed at "
        f"{level} level: x{FACTORS[level]:.2f}"
    ) in text
    # the name themis.yaml does not define: the default class, said in the log, by explain and by config check
    other_level = other_doc["job"]["placement"]["level"]
    assert other_row.done_service / other_row.service_s == pytest.approx(
        {"rack": 0.98, "cluster": 0.96}[other_level]
    )
    note = (
        f"model '{LUA_ONLY}' is unknown to themisd (neither built in nor in themis.yaml models): placed as the "
        "default class low"
    )
    assert other_doc["profile"]["name"] == "low" and other_doc["profile"]["note"] == note
    assert note in other_text
    logged = [line for line in d.log.read_text().splitlines() if note in line]
    assert logged and all("WARNING" in line and f"job={other}:" in line for line in logged), logged
    check = subprocess.run(
        [*THEMIS, "config", "check", str(d.config)],
        capture_output=True,
        text=True,
        env=dict(cluster.env),
        timeout=60,
        check=False,
    )
    assert check.returncode == 0, check.stderr
    assert f"lists {LUA_ONLY}, which themis.yaml's models section does not define" in check.stderr
    print(
        f"\n[models e2e] {SITE} at {level} level: done/service {row.done_service / row.service_s:.3f}; "
        f"{LUA_ONLY} at {other_level} level: {other_row.done_service / other_row.service_s:.3f}\n{text}"
    )


def test_a_bad_plugin_line_is_reported_and_never_stops_submissions(cluster: Cluster) -> None:
    """A typo on the plugin's plugstack.conf line is read by every sbatch, salloc and srun of the cluster:
    each says so and goes on with the built-in classes (job_submit.lua still checks every job)."""
    stack = cluster.dir / "etc" / "plugstack.conf"
    text = stack.read_text()
    try:
        stack.write_text(text.strip() + " models=Bad!Name colour=red\n")
        res = cluster.sbatch_result("--gres=gpu:1", "--themis-model=transformer-dp")
        assert res.returncode == 0, res.stderr
        assert "plugstack.conf: models=Bad!Name: 'Bad!Name' is not" in res.stderr and "(ignored:" in res.stderr
        assert "unknown argument 'colour=red' to spank_themis.so ignored" in res.stderr
        assert _record(cluster, cluster.submitted[-1]).startswith("themis:v1;app=;model=transformer-dp;")
        res = cluster.sbatch_result("--gres=gpu:1", f"--themis-model={SITE}")  # no site list at the client
        assert res.returncode != 0 and f"invalid option --themis-model={SITE}" in res.stderr
    finally:
        stack.write_text(text)
