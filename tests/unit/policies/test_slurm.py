"""Slurm multifactor priority (age + decayed fair share) with EASY backfill, no preemption."""

from __future__ import annotations

import pytest

from themis_slurm.core.decision import GrantSource
from themis_slurm.core.topology import Topology
from themis_slurm.policies import SlurmPolicy

from .helpers import app, check, ctx, granted, job, state


def test_backfill_starts_short_job_but_not_one_that_delays_the_reservation() -> None:
    topo = Topology.uniform(1, 1, 4)
    r = job("r", "x", gpus=2, work=1000)  # 2000 GPU-s on 2 GPUs: ends at t=1000
    big = job("big", "a", gpus=4, work=10000, submit=-100)  # oldest: highest priority
    short = job("short", "b", gpus=2, work=500, submit=0)  # 500 s: ends before t=1000
    long = job("long", "c", gpus=2, work=5000, submit=0)  # 5000 s: would delay big
    s = state(
        topo, [app("x", [r]), app("a", [big]), app("b", [short]), app("c", [long])], running={"r": {0, 1}}
    )
    d = SlurmPolicy().schedule(ctx(s))
    check(s, d)
    assert granted(d) == {"short"} and not d.preemptions
    assert "reserved 4 GPU(s) at t=1000" in d.apps["a"].note
    assert "would delay the reservation" in d.apps["c"].note
    assert "ends before the reservation" in d.apps["b"].note


def test_backfill_may_use_gpus_outside_the_reservation() -> None:
    topo = Topology.uniform(1, 2, 4)
    r = job("r", "x", gpus=4, work=250)  # node1, ends at t=250
    q = job("q", "x", gpus=2, work=5000)  # node2, ends at t=5000
    big = job("big", "a", gpus=4, work=10000, submit=-100)
    long = job("long", "c", gpus=2, work=5000, submit=0)
    s = state(
        topo, [app("x", [r, q]), app("a", [big]), app("c", [long])], running={"r": {0, 1, 2, 3}, "q": {4, 5}}
    )
    d = SlurmPolicy().schedule(ctx(s))
    check(s, d)
    assert granted(d) == {"long"}
    assert dict(d.grants[0].nodes) == {"node2": 2}
    assert d.grants[0].source is GrantSource.BACKFILL  # started out of priority order: typed, not a label
    assert "avoids the reserved GPUs" in d.apps["c"].note


def test_no_backfill_option_is_strict() -> None:
    topo = Topology.uniform(1, 1, 4)
    r = job("r", "x", gpus=2, work=1000)
    big = job("big", "a", gpus=4, submit=-100)
    short = job("short", "b", gpus=1, work=1, submit=0)
    s = state(topo, [app("x", [r]), app("a", [big]), app("b", [short])], running={"r": {0, 1}})
    d = SlurmPolicy(backfill=False).schedule(ctx(s))
    assert not d.grants


def test_fair_share_prefers_the_user_with_less_usage() -> None:
    topo = Topology.uniform(1, 1, 4)
    p = SlurmPolicy(weight_age=1000, weight_fairshare=10000)
    r = job("r", "heavy", gpus=4, work=3600)
    mine = job("mine", "heavy", gpus=4, submit=0)  # older
    theirs = job("theirs", "light", gpus=4, submit=10)
    apps = [app("heavy", [r, mine], owner="u1"), app("light", [theirs], owner="u2")]
    s = state(topo, apps, running={"r": {0, 1, 2, 3}})
    d = p.schedule(ctx(s))
    check(s, d)
    assert not d.grants
    # r completes at t=3600 having used 4 x 3600 GPU-s for u1
    s2 = state(topo, [app("heavy", [mine], owner="u1"), app("light", [theirs], owner="u2")], now=3600)
    d = p.schedule(ctx(s2))
    check(s2, d)
    assert granted(d) == {"theirs"}
    assert p.usage["u1"] == pytest.approx(4 * 3600)  # charged at the end of the interval, not yet decayed
    assert p.fairshare("u2", 2) == 1.0 and p.fairshare("u1", 2) == pytest.approx(0.25)


def test_usage_decays_with_half_life() -> None:
    p = SlurmPolicy(decay_half_life_s=100)
    p.usage = {"u": 1000.0}
    p._last = 0.0
    p._account(200.0)
    assert p.usage["u"] == pytest.approx(250.0)


def test_age_factor_is_capped() -> None:
    p = SlurmPolicy(weight_age=1000, weight_fairshare=0, max_age_s=100)
    assert p.priority(job("a", "a", submit=0), "u", 50, 1) == pytest.approx(500)
    assert p.priority(job("a", "a", submit=0), "u", 5000, 1) == pytest.approx(1000)
