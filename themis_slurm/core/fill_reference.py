"""The greedy fill written plainly: what :func:`~themis_slurm.core.fill.greedy_fill` must hand out.

Slow on purpose, and obviously what it says: no heap (a scan for the best entry), no kept priorities,
every placement through :meth:`Agent.offers` and every priority from :meth:`Agent.rho_of` and
:meth:`Agent.lateness` where it is needed. tests/unit/core/test_fill.py checks that the tuned fill hands
out exactly the same gangs (the same jobs, GPUs, levels and throughputs, in the same order) on generated
rounds. The fill, step by step:

1. Every app has a *standing entry*: a key and, once placed, an offer (:class:`Standing`). An app whose
   head jobs (the next job of each kind it has left) are all plain (:func:`plain_factors`) stands under an
   upper bound of its next priority, computed without placing (:func:`bound`); any other app is placed
   at once and stands under its exact priority (:func:`best`).
2. At each step the entry with the highest key (ties: the app listed first) is looked at. If it has no
   offer (a bound), or another app has since taken one of its offer's GPUs, the app is placed now; when
   its exact priority is still the highest, it goes on, else it stands again under that priority.
3. The app gets the offer, unless that would pass its cap (then it is out of the fill), and stands again
   (step 1) with its new throughput.
4. The fill ends when no entry is left, the pool is empty or every cap is reached.

A kind's offers are kept while its head job is the same and all their GPUs are free: placing again
would offer GPUs of the same value, maybe other ones, and which GPUs an app gets changes what later
placements find. That, and when a placement is made (steps 1 and 2), are part of the definition.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from themis_slurm.core.agent import Agent, Gang
from themis_slurm.core.fill import FILL_ORDERS, PLACE_NOW, TIE, TIE_S, Factors, Offer, caps
from themis_slurm.core.placement import Pool, get_profile
from themis_slurm.core.workload import Job


def plain_factors(agent: Agent, kind: Sequence[Job]) -> Factors | None:
    """The placement factors of a kind of plain jobs, or None when its jobs need the agent's own
    placement (:meth:`Agent.offers`). Plain: no node shape, not elastic, not a lease holder and allowed on
    any node (a set of every node restricts nothing); a kind's jobs share all of these. The pool's plain
    best fit places such a job (Agent.offers does the same): read here from the jobs' public facts, where
    the tuned fill reads the agent's own list."""
    if not kind:
        return None
    job = kind[0]
    if job.nodes is not None or job.elastic or job.id in agent.homes:
        return None
    if job.allowed_nodes is not None and agent.model.job_facts.get(job).allowed is not None:  # type: ignore[union-attr]
        return None
    return get_profile(job.profile).factors


@dataclass
class RefApp:
    """One app's progress: what it has left per kind, what it holds, its kept offers."""

    agent: Agent
    queues: list[list[Job]]  # per kind, the jobs not handed out yet, head first; [] once dropped
    gangs: list[Gang] = field(default_factory=list)
    x: float = 0.0  # the throughput of `gangs`
    kept: dict[int, tuple[Job, list[Offer]]] = field(default_factory=dict)  # per kind: (head job, offers)

    @classmethod
    def holding(cls, agent: Agent, held: Sequence[Gang]) -> RefApp:
        """The app at the start of the fill, holding `held` (gangs from earlier in the round)."""
        used = {g.job_id for g in held}
        app = cls(agent, [[j for j in kind if j.id not in used] for kind in agent.kinds], list(held))
        for g in held:
            app.x += g.throughput
        return app

    def heads(self) -> list[tuple[int, Job]]:
        """(kind, its next job) for every kind with jobs left."""
        return [(qi, q[0]) for qi, q in enumerate(self.queues) if q]


@dataclass(frozen=True)
class Standing:
    """An app's entry: its key, and the kind and offer it was placed at (None: the key is a bound)."""

    key: float
    kind: int = -1
    offer: Offer | None = None


def gain(by: str, app: RefApp, n_gpus: int, throughput: float, saved: float = 0.0) -> float:
    """The weighted log-gain of `throughput` more, per GPU with "density" (and "gain": not per GPU), from
    rho with the unsaved work the app loses as it stands (Agent.lost_without its gangs) to rho with
    `saved` of it kept (the gang renews its holder in place)."""
    ag = app.agent
    lost = ag.lost_without(app.gangs)
    g = ag.weight * (math.log(ag.rho_of(app.x, lost)) - math.log(ag.rho_of(app.x + throughput, lost - saved)))
    return g / n_gpus if by == "density" else g


def priority(by: str, app: RefApp, job: Job, offer: Offer, restart_s: float) -> float:
    """What handing `offer` to `job` is worth in order `by` (core/fill.py's module docstring)."""
    gpus, _, throughput = offer
    ag = app.agent
    away = ag.homes.get(job.id) != gpus  # a restart
    if by in ("density", "gain"):
        return gain(by, app, len(gpus), throughput, 0.0 if away else ag.risk_of(job.id))
    if by == "rho":
        return math.log(ag.rho_of(app.x, ag.lost_without(app.gangs))) + (math.log(ag.start_keep) if away else 0.0)
    if away:
        return ag.lateness(job) - restart_s
    return ag.lateness(job) + ag.risk_of(job.id) / throughput  # a renewal redoes none of its unsaved work


def bound(by: str, app: RefApp, restart_s: float) -> float | None:
    """An upper bound on the app's next priority without placing: None when it has no job left,
    PLACE_NOW when a head job is not plain. A plain job is never at home, and its gang gets at best its
    profile's tightest factor (more throughput is more gain): so with "rho" and "deadline" the bound is
    exact, and with "rho" the same for every plain kind (the first kind left decides)."""
    heads = app.heads()
    if not heads:
        return None
    ag = app.agent
    if by == "rho":
        if plain_factors(ag, app.queues[heads[0][0]]) is None:
            return PLACE_NOW
        return math.log(ag.rho_of(app.x, ag.lost_without(app.gangs))) + math.log(ag.start_keep)
    factors = [plain_factors(ag, app.queues[qi]) for qi, _ in heads]
    if any(f is None for f in factors):
        return PLACE_NOW
    if by == "deadline":
        return max(ag.lateness(job) for _, job in heads) - restart_s
    return max(gain(by, app, job.gpus, job.gpus * f[0] * ag.start_keep)  # type: ignore[index]
               for (_, job), f in zip(heads, factors, strict=True))  # fmt: skip


def offers(app: RefApp, qi: int, pool: Pool, small: bool) -> list[Offer]:
    """The kind's offers for its head job: the kept ones while the job is the same and all their GPUs
    are free, else the agent's offers now (kept); no offer drops the kind."""
    job = app.queues[qi][0]
    kept = app.kept.get(qi)
    if kept is not None and kept[0] is job and all(pool.has(o[0]) for o in kept[1]):
        return kept[1]
    found = app.agent.offers(job, pool, small)
    if found:
        app.kept[qi] = (job, found)
    else:
        app.queues[qi] = []
    return found


def best(by: str, app: RefApp, pool: Pool, small: bool, restart_s: float) -> Standing | None:
    """The app's best next gang among its kinds, placed against the pool as it is now (the first kind and
    offer among priorities within TIE, TIE_S with "deadline"); None when no kind fits."""
    tie = TIE_S if by == "deadline" else TIE
    top: Standing | None = None
    for qi, job in app.heads():
        for offer in offers(app, qi, pool, small)[: 1 if by in ("rho", "deadline") else None]:
            p = priority(by, app, job, offer, restart_s)
            if top is None or p > top.key + tie:
                top = Standing(p, qi, offer)
    return top


def reference_fill(agents: Sequence[Agent], pool: Pool, start: Mapping[str, Sequence[Gang]] | None = None,
                   by: str = "density", elastic_small: bool = True, restart_s: float = 0.0,
                   limit: int | None = None, groups: Sequence[Hashable] | None = None,
                   limits: Mapping[Hashable, int] | None = None) -> dict[str, list[Gang]]:  # fmt: skip
    """:func:`~themis_slurm.core.fill.greedy_fill`, the same arguments and answer, by steps 1 to 4 of the
    module docstring."""
    if by not in FILL_ORDERS:
        raise ValueError(f"by must be one of {', '.join(FILL_ORDERS)}, got {by!r}")
    small = elastic_small and by in ("density", "gain")
    group_of, left = caps(len(agents), limit, groups, limits)
    apps = [RefApp.holding(ag, (start or {}).get(ag.app_id, ())) for ag in agents]
    standing: dict[int, Standing] = {}

    def stand(k: int) -> None:  # step 1
        b = bound(by, apps[k], restart_s)
        if b is None:
            return  # no job left
        entry = best(by, apps[k], pool, small, restart_s) if b == PLACE_NOW else Standing(b)
        if entry is not None:
            standing[k] = entry

    for k in range(len(apps)):
        stand(k)
    while standing and pool.size and any(v > 0 for v in left.values()):
        k = max(standing, key=lambda i: (standing[i].key, -i))  # step 2
        entry = standing.pop(k)
        if entry.offer is None or not pool.has(entry.offer[0]):
            placed = best(by, apps[k], pool, small, restart_s)
            if placed is None:
                continue
            if standing and max((e.key, -i) for i, e in standing.items()) > (placed.key, -k):
                standing[k] = placed
                continue
            entry = placed
        assert entry.offer is not None
        gpus, level, throughput = entry.offer
        if len(gpus) > left[group_of[k]]:  # step 3
            continue
        left[group_of[k]] -= len(gpus)
        pool.take(gpus)
        app = apps[k]
        app.gangs.append(Gang(app.queues[entry.kind].pop(0).id, gpus, level, throughput))
        app.x += throughput
        stand(k)
    return {app.agent.app_id: app.gangs for app in apps if app.gangs}
