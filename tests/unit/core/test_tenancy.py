"""Tenancy (core/tenancy.py): nested shares, T_id on them, the weighted auction and the leftover's quotas."""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter

import pytest

from themis_slurm import reasons
from themis_slurm.core.agent import Agent
from themis_slurm.core.arbiter import ArbiterConfig, run_round
from themis_slurm.core.auction import ExactSolver
from themis_slurm.core.decision import Decision, GrantSource, KeptBy
from themis_slurm.core.fairness import FairnessModel, job_throughput
from themis_slurm.core.payments import hidden_payments
from themis_slurm.core.placement import Pool
from themis_slurm.core.state import ClusterState
from themis_slurm.core.tenancy import (
    FLAT,
    ZERO_SHARES,
    Tenancy,
    TenantBook,
    app_shares,
    auction_weights,
    contention,
    fractions,
    quotas,
    water_fill,
)
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App, Job, Lease

from .instances import random_state

TREE = Tenancy(levels=("account", "user", "app"), account_shares={"x": 3, "y": 1, "z": 2},
               user_shares={("x", "alice"): 1, ("x", "carol"): 3})  # fmt: skip


def _app(aid: str, user: str, account: str = "", jobs: int = 1, gpus: int = 1, work: float = 3600.0) -> App:
    return App(aid, user, 0.0, tuple(Job(f"{aid}.{k}", aid, gpus, work * gpus) for k in range(jobs)), account=account)


def _with_clocks(tenancy: Tenancy, apps: list[App]) -> list[App]:
    n = contention(tenancy, apps)
    return [dataclasses.replace(a, contention=n[a.id]) for a in apps]


# ------------------------------------------------------------------------------------------- shares
def test_nested_fractions_hand_computed_with_an_idle_account() -> None:
    """x:3, y:1 active and z:2 idle: z's share goes to its siblings (x 3/4, y 1/4); inside x, alice:1 and
    carol:3; alice's two apps split hers equally; bob has no user entry (default 1, alone in y)."""
    apps = [_app("a1", "alice", "x"), _app("a2", "alice", "x"), _app("c", "carol", "x"), _app("b", "bob", "y")]
    f = fractions(TREE, apps)
    assert f["a1"] == pytest.approx(3 / 4 * 1 / 4 / 2)
    assert f["a2"] == pytest.approx(3 / 32)
    assert f["c"] == pytest.approx(3 / 4 * 3 / 4)
    assert f["b"] == pytest.approx(1 / 4)
    assert sum(f.values()) == pytest.approx(1.0)
    n = contention(TREE, apps)
    assert n["a1"] == pytest.approx(32 / 3) and n["b"] == pytest.approx(4.0)
    w = auction_weights(TREE, apps)
    assert w["b"] / w["a1"] == pytest.approx((1 / 4) / (3 / 32))


def test_an_inactive_user_lends_its_share_to_its_siblings_then_up() -> None:
    """carol idle: alice has all of x; x idle: y has the cluster."""
    f = fractions(TREE, [_app("a1", "alice", "x"), _app("b", "bob", "y")])
    assert f == pytest.approx({"a1": 0.75, "b": 0.25})
    assert fractions(TREE, [_app("b", "bob", "y"), _app("b2", "bob", "y")]) == pytest.approx({"b": 0.5, "b2": 0.5})


def test_flat_is_today_exactly() -> None:
    """Apps alone: N is the number of apps (an exact float) and every weight is exactly 1.0."""
    apps = [_app(f"a{i}", f"u{i % 3}", "x") for i in range(49)]
    assert set(contention(FLAT, apps).values()) == {49.0}
    assert set(auction_weights(FLAT, apps).values()) == {1.0}
    assert quotas(FLAT, apps, 16, {a.id: 1.0 for a in apps}) == ({}, {})


def test_user_level_without_accounts_and_zero_shares() -> None:
    t = Tenancy(levels=("user", "app"), user_shares={("p", "alice"): 2, ("q", "alice"): 1, ("", "bob"): 0})
    f = fractions(t, [_app("a", "alice"), _app("b", "bob"), _app("c", "carol")])
    # alice: her shares summed over her accounts (3); bob: 0 shares count ZERO_SHARES; carol: default 1
    total = 3 + ZERO_SHARES + 1
    assert f["a"] == pytest.approx(3 / total) and f["c"] == pytest.approx(1 / total)
    assert 0 < f["b"] < 1e-6
    assert math.isfinite(contention(t, [_app("b", "bob"), _app("c", "carol")])["b"])


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"levels": ("user", "account", "app")}, "levels"),
        ({"levels": ("account", "user")}, "levels"),
        ({"levels": ("team", "app")}, "levels"),
        ({"account_shares": {"x": -1}}, "account_shares['x']"),
        ({"user_shares": {("x", "u"): float("nan")}}, "user_shares"),
        ({"default_shares": -2.0}, "default_shares"),
    ],
)
def test_bad_tenancy_is_refused_naming_the_field(kwargs: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        Tenancy(**kwargs)


def test_water_fill_caps_and_lends() -> None:
    assert water_fill(10, [1, 1, 2], [1, 100, 100]) == pytest.approx([1, 3, 6])
    assert water_fill(10, [1, 1], [2, 3]) == pytest.approx([2, 3])  # all capped: the rest unused
    assert water_fill(9, [3, 1], [100, 100]) == pytest.approx([6.75, 2.25])
    assert water_fill(5, [1, 1, 1], [0, 10, 10]) == pytest.approx([0, 2.5, 2.5])


def test_quotas_are_water_filled_down_the_tree() -> None:
    """16 GPUs, x:3 and y:1; y's only user can use 2: x gets 14, split alice:carol 1:3 but alice can use 3."""
    apps = [_app("a", "alice", "x", jobs=3), _app("c", "carol", "x", jobs=40), _app("b", "bob", "y", jobs=2)]
    target, entity_of = quotas(TREE, apps, 16, {a.id: float(len(a.jobs)) for a in apps})
    assert target[entity_of["b"]] == pytest.approx(2)
    assert target[entity_of["a"]] == pytest.approx(3)
    assert target[entity_of["c"]] == pytest.approx(11)


def test_t_id_is_the_finish_time_on_the_nested_share() -> None:
    """T_id = W / min(max parallelism, C x fraction): alice's app on 3/32 of 32 GPUs = 3 GPUs."""
    apps = _with_clocks(TREE, [_app("a1", "alice", "x", jobs=8), _app("a2", "alice", "x"),
                               _app("c", "carol", "x"), _app("b", "bob", "y", jobs=16)])  # fmt: skip
    model = FairnessModel(Topology.uniform(2, 2, 8), 32)
    a1 = next(a for a in apps if a.id == "a1")
    b = next(a for a in apps if a.id == "b")
    assert model.t_id(a1) == pytest.approx(8 * 3600.0 / 3.0)
    assert model.t_id(b) == pytest.approx(16 * 3600.0 / 8.0)  # 1/4 of 32 GPUs


# ------------------------------------------------------------------------------------------- the round
def _first_round(tenancy: Tenancy, k: int, gpus: int = 16, config: ArbiterConfig | None = None) -> Counter:
    """User A's 16 one-GPU jobs as k apps, user B's 16 as one app, on `gpus` free GPUs: GPUs per user."""
    topo = Topology.uniform(2, gpus // 8, 4) if gpus >= 8 else Topology.uniform(1, 1, gpus)
    apps = [App(f"A{i}", "alice", 0.0, tuple(Job(f"a{i}.{j}", f"A{i}", 1, 3600.0) for j in range(16 // k)))
            for i in range(k)]  # fmt: skip
    apps.append(App("B", "bob", 0.0, tuple(Job(f"b.{j}", "B", 1, 3600.0) for j in range(16))))
    state = ClusterState(topo, 0.0, frozenset(range(topo.size)), (), tuple(_with_clocks(tenancy, apps)),
                         tenancy=tenancy)  # fmt: skip
    d = run_round(state, config)
    return Counter("A" if g.app_id.startswith("A") else "B" for g in d.grants)


@pytest.mark.parametrize("k", [1, 2, 4, 8, 16])
def test_splitting_buys_no_gpus_with_the_user_level(k: int) -> None:
    """Apps alone, the splitter takes more the more apps it makes (11, 15, 16 of 16 for k = 2, 8, 16); with
    the user level each user gets 8 whatever k."""
    assert _first_round(Tenancy(levels=("user", "app")), k) == Counter({"A": 8, "B": 8})
    if k >= 8:
        assert _first_round(FLAT, k)["A"] >= 15  # the hole the user level closes


def test_weighted_auction_follows_shares_3_to_1() -> None:
    """Two saturated apps in accounts of shares 3 and 1, everyone bids, no payments: x* maximises
    3 log(1/rho_p) + log(1/rho_q), 6 and 2 of 8 GPUs (unweighted, it is 4 and 4)."""
    topo = Topology.uniform(1, 2, 4)
    tenancy = Tenancy(levels=("account", "app"), account_shares={"x": 3, "y": 1})
    apps = _with_clocks(tenancy, [_app("p", "p", "x", jobs=24), _app("q", "q", "y", jobs=24)])
    for solver in ("exact", "fast"):
        cfg = ArbiterConfig(fairness_knob=0.0, solver=solver, hidden_payments=False)
        for t, want in ((tenancy, {"p": 6, "q": 2}), (FLAT, {"p": 4, "q": 4})):
            state = ClusterState(topo, 0.0, frozenset(range(8)), (), tuple(apps), tenancy=t)
            assert Counter(g.app_id for g in run_round(state, cfg).grants) == Counter(want), (solver, t.levels)


def test_weighted_hidden_payments_match_brute_force() -> None:
    """c_i = exp(min(0, (others' weighted welfare in x* - without i) / w_i)), on random small rounds."""
    rng = random.Random(33)
    checked = 0
    for _ in range(300):
        state = random_state(rng, max_gpus=8)
        model = FairnessModel(state.topology, state.topology.size)
        held = {lease.job_id: lease.gpus for lease in state.leases}
        agents = []
        for app in state.apps:
            base = sum(job_throughput(j, held[j.id], state.topology) for j in app.jobs if j.id in held)
            waiting = [j for j in app.jobs if j.id not in held]
            if waiting:
                agents.append(Agent(app, model, state.now, base, waiting, weight=rng.choice([0.25, 1.0, 3.0])))
        pool = Pool(state.topology, state.free)
        if len(agents) < 2 or not pool.size:
            continue
        exact = ExactSolver()
        cands = exact.candidates(agents, pool)
        if len(cands) > 40:
            continue
        x_star = exact.solve_candidates(cands)
        pays = hidden_payments(agents, pool, x_star, exact, cands)
        weight = {a.app_id: a.weight for a in agents}
        for aid, won in x_star.bundles.items():
            base = next(a.rho_base for a in agents if a.app_id == aid)
            assert won.gain == pytest.approx(weight[aid] * math.log(base / won.rho))
            others = sum(b.gain for k, b in x_star.bundles.items() if k != aid)
            without = sum(b.gain for k, b in exact.solve_candidates(cands, exclude=aid).bundles.items())
            want = math.exp(min(0.0, (others - without) / weight[aid]))
            assert pays[aid].fraction == pytest.approx(want, rel=1e-6, abs=1e-9)
        checked += 1
    assert checked >= 30


def test_bad_agent_weight_is_refused() -> None:
    app = _app("a", "u")
    model = FairnessModel(Topology.uniform(1, 1, 4), 4)
    with pytest.raises(ValueError, match="weight"):
        Agent(app, model, 0.0, 0.0, app.jobs, weight=0.0)


def test_records_name_the_tenant_its_quota_and_its_gpus() -> None:
    """`themis explain` says "your user holds its share": the records carry the tenant, quota and GPUs."""
    tenancy = Tenancy(levels=("user", "app"))
    topo = Topology.uniform(1, 2, 4)
    apps = [_app(f"A{i}", "alice", jobs=4) for i in range(4)] + [_app("B", "bob", jobs=16)]
    state = ClusterState(topo, 0.0, frozenset(range(8)), (), tuple(_with_clocks(tenancy, apps)), tenancy=tenancy)
    d = run_round(state)
    rec = d.apps["A3"]
    assert rec.tenant == ("user", ("", "alice"))
    assert rec.tenant_quota == pytest.approx(4.0)
    assert rec.tenant_gpus == 4 == d.apps["B"].tenant_gpus
    flat = run_round(dataclasses.replace(state, tenancy=FLAT))
    assert flat.apps["A3"].tenant == () and flat.apps["A3"].tenant_quota is None


# ------------------------------------------------------------------------------------------- baselines
def test_app_shares_water_fill_down_to_the_apps() -> None:
    """x:3 / y:1 on 16 GPUs; in x alice:1 / carol:3 but carol can use 2: alice gets 12 - 2 = 10, her two
    apps split it 5 / 5 (one capped at 4: 4 / 6); bob's one app 4."""
    apps = [_app("a1", "alice", "x"), _app("a2", "alice", "x"), _app("c", "carol", "x"), _app("b", "bob", "y")]
    got = app_shares(TREE, apps, 16, {"a1": 4, "a2": 100, "c": 2, "b": 100})
    assert got == pytest.approx({"a1": 4, "a2": 6, "c": 2, "b": 4})


@pytest.mark.parametrize("policy", ["maxmin", "fairshare", "ftf"])
def test_baselines_with_the_tree_do_not_reward_splitting(policy: str) -> None:
    """User A's 16 one-GPU jobs as 16 apps, B's as one: with the user level each user's share is 8 of 16
    GPUs in each baseline whose source shares by entity (Gavel's weighted max-min, a hierarchical fair
    share; ftf through T_id on the nested share). Apps alone, A's share is 16 of 17 parts. maxmin and ftf
    are time-sliced (their time fractions X_j are the policy; rounds realise them), fairshare grants now."""
    from themis_slurm.policies import make_policy
    from themis_slurm.policies.base import PolicyContext

    topo = Topology.uniform(2, 2, 4)
    for tenancy, a_share in ((Tenancy(levels=("user", "app")), 8.0), (FLAT, 16 * 16 / 17)):
        apps = [_app(f"A{i}", "alice") for i in range(16)] + [_app("B", "bob", jobs=16)]
        state = ClusterState(topo, 0.0, frozenset(range(16)), (), tuple(_with_clocks(tenancy, apps)),
                             tenancy=tenancy)  # fmt: skip
        p = make_policy(policy)
        ctx = PolicyContext(state, frozenset({"arrival"}))
        if policy == "fairshare":
            d = p.schedule(ctx)
            got = sum(len(g.gpus) for g in d.grants if g.app_id.startswith("A"))
            assert got >= 15 if tenancy.flat else got == 8, (tenancy.levels, got)
            continue
        x = p.fractions(ctx, 16.0)
        a = sum(v for jid, v in x.items() if jid.startswith("A"))
        assert a == pytest.approx(a_share, rel=1e-3), (tenancy.levels, a)


def test_slurm_policy_uses_normalised_shares_down_the_tree() -> None:
    """Slurm's fair-share factor 2^(-U/S) with S the user's NormShares: equal usage, shares 3:1 -> the
    3-share user's factor is higher (2^(-0.5/0.75) against 2^(-0.5/0.25))."""
    from themis_slurm.policies.base import PolicyContext
    from themis_slurm.policies.slurm import SlurmPolicy

    tenancy = Tenancy(levels=("account", "user", "app"), account_shares={"x": 3, "y": 1})
    topo = Topology.uniform(1, 1, 2)
    p = SlurmPolicy()
    apps = [_app("p", "pat", "x", jobs=4), _app("q", "quinn", "y", jobs=4)]
    state = ClusterState(topo, 0.0, frozenset(range(2)), (), tuple(_with_clocks(tenancy, apps)), tenancy=tenancy)
    p.usage = {"pat": 100.0, "quinn": 100.0}
    d = p.schedule(PolicyContext(state, frozenset({"arrival"})))
    notes = {a: r.note for a, r in d.apps.items()}
    assert f"{2 ** (-0.5 / 0.75):.3f}" in notes["p"] and f"{2 ** (-0.5 / 0.25):.3f}" in notes["q"], notes


def _quota_round(alice_behind_s: float) -> Decision:
    """User A (12 apps that waited long: the worst rho, so A's apps bid) holds 4 of 8 GPUs, user B holds 3;
    one GPU is free. The books say A is `alice_behind_s` GPU-seconds behind the pace of its share and B
    ahead of its own (2,700 GPU-s done, none owed)."""
    tenancy = Tenancy(levels=("user", "app"))
    now = 5000.0
    apps = [App(f"A{i}", "alice", 0.0, (Job(f"a{i}", f"A{i}", 1, 7200.0),)) for i in range(12)]
    apps.append(App("B", "bob", 4000.0, tuple(
        Job(f"b{j}", "B", 1, 7200.0, done=900.0 if j < 3 else 0.0, service=900.0 if j < 3 else 0.0)
        for j in range(12))))  # fmt: skip
    leases = [Lease(f"a{i}", frozenset({i}), now - 100, now + 500) for i in range(4)] + \
        [Lease(f"b{j}", frozenset({4 + j}), now - 100, now + 500) for j in range(3)]  # fmt: skip
    books = {("user", ("", "alice")): TenantBook(alice_behind_s, 0.0), ("user", ("", "bob")): TenantBook(0.0, 0.0)}
    state = ClusterState(Topology.uniform(1, 2, 4), now, frozenset({7}), tuple(leases),
                         tuple(_with_clocks(tenancy, apps)), tenancy=tenancy, tenant_books=books)  # fmt: skip
    return run_round(state)


def test_an_auction_win_stops_at_the_tenant_quota() -> None:
    """A at the pace of its share: A's app wins the free GPU in the auction, but A is at its quota of 4
    (its share): the win goes to the leftover, which gives it to B (without the quota stop, A held 5 and B 3)."""
    d = _quota_round(0.0)
    winner = next(r for r in d.apps.values() if r.won_gpus)
    assert winner.app_id.startswith("A") and winner.kept_gpus == 0 and winner.kept_by is KeptBy.QUOTA
    assert "is at its share" in reasons.app_record(winner)
    assert [(g.job_id, g.source) for g in d.grants] == [("b10", GrantSource.LEFTOVER)]
    assert d.apps["B"].tenant_gpus == 4 == d.apps["A0"].tenant_gpus


def test_a_tenant_behind_the_pace_of_its_share_may_take_more_than_its_share() -> None:
    """Paced quotas (core/quota.py): A is 600 GPU-s behind its share's pace, one GPU over a 600 s lease, so
    its quota is its share (4) + 1: its app keeps the GPU it won."""
    d = _quota_round(600.0)
    winner = next(r for r in d.apps.values() if r.won_gpus)
    assert winner.app_id.startswith("A") and winner.kept_gpus == 1 and winner.tenant_quota == pytest.approx(5.0)
    assert [g.job_id for g in d.grants] == [f"a{winner.app_id[1:]}"] and d.apps["B"].tenant_gpus == 3
