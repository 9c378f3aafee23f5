"""Shared helpers for the Slurm read-side tests: fixture file access."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"


@pytest.fixture
def fixture_text():
    """Read a file from tests/fixtures/slurm by name."""

    def read(name: str) -> str:
        return (FIXTURES / name).read_text()

    return read


@pytest.fixture
def utc(monkeypatch):
    """The fixtures were captured on UTC machines and scontrol prints local times: parse them in UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
