"""Config validation: every error names the key, the value and what is accepted; --check-config; reload."""

from __future__ import annotations

import re
from dataclasses import fields, replace
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from themis_slurm.core.arbiter import ArbiterConfig
from themis_slurm.core.calibration import CalibrationConfig
from themis_slurm.daemon.config import BOUNDS, Config, ConfigError, load, parse, safe_load
from themis_slurm.daemon.main import cli
from themis_slurm.daemon.service import Service

EXAMPLE = Path(__file__).resolve().parents[3] / "themis_slurm" / "site" / "themis.yaml"


@pytest.mark.parametrize(("doc", "message"), [
    ({"scheduler": {"lease_minutes": -3}}, "themis.yaml: scheduler.lease_minutes: value -3 is not a positive number"),
    ({"mode": "advise"}, "themis.yaml: mode: value 'advise' is not one of enforce, observe"),
    ({"scheduler": {"fairness_knob": 1}}, "scheduler.fairness_knob: value 1 is not a number in [0, 1)"),
    ({"scheduler": {"grace_s": "10s"}}, "scheduler.grace_s: value '10s' is not a number >= 0"),
    ({"scheduler": {"solver": "gurobi"}}, "scheduler.solver: value 'gurobi' is not one of auto, exact, fast"),
    ({"scheduler": {"restart_cost_s": -1}}, "scheduler.restart_cost_s: value -1 is not a number >= 0"),
    ({"scheduler": {"reserve_wide_gangs": "yes"}}, "scheduler.reserve_wide_gangs: value 'yes' is not true or false"),
    ({"poll_interval_s": True}, "poll_interval_s: value True is not a positive number"),
    ({"state_dir": "var/lib"}, "state_dir: value 'var/lib' is not an absolute path"),
    ({"metrics": {"listen": "localhost"}}, "metrics.listen: value 'localhost' is not HOST:PORT"),
    ({"slurm": {"partitions": []}}, "slurm.partitions: value [] is not a non-empty list of partition names"),
    ({"lease": 3}, "themis.yaml: lease: unknown key (accepted: mode, poll_interval_s"),
    ({"scheduler": {"lease": 3}}, "scheduler.lease: unknown key (accepted: lease_minutes, grace_s"),
    ({"scheduler": 5}, "scheduler: value 5 is not a mapping"),
    ({"estimates": {"min_s": 100, "max_s": 10, "default_s": 50}}, "estimates.min_s: value 100 is above"),
    ({"estimates": {"default_s": 5}}, "estimates.default_s: value 5 is outside"),
    ({"estimates": {"calibrate": 1}}, "estimates.calibrate: value 1 is not true or false"),
    ({"estimates": {"calibration_min_jobs": 0}}, "estimates.calibration_min_jobs: value 0 is not an integer >= 1"),
    ({"estimates": {"calibration_window": 2.5}}, "estimates.calibration_window: value 2.5 is not an integer >= 1"),
    ({"estimates": {"calibration_raise_above": 0.5}}, "estimates.calibration_raise_above: value 0.5 is not a number >= 1"),
    ({"estimates": {"calibration_min_jobs": 20, "calibration_window": 10}},
     "estimates.calibration_window: value 10 is below estimates.calibration_min_jobs (20)"),
])  # fmt: skip
def test_errors_name_key_value_and_accepted(doc: dict, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse(doc, "themis.yaml")
    assert message in str(e.value)


def test_defaults_and_values() -> None:
    cfg = parse({"mode": "OBSERVE", "scheduler": {"lease_minutes": 0.5}, "slurm": {"partitions": "gpu"}})
    assert cfg.mode == "observe"
    assert cfg.scheduler.lease_s == 30.0
    assert cfg.slurm.partitions == ("gpu",)
    core = ArbiterConfig()
    assert (cfg.scheduler.restart_cost_s, cfg.scheduler.reserve_wide_gangs, cfg.scheduler.rank_at_share,
            cfg.scheduler.fairness_knob) == (core.restart_cost_s, True, 2.0, 0.9)  # fmt: skip
    off = parse({"scheduler": {"reserve_wide_gangs": False, "restart_cost_s": 0, "rank_at_share": 0}}).scheduler
    assert (off.reserve_wide_gangs, off.restart_cost_s, off.rank_at_share) == (False, 0.0, 0.0)
    assert parse(None) == Config(source="themis.yaml")
    assert parse({"metrics": {"listen": ""}}).metrics.address is None
    assert parse({"metrics": {"listen": "[::1]:9000"}}).metrics.address == ("::1", 9000)
    assert parse({"api": {"listen": "", "operators": ["themis", 0]}}).api.operators == ("themis", "0")
    with pytest.raises(ConfigError, match="api.operators: value True is not a list of user names or uids"):
        parse({"api": {"operators": True}})


def test_load_reports_yaml_errors_and_missing_files(tmp_path: Path) -> None:
    bad = tmp_path / "t.yaml"
    bad.write_text("mode: [enforce\n")
    with pytest.raises(ConfigError, match=r"t.yaml: not valid YAML at line"):
        load(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "missing.yaml")
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load(bad)


def test_annotated_example_is_valid() -> None:
    cfg = load(EXAMPLE)
    assert cfg.mode == "enforce"
    # the shipped site value: a default install behaves as before the code default became the core's 30 s
    assert cfg.scheduler.restart_cost_s == 60.0
    assert cfg.scheduler.arbiter() == replace(ArbiterConfig(), restart_cost_s=60.0)


def test_every_core_knob_is_settable_and_defaults_to_the_core() -> None:
    core = ArbiterConfig()
    assert parse({}).estimates.calibration() == CalibrationConfig()
    assert parse({"estimates": {"calibrate": False, "calibration_min_jobs": 4, "calibration_window": 8,
                                "calibration_raise_above": 2}}).estimates.calibration() == CalibrationConfig(False, 4, 8, 2.0)
    assert parse({"estimates": {"calibration_running": False, "calibration_prior": 2, "calibration_prior_users": 5,
                                "calibration_peer_floor": False, "calibration_peer_tolerance": 3}}).estimates.calibration() == \
        CalibrationConfig(running=False, prior=2.0, prior_users=5, peer_floor=False, peer_tolerance=3.0)
    assert {f.name for f in fields(CalibrationConfig)} == {"enabled", "min_jobs", "window", "raise_above", "running",
                                                           "prior", "prior_users", "peer_floor", "peer_tolerance"}
    assert parse({}).scheduler.arbiter() == core
    knobs = {"fairness_knob": 0.5, "solver": "fast", "exact_max_bidders": 3, "exact_max_gpus": 7,
             "idle_throughput": 0.2, "hidden_payments": False, "seed": 42, "restart_cost_s": 5,
             "reserve_wide_gangs": True, "keep_wide_gangs": True, "wide_gang_release_rho": 1.5,
             "keep_in_place": False, "rank_at_share": 2.0, "leftover_order": "rho", "unsaved_keep_leases": 2.5,
             "unsaved_release_rho": 0.6, "order_slack": 0.25}
    arb = parse({"scheduler": {**knobs, "lease_minutes": 2}}).scheduler.arbiter()
    assert arb == ArbiterConfig(lease_s=120.0, **knobs)
    assert {f.name for f in fields(ArbiterConfig)} <= {*knobs, "lease_s"}
    for key, bad, text in (("seed", 1.5, "an integer"), ("exact_max_gpus", -1, "an integer >= 0"),
                           ("idle_throughput", 0, "a number in (0, 1]"), ("hidden_payments", 1, "true or false"),
                           ("keep_wide_gangs", 0, "true or false"), ("wide_gang_release_rho", -1, "a number >= 0"),
                           ("unsaved_keep_leases", -1, "a number >= 0"), ("unsaved_release_rho", "x", "a number >= 0"),
                           ("order_slack", 1.5, "a number in [0, 1]"),
                           ("keep_in_place", 2, "true or false"), ("rank_at_share", -1, "a number >= 0"),
                           ("leftover_order", "fifo", "one of deadline, rho")):
        shown = repr(bad) if isinstance(bad, str) else bad
        with pytest.raises(ConfigError, match=re.escape(f"scheduler.{key}: value {shown} is not {text}")):
            parse({"scheduler": {key: bad}})


def test_check_config_exit_codes(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(f"state_dir: {tmp_path}\n")
    bad.write_text("scheduler:\n  lease_minutes: -3\n")
    runner = CliRunner()
    res = runner.invoke(cli, ["--check-config", str(good)])
    assert res.exit_code == 0 and "OK" in res.output
    res = runner.invoke(cli, ["--check-config", str(bad)])
    assert res.exit_code == 1
    assert "scheduler.lease_minutes: value -3 is not a positive number" in res.output
    res = runner.invoke(cli, ["-c", str(bad), "--check-config"])
    assert res.exit_code == 1
    res = runner.invoke(cli, ["check-config", str(good)])
    assert res.exit_code == 0


def test_sighup_reload_rejects_bad_config_and_keeps_old(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from themis_slurm.daemon.loop import Daemon
    from themis_slurm.state.store import Store

    path = tmp_path / "themis.yaml"
    path.write_text(f"state_dir: {tmp_path}\nscheduler:\n  lease_minutes: 5\nmetrics:\n  listen: ''\n")
    cfg = load(path)
    store = Store(cfg.db_path)
    svc = Service(cfg, path, backend=None)  # type: ignore[arg-type]
    daemon = Daemon(cfg, None, store)  # type: ignore[arg-type]
    path.write_text("scheduler:\n  lease_minutes: nope\n")
    svc._do_reload(daemon)
    assert daemon.cfg.scheduler.lease_minutes == 5
    assert "config reload rejected" in caplog.text
    path.write_text("state_dir: /elsewhere\nscheduler:\n  lease_minutes: 7\nmetrics:\n  listen: ''\n")
    svc._do_reload(daemon)
    assert daemon.cfg.scheduler.lease_minutes == 7
    assert daemon.cfg.state_dir == str(tmp_path), "state_dir needs a restart"
    store.close()


# ------------------------------------------------------------------------------------------ YAML and bounds
def test_duplicate_keys_are_errors_naming_the_key_and_both_lines(tmp_path: Path) -> None:
    f = tmp_path / "t.yaml"
    f.write_text("mode: observe\npoll_interval_s: 5\nlog_level: info\npoll_interval_s: 1\n")
    with pytest.raises(ConfigError) as e:
        load(f)
    assert str(e.value) == (f"{f}: duplicate key 'poll_interval_s' at line 4 (first given at line 2): "
                            "remove one of them")
    f.write_text("scheduler:\n  grace_s: 30\n  lease_minutes: 5\n  grace_s: 90\n")
    with pytest.raises(ConfigError, match=r"duplicate key 'grace_s' at line 4 \(first given at line 2\)"):
        load(f)
    f.write_text("scheduler:\n  grace_s: 30\nscheduler:\n  lease_minutes: 5\n")
    with pytest.raises(ConfigError, match=r"duplicate key 'scheduler' at line 3 \(first given at line 1\)"):
        load(f)
    # a merge key overridden on purpose is not a duplicate
    assert safe_load("base: &b {x: 1}\nm:\n  <<: *b\n  x: 2\n") == {"base": {"x": 1}, "m": {"x": 2}}


def test_exponent_numbers_are_numbers(tmp_path: Path) -> None:
    assert safe_load("a: 1e9\nb: 1e-3\nc: 5E2\nd: 1.5e3\ne: 5\nf: '1e9'\ng: 2.5\nh: -2e1") == {
        "a": 1e9, "b": 1e-3, "c": 500.0, "d": 1500.0, "e": 5, "f": "1e9", "g": 2.5, "h": -20.0}
    f = tmp_path / "t.yaml"
    f.write_text("poll_interval_s: 5E0\nscheduler:\n  restart_cost_s: 6e1\n  fairness_knob: 8e-1\n"
                 "estimates:\n  max_s: 2.592e6\n  default_s: 1e3\n")
    cfg = load(f)
    assert (cfg.poll_interval_s, cfg.scheduler.restart_cost_s, cfg.scheduler.fairness_knob) == (5.0, 60.0, 0.8)
    assert (cfg.estimates.max_s, cfg.estimates.default_s) == (2592000.0, 1000.0)
    assert yaml.safe_load("a: 1e9") == {"a": "1e9"}, "PyYAML's own loader is left as it is"


@pytest.mark.parametrize(("text", "message"), [
    ("poll_interval_s: 1e-6", "poll_interval_s: value 1e-06 is below the lower bound 0.1 s"),
    ("poll_interval_s: 0.05", "poll_interval_s: value 0.05 is below the lower bound 0.1 s"),
    ("scheduler:\n  lease_minutes: 0.05", "scheduler.lease_minutes: value 0.05 is below the lower bound 0.1 min"),
    ("scheduler:\n  release_timeout_s: 1", "scheduler.release_timeout_s: value 1 is below the lower bound 5 s"),
    ("slurm:\n  command_timeout_s: 0.5", "slurm.command_timeout_s: value 0.5 is below the lower bound 1 s"),
    ("estimates:\n  min_s: 0.5", "estimates.min_s: value 0.5 is below the lower bound 1 s"),
    ("scheduler:\n  grace_s: -1", "scheduler.grace_s: value -1 is not a number >= 0"),
    ("scheduler:\n  min_runtime_s: -1e3", "scheduler.min_runtime_s: value -1000.0 is not a number >= 0"),
    ("poll_interval_s: 60\nscheduler:\n  lease_minutes: 0.5",
     "scheduler.lease_minutes: value 0.5 (30 s) is shorter than poll_interval_s (60 s)"),
])  # fmt: skip
def test_intervals_have_lower_bounds(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "t.yaml"
    f.write_text(text + "\n")
    with pytest.raises(ConfigError) as e:
        load(f)
    assert str(e.value).startswith(f"{f}: {message}"), str(e.value)


def test_bounds_are_inclusive_and_cover_every_duration() -> None:
    doc: dict = {"poll_interval_s": 0.1, "scheduler": {"lease_minutes": 0.1, "grace_s": 0, "min_runtime_s": 0,
                                                       "release_timeout_s": 5, "restart_cost_s": 0},
                 "estimates": {"min_s": 1, "default_s": 1, "max_s": 1},
                 "slurm": {"command_timeout_s": 1, "action_timeout_s": 1, "act_within_s": 1},
                 "failopen": {"after_s": 0}, "api": {"request_timeout_s": 0.1, "write_timeout_s": 0.1},
                 "tenancy": {"refresh_s": 10}}
    cfg = parse(doc)
    assert cfg.poll_interval_s == 0.1 and cfg.slurm.command_timeout_s == 1.0
    assert cfg.slurm.action_timeout_s == 1.0 and cfg.slurm.act_within_s == 1.0
    durations = {"poll_interval_s"} | {f"{sec}.{k}" for sec, keys in doc.items() if isinstance(keys, dict)
                                       for k in keys}
    assert durations == set(BOUNDS)


def test_cli_reads_themis_yaml_with_the_same_loader(tmp_path: Path) -> None:
    from themis_slurm.cli.client import CliError, load_settings

    f = tmp_path / "t.yaml"
    f.write_text("api:\n  listen: '127.0.0.1:1'\napi:\n  listen: '127.0.0.1:2'\n")
    with pytest.raises(CliError, match=r"duplicate key 'api' at line 3 \(first given at line 1\)"):
        load_settings(f, None)
    f.write_text("state_dir: /srv/themis\napi:\n  listen: '127.0.0.1:9000'\n")
    s = load_settings(f, None)
    assert (s.url, s.db_path) == ("http://127.0.0.1:9000", Path("/srv/themis/themis.db"))


def test_slurm_backend_choice() -> None:
    from themis_slurm.daemon.config import BACKENDS
    from themis_slurm.slurm.backends import BACKEND_KINDS

    assert BACKENDS == BACKEND_KINDS
    assert parse({}, "t.yaml").slurm.backend == "auto"
    assert parse({"slurm": {"backend": "pyslurm"}}, "t.yaml").slurm.backend == "pyslurm"
    with pytest.raises(ConfigError, match="slurm.backend"):
        parse({"slurm": {"backend": "rest"}}, "t.yaml")


def test_the_api_servers_limits_are_config_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 38 item 8: the status API's limits were parameters of start_api_server only
    from themis_slurm.daemon import service

    cfg = parse({"state_dir": str(tmp_path), "api": {"listen": "127.0.0.1:8787", "workers": 3, "backlog": 9,
                 "request_timeout_s": 2.5, "write_timeout_s": 7, "max_connections": 40}})
    seen: dict = {}

    def fake_start(*args: object, **kw: object) -> object:
        seen.update(kw)
        return type("S", (), {"url": "http://x"})()

    monkeypatch.setattr(service, "start_api_server", fake_start)
    svc = Service(cfg, tmp_path / "t.yaml", backend=None)  # type: ignore[arg-type]
    svc._start_api(type("D", (), {"last_snapshot": None, "last_cycle_time": None, "cfg": cfg,
                                  "pending_actions": list})())
    assert {k: seen[k] for k in ("workers", "backlog", "timeout", "write_timeout", "max_connections")} == {
        "workers": 3, "backlog": 9, "timeout": 2.5, "write_timeout": 7.0, "max_connections": 40}
    with pytest.raises(ConfigError, match="api.workers: value 0 is not an integer >= 1"):
        parse({"api": {"workers": 0}})


def test_the_api_keys_default_to_the_servers_own_defaults() -> None:
    """daemon/config.py states the API server's defaults itself (the daemon imports the API only where it starts
    it): they must be the server's."""
    from themis_slurm.api import server

    api = Config().api
    assert (api.listen, api.workers, api.backlog, api.request_timeout_s, api.write_timeout_s,
            api.max_connections) == (server.DEFAULT_LISTEN, server.DEFAULT_WORKERS, server.DEFAULT_BACKLOG,
                                     server.DEFAULT_TIMEOUT_S, server.DEFAULT_WRITE_TIMEOUT_S,
                                     server.DEFAULT_MAX_CONNECTIONS)
