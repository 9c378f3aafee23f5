"""quick_init: the same objects as the dataclass's own __init__, built faster (core/quick_init.py)."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
import random
from dataclasses import dataclass, field

import pytest

from themis_slurm.core.agent import Bundle, Gang
from themis_slurm.core.decision import AppRecord, Grant, Preemption, Renewal
from themis_slurm.core.quick_init import quick_init
from themis_slurm.core.topology import Level
from themis_slurm.core.workload import App, Job, Lease
from themis_slurm.sim.validate import Holding


@quick_init
@dataclass(frozen=True, slots=True)
class _Sample:
    a: int
    b: str = "x"
    c: list[int] = field(default_factory=list)
    total: int = field(init=False)

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError(f"a must be >= 0, got {self.a}")
        object.__setattr__(self, "total", self.a + len(self.c))


def _original(cls: type, *args: object, **kwargs: object) -> object:
    """An instance built by the dataclass's own generated __init__ (kept as __wrapped__)."""
    obj = object.__new__(cls)
    cls.__init__.__wrapped__(obj, *args, **kwargs)
    return obj


def test_defaults_factories_post_init_and_keywords() -> None:
    s = _Sample(2)
    assert (s.a, s.b, s.c, s.total) == (2, "x", [], 2)
    t = _Sample(1, c=[5, 6], b="y")
    assert (t.a, t.b, t.c, t.total) == (1, "y", [5, 6], 3)
    assert _Sample(0).c is not _Sample(0).c  # a fresh default per instance, as default_factory promises
    assert s == _original(_Sample, 2)
    assert t == _original(_Sample, 1, b="y", c=[5, 6])


def test_errors_are_the_constructors_own() -> None:
    with pytest.raises(ValueError, match="a must be >= 0, got -1"):
        _Sample(-1)
    with pytest.raises(TypeError):
        _Sample()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Sample(1, d=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Sample(1, total=3)  # type: ignore[call-arg]  # not an __init__ field
    with pytest.raises(ValueError, match="work must be > 0"):
        Job("j", "a", 1, 0.0)
    with pytest.raises(ValueError, match="belongs to app b, not a"):
        App("a", "u", 0.0, (Job("j", "b", 1, 1.0),))


def test_frozen_hashable_picklable_replaceable() -> None:
    j = Job("j1", "a1", 2, 100.0, 5.0, "high", 1, 2, False, True, 3.0, 7.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        j.done = 6.0  # type: ignore[misc]
    assert hash(j) == hash(_original(Job, "j1", "a1", 2, 100.0, 5.0, "high", 1, 2, False, True, 3.0, 7.0))
    assert pickle.loads(pickle.dumps(j)) == j
    moved = dataclasses.replace(j, done=50.0)
    assert moved.done == 50.0 and moved.work == 100.0 and moved != j
    assert repr(j).startswith("Job(id='j1', app_id='a1', gpus=2,")


def test_signature_is_the_dataclasses() -> None:
    for cls in (Job, App, Lease, Gang, Bundle, Grant, Renewal, Preemption, AppRecord, Holding, _Sample):
        ours = inspect.signature(cls.__init__, follow_wrapped=False)  # not the original's, via __wrapped__
        assert ours == inspect.signature(cls.__init__.__wrapped__)
        assert cls.__init__.__qualname__ == f"{cls.__qualname__}.__init__"


def test_every_decorated_class_matches_the_generated_init() -> None:
    """Random arguments, positional and by keyword: every field equal to what the dataclass builds."""
    rng = random.Random(7)
    for _ in range(200):
        g = rng.randint(1, 8)
        job_args = (f"j{rng.randint(0, 9)}", "a", g, rng.uniform(1, 1e6), rng.uniform(0, 10), "low", None, None,
                    rng.random() < 0.5, rng.random() < 0.5, rng.uniform(0, 100), rng.uniform(0, 100))  # fmt: skip
        job = Job(*job_args)
        gpus = frozenset(rng.sample(range(64), g))
        gang = Gang(job.id, gpus, Level.NODE, rng.uniform(0, 8))
        cases: list[tuple[type, tuple, dict]] = [
            (Job, job_args, {}),
            (Job, job_args[:4], {"service": 2.5, "submit": 1.0}),
            (Job, (*job_args, frozenset({"n1", f"n{g}"})), {}),  # allowed_nodes, the last field, positionally
            (Job, job_args[:4], {"allowed_nodes": {"n2"}}),  # a plain set: kept as a frozenset by both
            (App, ("a", "u", rng.uniform(0, 100), (job,), rng.uniform(1, 5)), {"peak_gpus": g}),
            (Lease, (job.id, gpus, 0.0, rng.uniform(0, 1e4)), {}),
            (Gang, (job.id, gpus, Level.RACK, 1.5), {}),
            (Bundle, ("a", (gang,), rng.uniform(0.5, 3), rng.uniform(-1, 1)), {}),
            (Grant, (job.id, "a", gpus, {"n1": g}, "node", 600.0, "auction"), {"migrated": True}),
            (Renewal, (job.id, "a", gpus, 600.0), {"cut_s": 30.0}),
            (Preemption, (job.id, "a", gpus), {"note": "why"}),
            (AppRecord, ("a", 1.5, 1.2, 3, True), {"won_gpus": g, "note": "n"}),
            (Holding, ("a", gpus, True), {}),
        ]
        for cls, args, kwargs in cases:
            quick = cls(*args, **kwargs)
            slow = _original(cls, *args, **kwargs)
            for f in dataclasses.fields(cls):
                assert getattr(quick, f.name) == getattr(slow, f.name), (cls.__name__, f.name)
            assert quick == slow


def test_refuses_what_it_cannot_reproduce() -> None:
    @dataclass(frozen=True)
    class NoSlots:
        a: int

    with pytest.raises(TypeError, match="not a dataclass with slots=True"):
        quick_init(NoSlots)

    @dataclass(frozen=True, slots=True, kw_only=True)
    class KwOnly:
        a: int

    with pytest.raises(TypeError, match="keyword-only"):
        quick_init(KwOnly)

    @dataclass(frozen=True, slots=True)
    class WithInitVar:
        a: int
        scale: dataclasses.InitVar[int] = 1

    with pytest.raises(TypeError, match="init-only"):
        quick_init(WithInitVar)

    with pytest.raises(TypeError, match="not a dataclass"):
        quick_init(int)
