"""themis.yaml's ``tenancy:`` section (issue 33 item 2): levels, shares, refresh_s, and the errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from themis_slurm.daemon.config import Config, ConfigError, TenancyConfig, load, parse
from themis_slurm.daemon.main import cli

EXAMPLE = Path(__file__).resolve().parents[3] / "themis_slurm" / "site" / "themis.yaml"


def test_defaults_are_the_account_tree_and_five_minutes() -> None:
    # auto: account -> user -> app with accounting, user -> app without (docs/admin-guide.md, "Tenancy")
    assert parse({}).tenancy == TenancyConfig("auto", "auto", 300.0)
    assert load(EXAMPLE).tenancy == TenancyConfig("auto", "auto", 300.0)


@pytest.mark.parametrize(
    ("levels", "want"),
    [
        ("auto", "auto"),
        ("AUTO", "auto"),
        (["app"], ("app",)),
        (["user", "app"], ("user", "app")),
        (["account", "app"], ("account", "app")),
        (["Account", "User", "App"], ("account", "user", "app")),
    ],
)
def test_levels(levels: object, want: object) -> None:
    assert parse({"tenancy": {"levels": levels}}).tenancy.levels == want


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"levels": ["app", "user"]}, "tenancy.levels: value ['app', 'user'] is not auto, or a list out of "
         "account, user, app in that order ending with app (e.g. [user, app])"),
        ({"levels": ["user"]}, "tenancy.levels: value ['user'] is not auto"),
        ({"levels": ["user", "user", "app"]}, "tenancy.levels: value ['user', 'user', 'app'] is not auto"),
        ({"levels": ["group", "app"]}, "tenancy.levels: value ['group', 'app'] is not auto"),
        ({"levels": []}, "tenancy.levels: value [] is not auto"),
        ({"levels": "app"}, "tenancy.levels: value 'app' is not auto"),
        ({"levels": 3}, "tenancy.levels: value 3 is not auto"),
        ({"shares": "fair"}, "tenancy.shares: value 'fair' is not one of auto, slurm, equal"),
        ({"refresh_s": 5}, "tenancy.refresh_s: value 5 is below the lower bound 10 s (every refresh asks "
         "slurmctld for the whole association tree)"),
        ({"refresh_s": "5m"}, "tenancy.refresh_s: value '5m' is not a positive number"),
        ({"levles": ["app"]}, "tenancy.levles: unknown key (accepted: levels, shares, refresh_s)"),
    ],
)  # fmt: skip
def test_errors_name_the_key_and_the_value(doc: dict, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse({"tenancy": doc}, "themis.yaml")
    assert str(e.value).startswith(f"themis.yaml: {message}"), str(e.value)


def test_tenancy_is_applied_by_a_reload() -> None:
    old = Config()
    new = parse({"tenancy": {"levels": ["app"], "shares": "equal", "refresh_s": 60}})
    assert old.restart_only_changes(new) == []


def test_check_config_says_what_tenancy_it_will_use(tmp_path: Path) -> None:
    f = tmp_path / "t.yaml"
    f.write_text(f"state_dir: {tmp_path}\ntenancy:\n  levels: [user, app]\n  shares: equal\n")
    res = CliRunner().invoke(cli, ["--check-config", str(f)])
    assert res.exit_code == 0 and "tenancy user -> app with equal shares" in res.output
