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

With tenancy levels (core/tenancy.py), GPUs first go out within per-user quotas (core/quota.py: each
user's share of the GPUs in play, paced by how far it is behind or ahead of its share): the same groups
in the same order, each user's apps up to its quota, before the passes above hand out what is left to
everyone. So the
leftover follows the tree and not the number of apps a user made: sixteen apps of one user and one app
of another get the same GPUs when their shares are equal. Without levels there are no quotas (the paper).
"""

from __future__ import annotations

from themis_slurm.core.agent import Agent, Gang
from themis_slurm.core.decision import GrantSource
from themis_slurm.core.fill import greedy_fill
from themis_slurm.core.quota import room, tenant_gpus
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
    if rs.quota and rs.pool.size:
        got = _fill_quotas(rs, groups, got)
    for group in groups:
        if not group or not rs.pool.size:
            continue
        start = {a.app_id: got.get(a.app_id, []) for a in group}
        got = {**got, **greedy_fill(group, rs.pool, start, by=order, restart_s=restart_s)}
    rs.got = got
    for aid, gangs in got.items():
        for g in gangs[before.get(aid, 0):]:
            rs.source.setdefault(g.job_id, GrantSource.LEFTOVER)


def _fill_quotas(rs: RoundState, groups: list[list[Agent]], got: dict[str, list[Gang]]) -> dict[str, list[Gang]]:
    """The quota passes: within each group, one fill in the leftover's usual order in which each tenant's
    apps take leftover GPUs only up to what the tenant still lacks of its quota (core/quota.py). Where no
    quota binds, this is exactly the pass without quotas (the same order, the same gangs)."""
    if not rs.quota:
        return got
    have = tenant_gpus(rs)
    order, restart_s = rs.cfg.leftover_order, rs.cfg.restart_cost_s
    for group in groups:
        if not rs.pool.size:
            return got
        tenants = [rs.tenant_of[a.app_id] for a in group]
        rooms = {ent: room(rs, ent, have) for ent in set(tenants)}
        agents = [a for a, ent in zip(group, tenants, strict=True) if rooms[ent] > 0]
        if not agents:
            continue
        start = {a.app_id: got.get(a.app_id, []) for a in agents}
        filled = greedy_fill(agents, rs.pool, start, by=order, restart_s=restart_s,
                             groups=[rs.tenant_of[a.app_id] for a in agents], limits=rooms)
        for a in agents:
            ent = rs.tenant_of[a.app_id]
            have[ent] = have.get(ent, 0) + sum(len(g.gpus) for g in filled.get(a.app_id, [])[len(start[a.app_id]):])
        got = {**got, **filled}
    return got
