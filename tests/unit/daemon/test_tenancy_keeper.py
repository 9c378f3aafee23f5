"""daemon/tenancy.py: which tree the rounds use, when it is read again, what is logged, and what happens when
Slurm cannot tell (issue 33 item 2). A fake tree source stands for slurm/shares.py's SharesReader."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest

from themis_slurm.core.tenancy import FLAT, Tenancy
from themis_slurm.daemon.config import TenancyConfig
from themis_slurm.daemon.tenancy import RETRY_S, TenancyKeeper, resolve
from themis_slurm.slurm.errors import SlurmOutputError
from themis_slurm.slurm.runner import SlurmCommandError
from themis_slurm.slurm.shares import SSHARE, ShareTree, parse_sshare

TREE = "root||\n root|root|1\n vision||3\n  vision|alice|2\n  vision|bob|1\n nlp||1\n  nlp|bob|1\n"


@dataclass
class Source:
    """Answers like SharesReader; `fail` raises instead; counts the calls."""

    has_accounting: bool = True
    text: str = TREE
    fail: Exception | None = None
    calls: list[str] = field(default_factory=list)

    def accounting(self) -> bool:
        self.calls.append("accounting")
        if self.fail is not None:
            raise self.fail
        return self.has_accounting

    def tree(self) -> ShareTree:
        self.calls.append("tree")
        if self.fail is not None:
            raise self.fail
        return parse_sshare(self.text)


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    out = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tenancy:")]
    caplog.clear()
    return out


AUTO = TenancyConfig(levels="auto")


def test_auto_with_accounting_is_account_user_app_with_slurms_shares() -> None:
    got = resolve(AUTO, Source())
    assert got.tenancy == Tenancy(
        ("account", "user", "app"),
        {"vision": 3.0, "nlp": 1.0},
        {("root", "root"): 1.0, ("vision", "alice"): 2.0, ("vision", "bob"): 1.0, ("nlp", "bob"): 1.0},
    )
    assert got.line == "account -> user -> app, 2 accounts, 2 users (shares from slurm)"


def test_auto_without_accounting_is_user_app_equal_and_runs_no_sshare() -> None:
    src = Source(has_accounting=False)
    got = resolve(AUTO, src)
    assert got.tenancy == Tenancy(("user", "app")) and src.calls == ["accounting"]
    assert got.line == "user -> app (equal shares, no accounting (AccountingStorageType none))"


def test_app_level_alone_is_the_paper_and_reads_nothing() -> None:
    src = Source()
    got = resolve(TenancyConfig(levels=("app",)), src)
    assert got.tenancy == FLAT and got.tenancy.flat and src.calls == []


def test_explicit_levels_and_equal_shares_read_nothing() -> None:
    src = Source()
    assert resolve(TenancyConfig(levels=("account", "app"), shares="equal"), src).tenancy == Tenancy(
        ("account", "app")
    )
    assert src.calls == []


def test_explicit_levels_with_slurm_shares_read_only_the_tree() -> None:
    src = Source()
    got = resolve(TenancyConfig(levels=("user", "app"), shares="slurm"), src)
    assert got.tenancy.levels == ("user", "app") and src.calls == ["tree"]
    assert got.line == "user -> app, 2 users (shares from slurm)"


def test_slurm_shares_on_a_cluster_without_accounting_is_a_clear_error() -> None:
    keeper = TenancyKeeper(TenancyConfig(levels="auto", shares="slurm"), Source(has_accounting=False))
    with pytest.raises(Exception, match="tenancy.shares is slurm but the cluster has no accounting"):
        resolve(keeper.cfg, keeper.source)


def test_read_at_start_then_every_refresh_s_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "themisd")
    src = Source()
    keeper = TenancyKeeper(TenancyConfig(levels="auto", refresh_s=300), src)
    assert keeper.tenancy(1000.0).levels == ("account", "user", "app")
    assert lines(caplog) == ["tenancy: account -> user -> app, 2 accounts, 2 users (shares from slurm)"]
    for t in (1001.0, 1150.0, 1299.0):
        keeper.tenancy(t)
    assert src.calls == ["accounting", "tree"]  # nothing before refresh_s
    keeper.tenancy(1300.0)
    assert src.calls == ["accounting", "tree"] * 2
    assert lines(caplog) == []  # the same tree: not logged again


def test_sighup_reads_again_at_the_next_cycle(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "themisd")
    src = Source()
    keeper = TenancyKeeper(AUTO, src)
    keeper.tenancy(1000.0)
    src.text = TREE.replace("vision||3", "vision||5")
    keeper.configure(AUTO)  # what Daemon.reload does on SIGHUP
    assert keeper.tenancy(1001.0).account_shares["vision"] == 5.0
    assert lines(caplog)[-1] == (
        "tenancy: account -> user -> app, 2 accounts, 2 users (shares from slurm); "
        "applies from the next round, the apps' clocks keep their history"
    )
    keeper.configure(TenancyConfig(levels=("app",)))
    assert keeper.tenancy(1002.0) == FLAT
    assert lines(caplog) == [
        "tenancy: app (every app 1/N of the cluster, as in the paper: tenancy.levels [app]); "
        "applies from the next round, the apps' clocks keep their history"
    ]


@pytest.mark.parametrize("error", [
    SlurmCommandError(list(SSHARE), None, "no answer within 10 s"),
    SlurmCommandError(list(SSHARE), 1, "sshare: error: Problem talking to the database"),
    SlurmOutputError("sshare", "line 1", "expected Account|User|RawShares"),
])  # fmt: skip
def test_no_tree_at_start_falls_back_to_user_app_equal(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "themisd")
    src = Source(fail=error)
    keeper = TenancyKeeper(AUTO, src)
    assert keeper.tenancy(1000.0) == Tenancy(("user", "app"))
    logged = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert logged[0] == (
        "ERROR",
        f"tenancy: cannot read Slurm's account tree: {error}; using user -> app with "
        "equal shares until it can (retried every 30 s)",
    )
    assert logged[1] == (
        "INFO",
        "tenancy: user -> app (equal shares: fallback, Slurm's account tree could not be read)",
    )
    caplog.clear()
    keeper.tenancy(1000.0 + RETRY_S - 1)
    assert len(src.calls) == 1  # not retried before RETRY_S
    keeper.tenancy(1000.0 + RETRY_S)
    assert len(src.calls) == 2 and lines(caplog) == []  # the same failure: not logged again
    src.fail = None
    assert keeper.tenancy(1000.0 + 2 * RETRY_S).levels == ("account", "user", "app")
    assert lines(caplog) == [
        f"tenancy: Slurm's account tree read again after: {error}",
        "tenancy: account -> user -> app, 2 accounts, 2 users (shares from slurm); applies "
        "from the next round, the apps' clocks keep their history",
    ]


def test_a_failed_refresh_keeps_the_last_tree(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "themisd")
    src = Source()
    keeper = TenancyKeeper(TenancyConfig(levels="auto", refresh_s=60), src)
    good = keeper.tenancy(1000.0)
    caplog.clear()
    src.fail = SlurmCommandError(list(SSHARE), None, "no answer within 10 s")
    assert keeper.tenancy(1060.0) == good
    assert keeper.tenancy(1090.0) == good  # retried after RETRY_S, still failing: kept, not logged again
    assert src.calls.count("accounting") == 3
    warned = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert len(warned) == 1 and warned[0][0] == "WARNING"
    assert warned[0][1].startswith(
        "tenancy: cannot read Slurm's account tree: sshare -P -a -n -o "
        "Account,User,RawShares timed out: no answer within 10 s; keeping the last one "
        "(read at "
    )


def test_who_the_tree_lacks_is_logged_once_per_tree(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "themisd")
    src = Source()
    keeper = TenancyKeeper(AUTO, src)
    keeper.tenancy(1000.0)
    caplog.clear()
    owners = [("vision", "alice"), ("vision", "carol"), ("physics", "dave"), ("", "erin")]
    assert keeper.check_apps(owners) == [
        "user carol has no association in account vision: counted with 1 share",
        "account 'physics' (of user dave) is not in Slurm's account tree: it counts with 1 share",
        "user erin runs jobs without an account: they count as account '' with 1 share",
    ]
    assert keeper.check_apps(owners) == []  # once
    src.text = TREE + " physics||2\n  physics|dave|1\n"
    keeper.configure(AUTO)
    keeper.tenancy(1001.0)
    assert keeper.check_apps(owners) == [  # a new tree: said again, for who it still lacks
        "user carol has no association in account vision: counted with 1 share",
        "user erin runs jobs without an account: they count as account '' with 1 share",
    ]


def test_without_the_account_level_a_user_is_looked_up_by_name() -> None:
    keeper = TenancyKeeper(TenancyConfig(levels=("user", "app"), shares="slurm"), Source())
    keeper.tenancy(1000.0)
    assert keeper.check_apps([("nlp", "alice"), ("x", "carol")]) == [
        "user carol has no association in Slurm's account tree: counted with 1 share"
    ]


def test_equal_shares_have_nothing_to_lack() -> None:
    keeper = TenancyKeeper(TenancyConfig(levels="auto", shares="equal"), Source())
    keeper.tenancy(1000.0)
    assert keeper.check_apps([("", "carol")]) == []


def test_a_backend_without_a_reader_falls_back() -> None:
    keeper = TenancyKeeper(AUTO, None)
    assert keeper.tenancy(0.0) == Tenancy(("user", "app"))
    assert TenancyKeeper(TenancyConfig(levels=("app",)), None).tenancy(0.0) == FLAT
