"""Golden decisions: the full Decision sequence of a few seeded simulations, recorded and compared exactly.

A refactoring of the core (or of the daemon seam) must not change what Themis decides. These simulations
cover the phases of a round: the paper workload on 32 GPUs (exact MILP and hidden payments) with the
paper's ranking and with the defaults (ranking at a fair share, reservations), a slice of the real Philly
trace on 32 GPUs (the fast solver, leftover), and a Slurm-shaped mix of multi-node gangs with reservations.
The first three recordings keep the paper's knobs (f = 0.8, ranking by rho under what apps keep; PAPER),
so that a change of the defaults leaves them valid. Each Decision is reduced to its typed content (grants,
renewals and preemptions with their causes, every app's numbers, outcome, kept_by and reservation note;
prose is left out: wording belongs to the edges) and floats are rounded to 9 significant digits.

Record again only for a deliberate change of behaviour, in its own commit:
    THEMIS_GOLDEN_RECORD=1 .venv/bin/python -m pytest tests/unit/core/test_golden_decisions.py
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest

from themis_slurm.core.arbiter import PAPER_RANKING, ArbiterConfig, run_round
from themis_slurm.core.decision import Decision, ReservationNote
from themis_slurm.core.topology import Topology
from themis_slurm.policies.base import PolicyContext, ThemisPolicy
from themis_slurm.sim.engine import SimConfig, Simulator
from themis_slurm.sim.loaders import load_trace
from themis_slurm.sim.trace import Trace, TraceJob
from themis_slurm.sim.workload_paper import paper_workload

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "fixtures" / "golden"
PHILLY = REPO.parent / "shared" / "traces" / "philly_mix1.csv"
RECORD = os.environ.get("THEMIS_GOLDEN_RECORD") == "1"
PAPER = PAPER_RANKING  # the defaults when the first recordings were made


def _f(x: float | None) -> float | str | None:
    if x is None:
        return None
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    return float(f"{x:.9g}")


def _reservation(r: ReservationNote | None) -> list[Any] | None:
    return None if r is None else [r.job_id, r.gpus, r.held, _f(r.start_in_s), r.started]


def digest(d: Decision) -> dict[str, Any]:
    """The typed content of a Decision, JSON-ready and stable."""
    return {
        "now": _f(d.now),
        "grants": [[g.job_id, g.app_id, sorted(g.gpus), dict(sorted(g.nodes.items())), g.level, _f(g.lease_expiry),
                    g.source, g.migrated] for g in d.grants],
        "renewals": [[r.job_id, r.app_id, sorted(r.gpus), _f(r.lease_expiry), str(r.cause), _f(r.cut_s)]
                     for r in d.renewals],
        "preemptions": [[p.job_id, p.app_id, sorted(p.gpus), str(p.cause)] for p in d.preemptions],
        "apps": [[a.app_id, _f(a.rho_before), _f(a.rho_after), a.rank, a.bid, a.won_gpus, a.kept_gpus,
                  _f(a.payment_fraction), a.leftover_gpus, str(a.outcome), str(a.kept_by), a.ranked,
                  _reservation(a.reservation)] for a in sorted(d.apps.values(), key=lambda a: a.app_id)],
        "solver": d.solver,
        "objective": _f(d.objective),
        "offered": d.offered_gpus,
        "idle": sorted(d.idle_gpus),
        "reserved": sorted(d.reserved_gpus),
    }


class Recorder(ThemisPolicy):
    """ThemisPolicy that keeps the digest of every Decision it returns."""

    def __init__(self, config: ArbiterConfig) -> None:
        super().__init__(config)
        self.log: list[dict[str, Any]] = []

    def schedule(self, ctx: PolicyContext) -> Decision:
        d = run_round(ctx.state, self.config)
        self.log.append(digest(d))
        return d


def _paper_trace() -> Trace:
    full = paper_workload(seed=3, n_apps=8, cluster_gpus=32)
    return Trace(full.jobs[:120], "paper workload seed 3, first 120 jobs")


def _paper() -> tuple[Trace, Topology, ArbiterConfig, SimConfig]:
    return _paper_trace(), Topology.uniform(2, 4, 4, islands_per_node=2), ArbiterConfig(
        lease_s=600, seed=1, solver="auto", **PAPER), SimConfig()


def _defaults() -> tuple[Trace, Topology, ArbiterConfig, SimConfig]:
    return _paper_trace(), Topology.uniform(2, 4, 4, islands_per_node=2), ArbiterConfig(seed=1), SimConfig()


def _philly() -> tuple[Trace, Topology, ArbiterConfig, SimConfig]:
    if not PHILLY.is_file():
        pytest.skip(f"the Philly trace is not at {PHILLY} (../shared/traces is optional)")
    full = load_trace(PHILLY, "chronus", skip_bad=True)
    jobs = full.jobs[:300]
    t0 = jobs[0].arrival_s
    trace = Trace(tuple(TraceJob(j.job_id, j.app_id, j.user, j.arrival_s - t0, min(j.gpus, 16), j.duration_s, j.model)
                        for j in jobs), "philly_mix1.csv[:300]")
    return trace, Topology.uniform(2, 2, 8, islands_per_node=2), ArbiterConfig(
        lease_s=300, seed=2, solver="fast", **PAPER), SimConfig()


def _gangs() -> tuple[Trace, Topology, ArbiterConfig, SimConfig]:
    jobs = []
    shapes = [1, 2, 4, 8, 16, 4, 1, 8, 2, 12]
    models = ["vgg16", "resnet50", None, "alexnet", "inception3"]
    for k in range(40):
        g = shapes[k % len(shapes)]
        app = f"team{k % 5}" if k % 3 else f"solo{k}"
        jobs.append(TraceJob(f"j{k}", app, app, 240.0 * k, g, 1800.0 + 337.0 * (k % 7), models[k % len(models)]))
    trace = Trace(tuple(jobs), "slurm-shaped gangs")
    return trace, Topology.uniform(2, 3, 4, islands_per_node=2), ArbiterConfig(
        lease_s=600, seed=5, restart_cost_s=60, solver="auto", **{**PAPER, "reserve_wide_gangs": True}), SimConfig(
        node_shaped=True, restart_cost_s=60)


CASES = {"paper32": _paper, "philly32": _philly, "gangs24": _gangs, "defaults32": _defaults}


@pytest.mark.parametrize("name", sorted(CASES))
def test_decisions_match_the_recording(name: str) -> None:
    trace, topo, arb, sim = CASES[name]()
    rec = Recorder(arb)
    Simulator(trace, topo, rec, sim).run()
    path = GOLDEN / f"{name}.json.gz"
    if RECORD:
        path.write_bytes(gzip.compress(json.dumps(rec.log, separators=(",", ":")).encode(), mtime=0))
    assert path.exists(), f"no recording {path}: run with THEMIS_GOLDEN_RECORD=1 once"
    want = json.loads(gzip.decompress(path.read_bytes()))
    assert len(rec.log) == len(want), f"{name}: {len(rec.log)} rounds, recorded {len(want)}"
    for k, (got, exp) in enumerate(zip(rec.log, want, strict=True)):
        assert got == exp, f"{name}: round {k} (t={exp['now']}) differs"
