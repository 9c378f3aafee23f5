"""Tenancy: the account -> user -> app tree an app's private share comes from (pure).

Themis (NSDI 2020) gives each of N apps a private 1/N share of the cluster. On a shared Slurm cluster the
app is whatever a user makes it (a job, an array, a ``--themis-app`` tag), so a flat 1/N would let a user buy
GPUs by splitting work into more apps. Here an app's private share is its share of its user's share of
its account's share: at each level counted (``Tenancy.levels``) the parent's share is divided among its
children **that have work** (waiting or running: the apps a round sees) in proportion to their shares,
and equally among a user's apps. An account or user with no work has no share, so what it would have had
goes to its siblings first (their parent's share is divided among fewer), then up (a parent with no
active child is itself inactive). This is the "only active entities count" rule of Slurm's Fair Tree.

What this gives the rest of the core (docs/design.md, "Tenancy"):

* :func:`contention` -- each app's effective N, ``1 / its fraction of the cluster``: the caller feeds it to
  the app's :class:`~themis_slurm.core.fairness.ContentionClock` instead of the number of apps, so T_id is
  the finish time on the app's nested share. With the levels ``("app",)`` it is exactly the number of apps
  (today's Themis, bit for bit).
* :func:`auction_weights` -- the weight of each app in the partial allocation (the weighted Nash social
  welfare ``sum_i w_i log(1/rho_i)``, and the hidden payments ``c_i`` raised to ``1/w_i``): proportional to
  the app's fraction, 1.0 for every app in the flat case. Unweighted, the product of 1/rho is blind to
  shares: scaling an app's T_id multiplies its 1/rho by a constant, which does not move the argmax.
* :func:`quotas` -- how many GPUs each user (the lowest level above the app) should hold after this round,
  by hierarchical water-filling of the GPUs in play over the shares, capped by what each entity can use:
  the leftover hands GPUs out within these quotas first (core/leftover.py), so that leftover GPUs follow
  the tree and not the number of apps a user made.

Shares are the site's raw numbers (Slurm's RawShares from sshare, or 1 each for "equal"); an entity missing
from the tables has ``default_shares``. An entity with 0 shares counts ``ZERO_SHARES`` instead: it still has
a (tiny) share, so its T_id stays finite, and it gets GPUs only when nobody with shares can use them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from themis_slurm.core.workload import App

#: the levels of the tree, top-down; ``Tenancy.levels`` is a sub-sequence of these that ends with "app"
LEVELS = ("account", "user", "app")
#: the weight of an entity whose shares are 0 (Slurm allows it): tiny but not nothing
ZERO_SHARES = 1e-6

#: an entity of the tree: (level, key), key () for the root, (account,) or (account, user) below it
Entity = tuple[str, tuple[str, ...]]
ROOT: Entity = ("root", ())


@dataclass(frozen=True)
class Tenancy:
    """Which levels count and the shares at each: everything the core needs to know about tenants.

    `account_shares` maps an account to its raw shares; `user_shares` maps (account, user) to the user's
    raw shares inside that account (with the account level off, (``""``, user) is looked up first, then
    the user's shares summed over its accounts). Missing entries have `default_shares`.
    """

    levels: tuple[str, ...] = ("app",)
    account_shares: Mapping[str, float] = field(default_factory=dict)
    user_shares: Mapping[tuple[str, str], float] = field(default_factory=dict)
    default_shares: float = 1.0

    def __post_init__(self) -> None:
        levels = tuple(self.levels)
        object.__setattr__(self, "levels", levels)
        if not levels or levels[-1] != "app" or any(lv not in LEVELS for lv in levels) or \
                list(levels) != [lv for lv in LEVELS if lv in levels]:  # fmt: skip
            raise ValueError(f"levels must be some of account, user, in that order, then app; got {list(levels)}")
        if not (math.isfinite(self.default_shares) and self.default_shares >= 0):
            raise ValueError(f"default_shares must be a number >= 0, got {self.default_shares!r}")
        for name, table in (("account_shares", self.account_shares), ("user_shares", self.user_shares)):
            for k, v in table.items():
                if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
                    raise ValueError(f"{name}[{k!r}] must be a number >= 0, got {v!r}")
        summed: dict[str, float] = {}
        for (_, user), v in self.user_shares.items():
            summed[user] = summed.get(user, 0.0) + v
        object.__setattr__(self, "_user_total", summed)

    @property
    def flat(self) -> bool:
        """Only the app level counts: every app has 1/N, as in the paper."""
        return self.levels == ("app",)

    def path(self, app: App) -> tuple[Entity, ...]:
        """The entities above `app`, top-down (empty when flat)."""
        out: list[Entity] = []
        if "account" in self.levels:
            out.append(("account", (app.account,)))
        if "user" in self.levels:
            acct = app.account if "account" in self.levels else ""
            out.append(("user", (acct, app.owner)))
        return tuple(out)

    def shares_of(self, entity: Entity) -> float:
        """The raw shares of an account or user entity (before ZERO_SHARES)."""
        level, key = entity
        if level == "account":
            return float(self.account_shares.get(key[0], self.default_shares))
        if level == "user":
            acct, user = key
            if (acct, user) in self.user_shares:
                return float(self.user_shares[(acct, user)])
            if not acct and user in self._user_total:  # type: ignore[attr-defined]
                return float(self._user_total[user])  # type: ignore[attr-defined]
            return float(self.default_shares)
        return 1.0

    def weight_of(self, entity: Entity) -> float:
        s = self.shares_of(entity)
        return s if s > 0 else ZERO_SHARES


FLAT = Tenancy()


@dataclass(frozen=True, slots=True)
class TenantBook:
    """What a tenant (the lowest entity above the apps) has been owed and has had, since it last became
    active (it had no present jobs before); kept by the caller, as each app's contention clock is.

    `entitled` is the integral of its share of the cluster, ``cluster_gpus x`` its fraction
    (:func:`entity_fractions`), over that time, in GPU-seconds; `finished` is the work (ideal GPU-seconds)
    of its jobs that finished in it. With the work done by its present jobs, the core knows how far the
    tenant is behind or ahead of the pace of its share (core/quota.py: paced quotas), whatever apps it
    made and whichever of them have left.
    """

    entitled: float = 0.0
    finished: float = 0.0


def _children(tenancy: Tenancy, apps: Iterable[App]) -> tuple[dict[Entity, list[Entity]], dict[str, Entity]]:
    """The active tree: each entity's children (entities, or ("app", (app_id,)) leaves) in first-seen order,
    and each app's parent entity."""
    kids: dict[Entity, list[Entity]] = {}
    seen: set[Entity] = set()
    parent_of: dict[str, Entity] = {}
    for app in apps:
        parent = ROOT
        for ent in tenancy.path(app):
            if ent not in seen:
                seen.add(ent)
                kids.setdefault(parent, []).append(ent)
            parent = ent
        kids.setdefault(parent, []).append(("app", (app.id,)))
        parent_of[app.id] = parent
    return kids, parent_of


def fractions(tenancy: Tenancy, apps: Sequence[App]) -> dict[str, float]:
    """Each app's fraction of the cluster (they sum to 1 over `apps`, the apps with work).

    Flat: 1/N each. Otherwise the product down the tree of (own weight / sum of active siblings' weights),
    a user's apps splitting its fraction equally.
    """
    if not apps:
        return {}
    if tenancy.flat:
        n = len(apps)
        return {a.id: 1.0 / n for a in apps}
    kids, _ = _children(tenancy, apps)
    out: dict[str, float] = {}

    def walk(ent: Entity, frac: float) -> None:
        children = kids.get(ent, [])
        if children and children[0][0] == "app":
            each = frac / len(children)
            for _, (aid,) in children:
                out[aid] = each
            return
        total = sum(tenancy.weight_of(c) for c in children)
        for c in children:
            walk(c, frac * tenancy.weight_of(c) / total)

    walk(ROOT, 1.0)
    return out


def entity_fractions(tenancy: Tenancy, apps: Sequence[App]) -> dict[Entity, float]:
    """Each tenant's (lowest entity above the apps) fraction of the cluster: the sum of its apps'
    :func:`fractions`; empty when flat. What a :class:`TenantBook`'s `entitled` integrates."""
    if tenancy.flat or not apps:
        return {}
    fr = fractions(tenancy, apps)
    out: dict[Entity, float] = {}
    for app in apps:
        ent = tenancy.path(app)[-1]
        out[ent] = out.get(ent, 0.0) + fr[app.id]
    return out


def contention(tenancy: Tenancy, apps: Sequence[App]) -> dict[str, float]:
    """Each app's effective N (1 / its fraction): what its contention clock integrates. Flat: exactly
    the number of apps, as the clocks have always counted."""
    if tenancy.flat:
        n = float(max(1, len(apps)))
        return {a.id: n for a in apps}
    return {aid: 1.0 / f for aid, f in fractions(tenancy, apps).items()}


def auction_weights(tenancy: Tenancy, apps: Sequence[App]) -> dict[str, float]:
    """Each app's weight in the auction: its fraction times the number of apps (1.0 when flat, exactly)."""
    if tenancy.flat:
        return {a.id: 1.0 for a in apps}
    n = len(apps)
    return {aid: f * n for aid, f in fractions(tenancy, apps).items()}


def water_fill(capacity: float, weights: Sequence[float], caps: Sequence[float]) -> list[float]:
    """Split `capacity` in proportion to `weights`, none above its cap, what a capped one cannot use going
    to the others (weighted max-min fairness). The total is min(capacity, sum(caps))."""
    n = len(weights)
    out = [0.0] * n
    open_ = [i for i in range(n) if caps[i] > 0]
    left = capacity
    while open_ and left > 1e-12:
        total_w = sum(weights[i] for i in open_)
        if total_w <= 0:
            break
        capped = [i for i in open_ if caps[i] - out[i] <= left * weights[i] / total_w + 1e-12]
        if not capped:
            for i in open_:
                out[i] += left * weights[i] / total_w
            break
        for i in capped:
            left -= caps[i] - out[i]
            out[i] = caps[i]
        open_ = [i for i in open_ if i not in capped]
    return out


def _fill_down(tenancy: Tenancy, apps: Sequence[App], gpus: float, demand: Mapping[str, float],
               to_apps: bool) -> tuple[dict[Entity, float], dict[str, Entity]]:
    """Hierarchical water-filling of `gpus` from the root: each entity's GPUs split over its active children
    by weight (apps: equal), capped by each child's demand (the sum below it). GPUs per lowest entity above
    the apps, or with `to_apps` per app (keyed ("app", (id,))); and each app's parent entity."""
    kids, parent_of = _children(tenancy, apps)
    need: dict[Entity, float] = {}

    def demand_of(ent: Entity) -> float:
        if ent[0] == "app":
            return float(demand.get(ent[1][0], 0.0))
        if ent not in need:
            need[ent] = sum(demand_of(c) for c in kids.get(ent, []))
        return need[ent]

    out: dict[Entity, float] = {}

    def walk(ent: Entity, have: float) -> None:
        children = kids.get(ent, [])
        if ent[0] == "app" or (not to_apps and children and children[0][0] == "app"):
            out[ent] = have
            return
        weights = [1.0 if c[0] == "app" else tenancy.weight_of(c) for c in children]
        for c, g in zip(children, water_fill(have, weights, [demand_of(c) for c in children]), strict=True):
            walk(c, g)

    walk(ROOT, float(gpus))
    return out, parent_of


def quotas(tenancy: Tenancy, apps: Sequence[App], gpus: float,
           demand: Mapping[str, float]) -> tuple[dict[Entity, float], dict[str, Entity]]:
    """GPUs each lowest entity above the apps (a user, or an account when users do not count) should hold,
    out of `gpus` in play, and each app's entity. `demand` is the GPUs each app could hold at once.

    Hierarchical water-filling: the root's GPUs are split over its active children by weight, capped by
    each child's demand (the sum below it), and so on down to the users. Empty when flat (the leftover
    then has no quotas: today's behaviour).
    """
    if tenancy.flat or not apps:
        return {}, {}
    return _fill_down(tenancy, apps, gpus, demand, to_apps=False)


def app_shares(tenancy: Tenancy, apps: Sequence[App], gpus: float, demand: Mapping[str, float]) -> dict[str, float]:
    """GPUs per app: :func:`quotas`' hierarchical water-filling carried down to the apps (equal weights among
    a user's apps, each capped by its `demand`). The baselines that share GPUs by max-min (maxmin, fairshare)
    use it with tenancy levels; flat, it is plain max-min over the apps (they keep their own then).
    """
    if not apps:
        return {}
    out, _ = _fill_down(tenancy, apps, gpus, demand, to_apps=True)
    return {ent[1][0]: g for ent, g in out.items()}


__all__ = ["FLAT", "LEVELS", "ROOT", "ZERO_SHARES", "Entity", "TenantBook", "Tenancy", "app_shares", "auction_weights",
           "contention", "entity_fractions", "fractions", "quotas", "water_fill"]
