"""Shared helpers for the Slurm read-side tests: fixture file access."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"


@pytest.fixture
def fixture_text():
    """Read a file from tests/fixtures/slurm by name."""

    def read(name: str) -> str:
        return (FIXTURES / name).read_text()

    return read
