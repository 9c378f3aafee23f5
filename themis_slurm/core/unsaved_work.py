"""Phase: a lease holder that would throw away more work than its lease frees keeps its GPUs (issue #34 item 2).

A job that does not checkpoint loses what it did since its run started when it loses its lease
(:attr:`~themis_slurm.core.workload.Job.unsaved`). The auction, which sells one lease of the pool's GPUs,
cannot see that loss as a cost to anyone but the holder's app; and an at-risk app is not offered the
auction (core/bidding.py, ``offer``), so its holder is renewed only by the leftover, after the winners.
Preempting it then destroys ``unsaved`` work to free ``gpus x lease`` GPU-seconds: once the first exceeds
the second (:attr:`ArbiterConfig.unsaved_keep_leases` leases of its GPUs), the cluster as a whole loses
capacity by the preemption, whoever wins the GPUs. Measured on the paper workload with 30% of its jobs
never checkpointing (docs/eval/discussion.md, "Jobs that do not checkpoint"): without this phase Themis
preempted such jobs 5,676 times and threw away 7% of its GPU-hours.

Such a holder is renewed outright (RenewalCause.UNSAVED) unless its app is clearly ahead: its rho with
every lease it holds below ``ArbiterConfig.unsaved_release_rho``. The exception bounds what a false
``--themis-ckpt=no`` buys: a job that claims it never saves keeps its GPUs only while its app is behind its
private-share finish, which is when any bid of its own would win them back; once ahead, it is auctioned
like any lease (and themisd, seeing its progress go on after the requeue, sets the claim aside). Runs
after the pool phase and before the ranking, like the wide-gangs phase: the other bidders' hidden
payments are computed on the pool without these GPUs.
"""

from __future__ import annotations

from themis_slurm.core.decision import RenewalCause
from themis_slurm.core.outright import renew_unless_ahead
from themis_slurm.core.round_state import RoundState


def keep_unsaved(rs: RoundState) -> None:
    """Renew the expiring holders whose unsaved work exceeds what their lease frees (see module)."""
    cfg, jobs = rs.cfg, rs.jobs
    k = cfg.unsaved_keep_leases
    if k <= 0:
        return
    costly = [jid for jid, gpus in rs.homes.items() if jobs[jid].unsaved > k * len(gpus) * cfg.lease_s]
    renew_unless_ahead(rs, costly, cfg.unsaved_release_rho, RenewalCause.UNSAVED)
