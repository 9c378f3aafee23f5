"""Hidden payments and the visibility stop: what each winner of x* actually keeps.

Themis NSDI 2020, section 4.2: winner i keeps c_i = prod_{j != i} rho_j(x*_{-i}) / rho_j(x*) of what it
won (partial allocation: truth-telling pays); the rest is withheld and goes to the leftover. Whole gangs
are kept: the last one by a lottery number drawn from a hash of (seed, now, app id), so that the expected
share is exactly c_i and the round stays a pure function. A withheld gang that is a renewal stays on a
lease cut to c_i of a lease instead (the same GPU-time in expectation; the lottery never preempts a
running job). Then the visibility stop: a winner keeps gangs only until its rho is down to the worst rho
outside the auction (see :func:`visibility_stop`).
"""

from __future__ import annotations

from collections.abc import Sequence

from themis_slurm.core.agent import Agent, Gang
from themis_slurm.core.auction import hidden_payments, lottery
from themis_slurm.core.round_state import RoundState
from themis_slurm.core.winners import Solved

#: shortest lease, as a fraction of a lease, a renewal keeps when its hidden payment cuts it (c_i near 0)
MIN_CUT = 0.05


def charge(rs: RoundState, solved: Solved) -> None:
    """Hidden-payment phase: c_i for every winner (none when payments are off or nobody won)."""
    if not (rs.cfg.hidden_payments and rs.x_star is not None and rs.x_star.bundles):
        return
    draws = {a.app_id: lottery(rs.cfg.seed, rs.now, a.app_id) for a in rs.bidders}
    rs.payments = hidden_payments(rs.bidders, rs.pool, rs.x_star, solved.exact, solved.candidates, draws)


def keep_winnings(rs: RoundState) -> None:
    """Each winner takes what it keeps after its payment, up to the visibility stop, out of the pool."""
    assert rs.x_star is not None
    outside = [rs.rho_now[a] for a in rs.ranked[len(rs.bidders):]]
    level = max(outside) if outside else 0.0  # the worst rho outside the auction
    for aid, won in rs.x_star.bundles.items():
        kept: Sequence[Gang] = won.gangs
        pay = rs.payments.get(aid)
        if pay is not None:
            renewed = {g.job_id for g in pay.withheld if rs.homes.get(g.job_id) == g.gpus}
            for jid in renewed:
                rs.cut[jid] = rs.now + max(pay.fraction, MIN_CUT) * rs.cfg.lease_s
            keep = {g.job_id for g in pay.kept} | renewed
            kept = [g for g in won.gangs if g.job_id in keep]
        stop = visibility_stop(rs.agents[aid], kept, level)
        if len(stop) < len(kept):
            rs.stopped.add(aid)
        rs.kept_gpus[aid] = sum(len(g.gpus) for g in stop)
        rs.award(aid, list(stop), "auction")


def visibility_stop(agent: Agent, gangs: Sequence[Gang], level: float) -> tuple[Gang, ...]:
    """The winner's gangs, in its bidding order, until its rho is down to `level` (0: all of them); the
    first gang always (a bidder is at least tied for worst).

    Visibility exists to lift the worst apps (section 4.1); a winner whose rho is already no worse than
    every app outside the auction stops taking GPUs there, and the rest flows to the leftover, which
    hands it to the worst apps first. Without this stop, one or two bidders (small clusters: f = 0.8 and
    under ten apps) take every GPU that frees up, and the pool rotates from app to app lease by lease.
    """
    out: list[Gang] = []
    x = 0.0
    for g in gangs:
        if level > 0 and out and agent.rho_of(x) <= level:
            break
        out.append(g)
        x += g.throughput
    return tuple(out)
