"""Winner determination: the bundles of the pool that maximise the product of 1/rho over the bidders.

Themis NSDI 2020, section 4.2 (partial allocation, after Cole et al.): the allocation x* maximises the
Nash social welfare (the sum of log(1/rho); weighted by the apps' shares with tenancy levels,
core/tenancy.py). `exact` solves it as a MILP over each bidder's candidate
bundles (HiGHS); `fast` is the greedy of core/auction.py; `auto` picks exact for small rounds
(``exact_max_bidders`` bidders and ``exact_max_gpus`` GPUs in the pool), fast otherwise. The solver objects
and their candidates stay in the round state because the hidden payments solve the same problem again
without each winner (core/payments.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from themis_slurm.core.auction import Allocation, Bundle, ExactSolver, FastSolver
from themis_slurm.core.round_state import RoundState


@dataclass
class Solved:
    """What winner determination leaves for the payments: the exact solver and its candidates, if used."""

    exact: ExactSolver | None = None
    candidates: list[Bundle] | None = None


def choose_solver(rs: RoundState) -> str:
    cfg = rs.cfg
    if cfg.solver != "auto":
        return cfg.solver
    small = len(rs.bidders) <= cfg.exact_max_bidders and rs.pool.size <= cfg.exact_max_gpus
    return "exact" if small else "fast"


def determine_winners(rs: RoundState) -> Solved:
    """Winner-determination phase: x* over the bidders and the pool (empty when either is)."""
    rs.solver = choose_solver(rs)
    rs.x_star = Allocation({}, 0.0, rs.solver)
    if not (rs.bidders and rs.pool.size):
        return Solved()
    if rs.solver == "exact":
        exact = ExactSolver(node_alternatives=rs.state.topology.size <= rs.cfg.exact_max_gpus)
        cands = exact.candidates(rs.bidders, rs.pool)
        rs.x_star = exact.solve_candidates(cands)
        return Solved(exact, cands)
    rs.x_star = FastSolver().solve(rs.bidders, rs.pool)
    return Solved()
