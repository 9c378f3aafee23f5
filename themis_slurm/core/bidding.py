"""The first phases of a round: the pool on offer, and who may bid for it (visibility).

Themis NSDI 2020, section 4: the pool is the free GPUs plus those of the leases that expire now; every app
with waiting work computes its rho, and the offer goes to the ``max(1, floor((1 - f) n))`` apps with the
worst rho (f = fairness knob). Each bidder's :class:`~themis_slurm.core.agent.Agent` then values bundles of
the pool by the rho they give it (core/agent.py).
"""

from __future__ import annotations

import math

from themis_slurm.core.agent import Agent
from themis_slurm.core.decision import Renewal, RenewalCause
from themis_slurm.core.placement import Pool
from themis_slurm.core.round_state import RoundState


def bidders_offered(fairness_knob: float, n: int) -> int:
    """How many of the n apps with waiting work are offered the pool: max(1, floor((1 - f) n)), 0 if n = 0.

    The 1e-9 absorbs binary rounding: 1 - 0.8 is 0.19999999999999996, and floor of that times 10 would
    be 1, not 2 (one bidder fewer whenever (1 - f) n is a whole number).
    """
    return max(1, math.floor((1.0 - fairness_knob) * n + 1e-9)) if n else 0


def collect_pool(rs: RoundState) -> None:
    """Pool phase: free GPUs plus expiring preemptible leases. A lease holder that cannot be preempted is
    renewed outright; one that can becomes a bidder for its own GPUs (its "home": renewal in place)."""
    pool_ids = set(rs.state.free)
    for lease in rs.state.leases:
        job = rs.jobs[lease.job_id]
        if lease.expiry > rs.now:
            rs.held[job.id] = lease
        elif not job.preemptible:
            rs.held[job.id] = lease
            rs.renewals.append(Renewal(job.id, job.app_id, lease.gpus, rs.expiry, RenewalCause.NOT_PREEMPTIBLE))
        else:
            rs.homes[job.id] = lease.gpus
            pool_ids |= lease.gpus
    rs.pool = Pool(rs.state.topology, pool_ids)
    rs.offered = rs.pool.size


def rank_by_rho(rs: RoundState) -> None:
    """Visibility phase: an agent per app with waiting work, ranked worst rho first; the first 1 - f bid.

    rho is taken under the allocation each app keeps once the expiring leases are back in the pool (the
    GPUs being re-auctioned are nobody's), or, with ``rank_at_share`` s > 0, at s x a fair share of the
    GPUs (:func:`rho_at_share`). An app whose leases expire now ranks by that rho; any other app's rho is
    discounted by what a move costs (as its bids are), so that leases do not flip between near-equal
    apps. ``rho_now`` (the records' rho before the round) is always the rho under what the app keeps.
    """
    held, jobs = rs.held, rs.jobs
    throughput_on = rs.model.job_facts.throughput_on  # type: ignore[union-attr]
    numbers = rs.model.job_facts.numbers  # type: ignore[union-attr]
    kept: dict[str, float] = {}  # app -> throughput of the leases it keeps, summed in lease order
    n_held: dict[str, int] = {}  # app -> how many of its jobs keep their leases
    free_at: dict[str, float] = {}  # app -> the shortest remaining run time among those jobs
    for jid, lease in held.items():
        job = jobs[jid]
        aid = job.app_id
        kept[aid] = kept.get(aid, 0.0) + throughput_on(job, lease.gpus)
        n_held[aid] = n_held.get(aid, 0) + 1
        run_s = numbers(job)[1]
        if run_s < free_at.get(aid, math.inf):
            free_at[aid] = run_s
    weights = rs.weights
    homes_of: dict[str, dict[str, frozenset[int]]] = {}  # app -> its lease holders whose lease expires now
    for jid, gpus in rs.homes.items():
        homes_of.setdefault(jobs[jid].app_id, {})[jid] = gpus
    finish_rho = _finish_rho(rs)
    for app in rs.state.apps:
        base = kept.get(app.id, 0.0)
        k = n_held.get(app.id, 0)
        app_jobs = app.jobs
        if not k:
            waiting = list(app_jobs)
        elif all(j.id in held for j in app_jobs[-k:]):
            # its k lease holders are its last k jobs (as the simulator lists them): the rest is a slice
            waiting = list(app_jobs[:-k])
        else:
            waiting = [j for j in app_jobs if j.id not in held]
        if waiting:
            homes = homes_of.get(app.id, {})  # all among `waiting`: their leases are not kept
            ag = rs.agents[app.id] = Agent(app, rs.model, rs.now, base, waiting, homes, rs.restart_discount,
                                           free_at.get(app.id, math.inf), weights.get(app.id, 1.0),
                                           finish_rho)  # fmt: skip
            rs.rho_now[app.id] = ag.rho_base  # model.rho(app, now, base) with the kept-GPU floor (agent.py)
        else:
            rs.rho_now[app.id] = rs.model.rho(app, rs.now, base)
    share = rs.cfg.rank_at_share
    if share > 0:
        # a fair share: 1/N of the cluster, or the app's share of its user's of its account's (tenancy)
        fair = share * (rs.state.cluster_gpus or rs.state.topology.size) / max(1, len(rs.state.apps))
        rank_rho = {a: rho_at_share(ag, fair * weights.get(a, 1.0)) for a, ag in rs.agents.items()}
    else:
        rank_rho = rs.rho_now
    urgency = {a: rank_rho[a] * (1.0 if ag.homes else 1.0 - rs.restart_discount) for a, ag in rs.agents.items()}
    rs.ranked = sorted(rs.agents, key=lambda a: (-urgency[a], a))


def _finish_rho(rs: RoundState) -> float:
    """The rho an app's job order may let it finish at: 1 + order_slack x (worst - 1), with worst the highest
    fluid rho of the round's apps (elapsed + remaining work at its private-share pace, over T_id: the least
    rho the worst-off app can reach even on its private share). An app below it may serve its short jobs
    first as long as it stays below it; the worst app has no slack."""
    slack = rs.cfg.order_slack
    if slack <= 0:
        return 1.0
    model, now = rs.model, rs.now
    worst = 1.0
    for app in rs.state.apps:
        t_id, remaining, _ = model.facts(app)
        pace = model.share_rate(app)
        if t_id > 0 and pace > 0:
            r = (max(0.0, now - app.arrival) + remaining / pace) / t_id
            if r > worst:
                worst = r
    return 1.0 + slack * (worst - 1.0)


def rho_at_share(agent: Agent, fair_gpus: float) -> float:
    """How `agent`'s app ranks under ``ArbiterConfig.rank_at_share``: the rho it would reach with at least
    `fair_gpus` GPUs (at full speed; at most the GPUs of all its unfinished jobs at once) from now on; an
    app that holds more is ranked by its rho under what it keeps, and so is an app that has not had a GPU
    yet (nothing run, nothing finished, nothing held).

    Ranked by rho under what it keeps (the paper), every app that holds nothing has the rho of the idle
    throughput, about ten times any other, so with 30 to 50 apps sharing 32 or 64 GPUs the apps without
    GPUs fill the offer and an app held at one GPU below a share of 1.3 never bids for a second (docs/
    evaluation.md, section 5). At a common yardstick the ranking says instead which apps already fell
    behind: an app that waited with little has more work left for the time it has been here. An app that
    just arrived has not fallen behind yet, but a short one would wait for a large part of its T_id before
    it had (docs/design.md, "Ranking at a fair share"), so it keeps the paper's ranking until its first GPUs.
    """
    app = agent.app
    if agent.base <= 0 and app.finished_work <= 0 and all(j.service <= 0 for j in app.jobs):
        return agent.rho_base
    demand = float(agent.model.demand(app))
    return agent.rho_of(max(0.0, min(demand, fair_gpus) - agent.base))


def offer(rs: RoundState) -> None:
    """The bidders: the first 1 - f of the ranking (after a reservation may have rebuilt an agent)."""
    n = bidders_offered(rs.cfg.fairness_knob, len(rs.ranked))
    rs.bidders = [rs.agents[a] for a in rs.ranked[:n]]
