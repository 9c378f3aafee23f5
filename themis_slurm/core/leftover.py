"""Leftover: withheld and unbid GPUs go to waiting jobs until none fits (work conservation).

First to the apps outside the auction (as in the paper, section 4.2) and to the winners the visibility
stop cut short, then to every app that paid no hidden payment (withheld GPUs must not flow straight back
to their payer), then to everyone. Work conservation wins over the incentive when only a payer can use a
GPU: no GPU idles while a waiting job fits.

Within each group the order is ``ArbiterConfig.leftover_order``: "deadline" (the default) serves the job
latest against its app's private-share pace first (earliest virtual deadline first: Agent.lateness,
fairness.virtual_lateness), "rho" the app with the worst rho so far (water-filling, as the authors' code
re-auctions what is left to the next-worst apps). Why deadlines: most GPUs of a busy round are handed out
here, and worst-rho-first made apps take turns on the same GPUs at each lease expiry (measured in
docs/design.md, "Leftover and work conservation").
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
    order, restart_s = rs.cfg.leftover_order, rs.cfg.restart_cost_s
    for group in groups:
        if not group or not rs.pool.size:
            continue
        start = {a.app_id: got.get(a.app_id, []) for a in group}
        got = {**got, **greedy_fill(group, rs.pool, start, by=order, restart_s=restart_s)}
    rs.got = got
    for aid, gangs in got.items():
        for g in gangs[before.get(aid, 0):]:
            rs.source.setdefault(g.job_id, GrantSource.LEFTOVER)
