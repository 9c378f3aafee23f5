"""The real Philly MIX1 trace (ChronusArtifact), when the shared traces directory is present.

The trace is never part of the product: it lives in ../shared/traces relative to the repository root.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from themis_slurm.sim.loaders import load_trace
from themis_slurm.sim.trace import TraceError

REPO_ROOT = Path(__file__).resolve().parents[3]
PHILLY_MIX1 = REPO_ROOT.parent / "shared" / "traces" / "philly_mix1.csv"

pytestmark = pytest.mark.skipif(
    not PHILLY_MIX1.is_file(), reason=f"real trace not present at {PHILLY_MIX1} (../shared/traces is optional)"
)


def test_fails_fast_on_first_zero_gpu_row() -> None:
    with pytest.raises(TraceError, match=r"philly_mix1\.csv:\d+: field num_gpu: value '0' is not a positive integer"):
        load_trace(PHILLY_MIX1, "chronus")


def test_loads_with_skip_bad() -> None:
    trace = load_trace(PHILLY_MIX1, "chronus", skip_bad=True)
    assert trace.skipped == 184  # rows with num_gpu == 0 (shared/traces/README.md)
    assert all(b.field == "num_gpu" and b.value == "0" for b in trace.bad_rows)
    assert len(trace) == 30_940 - 184
    stats = trace.stats()
    assert dict(stats.gpus) == {1: 28_361, 4: 1_173, 8: 876, 2: 205, 16: 124, 32: 14, 12: 2, 20: 1}
    assert len({j.user for j in trace}) == 11
    assert stats.duration_max_s == 4_317
    assert {m for m, _ in stats.models} == {"inception3", "alexnet", "resnet101", "vgg16", None}
