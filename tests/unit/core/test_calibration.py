"""Estimate calibration (core/calibration.py): weighted per-user medians, the cluster fallback, lowering and
raising with their bounds, the window."""

from __future__ import annotations

import math

import pytest

from themis_slurm.core.calibration import (
    FROM_CLUSTER,
    FROM_USER,
    MAX_FACTOR,
    MIN_FACTOR,
    NONE,
    UNCALIBRATED,
    CalibrationConfig,
    UserHistory,
    calibrate,
    calibrated_work,
    finished_ratio,
    weighted_median,
)

CFG = CalibrationConfig(min_jobs=3, window=5)


def hist(*ratios: float, window: int = 5) -> UserHistory:
    """A history of jobs of equal work (weight 1)."""
    return UserHistory.of(((r, 1.0) for r in ratios), window)


def test_a_user_with_enough_jobs_gets_the_median_of_their_own_ratios() -> None:
    cal = calibrate({"alice": hist(0.5, 0.2, 0.4)}, CFG)
    assert cal.factor("alice") == 0.4 and cal.source("alice") == FROM_USER
    # the median, not the mean: one job that exited at once barely moves it
    assert calibrate({"alice": hist(0.5, 0.5, 0.01, 0.5)}, CFG).factor("alice") == 0.5


def test_raising_reads_the_work_weighted_median_lowering_the_plain_one() -> None:
    assert weighted_median([(0.2, 1.0), (0.9, 5.0), (0.5, 1.0)]) == 0.9
    assert weighted_median([(0.2, 1.0), (0.9, 1.0), (0.5, 1.0)]) == 0.5
    assert weighted_median([(0.2, 0.0), (0.9, 0.0), (0.5, 0.0)]) == 0.5, "no work at all: the plain median"
    assert math.isnan(weighted_median([]))
    # many tiny jobs with honest estimates cannot hide long ones that claim a tenth of their run time
    h = UserHistory.of([(1.0, 60.0)] * 4 + [(10.0, 36_000.0)] * 3, window=50)
    assert (h.median, h.weighted) == (1.0, 10.0)
    assert calibrate({"m": h}, CFG).factor("m") == pytest.approx(8.0)
    # lowering follows the plain median: one long job does not decide it
    h = UserHistory.of([(0.5, 60.0)] * 4 + [(1.0, 36_000.0)], window=50)
    assert calibrate({"a": h}, CFG).factor("a") == 0.5


def test_too_few_jobs_and_nobody_else_means_no_calibration() -> None:
    cal = calibrate({"alice": hist(0.5, 0.5)}, CFG)
    assert cal.factor("alice") == 1.0 and cal.source("alice") == UNCALIBRATED
    assert cal.factor("bob") == 1.0


def test_users_without_enough_history_get_the_median_of_user_medians_one_vote_each() -> None:
    # carol has many jobs at 0.1, alice and bob few at 0.5 and 0.6: pooled jobs would give 0.1, one
    # vote per user gives the median of (0.1, 0.5, 0.6) = 0.5, so carol alone cannot move everyone else
    h = {"carol": hist(0.1, 0.1, 0.1, 0.1, 0.1), "alice": hist(0.5), "bob": hist(0.6)}
    cal = calibrate(h, CFG)
    assert cal.factor("carol") == 0.1 and cal.source("carol") == FROM_USER
    assert cal.factor("alice") == 0.5 and cal.source("alice") == FROM_CLUSTER
    assert cal.factor("dave") == 0.5, "a user never seen gets the cluster factor"


def test_under_estimates_are_raised_to_the_tolerance_and_never_through_the_cluster() -> None:
    cfg = CalibrationConfig(min_jobs=3, window=5, raise_above=1.25)
    assert calibrate({"a": hist(1.2, 1.1, 1.25)}, cfg).factor("a") == 1.0, "within the tolerance: unchanged"
    assert calibrate({"a": hist(10.0, 10.0, 10.0)}, cfg).factor("a") == pytest.approx(8.0), "10 / 1.25"
    assert calibrate({"a": hist(1e6, 1e6, 1e6)}, cfg).factor("a") == MAX_FACTOR
    # a user whose jobs outrun their estimates never raises anybody else's
    cal = calibrate({"m": hist(10.0, 10.0, 10.0, 10.0), "b": hist(20.0)}, cfg)
    assert cal.factor("m") == 8.0 and cal.cluster == 1.0 and cal.factor("newcomer") == 1.0
    never = CalibrationConfig(min_jobs=3, window=5, raise_above=math.inf)
    assert calibrate({"a": hist(10.0, 10.0, 10.0)}, never).factor("a") == 1.0


def test_factors_below_one_are_floored_above_zero() -> None:
    assert calibrate({"alice": hist(0.0, 0.0, 0.0)}, CFG).factor("alice") == MIN_FACTOR


def test_the_window_keeps_only_the_most_recent_jobs() -> None:
    h = UserHistory()
    for r in (0.1, 0.1, 0.1, 0.9, 0.9, 0.9, 0.9, 0.9):
        h = h.add(r, 1.0, window=5)
    assert h.samples == ((0.9, 1.0),) * 5 and h.median == 0.9
    # a smaller window in the config than the stored history reads only the newest
    cal = calibrate({"a": hist(0.1, 0.1, 0.9, 0.9, 0.9, window=5)}, CalibrationConfig(min_jobs=3, window=3))
    assert cal.factor("a") == 0.9 and cal.counts["a"] == 3


def test_disabled_is_no_calibration_at_all() -> None:
    cal = calibrate({"alice": hist(0.5, 0.5, 0.5)}, CalibrationConfig(enabled=False, min_jobs=3, window=5))
    assert cal is NONE and cal.factor("alice") == 1.0


def test_finished_ratio_refuses_unusable_numbers() -> None:
    assert finished_ratio(100.0, 50.0) == 0.5
    for est, work in ((0.0, 1.0), (-1.0, 1.0), (math.inf, 1.0), (math.nan, 1.0), (10.0, -1.0), (10.0, math.nan)):
        assert finished_ratio(est, work) is None, (est, work)


def test_calibrated_work_scales() -> None:
    assert calibrated_work(100.0, 0.25) == 25.0
    assert calibrated_work(100.0, 1.5) == 150.0


@pytest.mark.parametrize("kw, word", [({"min_jobs": 0}, "min_jobs"), ({"min_jobs": True}, "min_jobs"),
                                      ({"min_jobs": 5, "window": 4}, "window"), ({"window": 2.5}, "window"),
                                      ({"raise_above": 0.9}, "raise_above"), ({"raise_above": "2"}, "raise_above"),
                                      ({"raise_above": math.nan}, "raise_above")])
def test_bad_knobs_are_refused_by_name(kw: dict, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        CalibrationConfig(**kw)
