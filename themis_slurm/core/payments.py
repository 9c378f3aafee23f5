"""Hidden payments and the visibility stop: what each winner of x* actually keeps.

Winner i keeps the fraction ``c_i = prod_{j!=i} v_j(x*) / prod_{j!=i} v_j(x*_{-i})`` (v = 1/rho) of its
allocation, where x*_{-i} is the welfare-maximising allocation without i (:func:`hidden_payments`). The exact
solver re-solves without i; the fast solver warm-starts from x* minus i and lets the others grab i's GPUs,
which can only raise their welfare, so c_i stays in [0, 1] either way (with ``bound``, the exact re-solve is
skipped when no other bidder can do better than in x*: c_i = 1; off by default). Gangs are indivisible: a
winner keeps whole gangs worth c_i of its win in expectation (:func:`keep_fraction`, a lottery on the last
gang, :func:`lottery`).

Themis NSDI 2020, section 4.2: winner i keeps c_i = prod_{j != i} rho_j(x*_{-i}) / rho_j(x*) of what it
won (partial allocation: truth-telling pays); the rest is withheld and goes to the leftover. Whole gangs
are kept: the last one by a lottery number drawn from a hash of (seed, now, app id), so that the expected
share is exactly c_i and the round stays a pure function. A withheld gang that is a renewal stays on a
lease cut to c_i of a lease instead (the same GPU-time in expectation; the lottery never preempts a
running job). Then the visibility stop: a winner keeps gangs only until its rho is down to the worst rho
outside the auction (see :func:`visibility_stop`), and, with tenancy levels, only while its tenant stays
within its quota (core/quota.py).

With tenancy levels the bids are weighted (``Agent.weight``, core/tenancy.py): gains are ``w_i log(rho_base /
rho)`` and ``c_i = (prod_{j!=i} v_j(x*)^{w_j} / prod_{j!=i} v_j(x*_{-i})^{w_j})^{1/w_i}``, the weighted partial
allocation, truthful by the same argument (docs/design.md, "Tenancy"); with every weight 1 it is the above.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from themis_slurm.core.agent import Agent, Bundle, Gang
from themis_slurm.core.auction import Allocation, ExactSolver
from themis_slurm.core.decision import GrantSource
from themis_slurm.core.fill import greedy_fill
from themis_slurm.core.placement import Pool
from themis_slurm.core.quota import quota_stop, tenant_gpus
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
    bid = {b.app_id for b in rs.bidders}
    outside = [rs.rho_now[a] for a in rs.ranked if a not in bid]
    level = max(outside) if outside else 0.0  # the worst rho outside the auction
    have = tenant_gpus(rs) if rs.quota else {}
    winners = rs.x_star.bundles.items()
    if rs.quota:  # a tenant's quota goes to its worst-off winners first
        winners = sorted(winners, key=lambda kv: (-rs.rho_now[kv[0]], kv[0]))
    for aid, won in winners:
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
        if rs.quota:
            within = quota_stop(rs, aid, stop, have)
            if len(within) < len(stop):
                rs.quota_stopped.add(aid)
            stop = within
        rs.kept_gpus[aid] = sum(len(g.gpus) for g in stop)
        rs.award(aid, list(stop), GrantSource.AUCTION)


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
        if level > 0 and out and agent.rho_of(x, agent.lost_without(out)) <= level:
            break
        out.append(g)
        x += g.throughput
    return tuple(out)


# ------------------------------------------------------------------------------------------- c_i
@dataclass(frozen=True)
class Payment:
    """Partial allocation outcome for one winner."""

    app_id: str
    fraction: float  # c_i in [0, 1]
    won: Bundle
    kept: tuple[Gang, ...]
    withheld: tuple[Gang, ...]


def _others_gain(alloc: Mapping[str, Bundle], skip: str) -> float:
    return sum(b.gain for aid, b in alloc.items() if aid != skip)


def keep_fraction(won: Bundle, c: float, draw: float = 1.0) -> tuple[tuple[Gang, ...], tuple[Gang, ...]]:
    """Whole gangs, in bidding order, worth the fraction c of what was won: in expectation, by a lottery.

    Partial allocation scales the allocation by c_i; gangs cannot be split. The app keeps the longest
    prefix that stays within c_i of its won throughput, plus the next gang when `draw` (uniform in
    [0, 1)) is below the uncovered remainder of the budget divided by that gang's throughput: the
    expected kept throughput is exactly c_i times what was won. `draw` = 1 never rounds up (the prefix
    only). Why a lottery: with the prefix only, an app bidding for a single gang keeps nothing whenever
    c_i < 1, i.e. whenever another bidder wants its GPUs, and can starve (docs/design.md).
    """
    budget = c * won.throughput + 1e-9
    kept: list[Gang] = []
    x = 0.0
    for k, g in enumerate(won.gangs):
        if x + g.throughput > budget:
            if draw < (budget - x) / g.throughput:
                kept.append(g)
                k += 1
            return tuple(kept), tuple(won.gangs[k:])
        kept.append(g)
        x += g.throughput
    return tuple(kept), ()


def lottery(seed: int, now: float, app_id: str) -> float:
    """The lottery number of `app_id` in the round at `now`: uniform in [0, 1), a pure function of its arguments."""
    digest = hashlib.sha256(f"{seed}:{now!r}:{app_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def hidden_payments(
    agents: Sequence[Agent],
    pool: Pool,
    x_star: Allocation,
    exact: ExactSolver | None = None,
    candidates: Sequence[Bundle] | None = None,
    draws: Mapping[str, float] | None = None,
    bound: bool = False,
) -> dict[str, Payment]:
    """c_i for every winner of `x_star` (computed on the round's `pool`, which is not changed).

    With `exact` and its `candidates`, x*_{-i} is the MILP optimum without i; otherwise it is the greedy
    warm start described in the module docstring. `draws` are the winners' lottery numbers for
    :func:`keep_fraction` (missing: 1, i.e. keep the prefix only).

    `bound` (exact only; off by default, today's behaviour) skips the MILP without i when it cannot beat
    x*: when no other bidder has a candidate worth more than what it holds in x*, x*_{-i} is x* without i
    and c_i = 1. The same c_i in exact arithmetic; the re-solve could only differ by the float rounding
    of an equal-valued sum (c_i = 1 - 1e-16 instead of 1).
    """
    out: dict[str, Payment] = {}
    weights = {a.app_id: a.weight for a in agents}
    best_of: dict[str, float] = {}  # each app's most valuable candidate, for `bound`
    if bound and exact is not None and candidates is not None:
        for b in candidates:
            if b.gain > best_of.get(b.app_id, 0.0):
                best_of[b.app_id] = b.gain
    # Apps that got every job they bid for cannot gain from i's GPUs: skip the re-solve when none is left.
    def unmet(a: Agent) -> bool:
        held = {g.job_id for g in x_star.bundles[a.app_id].gangs} if a.app_id in x_star.bundles else set()
        return any(j.id not in held for j in a.jobs)

    others_need = {a.app_id for a in agents if unmet(a)}
    after: Pool | None = None  # the pool once x* is taken: only when some re-solve needs it
    for aid, won in sorted(x_star.bundles.items()):
        held = x_star.bundles
        if best_of and all(g <= (held[k].gain if k in held else 0.0) for k, g in best_of.items() if k != aid):
            base = minus = 0.0  # no other bidder can do better than in x*: c_i = 1 without a re-solve
        elif exact is not None and candidates is not None:
            base = _others_gain(x_star.bundles, aid)
            x_minus = exact.solve_candidates(candidates, exclude=aid).bundles
            minus = _others_gain(x_minus, aid)
        elif others_need - {aid}:
            base = _others_gain(x_star.bundles, aid)
            if after is None:
                after = pool.copy()
                after.take(x_star.gpus)
            work = after.copy()
            work.give(won.gpus)
            others = [
                a for a in agents if a.app_id != aid and (a.app_id in others_need or a.app_id in x_star.bundles)
            ]
            start = {k: list(b.gangs) for k, b in x_star.bundles.items() if k != aid}
            got = greedy_fill(others, work, start)
            by_id = {a.app_id: a for a in others}
            minus = sum(by_id[k].bundle(g).gain for k, g in got.items())
        else:
            base = minus = 0.0  # nobody else wants more: x*_{-i} is x* without i, c_i = 1
        # weighted partial allocation: the others' weighted log-welfare lost, in units of i's own weight
        c = math.exp(min(0.0, (base - minus) / weights.get(aid, 1.0)))
        kept, withheld = keep_fraction(won, c, (draws or {}).get(aid, 1.0))
        out[aid] = Payment(aid, c, won, kept, withheld)
    return out
