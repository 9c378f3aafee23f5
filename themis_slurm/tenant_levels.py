"""Tenancy as people see it: each account's and user's share, GPUs, quota and worst rho (pure; issue 33 item 5).

The rounds divide the cluster account -> user -> app (core/tenancy.py). What an admin or a user wants to see
is that tree with numbers, as ``sshare -l`` shows Slurm's: for each account and user with work, its share of
the cluster now, the GPUs its jobs hold, the quota the last round gave it and how far its worst-off app is
behind (rho). The status API (api/views.py) and themisd's metrics (daemon/metrics.py) both build it here,
from the same stored facts, so a dashboard and ``themis status`` never disagree:

* the share is the core's arithmetic itself (:func:`core.tenancy.fractions` over the apps with work), so it
  is the fraction each app's T_id was computed on, summed up the tree;
* the quota of the tenant (the lowest level above the apps) is the one the last round used
  (AppRecord.tenant_quota); an account above its users has the sum of theirs (the quotas are water-filled
  down the tree, so the users' quotas add up to what the account may hold);
* an app counts where the rounds put it: under the account it arrived with (daemon/planning.first_account).

The tree the rounds use is stored by themisd (store v9, table ``tenancy``) as :func:`tenancy_json`, so the
API needs no Slurm call to show it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from themis_slurm.core.tenancy import Entity, Tenancy, fractions
from themis_slurm.core.workload import App


def entity_json(ent: Entity) -> str:
    """The core's Entity as the state database stores it: ``["user", ["account", "user"]]``."""
    return json.dumps([ent[0], list(ent[1])])


def entity_from_json(text: str) -> Entity:
    level, key = json.loads(text)
    return (str(level), tuple(str(k) for k in key))


def tenancy_json(t: Tenancy) -> str:
    """A Tenancy as JSON (levels, raw shares of accounts and users, the default), for the state database."""
    return json.dumps(
        {
            "levels": list(t.levels),
            "accounts": dict(sorted(t.account_shares.items())),
            "users": sorted([a, u, s] for (a, u), s in t.user_shares.items()),
            "default": t.default_shares,
        }
    )


def tenancy_from_json(text: str) -> Tenancy:
    """:func:`tenancy_json` back; ValueError (naming what is wrong) for a row that is not one."""
    try:
        d = json.loads(text)
        return Tenancy(
            tuple(d["levels"]),
            {str(a): float(s) for a, s in d["accounts"].items()},
            {(str(a), str(u)): float(s) for a, u, s in d["users"]},
            float(d["default"]),
        )
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ValueError(
            f"stored tenancy tree is not readable ({type(e).__name__}: {e}): {text[:80]!r}"
        ) from None


@dataclass(frozen=True)
class Member:
    """An app as the tree needs it. `active`: it has work (only those count for the shares, as in the rounds)."""

    app: str
    owner: str
    account: str
    active: bool = True
    rho: float | None = None
    rank: int | None = None
    gpus: int = 0
    running: int = 0
    waiting: int = 0


@dataclass(frozen=True)
class Level:
    """One account or user of the tree, with its numbers now.

    `shares` are its raw shares (Slurm's RawShares, 1 for equal); `share` its fraction of the cluster now
    (None when none of its apps has work); `quota` the GPUs the last round let it hold (None before a round
    saw it); `rho` the worst rho of its apps, `rank` the best (smallest) rank of its apps.
    """

    level: str  # "account" or "user"
    account: str  # "" for a user when accounts do not count
    user: str  # "" for an account
    shares: float
    share: float | None
    gpus: int
    quota: float | None
    rho: float | None
    rank: int | None
    apps: tuple[str, ...] = ()
    running: int = 0
    waiting: int = 0
    tenant: bool = False  # the lowest level above the apps: the one quotas are kept for

    @property
    def entity(self) -> Entity:
        return (
            ("account", (self.account,)) if self.level == "account" else ("user", (self.account, self.user))
        )

    @property
    def name(self) -> str:
        return self.account if self.level == "account" else self.user


@dataclass(frozen=True)
class Summary:
    """The tree of one moment: `levels` in display order (each account, then its users), each app's share
    and tenant. Empty (no levels, no tenants) when the tenancy is flat; `app_share` is then 1/N."""

    levels: tuple[Level, ...] = ()
    app_share: Mapping[str, float] = field(default_factory=dict)
    app_tenant: Mapping[str, Entity] = field(default_factory=dict)


def _order(rank: int | None, name: str) -> tuple[float, str]:
    return (math.inf if rank is None else rank, name)


def summarise(tenancy: Tenancy, members: Sequence[Member], quotas: Mapping[Entity, float | None]) -> Summary:
    """The accounts and users of `members` under `tenancy`, with `quotas` (tenant -> its quota in the last
    round). Ordered like ``themis status`` ranks apps: the account (user) with the worst-off app first."""
    active = [App(m.app, m.owner, 0.0, account=m.account) for m in members if m.active]
    share = fractions(tenancy, active)
    if tenancy.flat:
        return Summary((), share, {})
    paths = {m.app: tenancy.path(App(m.app, m.owner, 0.0, account=m.account)) for m in members}
    by_ent: dict[Entity, list[Member]] = {}
    for m in members:
        for ent in paths[m.app]:
            by_ent.setdefault(ent, []).append(m)
    tenant_level = tenancy.levels[-2]
    out: dict[Entity, Level] = {}
    for ent, ms in by_ent.items():
        level, key = ent
        account, user = (key[0], "") if level == "account" else key
        rhos = [m.rho for m in ms if m.rho is not None and math.isfinite(m.rho)]
        ranks = [m.rank for m in ms if m.rank is not None]
        fracs = [share[m.app] for m in ms if m.app in share]
        if level == tenant_level:
            quota = quotas.get(ent)
        else:  # an account above its users: what its users may hold together
            qs = [q for e, q in quotas.items() if e[0] == "user" and e[1][0] == account and q is not None]
            quota = sum(qs) if qs else None
        ordered = sorted(ms, key=lambda m: _order(m.rank, m.app))
        out[ent] = Level(
            level,
            account,
            user,
            tenancy.shares_of(ent),
            sum(fracs) if fracs else None,
            sum(m.gpus for m in ms),
            quota,
            max(rhos, default=None),
            min(ranks, default=None),
            tuple(m.app for m in ordered),
            sum(m.running for m in ms),
            sum(m.waiting for m in ms),
            level == tenant_level,
        )
    levels: list[Level] = []
    tops = sorted(
        (lv for lv in out.values() if lv.level == tenancy.levels[0]), key=lambda lv: _order(lv.rank, lv.name)
    )
    for top in tops:
        levels.append(top)
        if top.level == "account" and "user" in tenancy.levels:
            users = [lv for lv in out.values() if lv.level == "user" and lv.account == top.account]
            levels += sorted(users, key=lambda lv: _order(lv.rank, lv.name))
    return Summary(tuple(levels), share, {m.app: paths[m.app][-1] for m in members})


__all__ = [
    "Level",
    "Member",
    "Summary",
    "entity_from_json",
    "entity_json",
    "summarise",
    "tenancy_from_json",
    "tenancy_json",
]
