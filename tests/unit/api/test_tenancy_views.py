"""Tenancy in the status API (issue 33 item 5): shares, GPUs, quotas and worst rho per account and user, the
app fields, privacy, and which level `explain` says held a waiting job back."""

from __future__ import annotations

from pathlib import Path

import pytest

from themis_slurm.api.server import ApiApp, build_app
from themis_slurm.core.tenancy import FLAT, Tenancy

from . import tenancy_world as tw
from . import world

ALICE, BOB, ROOT = "MUNGE cred-alice", "MUNGE cred-bob", "MUNGE cred-root"


def make(tmp_path: Path, tree: Tenancy = tw.TREE, private: bool = True) -> ApiApp:
    db = tw.build_store(tmp_path / "state", tree)
    conf = tmp_path / "slurm.conf"
    conf.write_text(world.SLURM_CONF_PRIVATE if private else world.SLURM_CONF_PUBLIC)
    snap = tw.snapshot()
    app = build_app(
        db,
        str(conf),
        snapshot=lambda: snap,
        decoder=world.fake_decoder,
        names=world.names,
        last_cycle=lambda: world.NOW,
    )
    app.clock = lambda: world.NOW
    return app


@pytest.fixture
def api(tmp_path: Path) -> ApiApp:
    return make(tmp_path)


def levels(doc: dict) -> list[tuple]:
    return [
        (
            t["level"],
            t["account"],
            t["user"],
            t["share"],
            t["gpus_held"],
            t["quota"],
            t["rho_worst"],
            t["apps"],
        )
        for t in doc["tenancy"]["tenants"]
    ]


def test_cluster_groups_apps_by_account_and_user_with_shares_gpus_quotas(api: ApiApp) -> None:
    status, doc = api.handle("/v1/cluster", "", ROOT)
    assert status == 200
    ten = doc["tenancy"]
    assert (
        ten["levels"] == ["account", "user", "app"]
        and ten["line"] == tw.LINE
        and ten["read_at"] == world.NOW - 30
    )
    # vision 3 : nlp 1; alice and carol split vision; the accounts' quotas are their users' together;
    # the account with the worst-off app (alice/ft, rho 3.0) first, its users likewise
    assert levels(doc) == [
        (
            "account",
            "vision",
            None,
            0.75,
            4,
            6.0,
            3.0,
            ["themis-alice/ft", "themis-alice/sweep", "themis-carol/c"],
        ),
        ("user", "vision", "themis-alice", 0.375, 3, 3.0, 3.0, ["themis-alice/ft", "themis-alice/sweep"]),
        ("user", "vision", "themis-carol", 0.375, 1, 3.0, 0.9, ["themis-carol/c"]),
        ("account", "nlp", None, 0.25, 4, 4.0, 2.5, ["themis-bob/job-21", "themis-bob/job-20"]),
        ("user", "nlp", "themis-bob", 0.25, 4, 4.0, 2.5, ["themis-bob/job-21", "themis-bob/job-20"]),
    ]
    assert [t["shares"] for t in ten["tenants"]] == [3.0, 1.0, 1.0, 1.0, 1.0]
    assert [t["tenant"] for t in ten["tenants"]] == [False, True, True, False, True]
    apps = {a["app"]: a for a in doc["apps"]}
    assert apps["themis-alice/ft"]["share"] == 0.1875 and apps["themis-bob/job-20"]["share"] == 0.125
    assert apps["themis-alice/ft"]["account"] == "vision"
    assert apps["themis-alice/ft"]["tenant"] == {"level": "user", "account": "vision", "user": "themis-alice"}
    assert sum(a["share"] for a in doc["apps"]) == pytest.approx(1.0)


def test_private_data_shows_own_user_and_accounts_only(api: ApiApp) -> None:
    _, doc = api.handle("/v1/apps", "", BOB)
    assert [(t["level"], t["account"], t["user"], t["apps"]) for t in doc["tenancy"]["tenants"]] == [
        ("account", "nlp", None, ["themis-bob/job-21", "themis-bob/job-20"]),
        ("user", "nlp", "themis-bob", ["themis-bob/job-21", "themis-bob/job-20"]),
    ]
    _, doc = api.handle("/v1/cluster", "", None)  # no credential: aggregates, no names
    assert doc["tenancy"]["tenants"] == [] and doc["tenancy"]["levels"] == ["account", "user", "app"]
    _, doc = api.handle("/v1/apps", "user=themis-carol", ROOT)
    assert [(t["level"], t["user"], t["apps"]) for t in doc["tenancy"]["tenants"]] == [
        ("account", None, ["themis-carol/c"]),
        ("user", "themis-carol", ["themis-carol/c"]),
    ]


def test_users_without_accounts_and_accounts_without_users(tmp_path: Path) -> None:
    api = make(tmp_path / "u", Tenancy(("user", "app")))
    _, doc = api.handle("/v1/cluster", "", ROOT)
    # equal users: 1/3 each whatever their apps (the stored quotas are of the account -> user tree: not these)
    assert [
        (t["level"], t["account"], t["user"], round(t["share"], 4), t["quota"])
        for t in doc["tenancy"]["tenants"]
    ] == [
        ("user", "", "themis-alice", 0.3333, None),
        ("user", "", "themis-bob", 0.3333, None),
        ("user", "", "themis-carol", 0.3333, None),
    ]
    api = make(tmp_path / "a", Tenancy(("account", "app"), {"vision": 1.0, "nlp": 3.0}))
    _, doc = api.handle("/v1/cluster", "", ROOT)
    assert [(t["level"], t["account"], t["share"]) for t in doc["tenancy"]["tenants"]] == [
        ("account", "vision", 0.25),
        ("account", "nlp", 0.75),
    ]


def test_flat_tenancy_adds_nothing_but_the_app_share(tmp_path: Path) -> None:
    api = make(tmp_path, FLAT)
    _, doc = api.handle("/v1/cluster", "", ROOT)
    assert doc["tenancy"]["tenants"] == [] and doc["tenancy"]["levels"] == ["app"]
    assert {a["share"] for a in doc["apps"]} == {0.2} and all(a["tenant"] is None for a in doc["apps"])
    _, doc = api.handle("/v1/jobs/11/explain", "", ALICE)
    assert doc["tenancy"] is None and "your share" not in doc["summary"]


def test_explain_names_the_user_at_its_share_and_the_app_ahead(api: ApiApp) -> None:
    status, doc = api.handle("/v1/jobs/11/explain", "", ALICE)
    assert status == 200
    ten = doc["tenancy"]
    assert ten["round"] == 3
    assert ten["at_share"] == [
        {
            "level": "user",
            "name": "themis-alice",
            "account": "vision",
            "gpus": 3,
            "quota": 3.0,
            "share": 0.375,
        }
    ]  # vision: 4 of 6 with 2 more wanted fits
    assert ten["ahead"] == [{"app": "themis-alice/ft", "rank": 1, "rho": 3.0, "gpus": 1}]
    assert [(s["level"], s["share"]) for s in ten["standing"]] == [("account", 0.75), ("user", 0.375)]
    assert (
        "you (themis-alice) are at your share in account vision: you hold 3 GPU(s) against your quota of "
        "3.00 GPU(s) in that round, 37.5% of the cluster now; other users of the account came first; another "
        "app of yours is further behind and went first: themis-alice/ft (rank 1, rho 3.00, got 1 GPU(s))"
    ) in doc["summary"]
    assert doc["rounds"][0]["app"]["tenant"] == {"level": "user", "account": "vision", "user": "themis-alice"}
    assert doc["rounds"][0]["app"]["tenant_quota"] == 3.0 and doc["rounds"][0]["app"]["tenant_gpus"] == 3


def test_explain_names_the_account_at_its_share_and_a_quota_kept_win(api: ApiApp) -> None:
    _, doc = api.handle("/v1/jobs/21/explain", "", BOB)
    assert doc["tenancy"]["at_share"][0] == {
        "level": "account",
        "name": "nlp",
        "account": "nlp",
        "gpus": 4,
        "quota": 4.0,
        "share": 0.25,
    }
    assert doc["tenancy"]["ahead"] == []  # job-20 got nothing in round 3: it is not why job 21 waits
    assert (
        "it kept only what fits the quota because your account nlp is at its "
        "share: it holds 4 GPU(s) against its quota of 4.00 GPU(s) in that round, 25.0% of the cluster now; "
        "other accounts came first"
    ) in doc["summary"]
    _, doc = api.handle("/v1/jobs/21/explain", "", ROOT)  # an admin reads about the account, not "your"
    assert "account nlp is at its share" in doc["summary"] and "your" not in doc["summary"]


def test_explain_of_a_running_job_shows_its_standing_only(api: ApiApp) -> None:
    _, doc = api.handle("/v1/jobs/12/explain", "", ALICE)
    assert doc["tenancy"]["at_share"] == [] and doc["tenancy"]["reason"] is None
    assert [s["level"] for s in doc["tenancy"]["standing"]] == ["account", "user"]


def test_old_database_without_tenancy_is_flat(tmp_path: Path) -> None:
    from themis_slurm.state.schema import MIGRATIONS
    from themis_slurm.state.store import Store

    db = tmp_path / "state" / "themis.db"
    Store(db, migrations=MIGRATIONS[:8]).close()  # a v8 themisd's database: no tenancy table yet
    conf = tmp_path / "slurm.conf"
    conf.write_text(world.SLURM_CONF_PUBLIC)
    api = build_app(db, str(conf), snapshot=lambda: None, decoder=world.fake_decoder, names=world.names)
    status, doc = api.handle("/v1/apps", "", ROOT)
    assert status == 200 and doc["tenancy"] == {"levels": ["app"], "line": "", "read_at": None, "tenants": []}
