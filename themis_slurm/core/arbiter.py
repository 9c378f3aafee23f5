"""One Themis round: state in, Decision out. Pure: the simulator and the daemon call exactly this.

Steps (Themis NSDI 2020, section 4; choices in docs/design.md):

1. **Pool**: free GPUs plus those of leases expiring now. Holders that cannot be preempted are renewed
   outright; holders that can become bidders for their own GPUs (renewal in place if they win).
2. **Visibility**: every app with waiting work computes rho under the allocation it keeps once the
   expiring leases are back in the pool (apps without an expiring lease: times 1 - restart/lease, the
   cost of a move); the offer goes to the ``max(1, floor((1 - f) * n))`` worst (f = fairness knob).
3. **Bids**: each bidder's :class:`~themis_slurm.core.agent.Agent` values bundles by the rho they give
   (a gang that must start counts 1 - restart/lease of its throughput).
4. **Winner determination** (exact MILP for small rounds, fast greedy otherwise), then **hidden
   payments**: each winner keeps whole gangs worth c_i of what it won, the last gang by a lottery drawn
   from a hash of (seed, now, app id) so that the expected share is exactly c_i and a round stays pure;
   a withheld renewal keeps its GPUs on a lease cut to c_i of a lease instead. A winner then keeps its
   gangs only until its rho is down to the worst rho outside the auction (the visibility stop).
5. **Leftover**: withheld and unbid GPUs go first to the apps outside the auction, then to the apps
   that paid no hidden payment, then to anyone, worst rho first, until no waiting job fits: no GPU
   idles while work that fits waits (work conservation wins over the incentive when only a payer can
   use a GPU).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from themis_slurm.core.agent import Agent, Gang
from themis_slurm.core.auction import (
    Allocation,
    ExactSolver,
    FastSolver,
    Payment,
    greedy_fill,
    hidden_payments,
    payment_draw,
)
from themis_slurm.core.decision import (
    AppRecord,
    Decision,
    Grant,
    KeptBy,
    Outcome,
    Preemption,
    PreemptionCause,
    Renewal,
    RenewalCause,
    ReservationNote,
)
from themis_slurm.core.fairness import FairnessModel, job_throughput
from themis_slurm.core.placement import Pool, get_profile, throughput
from themis_slurm.core.state import ClusterState, check_state
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import Job, Lease

SOLVERS = ("auto", "exact", "fast")
#: shortest lease, as a fraction of a lease, a renewal keeps when its hidden payment cuts it (c_i near 0)
MIN_CUT = 0.05


@dataclass(frozen=True)
class ArbiterConfig:
    """Knobs of the mechanism. Defaults and their sources are in docs/design.md."""

    fairness_knob: float = 0.8
    lease_s: float = 600.0
    solver: str = "auto"
    exact_max_bidders: int = 12
    exact_max_gpus: int = 64
    idle_throughput: float = 0.1
    hidden_payments: bool = True
    seed: int = 0
    restart_cost_s: float = 30.0  # work lost by a (re)start; bids discount non-renewal gangs by restart/lease
    reserve_wide_gangs: bool = False  # reservations for wide gangs (step 2b); off: see docs/design.md

    def __post_init__(self) -> None:
        if not 0.0 <= self.fairness_knob < 1.0:
            raise ValueError(f"fairness_knob must be in [0, 1), got {self.fairness_knob}")
        if not self.lease_s > 0:
            raise ValueError(f"lease_s must be > 0 seconds, got {self.lease_s}")
        if not self.restart_cost_s >= 0:
            raise ValueError(f"restart_cost_s must be >= 0 seconds, got {self.restart_cost_s}")
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, got {self.solver!r}")


def bidders_offered(fairness_knob: float, n: int) -> int:
    """How many of the n apps with waiting work are offered the pool: max(1, floor((1 - f) n)), 0 if n = 0.

    The 1e-9 absorbs binary rounding: 1 - 0.8 is 0.19999999999999996, and floor of that times 10 would
    be 1, not 2 (one bidder fewer whenever (1 - f) n is a whole number).
    """
    return max(1, math.floor((1.0 - fairness_knob) * n + 1e-9)) if n else 0


def run_round(state: ClusterState, config: ArbiterConfig | None = None) -> Decision:
    """Run one Themis round (see module docstring)."""
    cfg = config or ArbiterConfig()
    topo, now = state.topology, state.now
    jobs = {j.id: j for a in state.apps for j in a.jobs}
    if len(jobs) != sum(len(a.jobs) for a in state.apps):
        raise ValueError("job ids must be unique across apps")
    check_state(state, jobs)
    model = FairnessModel(topo, state.cluster_gpus or topo.size, cfg.idle_throughput)
    expiry = now + cfg.lease_s
    start_cost = min(0.5, cfg.restart_cost_s / cfg.lease_s)

    # 1. pool: free + expiring preemptible leases
    renewals: list[Renewal] = []
    held: dict[str, Lease] = {}
    homes: dict[str, frozenset[int]] = {}
    pool_ids = set(state.free)
    for lease in state.leases:
        job = jobs[lease.job_id]
        if lease.expiry > now:
            held[job.id] = lease
        elif not job.preemptible:
            held[job.id] = lease
            renewals.append(Renewal(job.id, job.app_id, lease.gpus, expiry, "not preemptible: keeps its GPUs",
                                    RenewalCause.NOT_PREEMPTIBLE))
        else:
            homes[job.id] = lease.gpus
            pool_ids |= lease.gpus
    pool = Pool(topo, pool_ids)
    offered = pool.size

    # 2. agents for apps with waiting work; rank by rho under the allocation each keeps once the expiring
    #    leases have returned to the pool (the GPUs being re-auctioned are nobody's)
    agents: dict[str, Agent] = {}
    rho_now: dict[str, float] = {}
    for app in state.apps:
        base = sum(job_throughput(j, held[j.id].gpus, topo) for j in app.jobs if j.id in held)
        rho_now[app.id] = model.rho(app, now, base)
        waiting = [j for j in app.jobs if j.id not in held]
        if waiting:
            agents[app.id] = Agent(app, model, now, base, waiting, {j.id: homes[j.id] for j in waiting if j.id in homes},
                                   start_cost)  # fmt: skip
    # an app whose leases expire now ranks by its rho without them; any other app's rho is discounted by
    # the restart a move costs (as its bids are), so leases do not flip between near-equal apps
    urgency = {a: rho_now[a] * (1.0 if agents[a].homes else 1.0 - start_cost) for a in agents}
    ranked = sorted(agents, key=lambda a: (-urgency[a], a))
    n_bid = bidders_offered(cfg.fairness_knob, len(ranked))

    # 2b. reservation: the first wide gang (bidding order) of the worst bidder that has one and has waited a
    #     lease starts now if it fits, else the GPUs it will fit on soonest are held out of the pool until
    #     the leases on the rest expire
    got: dict[str, list[Gang]] = {}
    source: dict[str, str] = {}
    reserved: frozenset[int] = frozenset()
    reserve_note: dict[str, str] = {}
    reserve_data: dict[str, ReservationNote] = {}
    res = _reservation(topo, now, cfg, [agents[a] for a in ranked[:n_bid]], pool, held, jobs) \
        if cfg.reserve_wide_gangs else None
    if res is not None:
        ag, job, target, start_by = res
        if all(g in pool for g in target):
            pool.take(target)
            level_ = topo.level_of(target)
            gang = Gang(job.id, target, level_, throughput(len(target), level_, get_profile(job.profile)))
            got[ag.app_id] = [gang]
            source[job.id] = "reservation"
            agents[ag.app_id] = Agent(ag.app, model, now, ag.base + gang.throughput,
                                      [j for j in ag.jobs if j.id != job.id], ag.homes, start_cost)  # fmt: skip
            reserve_note[ag.app_id] = f"job {job.id} started on its reservation ({len(target)} GPUs)"
            reserve_data[ag.app_id] = ReservationNote(job.id, len(target), 0, 0.0, True)
        else:
            reserved = frozenset(g for g in target if g in pool)
            pool.take(reserved)
            reserve_data[ag.app_id] = ReservationNote(job.id, len(target), len(reserved), start_by - now, False)
            reserve_note[ag.app_id] = (f"{len(reserved)} of {len(target)} GPU(s) reserved for job {job.id}, "
                                       f"complete in {start_by - now:.0f} s")  # fmt: skip
            if not reserved:
                reserve_note[ag.app_id] = (f"job {job.id} starts on {len(target)} GPU(s) whose leases end in "
                                           f"{start_by - now:.0f} s (none held idle meanwhile)")  # fmt: skip
    bidders = [agents[a] for a in ranked[:n_bid]]

    # 3-4. auction among the bidders, hidden payments
    solver_name = cfg.solver
    if solver_name == "auto":
        small = len(bidders) <= cfg.exact_max_bidders and pool.size <= cfg.exact_max_gpus
        solver_name = "exact" if small else "fast"
    payments: dict[str, Payment] = {}
    x_star = Allocation({}, 0.0, solver_name)
    draws = {a.app_id: payment_draw(cfg.seed, now, a.app_id) for a in bidders}  # gangs kept by lottery
    if bidders and pool.size:
        if solver_name == "exact":
            exact = ExactSolver(node_alternatives=topo.size <= cfg.exact_max_gpus)
            cands = exact.candidates(bidders, pool)
            x_star = exact.solve_candidates(cands)
            if cfg.hidden_payments:
                payments = hidden_payments(bidders, pool, x_star, exact, cands, draws)
        else:
            x_star = FastSolver().solve(bidders, pool)
            if cfg.hidden_payments:
                payments = hidden_payments(bidders, pool, x_star, draws=draws)
    kept_gpus: dict[str, int] = {}
    outside = [rho_now[a] for a in ranked[n_bid:]]
    level = max(outside) if outside else 0.0  # the worst rho outside the auction
    cut: dict[str, float] = {}  # renewals paid for in lease time: job -> shortened expiry
    stopped: set[str] = set()  # winners the visibility stop cut short: they rejoin the leftover as equals
    for aid, won in x_star.bundles.items():
        pay = payments.get(aid)
        kept: Sequence[Gang] = won.gangs
        if pay is not None:
            # a withheld gang that is a renewal stays, on a lease cut to c_i of a lease: the payment is
            # the same GPU-time in expectation, and the lottery never preempts a running job
            renewed = {g.job_id for g in pay.withheld if homes.get(g.job_id) == g.gpus}
            for jid in renewed:
                cut[jid] = now + max(pay.fraction, MIN_CUT) * cfg.lease_s
            keep = {g.job_id for g in pay.kept} | renewed
            kept = [g for g in won.gangs if g.job_id in keep]
        stop = _up_to(agents[aid], kept, level)
        if len(stop) < len(kept):
            stopped.add(aid)
        kept = stop
        kept_gpus[aid] = sum(len(g.gpus) for g in kept)
        if kept:
            pool.take(frozenset().union(*(g.gpus for g in kept)))
            got[aid] = got.get(aid, []) + list(kept)
            for g in kept:
                source[g.job_id] = "auction"

    # 5. leftover: first to the apps outside the auction (as in the paper) and the winners the visibility
    #    stop cut short, then to every app that paid no hidden payment (withheld GPUs must not flow
    #    straight back to their payer), then to everyone, until no waiting job fits (work conservation)
    paid = {aid for aid, p in payments.items() if p.withheld}
    bidder_ids = {a.app_id for a in bidders} - (stopped - paid)
    before = {aid: len(gs) for aid, gs in got.items()}
    phases = [[a for a in agents.values() if a.app_id not in bidder_ids]]
    if paid:
        phases.append([a for a in agents.values() if a.app_id not in paid])
    phases.append(list(agents.values()))
    for group in phases:
        if not group or not pool.size:
            continue
        got = {**got, **greedy_fill(group, pool, {a.app_id: got.get(a.app_id, []) for a in group}, by="rho")}
    for aid, gangs in got.items():
        for g in gangs[before.get(aid, 0) :]:
            source.setdefault(g.job_id, "leftover")

    got = _keep_holders_in_place(got, homes, jobs, source)
    cut = {jid: t for jid, t in cut.items() if jid in source}
    got = _no_pointless_moves(got, homes, jobs, source, topo, 1.0 - start_cost)
    return _decide(state, cfg, model, agents, bidders, rho_now, ranked, x_star, payments, kept_gpus, cut, got, source,
                   homes, renewals, expiry, offered, pool, jobs, reserved, reserve_note, reserve_data,
                   stopped)  # fmt: skip


def _reservation(
    topo: Topology, now: float, cfg: ArbiterConfig, bidders: Sequence[Agent], pool: Pool,
    held: Mapping[str, Lease], jobs: Mapping[str, Job],
) -> tuple[Agent, Job, frozenset[int], float] | None:
    """The gang to reserve for, the GPUs it gets, and when they are all free (None: nothing to reserve).

    A wide gang needs several GPUs free in the same round, which a busy cluster whose leases expire one by
    one rarely has: without a reservation it waits until the cluster drains (a 4-GPU job waited 100 h on
    the paper workload while 1-GPU jobs took every GPU that freed up). Like Slurm's backfill
    reservation, the worst-ranked bidder with a rigid gang of >= 2 GPUs that has waited at least a lease
    gets whole nodes (or the GPUs of one node) for it: GPUs in the pool count as free now, other
    preemptible leases as free at their expiry, non-preemptible ones never. The nodes with the most GPUs
    free now win (then the earliest completion): the GPUs reserved in the previous round are free, so the
    reservation stays where it is and grows as the leases on its nodes expire, instead of moving to
    whichever nodes look soonest and displacing other jobs again. Only one reservation per round; a
    reserved GPU idles at most until the last lease on its nodes expires (at most one lease).
    """
    for ag in bidders:
        job = next((j for j in ag.jobs if j.gpus >= 2 and not j.elastic and j.id not in ag.homes
                    and now - j.submit >= cfg.lease_s), None)  # fmt: skip
        if job is None:
            continue
        avail = {g: now for g in pool.free_ids()}
        for lease in held.values():
            if jobs[lease.job_id].preemptible and math.isfinite(lease.expiry):
                avail.update({g: lease.expiry for g in lease.gpus})
        found = _reserve_on(topo, avail, now, job)
        if found is not None:
            return ag, job, found[0], found[1]
    return None


def _reserve_on(
    topo: Topology, avail: Mapping[int, float], now: float, job: Job
) -> tuple[frozenset[int], float] | None:
    """GPUs for `job` on n nodes x k GPUs (its shape; else one node, else whole nodes), nodes ranked by GPUs
    free now (most first), then by when their k GPUs are all free, then by name; with that time."""
    if job.nodes is not None and job.gpus_per_node is not None:
        n, k = job.nodes, job.gpus_per_node
    else:
        widest = max(len(v) for v in topo.node_gpus.values())
        n, k = (1, job.gpus) if job.gpus <= widest else (-(-job.gpus // widest), widest)
        if n * k != job.gpus:
            return None  # an uneven split across nodes: no reservation (rare; Slurm would decide the split)
    ranked: list[tuple[int, float, str, tuple[int, ...]]] = []
    for node, gids in topo.node_gpus.items():
        usable = sorted((g for g in gids if g in avail), key=lambda g: (avail[g] > now, avail[g], g))
        if len(usable) < k:
            continue
        pick = tuple(usable[:k])
        ranked.append((-sum(avail[g] <= now for g in pick), max(avail[g] for g in pick), node, pick))
    if len(ranked) < n:
        return None
    ranked.sort()
    chosen = ranked[:n]
    return frozenset(g for *_, pick in chosen for g in pick), max(t for _, t, _, _ in chosen)


def _up_to(agent: Agent, gangs: Sequence[Gang], level: float) -> tuple[Gang, ...]:
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
        if level > 0 and out and agent.rho_of(x) <= level:
            break
        out.append(g)
        x += g.throughput
    return tuple(out)


def _keep_holders_in_place(
    got: dict[str, list[Gang]],
    homes: Mapping[str, frozenset[int]],
    jobs: Mapping[str, Job],
    source: dict[str, str],
) -> dict[str, list[Gang]]:
    """Never restart two jobs where one renewal does.

    When a job X of an app lands exactly on the GPUs of a lease holder Y of the same app and the same
    kind (shape and profile: same throughput, same rho), while Y is preempted or moved, give Y its GPUs
    back and X whatever Y got (or nothing: X keeps waiting). The app's allocation is unchanged.
    """
    out: dict[str, list[Gang]] = {}
    for aid, gangs in got.items():
        gangs = list(gangs)
        by_job = {g.job_id: k for k, g in enumerate(gangs)}
        for y, home in homes.items():
            if jobs[y].app_id != aid or (y in by_job and gangs[by_job[y]].gpus == home):
                continue
            for k, g in enumerate(gangs):
                x = g.job_id
                if g.gpus == home and x != y and x not in homes and jobs[x].kind == jobs[y].kind:
                    yk = by_job.get(y)
                    sx, sy = source[x], source.get(y)
                    gangs[k] = Gang(y, g.gpus, g.level, g.throughput)
                    source[y] = sx
                    if yk is not None:  # Y had been moved elsewhere: X takes that spot instead
                        old = gangs[yk]
                        gangs[yk] = Gang(x, old.gpus, old.level, old.throughput)
                        source[x] = sy or sx
                    else:  # Y had lost: X keeps waiting
                        source.pop(x, None)
                    by_job = {gg.job_id: i for i, gg in enumerate(gangs)}
                    break
        out[aid] = gangs
    return out


def _no_pointless_moves(
    got: Mapping[str, list[Gang]],
    homes: Mapping[str, frozenset[int]],
    jobs: Mapping[str, Job],
    source: dict[str, str],
    topo: Topology,
    start_keep: float,
) -> dict[str, list[Gang]]:
    """Never spend a restart that changes no job's placement: a holder keeps its GPUs when a swap does as well.

    The auction and the leftover place gangs against the pool without knowing whose home a GPU is, so a
    bidder's gang can land on a lease holder Y's GPUs H (its best fit among equivalent spots) while Y, or a
    job X of Y's app and kind standing in for Y, is sent to other GPUs B of the same count: Y is
    preempted and restarted (or X started) for nothing when the two spots are equivalent. When the
    gangs on H lie inside H and cover it, and they can all be placed inside B (shape kept; a holder of B
    at its own home) at a placement factor no worse than on H for each of them, and Y's factor on H is no
    worse than on B, the gangs swap: Y renews on H, the gangs of H move to B, X (if it stood in) keeps
    waiting. Otherwise the move is kept, and then it is worth it: some job needs H (or Y needs B) for a
    better placement factor. The GPUs in use, each app's GPU count and gang count stay the same, so the
    idle GPUs, the hidden payments and the leftover accounting are untouched; the moved gangs get the
    throughput of their new placement (a renewal in place keeps it whole, a start counts `start_keep`),
    so rho_after reflects the final placements, and no app's throughput goes down.
    """
    out = {aid: list(gs) for aid, gs in got.items()}

    def factor(jid: str, gpus: frozenset[int]) -> float:
        return get_profile(jobs[jid].profile).factor(topo.level_of(gpus))

    def gang(jid: str, gpus: frozenset[int]) -> Gang:
        lvl = topo.level_of(gpus)
        keep = 1.0 if homes.get(jid) == gpus else start_keep
        return Gang(jid, gpus, lvl, throughput(len(gpus), lvl, get_profile(jobs[jid].profile)) * keep)

    def refit(occupants: Sequence[Gang], b: frozenset[int]) -> dict[str, frozenset[int]] | None:
        """The occupants of H placed inside B, none at a worse factor (None: they do not all fit)."""
        sub = Pool(topo, b)
        placed: dict[str, frozenset[int]] = {}
        for o in sorted(occupants, key=lambda g: (-len(g.gpus), g.job_id)):
            job, home = jobs[o.job_id], homes.get(o.job_id)
            if home is not None and len(home) == len(o.gpus) and all(g in sub for g in home):
                gpus: frozenset[int] | None = home
            elif job.nodes is not None and len(o.gpus) == job.gpus:
                gpus = sub.find(job.gpus, job.gpus_per_node, job.nodes)
            else:
                gpus = sub.find(len(o.gpus))
            if gpus is None or factor(o.job_id, gpus) < factor(o.job_id, o.gpus) - 1e-12:
                return None
            sub.take(gpus)
            placed[o.job_id] = gpus
        return placed if sub.size == 0 else None

    changed = True
    while changed:  # each swap puts one more holder at home and takes none away: this ends
        changed = False
        owner: dict[int, tuple[str, int]] = {}
        for aid, gs in out.items():
            for k, g in enumerate(gs):
                owner.update({gpu: (aid, k) for gpu in g.gpus})
        for y in sorted(homes):
            home, aid = homes[y], jobs[y].app_id
            gs = out.get(aid, [])
            mine = next((k for k, g in enumerate(gs) if g.job_id == y), None)
            if mine is not None and gs[mine].gpus == home:
                continue  # renewed in place already
            if any(g not in owner for g in home):
                continue  # part of H is idle or reserved: not a swap
            if mine is not None:
                movers = [mine]
            else:
                movers = [k for k, g in enumerate(gs) if g.job_id not in homes and jobs[g.job_id].kind == jobs[y].kind]
            for k in movers:
                m = gs[k]
                b = m.gpus
                if len(b) != len(home) or b & home or source.get(m.job_id) == "reservation":
                    continue
                if factor(y, home) < factor(y, b) - 1e-12:
                    continue  # Y itself is better placed on B: a move worth its restart
                slots = sorted({owner[g] for g in home})
                occupants = [out[oa][ok] for oa, ok in slots]
                if any(not o.gpus <= home or source.get(o.job_id) == "reservation" for o in occupants):
                    continue
                placed = refit(occupants, b)
                if placed is None:
                    continue  # some gang of H needs H for its placement: the move stands
                for oa, ok in slots:
                    o = out[oa][ok]
                    out[oa][ok] = gang(o.job_id, placed[o.job_id])
                gs[k] = gang(y, home)
                if m.job_id != y:  # X stood in for Y: Y takes its source, X keeps waiting
                    source[y] = source.pop(m.job_id)
                changed = True
                break
            if changed:
                break
    return out


def _decide(
    state: ClusterState,
    cfg: ArbiterConfig,
    model: FairnessModel,
    agents: Mapping[str, Agent],
    bidders: list[Agent],
    rho_now: Mapping[str, float],
    ranked: Sequence[str],
    x_star: Allocation,
    payments: Mapping[str, Payment],
    kept_gpus: Mapping[str, int],
    cut: Mapping[str, float],
    got: Mapping[str, list[Gang]],
    source: Mapping[str, str],
    homes: Mapping[str, frozenset[int]],
    renewals: list[Renewal],
    expiry: float,
    offered: int,
    pool: Pool,
    jobs: Mapping[str, Job],
    reserved: frozenset[int],
    reserve_note: Mapping[str, str],
    reserve_data: Mapping[str, ReservationNote],
    stopped: set[str],
) -> Decision:
    topo = state.topology
    grants: list[Grant] = []
    preemptions: list[Preemption] = []
    granted: set[str] = set()
    for aid, gangs in got.items():
        for g in gangs:
            granted.add(g.job_id)
            home = homes.get(g.job_id)
            if home is not None and home == g.gpus:
                won_back = source[g.job_id] == "auction"
                why = "won its GPUs back in the auction" if won_back else "kept its GPUs as leftover"
                cut_s = cut[g.job_id] - state.now if g.job_id in cut else None
                if cut_s is not None:
                    why += f" (lease cut to {cut_s:.0f} s: hidden payment)"
                renewals.append(Renewal(g.job_id, aid, g.gpus, cut.get(g.job_id, expiry), why,
                                        RenewalCause.WON_BACK if won_back else RenewalCause.LEFTOVER, cut_s))
                continue
            if home is not None:
                preemptions.append(Preemption(g.job_id, aid, home, "lease expired; moved to other GPUs",
                                              PreemptionCause.MOVED))
            grants.append(
                Grant(g.job_id, aid, g.gpus, topo.nodes_of(g.gpus), g.level.label, expiry, source[g.job_id],
                      migrated=home is not None)  # fmt: skip
            )
    for jid, home in homes.items():
        if jid not in granted:
            preemptions.append(Preemption(jid, jobs[jid].app_id, home, "lease expired and lost the auction",
                                          PreemptionCause.LOST))

    bid_ids = {a.app_id for a in bidders}
    rank = {aid: k + 1 for k, aid in enumerate(ranked)}
    records: dict[str, AppRecord] = {}
    for app in state.apps:
        aid = app.id
        gangs = got.get(aid, [])
        ag = agents.get(aid)
        # a gang started on its reservation is already in the rebuilt agent's base throughput
        extra = sum(g.throughput for g in gangs if source.get(g.job_id) != "reservation")
        rho_after = ag.rho_of(extra) if ag is not None else rho_now[aid]
        won = x_star.bundles.get(aid)
        pay = payments.get(aid)
        kept = kept_gpus.get(aid, 0)
        total = len(frozenset().union(*(g.gpus for g in gangs))) if gangs else 0
        by_reservation = sum(len(g.gpus) for g in gangs if source.get(g.job_id) == "reservation")
        leftover = total - kept - by_reservation
        kept_by = KeptBy.ALL
        if ag is None:
            outcome = Outcome.NOTHING_WAITING
            reason = "nothing waiting"
        elif aid in bid_ids:
            if won is None:
                outcome = Outcome.LOST
                reason = f"bid (rank {rank[aid]}) but won nothing"
            else:
                outcome = Outcome.WON
                reason = f"bid (rank {rank[aid]}), won {len(won.gpus)} GPU(s)"
                if pay is not None and pay.withheld:
                    kept_by = KeptBy.PAYMENT
                    reason += f", kept {kept} after hidden payment c={pay.fraction:.3f}"
                elif kept < len(won.gpus):
                    kept_by = KeptBy.VISIBILITY
                    reason += f", kept {kept} (rho down to the worst outside the auction)"
        else:
            outcome = Outcome.NOT_OFFERED
            reason = f"not offered (rank {rank[aid]} of {len(agents)}; f={cfg.fairness_knob})"
        if leftover:
            reason += f"; {leftover} GPU(s) from leftover"
        if aid in reserve_note:
            reason += f"; {reserve_note[aid]}"
        records[aid] = AppRecord(
            app_id=aid,
            rho_before=rho_now[aid],
            rho_after=rho_after,
            rank=rank.get(aid),
            bid=aid in bid_ids,
            won_gpus=len(won.gpus) if won else 0,
            kept_gpus=kept,
            payment_fraction=pay.fraction if pay else None,
            leftover_gpus=leftover,
            reason=reason,
            outcome=outcome,
            ranked=len(agents),
            kept_by=kept_by,
            reservation=reserve_data.get(aid),
        )
    return Decision(
        now=state.now,
        grants=tuple(grants),
        renewals=tuple(renewals),
        preemptions=tuple(preemptions),
        apps=records,
        solver=x_star.solver,
        objective=x_star.objective,
        offered_gpus=offered,
        idle_gpus=pool.free_ids(),
        reserved_gpus=reserved,
    )
