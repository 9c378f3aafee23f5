"""Optional phase: reserve GPUs for a wide gang that has waited a lease (``reserve_wide_gangs``).

On by default (docs/design.md says why, docs/eval/design-journal.md has the measurements). It runs after the
offer and before winner determination: the first wide gang (bidding order) of the worst bidder that has one
starts now if it fits, else the GPUs it will fit on soonest are held out of the pool until the leases on the
rest expire. When that gang already runs (its lease expires now), it keeps its GPUs (RenewalCause.RESERVATION)
instead of going back to the pool, where x* or the leftover would split them among other apps and later rounds
would have to reserve them again. On a cluster of several GPU types a running gang on a slow type gets GPUs of
a faster one reserved instead (:func:`_faster_than_home`): it keeps its home until they are free, then moves.
There a holder of one GPU qualifies too, when its home is on a slow type (:func:`_slow_holder`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from themis_slurm.core.agent import Agent, Gang
from themis_slurm.core.decision import GrantSource, Renewal, RenewalCause, ReservationNote
from themis_slurm.core.gpu_types import gang_speed, job_types, spanning_nodes
from themis_slurm.core.placement import Pool, get_profile, throughput
from themis_slurm.core.quota import room, tenant_gpus
from themis_slurm.core.round_state import RoundState
from themis_slurm.core.topology import Topology
from themis_slurm.core.wide_gangs import WIDE_GANG_GPUS
from themis_slurm.core.workload import Job, Lease


def reserve_for_wide_gang(rs: RoundState) -> None:
    """Reservation phase: start the gang on its reservation, or hold the part of it that is free now."""
    topo, now = rs.state.topology, rs.now
    fits = None
    if rs.quota:  # tenancy levels: only a gang its tenant has room for within its quota (core/quota.py)
        have = tenant_gpus(rs)

        def fits(ag: Agent, job: Job) -> bool:
            return room(rs, rs.tenant_of[ag.app_id], have) >= job.gpus

    res = _pick_gang(topo, now, rs.cfg.lease_s, rs.bidders, rs.pool, rs.held, rs.jobs, rs.homes, fits)
    if res is None:
        return
    ag, job, target, start_by = res
    home = ag.homes.get(job.id)
    if home is not None and target != home and not all(g in rs.pool for g in target):
        _renew_until(rs, ag, job, home, target, start_by)  # faster GPUs for it free up by start_by
        return
    if (home is not None and target == home) or all(g in rs.pool for g in target):
        level = topo.level_of(target)
        x = throughput(len(target), level, get_profile(job.profile))
        gang = Gang(job.id, target, level, x * gang_speed(topo, job, target) if topo.heterogeneous else x)
        if target == home:  # it runs there now: it keeps its GPUs, outside the auction like a start
            rs.homes.pop(job.id)
            rs.pool.take(target)
            rs.renewals.append(Renewal(job.id, ag.app_id, target, rs.expiry, RenewalCause.RESERVATION))
        else:
            rs.award(ag.app_id, [gang], GrantSource.RESERVATION)
            rs.reservations[ag.app_id] = ReservationNote(job.id, len(target), 0, 0.0, True)
        # the app bids on with the gang counted in its base throughput (and without the job)
        rebuilt = ag.with_started(job.id, gang.throughput)
        rs.agents[ag.app_id] = rebuilt
        rs.bidders = [rebuilt if b.app_id == ag.app_id else b for b in rs.bidders]
        return
    held = frozenset(g for g in target if g in rs.pool)
    rs.pool.take(held)
    rs.reserved = held
    rs.reservations[ag.app_id] = ReservationNote(job.id, len(target), len(held), start_by - now, False)


def _renew_until(rs: RoundState, ag: Agent, job: Job, home: frozenset[int], target: frozenset[int],
                 start_by: float) -> None:
    """A holder on a slow type whose faster `target` is not all free yet: it keeps its home until `start_by`
    (its lease cut there, so that it bids again when the target is free) and the part of the target free now
    is held for it."""
    topo = rs.state.topology
    level = topo.level_of(home)
    x = throughput(len(home), level, get_profile(job.profile)) * gang_speed(topo, job, home)
    rs.homes.pop(job.id)
    rs.pool.take(home)
    cut = min(start_by, rs.expiry)
    rs.renewals.append(Renewal(job.id, ag.app_id, home, cut, RenewalCause.RESERVATION, cut - rs.now))
    held = frozenset(g for g in target if g in rs.pool)
    rs.pool.take(held)
    rs.reserved = held
    rs.reservations[ag.app_id] = ReservationNote(job.id, len(target), len(held), start_by - rs.now, False)
    rebuilt = ag.with_started(job.id, x)
    rs.agents[ag.app_id] = rebuilt
    rs.bidders = [rebuilt if b.app_id == ag.app_id else b for b in rs.bidders]


def _pick_gang(
    topo: Topology, now: float, lease_s: float, bidders: Sequence[Agent], pool: Pool,
    held: Mapping[str, Lease], jobs: Mapping[str, Job], homes: Mapping[str, frozenset[int]] | None = None,
    fits: Callable[[Agent, Job], bool] | None = None,
) -> tuple[Agent, Job, frozenset[int], float] | None:
    """The gang to reserve for, the GPUs it gets, and when they are all free (None: nothing to reserve;
    a gang whose lease expires now gets its own GPUs, now).

    A wide gang needs several GPUs free in the same round, which a busy cluster whose leases expire one by
    one rarely has: without a reservation it waits until the cluster drains (a 4-GPU job waited 100 h on
    the paper workload while 1-GPU jobs took every GPU that freed up). Like Slurm's backfill
    reservation, the worst-ranked bidder with a rigid gang of >= 2 GPUs that has waited at least a lease
    (on several GPU types, or a holder of fewer on a slow type: :func:`_slow_holder`)
    gets whole nodes (or the GPUs of one node) for it: GPUs in the pool count as free now, other
    preemptible leases as free at their expiry, non-preemptible ones never. The nodes with the most GPUs
    free now win (then the earliest completion): the GPUs reserved in the previous round are free, so the
    reservation stays where it is and grows as the leases on its nodes expire, instead of moving to
    whichever nodes look soonest and displacing other jobs again. Among nodes as free, those whose GPUs
    are nobody's home win (`homes`: the leases expiring now, whose holders would otherwise renew in
    place): a gang placed on a holder's node while an equal node idles moves the holder for nothing (one
    restart). Only one reservation per round; a reserved GPU idles at most until the last lease on its
    nodes expires (at most one lease).

    The bidder's first wide gang may be a lease holder whose lease expires now (holders come first in
    bidding order): the gang a reservation started in an earlier round, or one that started otherwise.
    It is the gang this phase would reserve for, so it keeps its GPUs. Traced on the paper workload with
    uniform 1-3x estimate errors: without this, an 8-GPU job that needed 5 h of running was started 12
    times by reservations between 258 h and 309 h, and each time the leftover gave its GPUs at the next
    expiry to other apps (docs/design.md, The round, "The reserved gang keeps its GPUs").

    `fits`, when given (tenancy levels), skips a bidder whose gang its tenant has no room for within its
    quota: a reservation is a start outside the auction, and must not carry a user past its share.
    """
    avail: dict[int, float] | None = None  # when each GPU is free; built once, when some bidder has a gang
    homed: frozenset[int] = frozenset()
    for ag in bidders:
        job = next((j for j in ag.jobs if not j.elastic and now - j.submit >= lease_s
                    and (j.gpus >= WIDE_GANG_GPUS or _slow_holder(topo, ag, j))), None)  # fmt: skip
        if job is None or (fits is not None and not fits(ag, job)):
            continue
        narrow = job.gpus < WIDE_GANG_GPUS
        if avail is None and (job.id not in ag.homes or topo.heterogeneous):
            avail = {g: now for g in pool.free_ids()}
            for lease in held.values():
                if jobs[lease.job_id].preemptible and math.isfinite(lease.expiry):
                    avail.update({g: lease.expiry for g in lease.gpus})
            homed = frozenset(g for gpus in (homes or {}).values() for g in gpus)
        if job.id in ag.homes:
            home = ag.homes[job.id]
            up = _faster_than_home(topo, avail, now, job, home, homed, ag.start_keep) if avail is not None else None
            if up is None and narrow:
                continue
            return (ag, job, *up) if up is not None else (ag, job, home, now)
        assert avail is not None
        found = _reserve_on(topo, avail, now, job, homed)
        if found is not None:
            return ag, job, found[0], found[1]
    return None


def _slow_holder(topo: Topology, ag: Agent, job: Job) -> bool:
    """A holder whose home is on a type where it runs slower than on its fastest type by more than a restart
    costs (its speed there x the agent's start_keep).

    Why a narrow one too: at its lease expiry the auction alone leaves it where it is. Its move to a faster
    GPU is worth log(rho slow / rho fast) in x*, less than what the same GPU is worth to an app whose longer
    remaining run gains more from it, so the fast GPUs go to others lease after lease and it runs its whole
    run on the slow type. Measured on the paper workload over 32 v100 + 32 k80 at 0.3 (seed 0): Themis's
    max rho 2.78 (ftf over types 1.70); with this, 1.25 (docs/eval/discussion.md)."""
    if not topo.heterogeneous or job.id not in ag.homes:
        return False
    types = job_types(topo, job)
    return bool(types) and types[0][1] * ag.start_keep > gang_speed(topo, job, ag.homes[job.id])


def _faster_than_home(
    topo: Topology, avail: Mapping[int, float], now: float, job: Job, home: frozenset[int], homed: frozenset[int],
    keep: float,
) -> tuple[frozenset[int], float] | None:
    """On a cluster of several GPU types: GPUs for a holder whose home is on a slow type, on a type where it
    runs faster by more than a restart costs (its speed there x `keep`, the agent's start_keep, above its
    speed at home), fastest first, as for a waiting gang (:func:`_reserve_among`); None when there is none.

    Without it a wide gang that started on the slowest type while nothing else was free stayed there: the
    agent moves a holder only when a whole faster gang is free at its lease expiry, which on a cluster of
    one-GPU leases expiring one by one rarely happens, and this phase renewed it at home (measured on the
    Gavel traces, docs/eval/discussion.md: a 4-GPU job ran at 0.10 of its v100 speed on k80s for 40 h)."""
    at_home = gang_speed(topo, job, home)
    home_types = {topo.gpus[g].gpu_type for g in home}
    for t, speed, nodes in job_types(topo, job):
        if speed * keep <= at_home:
            break  # fastest first: no later type is worth the move either
        if t in home_types:
            continue
        found = _reserve_among(topo, avail, now, job, homed, {n: topo.node_gpus[n] for n in nodes})
        if found is not None:
            return found
    return None


def _reserve_on(
    topo: Topology, avail: Mapping[int, float], now: float, job: Job, homed: frozenset[int] = frozenset()
) -> tuple[frozenset[int], float] | None:
    """GPUs for `job` on n nodes x k GPUs (its shape; else one node, else whole nodes), nodes ranked by GPUs
    free now (most first), then by how many of them are a holder's home (fewest first), then by when their
    k GPUs are all free, then by name; with that time.

    A gang of several nodes takes the n best nodes of one rack when that makes it faster (a
    placement-sensitive model across racks runs at a fraction of its speed for its whole run, which a
    wait of at most one lease does not cost), else the n best anywhere.

    Only the job's allowed nodes count (:attr:`Job.allowed_nodes`): GPUs held for it elsewhere would idle
    for a start Slurm refuses. Without a shape it is split by the widest allowed node, so a gang too wide
    for one of them is still reserved whole nodes even where wider nodes it may not use exist.
    """
    if topo.heterogeneous:  # one type at a time, the job's fastest first; over several only when none ever holds it
        types = job_types(topo, job)
        for _t, _speed, nodes in types:
            found = _reserve_among(topo, avail, now, job, homed, {n: topo.node_gpus[n] for n in nodes})
            if found is not None:
                return found
        span = spanning_nodes(topo, job, types)  # wider than any one type: over several
        return _reserve_among(topo, avail, now, job, homed, {n: topo.node_gpus[n] for n in span}) if span else None
    allowed = job.allowed_nodes
    node_gpus = topo.node_gpus if allowed is None else {n: g for n, g in topo.node_gpus.items() if n in allowed}
    return _reserve_among(topo, avail, now, job, homed, node_gpus)


def _reserve_among(
    topo: Topology, avail: Mapping[int, float], now: float, job: Job, homed: frozenset[int],
    node_gpus: Mapping[str, Sequence[int]],
) -> tuple[frozenset[int], float] | None:
    """:func:`_reserve_on` on the nodes `node_gpus` (the job's allowed nodes, or those of one GPU type)."""
    if not node_gpus:
        return None  # allowed nowhere: nothing to reserve
    if job.nodes is not None and job.gpus_per_node is not None:
        n, k = job.nodes, job.gpus_per_node
    else:
        widest = max(len(v) for v in node_gpus.values())
        n, k = (1, job.gpus) if job.gpus <= widest else (-(-job.gpus // widest), widest)
        if n * k != job.gpus:
            return None  # an uneven split across nodes: no reservation (rare; Slurm would decide the split)
    ranked: list[tuple[int, int, float, str, tuple[int, ...]]] = []
    for node, gids in node_gpus.items():
        usable = sorted((g for g in gids if g in avail), key=lambda g: (avail[g] > now, g in homed, avail[g], g))
        if len(usable) < k:
            continue
        pick = tuple(usable[:k])
        ranked.append((-sum(avail[g] <= now for g in pick), sum(g in homed for g in pick),
                       max(avail[g] for g in pick), node, pick))  # fmt: skip
    if len(ranked) < n:
        return None
    ranked.sort()
    chosen = ranked[:n]
    if n > 1:
        profile = get_profile(job.profile)
        options = [chosen]
        for rack in topo.racks:
            here = [r for r in ranked if topo.node_rack[r[3]] == rack][:n]
            if len(here) == n:
                options.append(here)

        def score(opt: list[tuple[int, int, float, str, tuple[int, ...]]]) -> tuple[float, int, int, float]:
            gpus = [g for *_, pick in opt for g in pick]
            speed = throughput(len(gpus), topo.level_of(gpus), profile) * gang_speed(topo, job, gpus)
            return (-speed, sum(r[0] for r in opt), sum(r[1] for r in opt), max(r[2] for r in opt))

        chosen = min(options, key=score)  # the first (the n best anywhere) on a tie
    return frozenset(g for *_, pick in chosen for g in pick), max(r[2] for r in chosen)
