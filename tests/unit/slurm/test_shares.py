"""slurm/shares.py: Slurm's association tree (sshare) -> the core's Tenancy, on output captured from 22.05
and 25.11 (tests/fixtures/shares, capture.sh: vision [3] with a sub-account cv [2], nlp [1], idle [0])."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.slurm.fake_slurm import FakeRunner
from themis_slurm.core.tenancy import fractions
from themis_slurm.core.workload import App
from themis_slurm.slurm.errors import SlurmOutputError
from themis_slurm.slurm.runner import SlurmCommandError
from themis_slurm.slurm.shares import (
    SHOW_CONFIG,
    SSHARE,
    AccountNode,
    SharesReader,
    accounting_storage,
    has_accounting,
    parse_sshare,
)

SHARES = Path(__file__).resolve().parents[2] / "fixtures" / "shares"
VERSIONS = ("2205", "2511")
VISION, CV, NLP, IDLE, TEST = (
    "themis-fx-vision",
    "themis-fx-cv",
    "themis-fx-nlp",
    "themis-fx-idle",
    "themis-test",
)
ALICE, BOB = "themis-alice", "themis-bob"


def text(name: str) -> str:
    return (SHARES / name).read_text()


@pytest.mark.parametrize("v", VERSIONS)
def test_the_tree_sshare_prints(v: str) -> None:
    tree = parse_sshare(text(f"sshare_{v}.txt"))
    assert tree.accounts["root"] == AccountNode("root", None, None)
    assert tree.accounts[VISION] == AccountNode(VISION, "root", 3.0)
    assert tree.accounts[CV] == AccountNode(CV, VISION, 2.0)  # a sub-account: indented one more level
    assert tree.accounts[NLP] == AccountNode(NLP, "root", 1.0)
    assert tree.accounts[IDLE] == AccountNode(IDLE, "root", 0.0)
    assert tree.users[(VISION, ALICE)] == 2.0 and tree.users[(VISION, BOB)] == 1.0
    assert tree.users[(CV, ALICE)] == 1.0 and tree.users[(IDLE, ALICE)] == 1.0
    assert tree.users[(NLP, BOB)] is None  # Fairshare=parent
    assert tree.account_names == {VISION, CV, NLP, IDLE, TEST}
    assert not tree.notes


@pytest.mark.parametrize("v", VERSIONS)
def test_sshare_indentation_gives_the_parents_sacctmgr_names(v: str) -> None:
    """The tree rebuilt from sshare's indentation is the one slurmdbd stores (sacctmgr's ParentName)."""
    tree = parse_sshare(text(f"sshare_{v}.txt"))
    parents, users = {}, {}
    for line in text(f"sacctmgr_assoc_{v}.txt").splitlines():
        account, user, parent, share = line.split("|")
        if user:
            users[(account, user)] = None if share == "parent" else float(share)
        else:
            parents[account] = parent or None
    assert {a: n.parent for a, n in tree.accounts.items()} == parents
    assert dict(tree.users) == users


@pytest.mark.parametrize("v", VERSIONS)
def test_shares_flattened_to_one_account_level(v: str) -> None:
    tree = parse_sshare(text(f"sshare_{v}.txt"))
    # vision's 3 split over its users (2 + 1) and cv (2): its own jobs 3 * 3/5, cv's 3 * 2/5
    assert tree.account_shares() == pytest.approx({VISION: 1.8, CV: 1.2, NLP: 1.0, IDLE: 0.0, TEST: 1.0})
    assert tree.user_shares()[(NLP, BOB)] == 1.0  # parent counts as Slurm's default 1


@pytest.mark.parametrize("v", VERSIONS)
def test_the_tenancy_divides_the_cluster_as_slurm_would(v: str) -> None:
    """Apps in cv, nlp and vision: weights 1.2 : 1 : 1.8 of 4; inside vision alice 2 : bob 1."""
    ten = parse_sshare(text(f"sshare_{v}.txt")).tenancy(("account", "user", "app"))
    apps = [
        App("a/cv", ALICE, 0.0, account=CV),
        App("b/nlp", BOB, 0.0, account=NLP),
        App("a/v1", ALICE, 0.0, account=VISION),
        App("a/v2", ALICE, 0.0, account=VISION),
        App("b/v", BOB, 0.0, account=VISION),
    ]
    got = fractions(ten, apps)
    assert got == pytest.approx(
        {"a/cv": 0.3, "b/nlp": 0.25, "a/v1": 0.45 * 2 / 3 / 2, "a/v2": 0.45 * 2 / 3 / 2, "b/v": 0.45 / 3}
    )
    # an account with 0 shares and one Slurm does not list: tiny, and 1 share (the default)
    got = fractions(
        ten,
        [
            App("a/idle", ALICE, 0.0, account=IDLE),
            App("b/nlp", BOB, 0.0, account=NLP),
            App("c/x", "carol", 0.0, account="elsewhere"),
        ],
    )
    assert got["a/idle"] < 1e-5 and got["b/nlp"] == pytest.approx(0.5, abs=1e-5)
    assert got["c/x"] == pytest.approx(0.5, abs=1e-5)


@pytest.mark.parametrize("v", VERSIONS)
def test_accounting_storage_from_show_config(v: str) -> None:
    kind = accounting_storage(text(f"scontrol_show_config_{v}.txt"))
    assert kind == "accounting_storage/slurmdbd" and has_accounting(kind)
    assert not has_accounting(accounting_storage("AccountingStorageType   = accounting_storage/none\n"))
    assert not has_accounting(accounting_storage("ClusterName = x\n"))


@pytest.mark.parametrize(("out", "problem"), [
    ("root||\n themis||1|x\n", "line 2: expected Account|User|RawShares"),
    ("root||\n a||many\n", "line 2: RawShares 'many' is not a number or 'parent'"),
    ("root||\n a||-1\n", "line 2: RawShares '-1' is not a number >= 0"),
    ("root||\n a|alice|1\n", "line 2: user 'alice' of account 'a', which no line before introduced"),
    ("root||\n   a||1\n", "line 2: account 'a' is indented 3 levels below an account at level 0"),
    ("root||\n a||1\n a||2\n", "line 3: account 'a' appears twice"),
    ("root||\n |alice|1\n", "line 2: no account name"),
])  # fmt: skip
def test_bad_sshare_output_names_the_line(out: str, problem: str) -> None:
    with pytest.raises(SlurmOutputError, match=problem.replace("|", r"\|").replace("(", r"\(")):
        parse_sshare(out)


def test_a_second_association_per_partition_is_noted_and_the_first_counts() -> None:
    tree = parse_sshare("root||\n a||1\n  a|alice|3\n  a|alice|5\n")
    assert tree.users == {("a", "alice"): 3.0}
    assert tree.notes == (
        "sshare: user alice has more than one association in account a: the first one's shares count",
    )


def test_reader_runs_argument_lists_with_the_timeout() -> None:
    runner = FakeRunner({SSHARE: text("sshare_2205.txt"), SHOW_CONFIG: text("scontrol_show_config_2205.txt")})
    reader = SharesReader(runner, 7.0)
    assert reader.accounting() is True
    assert reader.tree().accounts[VISION].raw == 3.0
    assert runner.calls == [list(SHOW_CONFIG), list(SSHARE)]
    assert runner.timeouts == [7.0, 7.0]


def test_reader_failures_are_slurm_errors() -> None:
    reader = SharesReader(
        FakeRunner({SSHARE: SlurmCommandError(list(SSHARE), None, "no answer within 7 s")}), 7.0
    )
    with pytest.raises(SlurmCommandError, match="timed out"):
        reader.tree()
    with pytest.raises(SlurmOutputError, match="sshare: line 1"):
        SharesReader(FakeRunner({SSHARE: "garbage\n"}), 7.0).tree()
