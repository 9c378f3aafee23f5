"""Leftover: withheld and unbid GPUs go to waiting jobs until none fits (work conservation).

First to the apps outside the auction (as in the paper, section 4.2) and to the winners the visibility
stop cut short, then to every app that paid no hidden payment (withheld GPUs must not flow straight back
to their payer), then to everyone, worst rho first within each group. Work conservation wins over the
incentive when only a payer can use a GPU: no GPU idles while a waiting job fits.
"""

from __future__ import annotations

from themis_slurm.core.auction import greedy_fill
from themis_slurm.core.decision import GrantSource
from themis_slurm.core.round_state import RoundState


def hand_out_leftover(rs: RoundState) -> None:
    """Leftover phase (takes from the pool, appends gangs with source "leftover")."""
    paid = {aid for aid, p in rs.payments.items() if p.withheld}
    bidder_ids = {a.app_id for a in rs.bidders} - (rs.stopped - paid)
    before = {aid: len(gs) for aid, gs in rs.got.items()}
    groups = [[a for a in rs.agents.values() if a.app_id not in bidder_ids]]
    if paid:
        groups.append([a for a in rs.agents.values() if a.app_id not in paid])
    groups.append(list(rs.agents.values()))
    got = rs.got
    for group in groups:
        if not group or not rs.pool.size:
            continue
        got = {**got, **greedy_fill(group, rs.pool, {a.app_id: got.get(a.app_id, []) for a in group}, by="rho")}
    rs.got = got
    for aid, gangs in got.items():
        for g in gangs[before.get(aid, 0):]:
            rs.source.setdefault(g.job_id, GrantSource.LEFTOVER)
