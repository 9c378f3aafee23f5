"""Tests of the trace records: validation, helpers, statistics and error messages."""

from __future__ import annotations

import math

import pytest

from themis_slurm.sim.trace import (
    PROFILE_MODELS,
    SENSITIVE_MODELS,
    BadRow,
    Trace,
    TraceError,
    TraceJob,
    normalize_model,
)


def job(job_id: str, app: str, arrival: float, gpus: int = 1, duration: float = 10.0, model: str | None = None):
    return TraceJob(job_id, app, "u", arrival, gpus, duration, model)


def sample() -> Trace:
    return Trace(
        jobs=(job("c", "B", 30.0), job("a", "A", 10.0), job("b", "A", 10.0, gpus=4), job("d", "B", 50.0)),
        source="test",
    )


def test_jobs_sorted_by_arrival_stably() -> None:
    assert [j.job_id for j in sample().jobs] == ["a", "b", "c", "d"]


def test_apps_by_app_and_arrivals() -> None:
    trace = sample()
    assert trace.apps() == ("A", "B")
    assert {k: [j.job_id for j in v] for k, v in trace.by_app().items()} == {"A": ["a", "b"], "B": ["c", "d"]}
    assert trace.app_arrivals() == {"A": 10.0, "B": 30.0}
    assert len(trace) == 4 and [j.job_id for j in trace] == ["a", "b", "c", "d"]


def test_duplicate_job_ids_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate job_id 'a'"):
        Trace(jobs=(job("a", "A", 0.0), job("a", "B", 1.0)), source="t")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gpus": 0}, "gpus"),
        ({"gpus": True}, "gpus"),
        ({"arrival_s": -1.0}, "arrival_s"),
        ({"arrival_s": math.nan}, "arrival_s"),
        ({"duration_s": 0.0}, "duration_s"),
        ({"duration_s": math.inf}, "duration_s"),
        ({"model": "resnet18"}, "model"),
        ({"job_id": ""}, "non-empty"),
    ],
)
def test_trace_job_validation(kwargs: dict, message: str) -> None:
    fields = {"job_id": "j", "app_id": "a", "user": "u", "arrival_s": 0.0, "gpus": 1, "duration_s": 1.0}
    fields.update(kwargs)
    with pytest.raises(ValueError, match=message):
        TraceJob(**fields)


def test_shifted_scaled_and_truncated() -> None:
    trace = sample()
    shifted = trace.shifted()
    assert [j.arrival_s for j in shifted] == [0.0, 0.0, 20.0, 40.0]
    assert shifted.notes[-1].startswith("shifted")
    assert shifted.shifted() is shifted
    scaled = trace.scaled(arrival_factor=0.5, duration_factor=2.0)
    assert [j.arrival_s for j in scaled] == [5.0, 5.0, 15.0, 25.0]
    assert {j.duration_s for j in scaled} == {20.0}
    assert [j.job_id for j in trace.head_apps(1)] == ["a", "b"]
    assert [j.job_id for j in trace.head_jobs(3)] == ["a", "b", "c"]
    assert trace.head_apps(0).jobs == ()
    with pytest.raises(ValueError):
        trace.scaled(arrival_factor=0)
    with pytest.raises(ValueError):
        trace.head_jobs(-1)


def test_with_models() -> None:
    trace = sample().with_models({"A": "vgg16"})
    assert [j.model for j in trace] == ["vgg16", "vgg16", None, None]


def test_stats() -> None:
    stats = sample().stats()
    assert (stats.n_apps, stats.n_jobs) == (2, 4)
    assert stats.jobs_per_app_median == 2.0 and stats.jobs_per_app_max == 2
    assert stats.gpus == ((1, 3), (4, 1))
    assert stats.gpu_seconds == 70.0  # 3 x 1 GPU x 10 s + 4 GPUs x 10 s
    assert (stats.first_arrival_s, stats.last_arrival_s) == (10.0, 50.0)
    with pytest.raises(ValueError):
        Trace(jobs=(), source="empty").stats()


@pytest.mark.parametrize(
    ("raw", "model"),
    [
        ("inception_v3", "inception3"),
        ("Inception-V4", "inception4"),
        ("ResNet-50 (batch size 64)", "resnet50"),
        ("resnet101", "resnet101"),
        ("VGG16", "vgg16"),
        ("AlexNet", "alexnet"),
        ("googlenet", "googlenet"),
        ("mobilenet_v2", None),
        ("ResNet-18 (batch size 32)", None),
        ("", None),
        (None, None),
    ],
)
def test_normalize_model(raw: str | None, model: str | None) -> None:
    assert normalize_model(raw) == model


def test_model_sets() -> None:
    assert len(PROFILE_MODELS) == 10
    assert {"vgg11", "vgg16", "vgg19", "alexnet"} == SENSITIVE_MODELS


def test_trace_error_message_and_bad_row() -> None:
    error = TraceError("trace.csv", 17, "num_gpu", "0", "a positive integer")
    assert str(error) == "trace.csv:17: field num_gpu: value '0' is not a positive integer"
    assert (error.path, error.line, error.field, error.value) == ("trace.csv", 17, "num_gpu", "0")
    bad = BadRow.from_error(error)
    assert str(bad) == str(error)
    assert str(TraceError("t.csv", None, None, None, "the file is empty")) == "t.csv: the file is empty"
    assert str(TraceError("t.csv", 1, "header", None, "missing column x")) == "t.csv:1: field header: missing column x"
