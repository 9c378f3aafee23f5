"""planning.advance_apps under nested shares (hand-computed), the app's account, and its store column (v7)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from themis_slurm.core.tenancy import FLAT, Tenancy
from themis_slurm.daemon.planning import advance_apps, first_account
from themis_slurm.slurm.model import ManagedJob
from themis_slurm.state.schema import MIGRATIONS
from themis_slurm.state.store import Store

from .test_store import old_database

TREE = Tenancy(("account", "user", "app"), {"A": 3.0, "B": 1.0}, {("A", "alice"): 1.0, ("A", "bob"): 1.0})


def mj(job_id: str, app: str, account: str, submit: float = 0.0) -> ManagedJob:
    user = app.split("/")[0]
    return ManagedJob(
        job_id=job_id,
        slurm_id=int(job_id),
        app_key=app,
        user=user,
        state="PENDING",
        held=True,
        gpus=1,
        gpus_per_node=None,
        nodes=None,
        node_gpus={},
        gpu_ids=frozenset(),
        est_s=None,
        time_limit_s=None,
        profile=None,
        progress=None,
        progress_error=None,
        requeue_ok=True,
        restart_cnt=0,
        submit_time=submit,
        start_time=None,
        required_nodes=(),
        priority=0,
        account=account,
    )


JOBS = [mj("1", "alice/x", "A"), mj("2", "alice/y", "A"), mj("3", "bob/z", "A"), mj("4", "carol/w", "B")]


def test_nested_shares_feed_each_clock_its_effective_n() -> None:
    """A has 3 shares, B 1: A gets 3/4, split equally between alice and bob (3/8 each), alice's two apps 3/16
    each (N = 16/3), bob's one app 3/8 (N = 8/3), carol alone in B 1/4 (N = 4). After 10 s carol leaves:
    A holds the cluster, alice's apps 1/4 each (N = 4), bob's 1/2 (N = 2). At 30 s alice's x has averaged
    (10 * 16/3 + 20 * 4) / 30 = 40/9."""
    apps = advance_apps({}, JOBS, 0.0, {}, tenancy=TREE)
    assert {k: a.clock_current for k, a in apps.items()} == pytest.approx(
        {"alice/x": 16 / 3, "alice/y": 16 / 3, "bob/z": 8 / 3, "carol/w": 4.0}
    )
    assert {k: a.account for k, a in apps.items()} == {
        "alice/x": "A",
        "alice/y": "A",
        "bob/z": "A",
        "carol/w": "B",
    }
    apps = advance_apps(apps, JOBS[:3], 10.0, {}, tenancy=TREE)
    assert not apps["carol/w"].active
    assert {k: apps[k].clock_current for k in ("alice/x", "alice/y", "bob/z")} == pytest.approx(
        {"alice/x": 4.0, "alice/y": 4.0, "bob/z": 2.0}
    )
    # the time so far stays booked at the old share, not recomputed
    assert apps["alice/x"].clock_integral == pytest.approx(10 * 16 / 3)
    apps = advance_apps(apps, JOBS[:3], 30.0, {}, tenancy=TREE)
    assert apps["alice/x"].clock.average == pytest.approx(40 / 9)
    assert apps["bob/z"].clock.average == pytest.approx((10 * 8 / 3 + 20 * 2) / 30)


def test_a_tree_that_changes_applies_from_now_and_keeps_the_history() -> None:
    apps = advance_apps({}, JOBS, 0.0, {}, tenancy=TREE)
    equal = Tenancy(("account", "user", "app"))  # B now as big as A: carol 1/2, alice's apps 1/8
    apps = advance_apps(apps, JOBS, 10.0, {}, tenancy=equal)
    assert apps["carol/w"].clock_current == pytest.approx(2.0)
    assert apps["alice/x"].clock_current == pytest.approx(8.0)
    assert apps["carol/w"].clock_integral == pytest.approx(40.0)  # 10 s at N = 4 under the old tree
    apps = advance_apps(apps, JOBS, 20.0, {}, tenancy=equal)
    assert apps["carol/w"].clock.average == pytest.approx(3.0)


def test_splitting_work_into_more_apps_leaves_the_users_share() -> None:
    """Whatever number of apps alice makes, her apps' fractions (1/N) sum to her user's 3/8."""
    for k in (1, 2, 8, 32):
        jobs = [mj(str(10 + i), f"alice/s{i}", "A") for i in range(k)] + JOBS[2:]
        apps = advance_apps({}, jobs, 0.0, {}, tenancy=TREE)
        assert sum(1 / apps[f"alice/s{i}"].clock_current for i in range(k)) == pytest.approx(3 / 8)
        assert apps["bob/z"].clock_current == pytest.approx(8 / 3)


def test_the_app_level_alone_counts_the_apps() -> None:
    """levels [app] (however the Tenancy was built) gives every clock the number of apps, as before."""
    for ten in (FLAT, Tenancy(("app",), {"A": 3.0}), Tenancy()):
        apps = advance_apps({}, JOBS, 0.0, {}, tenancy=ten)
        assert {a.clock_current for a in apps.values()} == {4.0}
        assert advance_apps(apps, JOBS[:3], 10.0, {}, tenancy=ten) == advance_apps(apps, JOBS[:3], 10.0, {})


def test_an_app_across_accounts_takes_its_first_jobs_and_keeps_it() -> None:
    jobs = [mj("7", "alice/sweep", "A", submit=5.0), mj("8", "alice/sweep", "B", submit=3.0)]
    assert first_account(jobs, {}) == "B"
    # the first submission themisd kept counts (a requeue moves Slurm's SubmitTime)
    assert first_account(jobs, {"8": 9.0}) == "A"
    apps = advance_apps({}, jobs, 10.0, {}, tenancy=TREE)
    assert apps["alice/sweep"].account == "B"
    apps = advance_apps(apps, jobs[:1], 20.0, {}, tenancy=TREE)  # B's job left: the app stays under B
    assert apps["alice/sweep"].account == "B"


def test_an_app_stored_before_accounts_gets_its_jobs_account() -> None:
    apps = advance_apps({}, JOBS[:1], 0.0, {})
    old = {"alice/x": replace(apps["alice/x"], account="")}
    assert advance_apps(old, JOBS[:1], 5.0, {}, tenancy=TREE)["alice/x"].account == "A"


def test_v6_database_gains_the_apps_account(tmp_path: Path) -> None:
    assert "ALTER TABLE apps ADD COLUMN account" in MIGRATIONS[6]  # v6 -> v7
    s = Store(
        old_database(
            tmp_path,
            6,
            "INSERT INTO apps (app_key, owner, arrival, clock_since, clock_last, "
            "clock_integral, clock_current) VALUES ('alice/x', 'alice', 1, 1, 2, 3, 4)",
        )
    )
    assert s.version == len(MIGRATIONS)
    row = s.apps()["alice/x"]
    assert row.account == "" and row.clock_integral == 3.0 and row.clock_current == 4.0
    with s.tx():
        s.put_app(replace(row, account="vision"))
    assert s.apps()["alice/x"].account == "vision"
    assert [tuple(r) for r in s.query("SELECT app_key, account FROM apps")] == [("alice/x", "vision")]
    s.close()
