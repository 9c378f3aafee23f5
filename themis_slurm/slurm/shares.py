"""Slurm's account tree and its shares -> the core's `Tenancy` (issue 33: fair between the people).

What is read, and why from where. ``sshare -P -a -n -o Account,User,RawShares`` asks slurmctld for its
association cache: every account and user association of this cluster with its raw shares (``sacctmgr
... Fairshare=``), printed as a tree (an account's name is indented by one space per level below root;
a user line carries its account and its name). This is the tree Slurm's own fair share (Fair Tree) uses,
it needs no slurmdbd round trip (slurmctld answers even while slurmdbd is down), it prints the same on
22.05 and 25.11, and it is cheap. Measured on the test clusters (6 accounts, 15 associations; median of
10): sshare 3.9 ms on 22.05 and 5.1 ms on 25.11; ``sacctmgr -P -n show assoc cluster=...`` 180 ms on 22.05
and 6.7 ms on 25.11 (it asks slurmdbd, and needs the cluster's name). pyslurm 25.11 has no shares call:
``pyslurm.db.Associations.load()`` (5 ms) reads slurmdbd directly, the sacctmgr path, with no timeout of
ours. So both backends read the tree with sshare through the `Runner` (argument lists only, every call
counted and bounded by the action timeout).

Whether the cluster has accounting at all (``levels: auto``) comes from ``scontrol show config``
(AccountingStorageType): without accounting there are no associations, so no sshare is run.

From tree to shares (:meth:`ShareTree.tenancy`). The core's tree has one account level (the account a
job runs under, ``-A``). A top-level account counts with its RawShares. A sub-account X of P counts with
P's shares times X's fraction of P's children (``raw(X) / sum of the raw shares of P's sub-accounts and
users``), and P's own jobs (its users' associations) with P's shares times its users' fraction: between
accounts of the same parent the ratios are Slurm's, and between any two accounts the ratio is the ratio
of their fractions of the cluster (the product of the levels' fractions down the tree; sshare's
NormShares is one level's fraction under Fair Tree, and empty under priority/basic). What flattening
loses: an idle sub-account's share goes to every active account in proportion, not to its siblings
first (docs/admin-guide.md, "Tenancy"). Users count inside each account with their RawShares there. ``parent`` (a user association
with ``Fairshare=parent``) counts as 1 share, Slurm's default; 0 shares stay 0 (the core gives them a
tiny weight: GPUs only when nobody with shares can use them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from themis_slurm.core.tenancy import Tenancy
from themis_slurm.slurm.errors import SlurmOutputError
from themis_slurm.slurm.runner import Runner

SSHARE = ("sshare", "-P", "-a", "-n", "-o", "Account,User,RawShares")
SHOW_CONFIG = ("scontrol", "show", "config")
ROOT = "root"
#: what a user association with ``Fairshare=parent`` counts as (Slurm's default raw shares)
PARENT_SHARES = 1.0
NO_ACCOUNTING = "accounting_storage/none"


@dataclass(frozen=True)
class AccountNode:
    """An account association: its parent account (None for root) and its raw shares (None: unset, root)."""

    name: str
    parent: str | None
    raw: float | None


@dataclass(frozen=True)
class ShareTree:
    """The association tree as sshare prints it. `users` maps (account, user) to the user's raw shares
    (None: ``parent``). `notes`: lines that were odd but not fatal (a duplicate association)."""

    accounts: Mapping[str, AccountNode]
    users: Mapping[tuple[str, str], float | None]
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def user_names(self) -> frozenset[str]:
        return frozenset(u for _, u in self.users)

    @property
    def account_names(self) -> frozenset[str]:
        """Every account but root (which holds no one's jobs but its own user's)."""
        return frozenset(a for a in self.accounts if a != ROOT)

    def _raw(self, account: str) -> float:
        node = self.accounts.get(account)
        return 0.0 if node is None or node.raw is None else node.raw

    def _children(self) -> dict[str, list[str]]:
        kids: dict[str, list[str]] = {}
        for node in self.accounts.values():
            if node.parent is not None:
                kids.setdefault(node.parent, []).append(node.name)
        return kids

    def account_shares(self) -> dict[str, float]:
        """Each account's shares as the core compares them (module docstring): top-level accounts their raw
        shares; below, the parent's shares times the account's fraction of the parent's children; and
        every account holding sub-accounts, for its own users' jobs, the fraction its users hold."""
        kids = self._children()
        users_raw: dict[str, float] = {}
        for (acct, _), raw in self.users.items():
            users_raw[acct] = users_raw.get(acct, 0.0) + (PARENT_SHARES if raw is None else raw)
        out: dict[str, float] = {}

        def walk(name: str, share: float) -> None:
            subs = kids.get(name, [])
            total = users_raw.get(name, 0.0) + sum(self._raw(s) for s in subs)
            if name != ROOT:
                out[name] = (
                    share if not subs else (share * users_raw.get(name, 0.0) / total if total else 0.0)
                )
            for s in subs:
                walk(s, self._raw(s) if name == ROOT else (share * self._raw(s) / total if total else 0.0))

        if ROOT in self.accounts:
            walk(ROOT, 1.0)
        for name in self.accounts:  # an account outside root's tree (no root line shown): its raw shares
            if name != ROOT and name not in out:
                out[name] = self._raw(name)
        return out

    def user_shares(self) -> dict[tuple[str, str], float]:
        """(account, user) -> the user's raw shares in that account (``parent`` as PARENT_SHARES)."""
        return {k: PARENT_SHARES if v is None else v for k, v in self.users.items()}

    def tenancy(self, levels: Sequence[str]) -> Tenancy:
        """The core's Tenancy for `levels` with these shares (entities missing from the tree: 1 share)."""
        return Tenancy(tuple(levels), self.account_shares(), self.user_shares(), default_shares=1.0)


def _shares(value: str, where: str) -> float | None:
    v = value.strip()
    if v.lower() == "parent":
        return None
    try:
        x = float(v)
    except ValueError:
        raise SlurmOutputError("sshare", where, f"RawShares {value!r} is not a number or 'parent'") from None
    if not math.isfinite(x) or x < 0:
        raise SlurmOutputError("sshare", where, f"RawShares {value!r} is not a number >= 0")
    return x


def parse_sshare(text: str) -> ShareTree:
    """``sshare -P -a -n -o Account,User,RawShares`` output (22.05 and 25.11 print it alike) as a ShareTree.

    The account column is indented by one space per level below root (``slurmdb_tree_name_get``); an
    account line has an empty user. A user line's account is its parent. Raises SlurmOutputError naming
    the line for anything else.
    """
    accounts: dict[str, AccountNode] = {}
    users: dict[tuple[str, str], float | None] = {}
    notes: list[str] = []
    stack: list[str] = []  # the open accounts, by depth
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"line {n}"
        parts = line.split("|")
        if len(parts) != 3:
            raise SlurmOutputError("sshare", where, f"expected Account|User|RawShares, got {line!r}")
        acct_col, user, raw = parts
        name = acct_col.lstrip(" ")
        depth = len(acct_col) - len(name)
        if not name or " " in name:
            raise SlurmOutputError("sshare", where, f"no account name in {line!r}")
        if user:
            if name not in accounts:
                raise SlurmOutputError(
                    "sshare", where, f"user {user!r} of account {name!r}, which no line before introduced"
                )
            if (name, user) in users:  # one per partition (associations with Partition=): the first counts
                notes.append(
                    f"sshare: user {user} has more than one association in account {name}: the first "
                    "one's shares count"
                )
                continue
            users[(name, user)] = _shares(raw, where)
            continue
        if depth > len(stack):
            raise SlurmOutputError(
                "sshare",
                where,
                f"account {name!r} is indented {depth} levels below an account at level {len(stack) - 1}",
            )
        del stack[depth:]
        parent = stack[-1] if stack else None
        if name in accounts:
            raise SlurmOutputError("sshare", where, f"account {name!r} appears twice")
        accounts[name] = AccountNode(name, parent, None if not raw.strip() else _shares(raw, where))
        stack.append(name)
    return ShareTree(accounts, users, tuple(notes))


def accounting_storage(show_config: str) -> str:
    """AccountingStorageType from ``scontrol show config`` output ("" when the line is missing)."""
    for line in show_config.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "AccountingStorageType":
            return value.strip()
    return ""


def has_accounting(storage_type: str) -> bool:
    """True when Slurm keeps associations: AccountingStorageType set and not ``accounting_storage/none``."""
    return bool(storage_type) and storage_type != NO_ACCOUNTING


class SharesReader:
    """Reads the tree and the accounting type through a `Runner`, each call bounded by `timeout_s`."""

    def __init__(self, runner: Runner, timeout_s: float) -> None:
        self.runner = runner
        self.timeout_s = timeout_s

    def accounting(self) -> bool:
        """Whether the cluster has accounting (SlurmCommandError when scontrol fails or times out)."""
        return has_accounting(accounting_storage(self.runner.run(SHOW_CONFIG, self.timeout_s)))

    def tree(self) -> ShareTree:
        """The association tree (SlurmCommandError / SlurmOutputError on failure)."""
        return parse_sshare(self.runner.run(SSHARE, self.timeout_s))


__all__ = [
    "NO_ACCOUNTING",
    "PARENT_SHARES",
    "ROOT",
    "SHOW_CONFIG",
    "SSHARE",
    "AccountNode",
    "ShareTree",
    "SharesReader",
    "accounting_storage",
    "has_accounting",
    "parse_sshare",
]
