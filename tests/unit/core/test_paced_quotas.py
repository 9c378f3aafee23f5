"""Paced quotas (core/quota.py): a tenant's quota is its share of the GPUs in play plus what it is behind
the pace of its share, over one lease; the tenant's book (core/tenancy.TenantBook) makes it independent of
how the tenant's work is packaged into apps. And greedy_fill's per-group caps, which the leftover's quota
pass uses."""

from __future__ import annotations

import random

import pytest

from themis_slurm.core.auction import FILL_ORDERS, greedy_fill
from themis_slurm.core.quota import PACE_LEASES, paced
from themis_slurm.core.tenancy import Tenancy, TenantBook, entity_fractions
from themis_slurm.core.workload import App, Job

from .instances import agents_for, random_state

ALICE, BOB = ("user", ("", "alice")), ("user", ("", "bob"))


def _apps() -> tuple[list[App], dict[str, tuple]]:
    """alice: two apps arrived at 0 and 400 (contention 2 and 4 on 8 GPUs), 300 and 100 GPU-s done;
    bob: one app arrived at 0 (contention 2), 900 GPU-s done and 200 finished."""
    apps = [App("a1", "alice", 0.0, (Job("j1", "a1", 1, 5000.0, done=300.0),), contention=2.0),
            App("a2", "alice", 400.0, (Job("j2", "a2", 2, 5000.0, done=100.0),), contention=4.0),
            App("b1", "bob", 0.0, (Job("j3", "b1", 1, 5000.0, done=900.0),), contention=2.0, finished_work=200.0)]
    return apps, {"a1": ALICE, "a2": ALICE, "b1": BOB}


def test_without_books_each_tenant_is_paced_by_its_present_apps() -> None:
    # now 1000, 8 GPUs, lease 600: alice owed 8/2 x 1000 + 8/4 x 600 = 5200, did 400; bob owed 4000, did
    # 1100. Together they did 1500 of 9200: the cluster's pace is 15/92 of the shares'. At that pace alice
    # is owed 5200 x 15/92 = 847.8, 447.8 behind: + 0.746 GPU; bob is ahead: his share
    apps, tenant_of = _apps()
    share = {ALICE: 2.0, BOB: 1.0}
    demand = {"a1": 1.0, "a2": 2.0, "b1": 1.0}
    q = paced(share, tenant_of, apps, dict.fromkeys(demand, 100.0), {}, 1000.0, 8.0, 600.0)
    behind = 5200.0 * 1500.0 / 9200.0 - 400.0
    assert q[ALICE] == pytest.approx(2.0 + behind / (600.0 * PACE_LEASES))
    assert q[BOB] == 1.0
    # capped by what their apps can use: alice 3, bob 1 (his share; ahead, never less)
    q = paced(share, tenant_of, apps, {"a1": 1.0, "a2": 1.0, "b1": 1.0}, {}, 1000.0, 8.0, 600.0)
    assert q == {ALICE: 2.0, BOB: 1.0}


def test_the_book_replaces_the_apps_clocks_and_ahead_keeps_the_share() -> None:
    # alice's book: owed 1000, 200 finished, present done 400: did 600 of 1000; bob's: owed 500, 2000
    # finished, present done 900: did 2900 of 500. Together 3500 of 1500: more than owed, so the pace is
    # the shares' own (at most 1): alice 400 behind -> +2/3 GPU; bob ahead -> his share, not less
    apps, tenant_of = _apps()
    books = {ALICE: TenantBook(1000.0, 200.0), BOB: TenantBook(500.0, 2000.0)}
    q = paced({ALICE: 2.0, BOB: 1.0}, tenant_of, apps, dict.fromkeys(("a1", "a2", "b1"), 100.0), books,
              1000.0, 8.0, 600.0)
    assert q[ALICE] == pytest.approx(2.0 + 400.0 / (600.0 * PACE_LEASES)) and q[BOB] == 1.0


def test_tenants_equally_behind_get_their_shares_and_quotas_fit_what_is_in_play() -> None:
    """When every tenant did the same fraction of what its share owed it (the cluster lost work to
    restarts or idle GPUs, not to one tenant), no tenant is behind the pace the cluster kept: each quota
    is its share, so the quotas add up to the GPUs in play and the leftover's order cannot decide who
    gets less than its share (benchmarks/estimate_gaming.py: the liar at 58% with the full pace)."""
    apps = [App("a1", "alice", 0.0, (Job("j1", "a1", 1, 5000.0, done=600.0),), contention=2.0),
            App("b1", "bob", 0.0, (Job("j2", "b1", 1, 5000.0, done=1200.0),), contention=2.0)]
    tenant_of = {"a1": ALICE, "b1": BOB}
    books = {ALICE: TenantBook(2000.0, 400.0), BOB: TenantBook(4000.0, 800.0)}  # both did half
    share = {ALICE: 3.0, BOB: 5.0}
    q = paced(share, tenant_of, apps, {"a1": 100.0, "b1": 100.0}, books, 1000.0, 8.0, 600.0)
    assert q == pytest.approx(share)
    assert sum(q.values()) == pytest.approx(8.0)
    # and one that did less than the others is behind by what it lacks at their pace
    apps[0] = App("a1", "alice", 0.0, (Job("j1", "a1", 1, 5000.0, done=300.0),), contention=2.0)
    q = paced(share, tenant_of, apps, {"a1": 100.0, "b1": 100.0}, books, 1000.0, 8.0, 600.0)
    pace = (700.0 + 2000.0) / 6000.0
    assert q[ALICE] == pytest.approx(3.0 + (pace * 2000.0 - 700.0) / (600.0 * PACE_LEASES))
    assert q[BOB] == 5.0


def test_entity_fractions_sum_the_apps_fractions_per_tenant() -> None:
    t = Tenancy(("account", "user", "app"), account_shares={"X": 3.0, "Y": 1.0})
    apps = [App("x1", "u1", 0.0, account="X"), App("x2", "u1", 0.0, account="X"), App("x3", "u2", 0.0, account="X"),
            App("y1", "u3", 0.0, account="Y")]
    assert entity_fractions(t, apps) == pytest.approx(
        {("user", ("X", "u1")): 0.375, ("user", ("X", "u2")): 0.375, ("user", ("Y", "u3")): 0.25})
    assert entity_fractions(Tenancy(), apps) == {}


@pytest.mark.parametrize("by", FILL_ORDERS)
def test_group_caps_bound_each_group_and_one_big_cap_changes_nothing(by: str) -> None:
    """Per-group caps: no group gets past its cap; with caps no group can reach, the fill is the uncapped
    fill, gang for gang."""
    rng = random.Random(7)
    for _ in range(150):
        state = random_state(rng)
        agents, pool = agents_for(state)
        if not agents:
            continue
        groups = [rng.choice("ab") for _ in agents]
        free = pool.copy()
        plain = greedy_fill(agents, free, by=by)
        same = greedy_fill(agents, pool.copy(), by=by, groups=groups, limits={"a": 10**6, "b": 10**6})
        assert same == plain
        caps = {"a": rng.randint(0, 4), "b": rng.randint(0, 4)}
        capped = greedy_fill(agents, pool.copy(), by=by, groups=groups, limits=caps)
        for g, cap in caps.items():
            took = sum(len(x.gpus) for a, grp in zip(agents, groups, strict=True) if grp == g
                       for x in capped.get(a.app_id, []))
            assert took <= cap

