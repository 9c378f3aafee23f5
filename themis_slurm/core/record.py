"""The last phase: turn the round state into a Decision (grants, renewals, preemptions, one AppRecord per app).

Everything here is data: outcomes, counts, causes and the reservation note are typed fields; the words
for them are made at the edges (themis_slurm/reasons.py).
"""

from __future__ import annotations

from themis_slurm.core.agent import Gang
from themis_slurm.core.decision import (
    AppRecord,
    Decision,
    Grant,
    GrantSource,
    KeptBy,
    LazyRecords,
    Outcome,
    Preemption,
    PreemptionCause,
    Renewal,
    RenewalCause,
)
from themis_slurm.core.quota import tenant_gpus as tenant_gpus_of
from themis_slurm.core.round_state import RoundState


def record(rs: RoundState) -> Decision:
    """Decision phase."""
    grants, preemptions = _actions(rs)
    assert rs.x_star is not None
    rank_of = {aid: k + 1 for k, aid in enumerate(rs.ranked)}
    tenant_gpus = tenant_gpus_of(rs) if rs.tenant_of else {}
    bid_ids = {b.app_id for b in rs.bidders}
    return Decision(
        now=rs.now,
        grants=tuple(grants),
        renewals=tuple(rs.renewals),
        preemptions=tuple(preemptions),
        # built when first read (the simulator applies a decision without reading them): nothing they read
        # changes once the round is over (an agent's numbers are fixed when it is made)
        apps=LazyRecords(lambda: {app.id: _app_record(rs, app.id, rank_of, bid_ids, tenant_gpus)
                                  for app in rs.state.apps}),
        solver=rs.x_star.solver,
        objective=rs.x_star.objective,
        offered_gpus=rs.offered,
        idle_gpus=rs.pool.free_ids(),
        reserved_gpus=rs.reserved,
    )


def _actions(rs: RoundState) -> tuple[list[Grant], list[Preemption]]:
    """Grants for gangs off their home, renewals (appended to rs.renewals) for gangs at home, preemptions."""
    topo = rs.state.topology
    grants: list[Grant] = []
    preemptions: list[Preemption] = []
    granted: set[str] = set()
    for aid, gangs in rs.got.items():
        for g in gangs:
            granted.add(g.job_id)
            home = rs.homes.get(g.job_id)
            if home is not None and home == g.gpus:
                rs.renewals.append(_renewal(rs, aid, g))
                continue
            if home is not None:
                preemptions.append(Preemption(g.job_id, aid, home, PreemptionCause.MOVED))
            grants.append(Grant(g.job_id, aid, g.gpus, topo.nodes_of(g.gpus), g.level.label, rs.expiry,
                                rs.source[g.job_id], migrated=home is not None))  # fmt: skip
    for jid, home in rs.homes.items():
        if jid not in granted:
            preemptions.append(Preemption(jid, rs.jobs[jid].app_id, home, PreemptionCause.LOST))
    return grants, preemptions


def _renewal(rs: RoundState, aid: str, g: Gang) -> Renewal:
    cause = RenewalCause.WON_BACK if rs.source[g.job_id] is GrantSource.AUCTION else RenewalCause.LEFTOVER
    cut_s = rs.cut[g.job_id] - rs.now if g.job_id in rs.cut else None
    return Renewal(g.job_id, aid, g.gpus, rs.cut.get(g.job_id, rs.expiry), cause, cut_s)


def _app_record(rs: RoundState, aid: str, rank_of: dict[str, int], bid_ids: set[str],
                tenant_gpus: dict[tuple, int]) -> AppRecord:
    assert rs.x_star is not None
    gangs = rs.got.get(aid, [])
    ag = rs.agents.get(aid)
    # a gang started on its reservation is already in the rebuilt agent's base throughput
    extra = 0.0
    total = by_reservation = 0  # an app's gangs never share a GPU (each came out of the pool)
    for g in gangs:
        total += len(g.gpus)
        if rs.source.get(g.job_id) is GrantSource.RESERVATION:
            by_reservation += len(g.gpus)
        else:
            extra += g.throughput
    won = rs.x_star.bundles.get(aid)
    pay = rs.payments.get(aid)
    kept = rs.kept_gpus.get(aid, 0)
    rank = rank_of.get(aid)
    bid = aid in bid_ids
    kept_by = KeptBy.ALL
    if ag is None:
        outcome = Outcome.NOTHING_WAITING
    elif not bid:
        outcome = Outcome.NOT_OFFERED
    elif won is None:
        outcome = Outcome.LOST
    else:
        outcome = Outcome.WON
        if pay is not None and pay.withheld:
            kept_by = KeptBy.PAYMENT
        elif aid in rs.quota_stopped:
            kept_by = KeptBy.QUOTA
        elif kept < len(won.gpus):
            kept_by = KeptBy.VISIBILITY
    return AppRecord(
        app_id=aid, rho_before=rs.rho_now[aid], rho_after=ag.rho_of(extra, ag.lost_without(gangs)) if ag is not None else rs.rho_now[aid],
        rank=rank, bid=bid, won_gpus=len(won.gpus) if won else 0, kept_gpus=kept,
        payment_fraction=pay.fraction if pay else None, leftover_gpus=total - kept - by_reservation, outcome=outcome,
        ranked=len(rs.agents), kept_by=kept_by, reservation=rs.reservations.get(aid),
        tenant=(ent := rs.tenant_of.get(aid, ())), tenant_quota=rs.quota.get(ent) if ent else None,
        tenant_gpus=tenant_gpus.get(ent, 0) if ent else 0,
    )  # fmt: skip
