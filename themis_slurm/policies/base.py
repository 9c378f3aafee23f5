"""The one interface every scheduling policy implements, Themis included.

A policy is called at events (arrivals, completions, lease expiries, its own wake-ups) with the cluster
state and returns a :class:`~themis_slurm.core.decision.Decision`: grants start waiting jobs on free GPUs,
preemptions stop running jobs, renewals extend leases. The caller (the simulator, or the daemon for
Themis) applies it and checks it: no GPU granted twice, gangs whole, only free GPUs granted.

Unlike the Themis arbiter, which only takes back GPUs whose lease expired, baseline policies may preempt any
preemptible running job at any call (Tiresias demotes, Gandiva time-slices). Leases on grants are how a
policy asks to be woken: ``lease_expiry`` is when the caller must call it again for that job (``inf``:
never for that job).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from themis_slurm.core.arbiter import ArbiterConfig, run_round
from themis_slurm.core.decision import Decision
from themis_slurm.core.job_facts import JobFactsCache
from themis_slurm.core.state import ClusterState


@dataclass(frozen=True)
class PolicyContext:
    """What a policy sees at one call.

    `state.leases` are the running jobs (a lease with ``expiry <= now`` has expired); `state.free` the
    idle GPUs it may grant; jobs carry estimates only (`work`, `done`, `service`), never true sizes.
    `reasons` says why the call happens ("arrival", "completion", "lease", "wakeup").
    """

    state: ClusterState
    reasons: frozenset[str] = frozenset()


class Policy(Protocol):
    """A scheduling policy. Implementations live one per module in this package.

    Every policy declares `grants_only_free_or_expired`: True when it never preempts a job whose lease has
    not expired, so that a call with no free GPU and no expired lease cannot change anything (the
    simulator then skips such calls); False when it may preempt at any call (time-slicing, demotion,
    shortest-first preemption). Themis is True by construction: it only hands out free GPUs and GPUs of
    expired leases.

    Every policy also declares `reads_estimates`: False when what it decides depends only on jobs' sizes,
    shapes, submit times and attained service (`Job.service`), never on their estimated work or progress
    (`work`, `done`, `remaining`), so that estimate errors, calibration and progress reports cannot change
    it (Tiresias's least attained service, FIFO, time slicing); True otherwise. The evaluation runs such a
    policy once for all its estimate experiments (benchmarks/paper_eval.py); a test checks each False
    against a simulation with and without estimate errors (tests/unit/policies/test_registry.py).
    """

    name: str
    grants_only_free_or_expired: bool
    reads_estimates: bool

    def schedule(self, ctx: PolicyContext) -> Decision:
        """Decide grants, preemptions and renewals for this instant."""
        ...

    def next_wakeup(self, now: float) -> float | None:
        """When the policy wants to be called again with no event (None: only on events)."""
        ...


class ThemisPolicy:
    """Themis: the core arbiter, unchanged (the daemon calls the same :func:`run_round`)."""

    name = "themis"
    #: only free GPUs and GPUs of expired leases are re-auctioned (see :class:`Policy`)
    grants_only_free_or_expired = True
    #: rho is estimated remaining work over throughput (see :class:`Policy`)
    reads_estimates = True

    def __init__(self, config: ArbiterConfig | None = None) -> None:
        self.config = config or ArbiterConfig()
        self._cache = JobFactsCache()  # per-job numbers kept across rounds (same decisions, less work)

    def schedule(self, ctx: PolicyContext) -> Decision:
        return run_round(ctx.state, self.config, self._cache)

    def next_wakeup(self, now: float) -> float | None:
        return None  # leases carry their own expiry
