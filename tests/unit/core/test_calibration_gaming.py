"""Estimates that cannot be gamed (core/calibration.py, issue #33 item 6): started jobs past their
estimates as evidence at once, the cluster's prior in both directions, and the peer floor on the claims of
users without evidence. Every expected factor is computed by hand in the comments."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from themis_slurm.core.calibration import (
    FROM_CLUSTER,
    FROM_PEERS,
    FROM_RUNNING,
    FROM_USER,
    MAX_FACTOR,
    UNCALIBRATED,
    CalibrationConfig,
    Present,
    UserHistory,
    calibrate,
    censored_ratio,
    with_present,
)

CFG = CalibrationConfig(min_jobs=3, window=10)


def hist(*ratios: float, work: float = 1.0) -> UserHistory:
    return UserHistory.of(((r, work) for r in ratios), 10)


def running(n: int, est: float, done: float, claim: float | None = None) -> Present:
    """n started one-GPU jobs of estimate `est` GPU-s that have done `done` each."""
    return Present.of([claim if claim is not None else est] * n, [(est, done)] * n)


def test_censored_ratio_is_what_the_work_done_proves() -> None:
    assert censored_ratio(60.0, 150.0) == 2.5
    assert censored_ratio(60.0, 30.0) == 0.5
    for est, done in ((60.0, 0.0), (0.0, 10.0), (math.inf, 10.0), (60.0, math.nan), (-1.0, 5.0)):
        assert censored_ratio(est, done) is None, (est, done)


def test_jobs_running_past_their_estimates_raise_their_user_at_once() -> None:
    # three jobs claimed 60 s and have run 150 s each: the ratio is at least 2.5, so 2.5 / 1.25 = 2
    cal = calibrate({}, CFG, {"liar": running(3, 60.0, 150.0)})
    assert cal.factor("liar") == pytest.approx(2.0) and cal.source("liar") == FROM_RUNNING
    # two are not min_jobs (3): one early overrun does not move a user
    assert calibrate({}, CFG, {"liar": running(2, 60.0, 150.0)}).factor("liar") == 1.0
    # still within the tolerance (ratio >= 1.2 only): nothing proven beyond it
    assert calibrate({}, CFG, {"u": running(5, 60.0, 72.0)}).factor("u") == 1.0
    # off
    off = CalibrationConfig(min_jobs=3, window=10, running=False)
    assert calibrate({}, off, {"liar": running(3, 60.0, 150.0)}).factor("liar") == 1.0


def test_running_jobs_never_lower_a_factor() -> None:
    # jobs half way through an estimate say nothing about it: a lower bound of 0.5 is not a ratio of 0.5
    cal = calibrate({}, CFG, {"u": running(6, 100.0, 50.0)})
    assert cal.factor("u") == 1.0 and cal.source("u") == UNCALIBRATED
    # a user who over-estimates keeps their own factor while their jobs run inside their estimates
    cal = calibrate({"u": hist(0.5, 0.5, 0.5)}, CFG, {"u": running(6, 100.0, 40.0)})
    assert cal.factor("u") == 0.5 and cal.source("u") == FROM_USER


def test_running_evidence_is_pooled_with_the_finished_jobs_by_work() -> None:
    # ten finished jobs at ratio 1 of 30 GPU-s each (300 in all) and three running ones at 2.0 (60 s of an
    # estimate of 30 each, 180 in all): the weighted median is 1.0, nothing is raised
    h = {"m": UserHistory.of([(1.0, 30.0)] * 10, 10)}
    assert calibrate(h, CFG, {"m": running(3, 30.0, 60.0)}).factor("m") == 1.0
    # thirteen running ones at 1.5 (45 GPU-s each, 585 > 300): the weighted median is 1.5, 1.5 / 1.25 = 1.2
    cal = calibrate(h, CFG, {"m": running(13, 30.0, 45.0)})
    assert cal.factor("m") == pytest.approx(1.2) and cal.source("m") == FROM_RUNNING
    # a raise the finished jobs already gave (ratio 5: factor 4) is not lowered by running jobs proving less
    h = {"m": hist(5.0, 5.0, 5.0)}
    assert calibrate(h, CFG, {"m": running(3, 10.0, 20.0)}).factor("m") == pytest.approx(4.0)


def test_the_cluster_prior_raises_newcomers_only_when_enough_users_are_raised() -> None:
    raised = {u: hist(5.0, 5.0, 5.0) for u in ("a", "b")}  # each factor 5 / 1.25 = 4
    assert calibrate(raised, CFG).factor("newcomer") == 1.0, "two users under-estimating are not the cluster"
    raised["c"] = hist(5.0, 5.0, 5.0)
    cal = calibrate(raised, CFG)
    assert cal.cluster == pytest.approx(4.0) and cal.factor("newcomer") == pytest.approx(4.0)
    assert cal.source("newcomer") == FROM_CLUSTER
    # one vote per user: a, b, c raised by 4, d and e honest (factor 1): the median of (1, 1, 4, 4, 4) is 4
    mixed = {**raised, "d": hist(1.0, 1.0, 1.0), "e": hist(1.0, 1.0, 1.0)}
    assert calibrate(mixed, CFG).cluster == pytest.approx(4.0)
    mixed["f"] = hist(1.0, 1.0, 1.0)  # (1, 1, 1, 4, 4, 4): the median 2.5 is still above 1
    assert calibrate(mixed, CFG).cluster == pytest.approx(2.5)
    mixed["g"] = hist(1.0, 1.0, 1.0)  # (1, 1, 1, 1, 4, 4, 4): 1, and the median of medians (1) lowers nothing
    assert calibrate(mixed, CFG).cluster == 1.0
    assert calibrate(raised, CalibrationConfig(min_jobs=3, window=10, prior_users=4)).cluster == 1.0


def test_a_configured_prior_replaces_the_learned_one() -> None:
    cfg = CalibrationConfig(min_jobs=3, window=10, prior=2.0)
    cal = calibrate({"a": hist(0.5, 0.5, 0.5)}, cfg)
    assert cal.factor("a") == 0.5 and cal.factor("newcomer") == 2.0 and cal.source("newcomer") == FROM_CLUSTER
    with pytest.raises(ValueError, match="prior"):
        CalibrationConfig(prior=0.0)
    with pytest.raises(ValueError, match="prior_users"):
        CalibrationConfig(prior_users=0)
    with pytest.raises(ValueError, match="peer_tolerance"):
        CalibrationConfig(peer_tolerance=0.5)
    with pytest.raises(ValueError, match="peer_floor"):
        CalibrationConfig(peer_floor=1)  # type: ignore[arg-type]


def test_a_claim_without_evidence_is_held_to_the_shortest_other_claim() -> None:
    # the case: the honest user claims 300 s, the newcomer 60 s: 300 / 60 = 5
    present = {"honest": Present.of([300.0] * 16), "liar": Present.of([60.0] * 16)}
    cal = calibrate({}, CFG, present)
    assert cal.factor("liar") == pytest.approx(5.0) and cal.source("liar") == FROM_PEERS
    assert cal.factor("honest") == 1.0, "claiming longer than the others is the user's own loss"
    # three users: only the one below every other is raised, to the lowest of the others (300)
    present["slow"] = Present.of([600.0])
    cal = calibrate({}, CFG, present)
    assert (cal.factor("liar"), cal.factor("honest"), cal.factor("slow")) == (pytest.approx(5.0), 1.0, 1.0)
    # a user's claim is the median of their jobs' claims: (60, 60, 900) -> 60
    cal = calibrate({}, CFG, {"h": Present.of([300.0]), "m": Present.of([60.0, 900.0, 60.0])})
    assert cal.factor("m") == pytest.approx(5.0)
    # within the tolerance of the lowest other claim (300 / 160 < 2): the user's word stands
    assert calibrate({}, CFG, {"h": Present.of([300.0]), "m": Present.of([160.0])}).factor("m") == 1.0
    strict = CalibrationConfig(min_jobs=3, window=10, peer_tolerance=1.0)
    assert calibrate({}, strict, {"h": Present.of([300.0]), "m": Present.of([160.0])}).factor("m") == 1.875
    # alone, nobody to compare with; off, nothing
    assert calibrate({}, CFG, {"liar": Present.of([60.0])}).factor("liar") == 1.0
    off = CalibrationConfig(min_jobs=3, window=10, peer_floor=False)
    assert calibrate({}, off, {"h": Present.of([300.0]), "l": Present.of([60.0])}).factor("l") == 1.0


def test_the_peer_floor_goes_on_top_of_the_cluster_prior() -> None:
    # the cluster over-estimates by 2 (median of medians 0.5): the newcomer's 60 s count as 300 x 0.5 = 150
    h = {"a": hist(0.5, 0.5, 0.5)}
    cal = calibrate(h, CFG, {"a": Present.of([300.0]), "n": Present.of([60.0])})
    assert cal.cluster == 0.5 and cal.factor("n") == pytest.approx(2.5)


def test_users_with_evidence_keep_their_words_unless_proven_short() -> None:
    # an honest user with history claims 60 s against 300 s: their own factor (1) stands
    cal = calibrate({"m": hist(1.0, 1.0, 1.0)}, CFG, {"h": Present.of([300.0]), "m": Present.of([60.0])})
    assert cal.factor("m") == 1.0 and cal.source("m") == FROM_USER
    # proven short by 5 (factor 4): 60 x 4 = 240 is still below 300, so the tolerance goes: 300 / 60 = 5,
    # which is also their full correction (4 x 1.25)
    cal = calibrate({"m": hist(5.0, 5.0, 5.0)}, CFG, {"h": Present.of([300.0]), "m": Present.of([60.0])})
    assert cal.factor("m") == pytest.approx(5.0) and cal.source("m") == FROM_PEERS
    # proven short by 2 (factor 1.6): the floor would want 5, the full correction allows 2
    cal = calibrate({"m": hist(2.0, 2.0, 2.0)}, CFG, {"h": Present.of([300.0]), "m": Present.of([60.0])})
    assert cal.factor("m") == pytest.approx(2.0)


def test_a_history_the_running_jobs_contradict_no_longer_shields_the_claims() -> None:
    """Issue #33's liar with a history: ten one-minute jobs with exact estimates, then one-minute claims
    for five-minute jobs next to an honest user's five-minute claims."""
    h = {"liar": UserHistory.of([(1.0, 60.0)] * 10, 10)}
    present = {"honest": Present.of([300.0] * 16), "liar": Present.of([60.0] * 13)}
    # while its jobs are inside their claims, its history speaks for it: its own factor, 1
    cal = calibrate(h, CFG, {**present, "liar": running(13, 60.0, 50.0)})
    assert cal.factor("liar") == 1.0 and cal.source("liar") == FROM_USER
    # 90 s into them: the pool is ten finished jobs at 1.0 (600 GPU-s) and 13 started at >= 1.5 (1,170):
    # the weighted median is 1.5, a raise to 1.2 > 1. The history is contradicted, so the claims count as a
    # newcomer's: 300 > 60 x 2, counted at 300 (factor 5). Before, the proven-short floor alone: at most
    # the full correction, 1.2 x 1.25 = 1.5 (90 s), rising with the jobs' run time
    cal = calibrate(h, CFG, {**present, "liar": running(13, 60.0, 90.0)})
    assert cal.factor("liar") == pytest.approx(5.0) and cal.source("liar") == FROM_PEERS
    assert calibrate(h, CFG, {"liar": running(13, 60.0, 90.0)}).source("liar") == FROM_RUNNING
    # within the peer tolerance of the honest user's claims (100 < 60 x 2): the proven-short floor alone,
    # 100 / 60 = 1.67 capped at the full correction 1.5
    cal = calibrate(h, CFG, {"honest": Present.of([100.0]), "liar": running(13, 60.0, 90.0)})
    assert cal.factor("liar") == pytest.approx(1.5)


def test_evidence_of_a_lie_never_lowers_the_estimates() -> None:
    # a newcomer claiming 60 s against 300 s: the peer floor counts it at 300 (factor 5)
    present = {"honest": Present.of([300.0] * 8), "liar": Present.of([60.0] * 3)}
    assert calibrate({}, CFG, present).factor("liar") == pytest.approx(5.0)
    # three of its jobs at 90 s prove a raise of 1.5 / 1.25 = 1.2; before, that replaced the floor: min(5,
    # 1.2 x 1.25) = 1.5. Now the larger of the two rules: still 5
    present["liar"] = running(3, 60.0, 90.0)
    cal = calibrate({}, CFG, present)
    assert cal.factor("liar") == pytest.approx(5.0) and cal.source("liar") == FROM_PEERS
    # a raising prior (three users raised by 4) is not replaced by a smaller proven raise (1.2)
    raised = {u: hist(5.0, 5.0, 5.0) for u in ("a", "b", "c")}
    cal = calibrate(raised, CFG, {"n": running(3, 60.0, 90.0)})
    assert cal.factor("n") == pytest.approx(4.0) and cal.source("n") == FROM_CLUSTER
    # a proven raise above the prior does apply: 3 jobs at 360 s of 60 (ratio 6): 6 / 1.25 = 4.8
    cal = calibrate(raised, CFG, {"n": running(3, 60.0, 360.0)})
    assert cal.factor("n") == pytest.approx(4.8) and cal.source("n") == FROM_RUNNING


def test_with_present_is_calibrate_in_two_steps_and_returns_the_same_object_when_nothing_applies() -> None:
    h = {"a": hist(0.5, 0.5, 0.5), "b": hist(5.0, 5.0, 5.0)}
    present = {"a": Present.of([100.0]), "b": Present.of([100.0]), "c": running(3, 60.0, 150.0, claim=30.0)}
    learned = calibrate(h, CFG)
    assert with_present(learned, h, present, CFG) == calibrate(h, CFG, present)
    quiet = {"a": Present.of([100.0]), "b": Present.of([100.0])}
    assert with_present(learned, h, quiet, CFG) is learned


settings_ = settings(max_examples=200, deadline=None)
claims = st.floats(min_value=10.0, max_value=1000.0, allow_nan=False)
ratios = st.floats(min_value=0.05, max_value=20.0, allow_nan=False)


#: (first estimate, done) of a started job: done up to 8 times the estimate
overrun = st.floats(min_value=0.0, max_value=8.0, allow_nan=False)
started_jobs = st.lists(st.tuples(claims, overrun).map(lambda t: (t[0], t[0] * t[1])), max_size=8)


@settings_
@given(
    st.dictionaries(st.sampled_from("abcdefg"), claims, min_size=2),
    st.dictionaries(st.sampled_from("abcdefg"), st.lists(ratios, min_size=1, max_size=6)),
    st.dictionaries(st.sampled_from("abcdefg"), started_jobs),
)
def test_the_stated_bound(
    mine: dict[str, float], past: dict[str, list[float]], runs: dict[str, list[tuple[float, float]]]
) -> None:
    """The bound (module docstring), each user seen in median: (1) without evidence of their own no shorter
    than the cluster's prior x the lowest of the other users' median claims (floor) / peer_tolerance; (2)
    without a factor from finished jobs or with one their started jobs prove too low, when claiming more
    than peer_tolerance below the floor, no shorter than prior x floor; (3) proven short, no shorter than
    the smaller of the floor and their claim x their full correction; honest or long estimates with
    nothing proven by started jobs: the user's own factor."""
    h = {u: hist(*rs) for u, rs in past.items()}
    present = {u: Present.of([c], runs.get(u, ())) for u, c in mine.items()}
    learned = calibrate(h, CFG)
    cal = calibrate(h, CFG, present)
    tol = 1 - 1e-9
    for u, c in mine.items():
        floor = min(v for w, v in mine.items() if w != u)
        seen = c * cal.factor(u)
        if cal.factor(u) == MAX_FACTOR:
            continue  # the clamp: estimates are never raised past 100x
        mine_own = learned.by_user.get(u)
        own = cal.by_user.get(u)  # with the raise proven by started jobs
        contradicted = u in cal.running
        if own is None:  # (1)
            assert seen >= learned.cluster * floor / CFG.peer_tolerance * tol, (u, c, floor, cal)
        if (mine_own is None or contradicted) and floor > c * CFG.peer_tolerance:  # (2)
            assert seen >= learned.cluster * floor * tol, (u, c, floor, cal)
        if own is not None and own > 1.0:  # (3)
            assert seen >= min(floor, c * own * CFG.raise_above) * tol, (u, c, floor, cal)
        if own is not None and own <= 1.0:
            assert cal.factor(u) == own, "evidence of honest or long estimates: the user's own factor"


@settings_
@given(
    st.dictionaries(st.sampled_from("abcdefg"), claims, min_size=1),
    st.dictionaries(st.sampled_from("abcdefg"), st.lists(ratios, min_size=1, max_size=12)),
    st.dictionaries(st.sampled_from("abcdefg"), started_jobs),
    st.sampled_from([None, 0.5, 2.0]),
)
def test_evidence_never_lowers_a_factor(
    mine: dict[str, float],
    past: dict[str, list[float]],
    runs: dict[str, list[tuple[float, float]]],
    prior: float | None,
) -> None:
    """Started jobs are evidence for raising only: with them every user's factor is at least what it is
    without them (same finished jobs, same claims)."""
    cfg = CalibrationConfig(min_jobs=3, window=10, prior=prior)
    h = {u: hist(*rs) for u, rs in past.items()}
    without = calibrate(h, cfg, {u: Present.of([c]) for u, c in mine.items()})
    with_runs = calibrate(h, cfg, {u: Present.of([c], runs.get(u, ())) for u, c in mine.items()})
    for u in mine:
        assert with_runs.factor(u) >= without.factor(u) * (1 - 1e-12), (u, without, with_runs)
