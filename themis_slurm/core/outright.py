"""Renewals outside the auction, unless the holder's app is clearly ahead: the step the wide-gangs phase
(core/wide_gangs.py) and the unsaved-work phase (core/unsaved_work.py) share.

Both run after the pool phase and before the ranking: a kept lease leaves the pool, so the other bidders'
hidden payments are computed on the pool without it, and its app ranks and bids with it counted in what
it keeps. "Clearly ahead" is the app's rho with every lease it holds, the expiring ones included, below the
phase's release rho: the rho the ranking uses, which a progress report can only lower
(core.workload.refine_by_progress), so the rule adds no input an app could misreport.
"""

from __future__ import annotations

from collections.abc import Iterable

from themis_slurm.core.decision import Renewal, RenewalCause
from themis_slurm.core.round_state import RoundState


def renew_unless_ahead(rs: RoundState, job_ids: Iterable[str], release_rho: float, cause: RenewalCause) -> None:
    """Renew each expiring holder in `job_ids` (keys of ``rs.homes``) outright with `cause`, unless its app's
    rho with all it holds is below `release_rho`; its GPUs leave the pool."""
    job_ids = list(job_ids)
    if not job_ids:
        return
    jobs = rs.jobs
    apps = {app.id: app for app in rs.state.apps}
    throughput_on = rs.model.job_facts.throughput_on  # type: ignore[union-attr]
    leases = {lease.job_id: lease for lease in rs.state.leases}
    holds: dict[str, float] = {}  # app -> throughput of every lease it holds, the expiring ones included
    for lease in leases.values():
        job = jobs[lease.job_id]
        holds[job.app_id] = holds.get(job.app_id, 0.0) + throughput_on(job, lease.gpus)
    for jid in job_ids:
        job = jobs[jid]
        if rs.model.rho(apps[job.app_id], rs.now, holds[job.app_id]) < release_rho:
            continue
        gpus = rs.homes.pop(jid)
        rs.held[jid] = leases[jid]
        rs.pool.take(gpus)
        rs.renewals.append(Renewal(jid, job.app_id, gpus, rs.expiry, cause))
    rs.offered = rs.pool.size
