"""Estimate calibration (core/calibration.py): per-user medians, the cluster fallback, the cap, the window."""

from __future__ import annotations

import math

import pytest

from themis_slurm.core.calibration import (
    FROM_CLUSTER,
    FROM_USER,
    MIN_FACTOR,
    NONE,
    UNCALIBRATED,
    CalibrationConfig,
    UserHistory,
    calibrate,
    calibrated_work,
    finished_ratio,
)

CFG = CalibrationConfig(min_jobs=3, window=5)


def hist(*ratios: float, window: int = 5) -> UserHistory:
    return UserHistory.of(ratios, window)


def test_a_user_with_enough_jobs_gets_the_median_of_their_own_ratios() -> None:
    cal = calibrate({"alice": hist(0.5, 0.2, 0.4)}, CFG)
    assert cal.factor("alice") == 0.4 and cal.source("alice") == FROM_USER
    # the median, not the mean: one job that exited at once barely moves it
    assert calibrate({"alice": hist(0.5, 0.5, 0.01, 0.5)}, CFG).factor("alice") == 0.5


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


def test_factors_are_capped_at_one_and_floored_above_zero() -> None:
    assert calibrate({"alice": hist(2.0, 3.0, 1.5)}, CFG).factor("alice") == 1.0, "under-estimates: no change"
    assert calibrate({"alice": hist(0.0, 0.0, 0.0)}, CFG).factor("alice") == MIN_FACTOR


def test_the_window_keeps_only_the_most_recent_jobs() -> None:
    h = UserHistory()
    for r in (0.1, 0.1, 0.1, 0.9, 0.9, 0.9, 0.9, 0.9):
        h = h.add(r, window=5)
    assert h.ratios == (0.9,) * 5 and h.median == 0.9
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


def test_calibrated_work_only_ever_lowers() -> None:
    assert calibrated_work(100.0, 0.25) == 25.0
    assert calibrated_work(100.0, 1.5) == 100.0


@pytest.mark.parametrize("kw, word", [({"min_jobs": 0}, "min_jobs"), ({"min_jobs": True}, "min_jobs"),
                                      ({"min_jobs": 5, "window": 4}, "window"), ({"window": 2.5}, "window")])
def test_bad_knobs_are_refused_by_name(kw: dict, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        CalibrationConfig(**kw)
