"""Optional phase (off by default): a started wide gang keeps its GPUs unless its app is clearly ahead.

A rigid gang of two or more GPUs needs that many GPUs free in one round to start. On a busy cluster whose
one-GPU leases expire one by one, a round's pool rarely holds them, and the auction rarely gives them to one
app even when it does: x* maximises the product of 1/rho, and the same GPUs lift several apps that hold
nothing (each by the 1/idle_throughput factor) instead of one. So a wide gang preempted at its lease expiry
waits again, often far longer than a lease, and its app's rho climbs. Measured without this phase
(docs/eval/discussion.md): at f = 0.5 one app's two 8-GPU jobs were started 33 and 16 times and the app
ended at rho 2.41; on 32 GPUs the worst apps were large sweeps whose last 8-GPU job lost every round,
ranked first, for the last 170 simulated hours.

This phase runs after the pool phase and before the ranking: an expiring, preemptible lease of a rigid
gang (not elastic) of at least :data:`WIDE_GANG_GPUS` GPUs is renewed outright (RenewalCause.WIDE_GANG)
when its app's rho, with every lease the app holds (this one included), is at least
``ArbiterConfig.wide_gang_release_rho``. An app below that is clearly ahead of its private-share finish
time; its gang goes back to the pool and is auctioned like any lease. A kept gang's GPUs leave the pool,
and its app ranks and bids with the gang counted in what it keeps. Like a non-preemptible lease it is a
renewal outside the auction, so the other bidders' hidden payments are computed on the pool without it.
It adds no input an app could misreport: the rho it is judged by is the one the ranking uses, and a
progress report can only lower it (core.workload.refine_by_progress). Off by default
(``ArbiterConfig.keep_wide_gangs``); the reason is in docs/design.md, the measurements
in docs/eval/design-journal.md.
"""

from __future__ import annotations

from themis_slurm.core.decision import RenewalCause
from themis_slurm.core.outright import renew_unless_ahead
from themis_slurm.core.round_state import RoundState

#: A gang is wide from this many GPUs on (also the reservation phase's threshold, core/reservation.py).
WIDE_GANG_GPUS = 2


def keep_wide_gangs(rs: RoundState) -> None:
    """Keep-wide-gangs phase: renew the expiring wide gangs of apps that are not clearly ahead (see module)."""
    jobs = rs.jobs
    wide = [jid for jid, gpus in rs.homes.items() if len(gpus) >= WIDE_GANG_GPUS and not jobs[jid].elastic]
    renew_unless_ahead(rs, wide, rs.cfg.wide_gang_release_rho, RenewalCause.WIDE_GANG)
