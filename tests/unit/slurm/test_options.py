"""The trusted AdminComment record and the Comment progress report (options.py)."""

from __future__ import annotations

import math

import pytest

from themis_slurm.slurm.options import Record, is_record, parse_progress, parse_record


def test_full_record() -> None:
    rec, problems = parse_record("themis:v1;app=sweep42;model=vgg16;sens=;est=21600")
    assert problems == []
    assert rec == Record(app="sweep42", model="vgg16", sens=None, est_s=21600.0)
    assert rec.profile == "vgg16"


def test_empty_fields_are_none_and_sens_is_the_profile() -> None:
    rec, problems = parse_record("themis:v1;app=;model=;sens=high;est=")
    assert problems == []
    assert rec == Record(sens="high")
    assert rec.profile == "high"


def test_unknown_keys_are_ignored() -> None:
    rec, problems = parse_record("themis:v1;app=a;future=1;est=60")
    assert problems == [] and rec.app == "a" and rec.est_s == 60.0


@pytest.mark.parametrize("est", ["abc", "-5", "0", "1.5"])
def test_bad_est_names_field_and_value(est: str) -> None:
    rec, problems = parse_record(f"themis:v1;app=a;model=;sens=;est={est}")
    assert rec.app == "a" and rec.est_s is None
    assert len(problems) == 1 and f"est={est!r}" in problems[0]


@pytest.mark.parametrize(("raw", "ckpt_s", "given"), [
    ("", None, False), ("yes", None, True), ("no", math.inf, True), ("1800", 1800.0, True),
])
def test_ckpt(raw: str, ckpt_s: float | None, given: bool) -> None:
    rec, problems = parse_record("themis:v1;app=a;model=;sens=;est=60" + (f";ckpt={raw}" if raw else ""))
    assert problems == [] and rec.ckpt_s == ckpt_s and rec.ckpt_given is given


@pytest.mark.parametrize("raw", ["maybe", "0", "-5", "1.5", "30m"])
def test_bad_ckpt_names_field_and_value(raw: str) -> None:
    rec, problems = parse_record(f"themis:v1;app=a;model=;sens=;est=60;ckpt={raw}")
    assert rec.ckpt_s is None and not rec.ckpt_given and rec.est_s == 60.0
    assert len(problems) == 1 and f"ckpt={raw!r}" in problems[0]


def test_other_version_gives_defaults_and_a_problem() -> None:
    rec, problems = parse_record("themis:v2;app=a")
    assert rec == Record()
    assert "themis:v2" in problems[0] and "themis:v1" in problems[0]


def test_field_without_equals_is_reported() -> None:
    rec, problems = parse_record("themis:v1;app=a;garbage")
    assert rec.app == "a" and "garbage" in problems[0]


def test_is_record() -> None:
    assert is_record("themis:v1;app=;model=;sens=;est=")
    assert not is_record("")
    assert not is_record("some admin note")


@pytest.mark.parametrize(("comment", "value"), [
    ("themis:progress=0.42", 0.42),
    ("THEMIS: progress = 1", 1.0),
    ("themis:progress=0", 0.0),
    ("themis:app=sweep1,progress=0.5;epoch 3 of 6", 0.5),
    ("themis:progress=5e-1", 0.5),
])
def test_progress(comment: str, value: float) -> None:
    assert parse_progress(comment) == (value, None)


@pytest.mark.parametrize("comment", ["", "free text", "themis:app=sweep1", "themis:", "note; progress=0.3"])
def test_no_progress(comment: str) -> None:
    assert parse_progress(comment) == (None, None)


@pytest.mark.parametrize("raw", ["abc", "1.5", "-0.1", "nan", "inf", "42%", ""])
def test_bad_progress_names_field_and_value(raw: str) -> None:
    value, error = parse_progress(f"themis:progress={raw}")
    assert value is None
    assert error is not None and f"progress={raw!r}" in error and "between 0 and 1" in error


def test_progress_twice() -> None:
    value, error = parse_progress("themis:progress=0.1,progress=0.2")
    assert value is None and error is not None and "2 times" in error


def test_long_values_are_shortened_in_messages() -> None:
    _, error = parse_progress("themis:progress=" + "x" * 500)
    assert error is not None and len(error) < 120
