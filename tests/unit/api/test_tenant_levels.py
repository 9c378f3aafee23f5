"""The tenancy tree with numbers (themis_slurm/tenant_levels.py), the words of a tenancy limit
(themis_slurm/reasons.py) and the stored tree (store v9), checked by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from themis_slurm import reasons
from themis_slurm.core.decision import AppRecord, Outcome
from themis_slurm.core.tenancy import FLAT, ZERO_SHARES, Tenancy, entity_fractions, fractions
from themis_slurm.core.workload import App
from themis_slurm.state.schema import MIGRATIONS
from themis_slurm.state.store import Store
from themis_slurm.tenant_levels import Member, entity_json, summarise, tenancy_from_json, tenancy_json

TREE = Tenancy(
    ("account", "user", "app"), {"A": 3.0, "B": 1.0, "Z": 0.0}, {("A", "u1"): 2.0, ("A", "u2"): 1.0}
)


def test_shares_are_the_cores_fractions_summed_up_the_tree() -> None:
    members = [
        Member("u1/a", "u1", "A", rho=2.0, rank=1, gpus=4, running=1, waiting=1),
        Member("u1/b", "u1", "A", rho=1.2, rank=3, gpus=0, waiting=1),
        Member("u2/a", "u2", "A", rho=0.8, rank=4, gpus=2, running=1),
        Member("u3/a", "u3", "B", rho=1.5, rank=2, gpus=2, running=1),
        Member("u4/old", "u4", "B", active=False, rho=0.5),
    ]  # finished: grouped, no share
    got = summarise(TREE, members, {("user", ("A", "u1")): 5.0, ("user", ("A", "u2")): 1.0})
    rows = [(lv.level, lv.name, lv.share, lv.gpus, lv.quota, lv.rho, lv.rank, lv.apps) for lv in got.levels]
    # A 3/4 split 2:1 between u1 and u2; B 1/4 all u3's (u4 has no work); by worst-off app first
    assert rows == [
        ("account", "A", 0.75, 6, 6.0, 2.0, 1, ("u1/a", "u1/b", "u2/a")),
        ("user", "u1", 0.5, 4, 5.0, 2.0, 1, ("u1/a", "u1/b")),
        ("user", "u2", 0.25, 2, 1.0, 0.8, 4, ("u2/a",)),
        ("account", "B", 0.25, 2, None, 1.5, 2, ("u3/a", "u4/old")),
        ("user", "u3", 0.25, 2, None, 1.5, 2, ("u3/a",)),
        ("user", "u4", None, 0, None, 0.5, None, ("u4/old",)),
    ]
    active = [App(m.app, m.owner, 0.0, account=m.account) for m in members if m.active]
    assert got.app_share == fractions(TREE, active)
    users = entity_fractions(TREE, active)
    assert {lv.entity: lv.share for lv in got.levels if lv.level == "user" and lv.share} == users
    assert got.app_tenant["u1/b"] == ("user", ("A", "u1"))


def test_zero_shares_and_flat() -> None:
    got = summarise(TREE, [Member("z/a", "z", "Z"), Member("u3/a", "u3", "B")], {})
    assert [(lv.name, lv.shares) for lv in got.levels if lv.level == "account"] == [("B", 1.0), ("Z", 0.0)]
    assert got.levels[2].share == pytest.approx(ZERO_SHARES / (1 + ZERO_SHARES))
    flat = summarise(FLAT, [Member("a/x", "a", ""), Member("b/y", "b", "")], {})
    assert flat.levels == () and flat.app_share == {"a/x": 0.5, "b/y": 0.5} and flat.app_tenant == {}


def test_tree_json_round_trip_and_bad_rows() -> None:
    assert tenancy_from_json(tenancy_json(TREE)) == TREE
    assert entity_json(("user", ("A", "u1"))) == '["user", ["A", "u1"]]'
    with pytest.raises(ValueError, match="stored tenancy tree is not readable"):
        tenancy_from_json('{"levels": ["user"]}')


LV = reasons.LevelAtShare


@pytest.mark.parametrize(
    ("at_share", "ahead", "kept", "you", "tenant", "words"),
    [
        (
            [LV("account", "vision", "vision", 8, 8.0, 0.5)],
            [],
            False,
            True,
            ("user", "alice"),
            "your account vision is at its share: it holds 8 GPU(s) against its quota of 8.00 GPU(s) in that round, "
            "50.0% of the cluster now; other accounts came first",
        ),
        (
            [LV("user", "alice", "vision", 2, 2.5)],
            [],
            False,
            True,
            ("user", "alice"),
            "you (alice) are at your share in account vision: you hold 2 GPU(s) against your quota of 2.50 GPU(s) in "
            "that round; other users of the account came first",
        ),
        (
            [LV("user", "alice", "", 2, 2.0, 0.25)],
            [],
            True,
            False,
            ("user", "alice"),
            "it kept only what fits the quota because user alice is at its share: it holds 2 GPU(s) against its quota "
            "of 2.00 GPU(s) in that round, 25.0% of the cluster now; other users came first",
        ),
        (
            [],
            [reasons.AppAhead("alice/a", 1, 3.0, 4)],
            False,
            True,
            ("user", "alice"),
            "another app of yours is further behind and went first: alice/a (rank 1, rho 3.00, got 4 GPU(s))",
        ),
        (
            [],
            [reasons.AppAhead("bob/a", 1, None, 1), reasons.AppAhead("carol/b", 2, 2.0, 2)],
            False,
            True,
            ("account", "nlp"),
            "other apps of account nlp are further behind and went first: bob/a (rank 1, rho -, "
            "got 1 GPU(s)), carol/b (rank 2, rho 2.00, got 2 GPU(s))",
        ),
        ([], [], False, True, ("user", "alice"), None),
    ],
)
def test_words_of_a_tenancy_limit(
    at_share: list, ahead: list, kept: bool, you: bool, tenant: tuple, words: str | None
) -> None:
    assert reasons.tenancy_limit(at_share, ahead, kept, you, tenant) == words


def test_at_quota_counts_whole_gpus() -> None:
    assert reasons.at_quota(3, 4.9, 2) and not reasons.at_quota(2, 4.9, 2)
    assert not reasons.at_quota(0, None, 1) and reasons.at_quota(0, 0.5, 1)


def test_v8_database_gains_the_tenancy_table_and_record_columns(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    s = Store(db, migrations=MIGRATIONS[:8])
    with s.tx():
        rid = s.db.execute(
            "INSERT INTO rounds (time, mode, trigger, solver, offered_gpus, grants, renewals, "
            "preemptions, latency_s) VALUES (1, 'enforce', 'x', 'exact', 4, 0, 0, 0, 0.01)"
        ).lastrowid
        s.db.execute(
            "INSERT INTO decisions (round_id, time, app_key, action, reason) VALUES (?, 1, 'u/a', 'app', '')",
            (rid,),
        )
    s.close()
    s = Store(db)
    assert s.version == len(MIGRATIONS) and s.tenancy() is None
    assert [tuple(r) for r in s.query("SELECT tenant, tenant_quota, tenant_gpus FROM decisions")] == [
        (None, None, None)
    ]
    rec = AppRecord(
        "u/b",
        1.0,
        1.0,
        1,
        True,
        outcome=Outcome.LOST,
        tenant=("user", ("A", "u")),
        tenant_quota=2.5,
        tenant_gpus=2,
    )
    with s.tx():
        s.add_decision(rid, 2.0, "u/b", None, "app", record=rec)
        s.put_tenancy(TREE, "line", 5.0, 6.0)
    assert [
        tuple(r)
        for r in s.query("SELECT tenant, tenant_quota, tenant_gpus FROM decisions WHERE app_key = 'u/b'")
    ] == [('["user", ["A", "u"]]', 2.5, 2)]
    assert s.tenancy() == (TREE, "line", 5.0)
    assert "decisions_round" in {r[0] for r in s.query("SELECT name FROM sqlite_master WHERE type = 'index'")}
    s.close()
