"""Per-tenant quotas of one round (tenancy levels only; core/tenancy.py has the tree and the arithmetic).

Set once, after the offer and before the reservation phase (:func:`set_quotas`): the GPUs in play (those
held for the next lease and the pool) are water-filled down the account -> user tree by shares, each
entity capped by what it can use, and a tenant behind the pace of its share may take more, to catch up
(:func:`paced`). Three phases then hold each tenant (the lowest level above the apps: the user, or the
account when users do not count) to its quota:

* the reservation (reservation.reserve_for_wide_gang): it starts or holds GPUs only for a gang its tenant
  has room for (with 2-GPU jobs on 16 GPUs, reservations alone gave a splitting user 1.34x the GPU time
  of the other before this);

* the auction's keep (payments.keep_winnings): after its hidden payment and the visibility stop, a winner
  keeps gangs only while its tenant stays within its quota (:func:`quota_stop`); what it does not keep goes
  to the leftover. Without it, the apps of a user who split its work are more of the bidders (the worst
  1 - f of the apps), and won GPUs the leftover could not take back: measured in the simulator
  (benchmarks/tenancy.py), 32 apps of user A against one app of user B took 5-6% more GPU time;
* the leftover's first passes (leftover._fill_quotas): in the leftover's own order, each tenant up to its
  quota.

The stop depends on the tree, the shares, the tenants' books and the GPUs their jobs ask for, never on a bid, so the
auction among the apps of one tenant stays the partial allocation (truthful bids); the leftover's last
passes hand out what no tenant under quota can use, so no GPU idles while a job fits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from themis_slurm.core.agent import Gang
from themis_slurm.core.round_state import RoundState
from themis_slurm.core.tenancy import Entity, TenantBook, quotas
from themis_slurm.core.workload import App

#: What a tenant is behind the pace of its share is made up over this many leases (:func:`paced`): 1 lets
#: it catch up as fast as the auction would; longer spreads made splitting cost the splitter up to 16%.
PACE_LEASES = 1.0


def set_quotas(rs: RoundState) -> None:
    """Fill rs.quota and rs.tenant_of (nothing when flat): each tenant's share of the GPUs in play, paced by
    how far its apps are behind or ahead of their private shares (:func:`paced`)."""
    state = rs.state
    if state.tenancy.flat:
        return
    held = _app_gpus(rs)
    in_play = sum(held.values()) + rs.pool.size + len(rs.reserved)
    demand = {a.id: float(max(rs.model.demand(a), held.get(a.id, 0))) for a in state.apps}
    share, rs.tenant_of = quotas(state.tenancy, state.apps, in_play, demand)
    cluster = float(state.cluster_gpus or state.topology.size)
    rs.quota = paced(share, rs.tenant_of, state.apps, demand, state.tenant_books, rs.now, cluster, rs.cfg.lease_s)


def paced(share: Mapping[Entity, float], tenant_of: Mapping[str, Entity], apps: Sequence[App],
          demand: Mapping[str, float], books: Mapping[Entity, TenantBook], now: float, cluster_gpus: float,
          lease_s: float) -> dict[Entity, float]:
    """Each tenant's quota: its `share` of the GPUs in play, plus what it is behind the pace of its share
    spread over `PACE_LEASES` leases; capped by what its apps can use (`demand`).

    Behind is the work the tenant's share would have done by now minus the work its jobs did (ideal
    GPU-seconds, the pace of T_id: core/fairness.py), from its :class:`TenantBook`: ``entitled - finished``
    minus the work done by its present jobs. A tenant without a book (a caller that keeps none) is paced by
    its present apps alone: each app's ``cluster_gpus / contention`` GPUs since its arrival, minus its
    finished and done work (what an app that left was owed or had is then forgotten). A tenant ahead of
    its pace keeps its share.

    The pace is the one the cluster kept: when all tenants together did less than their shares owed them
    (restart costs, GPUs that idled, work lost to preemption), each is owed only that fraction of its
    entitlement, the same for every tenant (``pace`` below, at most 1). Measured against the full pace,
    every tenant is behind at once and the quotas add up to more GPUs than are in play: the leftover's
    quota passes then serve whichever tenant its order puts first, up to that tenant's inflated quota,
    and the other falls short of even its share. With understated estimates putting the liar first
    (earlier virtual deadlines), a user claiming 250 s for 300-s jobs held 58% of the first 15 minutes
    (benchmarks/estimate_gaming.py, 45 s leases, 16 apps of 4 jobs each; 50% at this pace).

    Why: the instantaneous share alone (the quota before) kept an app that fell behind from taking more
    than its share to catch up, which is what finish-time fairness asks of the auction: on the paper
    workload with every app its own user, Themis's max rho went from 1.005 to 2.03 (1.00 paced). The book is
    the tenant's, not its apps', so splitting work into more apps still buys nothing (docs/design.md,
    "Paced quotas"; docs/eval/design-journal.md has the measurements and what looser quotas cost).
    """
    entitled: dict[Entity, float] = {}
    done: dict[Entity, float] = {}
    need: dict[Entity, float] = {}
    for app in apps:
        ent = tenant_of.get(app.id)
        if ent is None:
            continue
        did = sum(j.done for j in app.jobs)
        if ent not in books:
            did += app.finished_work
            entitled[ent] = entitled.get(ent, 0.0) + cluster_gpus / max(1.0, app.contention) * max(0.0, now - app.arrival)
        done[ent] = done.get(ent, 0.0) + did
        need[ent] = need.get(ent, 0.0) + demand.get(app.id, 0.0)
    for ent, book in books.items():
        if ent in done:
            entitled[ent] = entitled.get(ent, 0.0) + book.entitled
            done[ent] += book.finished
    owed = sum(entitled.values())
    pace = min(1.0, sum(done.values()) / owed) if owed > 0.0 else 1.0
    behind = {ent: pace * entitled.get(ent, 0.0) - did for ent, did in done.items()}
    spread = lease_s * PACE_LEASES
    return {ent: min(need.get(ent, 0.0), q + max(0.0, behind.get(ent, 0.0)) / spread) for ent, q in share.items()}


def tenant_gpus(rs: RoundState) -> dict[Entity, int]:
    """GPUs each tenant holds for the next lease now: its kept leases and what its apps got this round."""
    out: dict[Entity, int] = {}
    for aid, n in _app_gpus(rs).items():
        ent = rs.tenant_of.get(aid)
        if ent is not None:
            out[ent] = out.get(ent, 0) + n
    return out


def room(rs: RoundState, ent: Entity, have: dict[Entity, int]) -> int:
    """Whole GPUs `ent` may still take within its quota (0 when at or above it)."""
    return max(0, math.floor(rs.quota.get(ent, 0.0) + 1e-9) - have.get(ent, 0))


def quota_stop(rs: RoundState, app_id: str, gangs: Sequence[Gang], have: dict[Entity, int]) -> tuple[Gang, ...]:
    """The winner's gangs, in order, while its tenant stays within its quota; `have` is updated with them.
    All of them when there are no quotas (flat)."""
    ent = rs.tenant_of.get(app_id)
    if ent is None:
        return tuple(gangs)
    left = room(rs, ent, have)
    out: list[Gang] = []
    for g in gangs:
        if len(g.gpus) > left:
            break
        out.append(g)
        left -= len(g.gpus)
    have[ent] = have.get(ent, 0) + sum(len(g.gpus) for g in out)
    return tuple(out)


def _app_gpus(rs: RoundState) -> dict[str, int]:
    """GPUs each app holds for the next lease so far: leases that stay (rs.held), renewals outside rs.held
    (a reservation's gang that keeps its GPUs), and what it got this round."""
    held: dict[str, int] = {}
    jobs = rs.jobs
    for jid, lease in rs.held.items():
        aid = jobs[jid].app_id
        held[aid] = held.get(aid, 0) + len(lease.gpus)
    for r in rs.renewals:
        if r.job_id not in rs.held:
            held[r.app_id] = held.get(r.app_id, 0) + len(r.gpus)
    for aid, gangs in rs.got.items():
        held[aid] = held.get(aid, 0) + sum(len(g.gpus) for g in gangs)
    return held
