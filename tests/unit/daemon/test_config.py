"""Config validation: every error names the key, the value and what is accepted; --check-config; reload."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from themis_slurm.daemon.config import Config, ConfigError, load, parse
from themis_slurm.daemon.main import cli
from themis_slurm.daemon.service import Service

EXAMPLE = Path(__file__).resolve().parents[3] / "daemon" / "themis.yaml"


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
    assert (cfg.scheduler.restart_cost_s, cfg.scheduler.reserve_wide_gangs) == (60.0, False)
    on = parse({"scheduler": {"reserve_wide_gangs": True, "restart_cost_s": 0}}).scheduler
    assert (on.reserve_wide_gangs, on.restart_cost_s) == (True, 0.0)
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
    from themis_slurm.daemon.state import Store

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
