"""The unsaved-work phase (core/unsaved_work.py): a holder that would throw away more work than its lease
frees keeps its GPUs unless its app is clearly ahead.

One node of 4 GPUs, now = 1000 s, N = 2, profile "none", restart cost 0, 600 s leases. B (arrived at 0)
holds all 4 GPUs on a lease expiring now; its job b1 has 3,500 of 4,000 GPU-s done: rho 0.5625 with its
lease, 7.5 without. Four apps A0-A3 (arrived at 900) each wait with a one-GPU job and nothing: rho 10.25
each. A job that checkpoints (nothing unsaved) loses the 4 GPUs to them. One lease of b1's GPUs frees
4 x 600 = 2,400 GPU-s.
"""

from __future__ import annotations

import pytest

from themis_slurm import reasons
from themis_slurm.core.arbiter import ArbiterConfig, run_round
from themis_slurm.core.decision import Decision, RenewalCause
from themis_slurm.core.fairness import FairnessModel
from themis_slurm.core.state import ClusterState
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App, Job, Lease

from .test_arbiter import check_invariants
from .test_golden_decisions import digest

ONE_NODE = Topology.uniform(1, 1, 4)
NOW = 1000.0


def _state(unsaved: float, expiry: float = NOW, preemptible: bool = True) -> ClusterState:
    b = App("B", "u", 0.0, (Job("b1", "B", 4, 4000.0, done=3500.0, profile="none", unsaved=unsaved,
                                preemptible=preemptible),), contention=2)  # fmt: skip
    waiting = tuple(
        App(f"A{i}", "u", 900.0, (Job(f"a{i}", f"A{i}", 1, 4000.0, profile="none", submit=900.0),), contention=2)
        for i in range(4)
    )
    return ClusterState(ONE_NODE, NOW, frozenset(), (Lease("b1", frozenset(range(4)), 400.0, expiry),),
                        (*waiting, b))  # fmt: skip


def _run(state: ClusterState, **knobs) -> Decision:
    d = run_round(state, ArbiterConfig(**{"restart_cost_s": 0.0, "lease_s": 600.0, **knobs}))
    check_invariants(state, d)
    return d


def test_the_numbers_of_the_docstring() -> None:
    state = _state(0.0)
    model = FairnessModel(ONE_NODE, 4)
    b = state.apps[-1]
    assert model.rho(b, NOW, 4.0) == pytest.approx(0.5625)
    assert model.rho(b, NOW, 0.0) == pytest.approx(7.5)
    assert model.rho(state.apps[0], NOW, 0.0) == pytest.approx(10.25)
    d = _run(state)  # a job that checkpoints: preempted for the four apps with nothing
    assert sorted(g.job_id for g in d.grants) == ["a0", "a1", "a2", "a3"] and [p.job_id for p in d.preemptions] == ["b1"]


@pytest.mark.parametrize("solver", ["exact", "fast"])
def test_a_holder_that_would_lose_more_than_a_lease_keeps_its_gpus(solver: str) -> None:
    """2,500 GPU-s unsaved, more than the 2,400 its lease frees, and B (0.5625) not below the release rho
    0.3: b1 is renewed outright before the ranking, so nothing is on offer."""
    d = _run(_state(2500.0), solver=solver)
    assert [(r.job_id, sorted(r.gpus), r.lease_expiry, r.cause) for r in d.renewals] == [
        ("b1", [0, 1, 2, 3], NOW + 600.0, RenewalCause.UNSAVED)
    ]
    assert not d.grants and not d.preemptions and d.offered_gpus == 0
    assert d.apps["B"].rank is None  # nothing waiting once b1 is kept: not ranked
    assert "more unsaved work than its lease frees" in reasons.renewal_cause(RenewalCause.UNSAVED)


@pytest.mark.parametrize(
    ("unsaved", "knobs"),
    [
        (2300.0, {}),  # less than a lease frees
        (2500.0, {"unsaved_release_rho": 0.6}),  # B (0.5625) clearly ahead: a false ckpt=no buys nothing more
        (2500.0, {"unsaved_keep_leases": 2.0}),  # below a threshold of two leases (4,800 GPU-s)
    ],
)
def test_otherwise_the_round_is_the_one_without_the_phase(unsaved: float, knobs: dict) -> None:
    """Below the threshold, or with its app clearly ahead, the holder is auctioned like any lease: the
    Decision is exactly the one with the phase off (the bids' own charge of the unsaved work decides)."""
    state = _state(unsaved)
    d = _run(state, **knobs)
    assert RenewalCause.UNSAVED not in {r.cause for r in d.renewals}
    assert digest(d) == digest(_run(state, **{**knobs, "unsaved_keep_leases": 0.0}))


def test_leases_not_expiring_and_holders_not_preemptible_are_left_alone() -> None:
    d = _run(_state(2500.0, expiry=NOW + 50.0))
    assert not d.renewals and not d.preemptions
    d = _run(_state(2500.0, preemptible=False))
    assert [r.cause for r in d.renewals] == [RenewalCause.NOT_PREEMPTIBLE]


def test_bad_knobs_are_refused_with_their_name() -> None:
    with pytest.raises(ValueError, match="unsaved_keep_leases must be a number >= 0, got -1"):
        ArbiterConfig(unsaved_keep_leases=-1)
    with pytest.raises(ValueError, match="unsaved_release_rho must be a number >= 0, got nan"):
        ArbiterConfig(unsaved_release_rho=float("nan"))
