"""The wide-gangs phase (core/wide_gangs.py): a started wide gang renews unless its app is clearly ahead.

One node of 4 GPUs, now = 1000 s, N = 2, profile "none" (factor 1 everywhere). T_id = 4000 / min(4, 4 / 2) =
2000 for both apps (the path floor 4000 / 4 = 1000 does not bind):
  B: arrived at 0, one 4-GPU job b1 of 4000 GPU-s with 1000 done, on a lease of all 4 GPUs that expires
     now: rho with its lease = (1000 + 3000 / 4) / 2000 = 0.875; rho without = (1000 + 3000) / 0.1 / 2000
     = 20.
  A: arrived at 900, one 4-GPU job a1 of 4000 GPU-s, nothing done: rho(nothing) = (100 + 4000) / 0.1 / 2000
     = 20.5, worse than B's 20, so without the phase (and without a restart cost) A wins the 4 GPUs and B
     is preempted (tests/unit/core/test_round_policy.py).
"""

from __future__ import annotations

import pytest

from themis_slurm import reasons
from themis_slurm.core.arbiter import ArbiterConfig, run_round
from themis_slurm.core.decision import RenewalCause
from themis_slurm.core.fairness import FairnessModel
from themis_slurm.core.state import ClusterState
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App, Job, Lease

from .test_arbiter import check_invariants

ONE_NODE = Topology.uniform(1, 1, 4)
NOW = 1000.0


def _state(width: int = 4, elastic: bool = False, expiry: float = NOW) -> ClusterState:
    """B holds `width` of the 4 GPUs on a lease ending at `expiry`; A waits for a 4-GPU gang."""
    b = App("B", "u", 0.0, (Job("b1", "B", width, 4000.0, done=1000.0, profile="none", elastic=elastic),),
            contention=2)  # fmt: skip
    a = App("A", "u", 900.0, (Job("a1", "A", 4, 4000.0, profile="none", submit=900.0),), contention=2)
    free = frozenset(range(width, 4))
    return ClusterState(ONE_NODE, NOW, free, (Lease("b1", frozenset(range(width)), 400.0, expiry),), (a, b))


def _run(state: ClusterState, **knobs) -> object:
    d = run_round(state, ArbiterConfig(**{"restart_cost_s": 0.0, "lease_s": 600.0, "keep_wide_gangs": True, **knobs}))
    check_invariants(state, d)
    return d


def test_the_numbers_of_the_docstring() -> None:
    state = _state()
    model = FairnessModel(ONE_NODE, 4)
    a, b = state.apps
    assert model.rho(b, NOW, 4.0) == pytest.approx(0.875)
    assert model.rho(b, NOW, 0.0) == pytest.approx(20.0)
    assert model.rho(a, NOW, 0.0) == pytest.approx(20.5)


@pytest.mark.parametrize("solver", ["exact", "fast"])
def test_a_wide_gang_not_clearly_ahead_keeps_its_gpus(solver: str) -> None:
    """B's rho with its gang, 0.875, is above the release rho 0.8: b1 renews outright (cause wide_gang),
    before any ranking, so B has nothing waiting and A, worse off, waits: no GPU is on offer."""
    d = _run(_state(), solver=solver)
    assert [(r.job_id, sorted(r.gpus), r.lease_expiry, r.cause) for r in d.renewals] == [
        ("b1", [0, 1, 2, 3], NOW + 600.0, RenewalCause.WIDE_GANG)
    ]
    assert not d.grants and not d.preemptions
    assert d.offered_gpus == 0
    assert d.apps["B"].rank is None and d.apps["B"].rho_before == pytest.approx(0.875)
    assert d.apps["A"].rank == 1 and d.apps["A"].won_gpus == 0
    assert "wide gang keeps its GPUs" in reasons.renewal_cause(d.renewals[0].cause)


@pytest.mark.parametrize("release", [0.9, 2.0])
def test_an_app_clearly_ahead_puts_its_wide_gang_up_for_auction(release: float) -> None:
    """With the release rho above 0.875, B is clearly ahead: b1 goes back into the pool, A (20.5 > 20)
    wins the 4 GPUs and b1 is preempted, exactly as without the phase."""
    d = _run(_state(), wide_gang_release_rho=release)
    off = _run(_state(), keep_wide_gangs=False)
    assert [(g.job_id, sorted(g.gpus)) for g in d.grants] == [("a1", [0, 1, 2, 3])]
    assert [p.job_id for p in d.preemptions] == ["b1"] and not d.renewals
    assert (d.grants, d.preemptions, d.renewals) == (off.grants, off.preemptions, off.renewals)


def test_release_rho_zero_always_keeps() -> None:
    d = _run(_state(), wide_gang_release_rho=0.0)
    assert [r.cause for r in d.renewals] == [RenewalCause.WIDE_GANG]


@pytest.mark.parametrize(("width", "elastic"), [(1, False), (4, True)])
def test_one_gpu_and_elastic_gangs_are_auctioned(width: int, elastic: bool) -> None:
    """A 1-GPU job restarts on any GPU that frees up, and an elastic one can restart smaller: neither is
    a wide gang, so both go to the auction (A, the worst, takes what B held)."""
    d = _run(_state(width, elastic))
    assert not any(r.cause is RenewalCause.WIDE_GANG for r in d.renewals)
    assert "b1" in {p.job_id for p in d.preemptions}


def test_a_lease_that_does_not_expire_is_left_alone() -> None:
    """The phase only looks at expiring leases: a running lease is kept by the pool phase, no renewal."""
    d = _run(_state(expiry=NOW + 300.0))
    assert not d.renewals and not d.preemptions and not d.grants


def test_off_by_default_and_validated() -> None:
    assert not ArbiterConfig().keep_wide_gangs and ArbiterConfig().wide_gang_release_rho == 0.8
    d = run_round(_state(), ArbiterConfig(restart_cost_s=0.0, lease_s=600.0))
    assert [p.job_id for p in d.preemptions] == ["b1"] and not d.renewals
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="wide_gang_release_rho"):
            ArbiterConfig(wide_gang_release_rho=bad)
