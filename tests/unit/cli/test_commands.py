"""Every query command against a live API server: columns, --json shape, -P, -h, exit codes, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from api import world

from themis_slurm.api import ApiServer

from .conftest import Run, free_port


def test_status(run: Run, server: ApiServer) -> None:
    res = run("status", "--url", server.url, user="root")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith("Themis  8 GPUs: 2 free, 0 starting, 6 leased, 0 unmanaged, 0 unavailable")
    assert lines[2].split() == ["RACK", "NODES", "GPUS", "FREE", "STARTING", "LEASED", "UNMANAGED", "UNAVAILABLE"]
    assert lines[3].split() == ["rack1", "1", "4", "2", "0", "2", "0", "0"]
    apps = lines[lines.index("") + 1:][lines[lines.index("") + 1:].index("") + 1:]
    assert apps[0].split() == ["RANK", "APP", "OWNER", "RUN", "WAIT", "GPUS", "RHO", "PREEMPT"]
    assert apps[1].split() == ["1", "themis-bob/job-21", "themis-bob", "0", "1", "0", "2.50", "0"]
    assert "3 app(s) (worst rho 2.50, median 1.40)" in res.output


def test_status_json_shape(run: Run, server: ApiServer) -> None:
    doc = json.loads(run("status", "--url", server.url, "--json").output)
    assert set(doc) == {"meta", "gpus", "racks", "aggregates", "apps", "next_leases", "rounds", "ineligible",
                        "pending_actions", "tenancy"}
    assert doc["tenancy"] == {"levels": ["app"], "line": "", "read_at": None, "tenants": []}  # flat: no tree
    assert set(doc["meta"]) == {"time", "data_time", "data_age_s", "source", "viewer", "private_data", "warnings"}
    assert doc["meta"]["viewer"]["user"] == "themis-alice"


def test_status_parsable_and_noheader(run: Run, server: ApiServer) -> None:
    out = run("status", "--url", server.url, "-P", "-h", user="root").output
    assert out.splitlines()[0] == "rack1|1|4|2|0|2|0|0"
    assert "1|themis-bob/job-21|themis-bob|0|1|0|2.50|0" in out


def test_jobs_columns_and_privacy(run: Run, server: ApiServer) -> None:
    res = run("jobs", "--url", server.url)
    assert res.exit_code == 0
    lines = res.output.splitlines()
    assert lines[0].split() == ["JOBID", "PARTITION", "NAME", "USER", "APP", "ST", "THEMIS", "GPUS", "NODES",
                                "LEASE_END"]
    assert [line.split()[0] for line in lines[1:3]] == ["10", "11"]
    assert "PrivateData=jobs,usage" in res.output  # note on stderr (mixed into output by CliRunner)
    out = run("jobs", "--url", server.url, "-u", "themis-bob", "-o", "job,st,intent", "-P", "-h", user="root").output
    assert out.splitlines()[:2] == ["20|R|running", "21|PD|waiting"]


def test_apps_and_topology(run: Run, server: ApiServer) -> None:
    out = run("apps", "--url", server.url, "-o", "rank,app,rho,t_id,t_sh", "-P", user="root").output
    head, first = out.splitlines()[:2]
    assert head == "RANK|APP|RHO|T_ID|T_SH" and first.startswith("1|themis-bob/job-21|2.50|")
    topo = run("topology", "--url", server.url, user="bob").output.splitlines()
    assert topo[0].split() == ["RACK", "NODE", "GPUS", "FREE", "LEASED", "ISLANDS", "GPUS_BY_ISLAND"]
    assert topo[1].split()[:6] == ["rack1", "node1", "4", "2", "2", "2"]
    assert "[0:L 1:L] [2:. 3:.]" in topo[1] and "[0:20 1:20] [2:20 3:20]" in topo[2]


def test_explain_running_waiting_unknown(run: Run, server: ApiServer) -> None:
    out = run("explain", "10", "--url", server.url).output
    assert "Job 10  app themis-alice/sweep" in out and "Why:       running on node1:2" in out
    assert "Lease:" in out and "ROUND" in out
    # no model given: the default class, built in, and its factor where the job runs (issue #36 item 3)
    assert "Class:     low (built-in): island 1.00, node 1.00, rack 0.98, cluster 0.96; now placed at island " \
        "level: x1.00" in out
    out = run("explain", "21", "--url", server.url, user="bob").output
    assert "Why:       waiting: in round 2" in out
    res = run("explain", "999", "--url", server.url)
    assert res.exit_code == 1 and "themis: error: job 999 is not managed by Themis" in res.output
    doc = json.loads(run("explain", "10", "--url", server.url, "--json").output)
    assert set(doc) == {"meta", "job", "app", "summary", "rounds", "placement", "lease", "events", "estimate",
                        "tenancy", "room", "profile"}
    assert (doc["profile"]["asked"], doc["profile"]["name"], doc["profile"]["defined_by"]) == (None, "low", "built-in")
    assert doc["tenancy"] is None  # flat (tenancy.levels [app])
    assert doc["room"] is None  # a running job (and one that needs no CPUs or memory)
    assert doc["estimate"]["calibration_factor"] == 1.0 and "Estimate:  " in out


def test_anonymous_gets_aggregates_and_is_told_why(run: Run, server: ApiServer) -> None:
    res = run("jobs", "--url", server.url, "-h", user=None)
    assert res.exit_code == 0
    assert "aggregates only (munge is not installed (apt-get install munge))" in res.output


def test_daemon_down_is_an_error_naming_the_address(run: Run) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    res = run("status", "--url", url)
    assert res.exit_code == 1
    assert f"themis: error: themisd not reachable at {url}" in res.output
    assert "is the service running? (systemctl status themisd)" in res.output


def test_controller_fallback_reads_the_database(run: Run, db: Path, tmp_path: Path, slurm_conf: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from themis_slurm.api import cluster

    monkeypatch.setattr(cluster.CachedSnapshot, "_cli_reader", staticmethod(lambda *a: world.snapshot))
    cfg = tmp_path / "themis.yaml"
    cfg.write_text(f"state_dir: {db.parent}\napi:\n  listen: 127.0.0.1:{free_port()}\n"
                   f"slurm:\n  slurm_conf: {slurm_conf}\n")
    res = run("jobs", "-c", str(cfg), "-h", "-o", "job")
    assert res.exit_code == 0, res.output
    assert "read " + str(db) + " directly" in res.output and "data from the state database" in res.output


def test_usage_errors_exit_2(run: Run, server: ApiServer) -> None:
    assert run("jobs", "--url", server.url, "-o", "bogus").exit_code == 2
    assert run("status", "--watch", "0").exit_code == 2
    assert run("explain").exit_code == 2
    assert run("config", "check", "a", "b").exit_code == 2


def test_explicit_missing_config_is_an_error(run: Run, tmp_path: Path) -> None:
    res = run("status", "-c", str(tmp_path / "nope.yaml"))
    assert res.exit_code == 1 and "does not exist" in res.output


@pytest.mark.parametrize("factor, shown", [(1.0, None), (0.25, "x 0.25"), (2.4, "x 2.40")])
def test_explain_shows_the_calibrated_estimate(factor: float, shown: str | None) -> None:
    from themis_slurm.cli.explain import render_explain
    from themis_slurm.cli.output import TableOptions

    doc = {"job": {"job": "7", "app": "alice/a", "user": "alice", "gpus": 2, "state": "PENDING", "intent": "waiting"},
           "app": None, "summary": "waiting", "lease": {"end": None}, "rounds": [], "events": [],
           "placement": {"planned": {}, "granted": None, "current": None},
           "estimate": {"source": "est=", "seconds": 3600.0 * factor, "submitted_seconds": 3600.0,
                        "calibration_factor": factor, "note": ""}}
    line = next(x for x in render_explain(doc, TableOptions()).splitlines() if x.startswith("Estimate:"))
    assert "from --themis-est" in line
    if shown is None:
        assert "calibrated" not in line
    else:
        assert shown in line and "(1:00:00)" in line and "calibrated" in line


@pytest.mark.parametrize(("saves", "source", "unsaved", "shown"), [
    ("warning", "default", 0.0, "Saves:     at Themis's warning, from the default"),
    ("never", "learned", 7200.0, "never (a preemption loses its whole run), from learned: its progress restarted "
     "lower after a requeue; a preemption now would lose 2.00 GPU-h of work"),
    ("every 1800 s", "owner", 360.0, "every 1800 s, from its owner's --themis-ckpt; a preemption now would lose 0.10"),
    ("warning", "learned", 0.0, "at Themis's warning, from learned: its progress went on after a requeue"),
])
def test_explain_says_how_the_job_saves(saves: str, source: str, unsaved: float, shown: str) -> None:
    from themis_slurm.cli.explain import render_explain
    from themis_slurm.cli.output import TableOptions

    doc = {"job": {"job": "7", "app": "alice/a", "user": "alice", "gpus": 2, "state": "RUNNING", "intent": "running",
                   "checkpoint": saves, "checkpoint_source": source, "unsaved_gpu_s": unsaved},
           "app": None, "summary": "running", "lease": {"end": None}, "rounds": [], "events": [],
           "placement": {"planned": {}, "granted": None, "current": None}, "estimate": None}
    line = next(x for x in render_explain(doc, TableOptions()).splitlines() if x.startswith("Saves:"))
    assert shown in line
