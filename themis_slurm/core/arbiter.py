"""One Themis round: state in, Decision out. Pure: the simulator and the daemon call exactly this.

A round is a fixed list of named phases over one typed :class:`~themis_slurm.core.round_state.RoundState`
(Themis NSDI 2020, section 4; choices in docs/design.md, whose "The round" section maps each phase to its
module and function):

    pool          bidding.collect_pool            free GPUs + expiring leases; non-preemptible holders renew
    unsaved       unsaved_work.keep_unsaved       holders that would lose more work than their lease frees renew
                                                  unless their app is clearly ahead (unsaved_keep_leases > 0)
    wide gangs    wide_gangs.keep_wide_gangs      optional (keep_wide_gangs): started wide gangs renew
                                                  unless their app is clearly ahead (rho < release rho)
    visibility    bidding.rank_by_rho, offer      rank apps with waiting work by rho; the worst 1 - f bid
    quotas        quota.set_quotas                tenancy levels only: each tenant's GPUs for the next lease
    reservation   reservation.reserve_for_wide_gang   optional (reserve_wide_gangs, on by default): a wide gang's GPUs
    winners       winners.determine_winners       x* = argmax prod 1/rho (exact MILP or fast greedy)
    payments      payments.charge, keep_winnings  hidden payments c_i; keep up to the visibility stop (and quota)
    leftover      leftover.hand_out_leftover      the rest to waiting jobs until none fits, earliest virtual
                                                  deadline first (leftover_order "deadline"; "rho": worst first)
    keep-in-place keep_in_place.keep_in_place     optional (keep_in_place, on by default): no restart that
                                                  changes no placement
    decision      record.record                   grants, renewals, preemptions, an AppRecord per app

Agents (core/agent.py) value bundles by the rho they give their app; a gang that must (re)start counts
1 - restart/lease of its throughput (RoundState.restart_discount), in bids, ranking and placement fixes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from themis_slurm.core.bidding import bidders_offered, collect_pool, offer, rank_by_rho
from themis_slurm.core.decision import Decision
from themis_slurm.core.job_facts import JobFactsCache
from themis_slurm.core.keep_in_place import keep_in_place
from themis_slurm.core.leftover import hand_out_leftover
from themis_slurm.core.payments import charge, keep_winnings
from themis_slurm.core.quota import set_quotas
from themis_slurm.core.record import record
from themis_slurm.core.reservation import reserve_for_wide_gang
from themis_slurm.core.round_state import RoundState
from themis_slurm.core.state import ClusterState
from themis_slurm.core.unsaved_work import keep_unsaved
from themis_slurm.core.wide_gangs import keep_wide_gangs
from themis_slurm.core.winners import determine_winners

__all__ = ["LEFTOVER_ORDERS", "PAPER_RANKING", "ArbiterConfig", "SOLVERS", "bidders_offered", "run_round"]

SOLVERS = ("auto", "exact", "fast")
#: the leftover's order (core/leftover.py): earliest virtual deadline first (the default) or worst rho first
LEFTOVER_ORDERS = ("deadline", "rho")

#: The knobs that give the paper's ranking (rho under what apps keep, f = 0.8, no reservations): the defaults
#: before ranking at a fair share (docs/design.md), for `dataclasses.replace(config, **PAPER_RANKING)`.
PAPER_RANKING = {"fairness_knob": 0.8, "rank_at_share": 0.0, "reserve_wide_gangs": False}


@dataclass(frozen=True)
class ArbiterConfig:
    """Knobs of the mechanism. Defaults and their sources are in docs/design.md."""

    fairness_knob: float = 0.9  # the paper's knob; 0.9 with rank_at_share (docs/design.md, "Ranking at a fair share")
    lease_s: float = 600.0
    solver: str = "auto"
    exact_max_bidders: int = 12
    exact_max_gpus: int = 64
    idle_throughput: float = 0.1
    hidden_payments: bool = True
    seed: int = 0
    restart_cost_s: float = 30.0  # work lost by a (re)start; bids discount non-renewal gangs by restart/lease
    reserve_wide_gangs: bool = True  # the reservation phase (core/reservation.py); docs/design.md
    keep_wide_gangs: bool = False  # the wide-gangs phase (core/wide_gangs.py); off: see docs/design.md
    wide_gang_release_rho: float = 0.8  # ... below this rho an app is clearly ahead: its wide gang is auctioned
    unsaved_keep_leases: float = 1.0  # core/unsaved_work.py: keep a holder whose unsaved work > this many leases of its GPUs (0: never)
    unsaved_release_rho: float = 0.3  # ... unless its app's rho is below this (clearly ahead)
    order_slack: float = 0.7  # bidding._finish_rho: the share of the gap to the worst app's rho an app's job order may use
    keep_in_place: bool = True  # the keep-in-place phase (core/keep_in_place.py): off only to see what it saves
    rank_at_share: float = 2.0  # s > 0: rank at s x a fair share (bidding.py); 0: by rho under what apps keep (the paper)
    leftover_order: str = "deadline"  # the leftover's order: earliest virtual deadline first, or "rho" (the authors')

    def __post_init__(self) -> None:
        if not 0.0 <= self.fairness_knob < 1.0:
            raise ValueError(f"fairness_knob must be in [0, 1), got {self.fairness_knob}")
        if not self.lease_s > 0:
            raise ValueError(f"lease_s must be > 0 seconds, got {self.lease_s}")
        if not self.restart_cost_s >= 0:
            raise ValueError(f"restart_cost_s must be >= 0 seconds, got {self.restart_cost_s}")
        if not (self.wide_gang_release_rho >= 0 and math.isfinite(self.wide_gang_release_rho)):
            raise ValueError(f"wide_gang_release_rho must be a number >= 0, got {self.wide_gang_release_rho}")
        if not (self.unsaved_keep_leases >= 0 and math.isfinite(self.unsaved_keep_leases)):
            raise ValueError(f"unsaved_keep_leases must be a number >= 0, got {self.unsaved_keep_leases}")
        if not (self.unsaved_release_rho >= 0 and math.isfinite(self.unsaved_release_rho)):
            raise ValueError(f"unsaved_release_rho must be a number >= 0, got {self.unsaved_release_rho}")
        if not 0.0 <= self.order_slack <= 1.0:
            raise ValueError(f"order_slack must be a number in [0, 1], got {self.order_slack}")
        if not (self.rank_at_share >= 0 and math.isfinite(self.rank_at_share)):
            raise ValueError(f"rank_at_share must be a number >= 0, got {self.rank_at_share}")
        if self.leftover_order not in LEFTOVER_ORDERS:
            raise ValueError(f"leftover_order must be one of {', '.join(LEFTOVER_ORDERS)}, got {self.leftover_order!r}")
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, got {self.solver!r}")


def run_round(state: ClusterState, config: ArbiterConfig | None = None, cache: JobFactsCache | None = None) -> Decision:
    """Run one Themis round: the phases of the module docstring, in order.

    A caller that runs round after round may keep one `cache` (core/job_facts.py) and pass it each time:
    the per-job numbers of jobs it passes again (the same objects) are then not recomputed. The Decision
    is the same with or without it.
    """
    rs = RoundState.start(state, config or ArbiterConfig(), cache)
    collect_pool(rs)
    keep_unsaved(rs)
    if rs.cfg.keep_wide_gangs:
        keep_wide_gangs(rs)
    rank_by_rho(rs)
    offer(rs)
    set_quotas(rs)
    if rs.cfg.reserve_wide_gangs:
        reserve_for_wide_gang(rs)
    solved = determine_winners(rs)
    charge(rs, solved)
    keep_winnings(rs)
    hand_out_leftover(rs)
    if rs.cfg.keep_in_place:
        keep_in_place(rs)
    return record(rs)
