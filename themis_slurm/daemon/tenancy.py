"""themisd's view of the account tree: which Tenancy the rounds use, refreshed and logged (issue 33 item 2).

The core divides the cluster account -> user -> app (core/tenancy.py); this module decides which tree that
is, from ``tenancy:`` in themis.yaml and from Slurm (slurm/shares.py), and keeps it current:

* **Levels and shares.** ``levels: auto`` is account -> user -> app on a cluster with accounting
  (AccountingStorageType not none) and user -> app without; ``shares: auto`` is Slurm's RawShares with
  accounting and equal shares without. ``levels: [app]`` is the paper's flat 1/N and reads nothing.
* **When.** At the first cycle, then every ``refresh_s``, and at the next cycle after a SIGHUP (the config
  reload calls :meth:`TenancyKeeper.configure`). Each refresh is one ``scontrol show config`` (only when
  something is ``auto``) and one ``sshare``, each bounded by ``slurm.action_timeout_s``.
* **What is logged.** One line whenever what the rounds use changes (``tenancy: account -> user -> app,
  3 accounts, 7 users (shares from slurm)``), nothing while it stays the same.
* **A failed or slow read** (sshare/scontrol failing, timing out, printing what cannot be parsed) keeps the
  last tree read and logs one warning per episode; the read is retried every :data:`RETRY_S` seconds (or
  ``refresh_s`` when shorter). With no tree read yet (at start) the rounds use user -> app with equal
  shares until a read succeeds (logged as an error once).
* **A tree that changes while jobs run** applies from the next round: each app's contention clock books the
  time so far at the old share and runs on at the new one (its history is kept, not recomputed).
* **Entities the tree lacks.** A job's user with no association in the job's account, or an account Slurm
  does not list (a job of a user without association, with AccountingStorageEnforce off), counts with 1
  share (Slurm's default); logged once per (account, user) and tree.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from themis_slurm.core.tenancy import FLAT, Tenancy
from themis_slurm.daemon.config import TenancyConfig
from themis_slurm.slurm.errors import SlurmOutputError
from themis_slurm.slurm.runner import SlurmCommandError
from themis_slurm.slurm.shares import ROOT, ShareTree

log = logging.getLogger("themisd")
#: how soon a failed read is tried again (at most refresh_s)
RETRY_S = 30.0
#: what the rounds use when no tree could be read yet (at start)
FALLBACK_LEVELS = ("user", "app")


class TreeSource(Protocol):
    """Where the tree comes from (slurm/shares.py's SharesReader; a fake in the tests)."""

    def accounting(self) -> bool: ...

    def tree(self) -> ShareTree: ...


class TreeUnavailable(RuntimeError):
    """The tree cannot be read here (no reader for this backend, or shares from Slurm without accounting)."""


@dataclass(frozen=True)
class Resolved:
    """One refresh's result: the Tenancy and the line that describes it (and the tree, for the checks)."""

    tenancy: Tenancy
    line: str
    tree: ShareTree | None = None


def arrows(levels: Iterable[str]) -> str:
    return " -> ".join(levels)


def resolve(cfg: TenancyConfig, source: TreeSource | None) -> Resolved:
    """The Tenancy `cfg` asks for on this cluster (reads Slurm through `source` only when needed).

    Raises SlurmCommandError, SlurmOutputError or TreeUnavailable when Slurm cannot tell.
    """
    if cfg.levels == ("app",):
        return Resolved(FLAT, "app (every app 1/N of the cluster, as in the paper: tenancy.levels [app])")
    accounting: bool | None = None
    if cfg.levels == "auto" or cfg.shares == "auto":
        if source is None:
            raise TreeUnavailable("this Slurm backend cannot tell whether the cluster has accounting")
        accounting = source.accounting()
    if cfg.levels == "auto":
        levels: tuple[str, ...] = ("account", "user", "app") if accounting else ("user", "app")
    else:
        levels = tuple(cfg.levels)
    shares = cfg.shares if cfg.shares != "auto" else ("slurm" if accounting else "equal")
    why = "" if accounting is None or accounting else ", no accounting (AccountingStorageType none)"
    if shares == "equal":
        return Resolved(Tenancy(levels), f"{arrows(levels)} (equal shares{why})")
    if accounting is False:
        raise TreeUnavailable(
            "tenancy.shares is slurm but the cluster has no accounting (AccountingStorageType "
            "accounting_storage/none): Slurm keeps no shares"
        )
    if source is None:
        raise TreeUnavailable("this Slurm backend cannot read the association tree (sshare)")
    tree = source.tree()
    parts = []
    if "account" in levels:
        n = len(tree.account_names)
        parts.append(f"{n} account{'' if n == 1 else 's'}")
    users = {u for (a, u) in tree.users if a != ROOT}
    parts.append(f"{len(users)} user{'' if len(users) == 1 else 's'}")
    return Resolved(tree.tenancy(levels), f"{arrows(levels)}, {', '.join(parts)} (shares from slurm)", tree)


def _clock(now: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(now)) if math.isfinite(now) else "-"


class TenancyKeeper:
    """The Tenancy of the rounds, refreshed on time and on reload (see the module docstring)."""

    def __init__(self, cfg: TenancyConfig, source: TreeSource | None) -> None:
        self.cfg = cfg
        self.source = source
        self.current: Resolved | None = None
        self.read_at: float | None = None  # when `current` was read (None: the start fallback)
        self._due = -math.inf
        self._failing: str | None = None  # the error of the episode being logged
        self._logged_line: str | None = None
        self._missing_seen: set[tuple[str, str]] = set()

    def configure(self, cfg: TenancyConfig) -> None:
        """A config reload (SIGHUP): apply `cfg` and read the tree again at the next cycle."""
        self.cfg = cfg
        self._due = -math.inf

    def tenancy(self, now: float) -> Tenancy:
        """What this cycle's rounds use (a refresh first when one is due)."""
        if now >= self._due:
            self._refresh(now)
        assert self.current is not None
        return self.current.tenancy

    def _refresh(self, now: float) -> None:
        try:
            got = resolve(self.cfg, self.source)
        except (SlurmCommandError, SlurmOutputError, TreeUnavailable, OSError) as e:
            self._due = now + min(self.cfg.refresh_s, RETRY_S)
            self._failed(now, str(e))
            return
        self._due = now + self.cfg.refresh_s
        if self._failing is not None:
            log.info("tenancy: Slurm's account tree read again after: %s", self._failing)
            self._failing = None
        for note in got.tree.notes if got.tree is not None else ():
            if self.current is None or self.current.tree is None or note not in self.current.tree.notes:
                log.warning("tenancy: %s", note)
        self._use(got, now)

    def _failed(self, now: float, error: str) -> None:
        retry = min(self.cfg.refresh_s, RETRY_S)
        if self.current is None:
            fallback = Resolved(
                Tenancy(FALLBACK_LEVELS),
                f"{arrows(FALLBACK_LEVELS)} (equal shares: fallback, Slurm's account tree could not be read)",
            )
            log.error(
                "tenancy: cannot read Slurm's account tree: %s; using %s until it can (retried every %.0f s)",
                error,
                arrows(FALLBACK_LEVELS) + " with equal shares",
                retry,
            )
            self._failing = error
            self._use(fallback, None)
            return
        if self._failing is None:
            kept = f"read at {_clock(self.read_at)}" if self.read_at is not None else "the start fallback"
            log.warning(
                "tenancy: cannot read Slurm's account tree: %s; keeping the last one (%s), retried every "
                "%.0f s",
                error,
                kept,
                retry,
            )
        self._failing = error

    def _use(self, got: Resolved, now: float | None) -> None:
        changed = self.current is not None and self.current.tenancy != got.tenancy
        if got.line != self._logged_line or changed:
            tail = "; applies from the next round, the apps' clocks keep their history" if changed else ""
            log.info("tenancy: %s%s", got.line, tail)
            self._logged_line = got.line
        if self.current is None or self.current.tenancy != got.tenancy:
            self._missing_seen.clear()  # a new tree: say again who it lacks
        self.current = got
        self.read_at = now

    def check_apps(self, owners: Iterable[tuple[str, str]]) -> list[str]:
        """Logs, once per (account, user) and tree, who the tree read from Slurm does not list; returns
        the lines logged. `owners`: (account, user) of the active apps."""
        cur = self.current
        if cur is None or cur.tree is None:
            return []
        levels = cur.tenancy.levels
        out = []
        for account, user in owners:
            if (account, user) in self._missing_seen:
                continue
            line = None
            if "account" in levels and account not in cur.tree.accounts:
                line = (
                    f"account {account!r} (of user {user}) is not in Slurm's account tree: it counts with 1 "
                    "share"
                    if account
                    else f"user {user} runs jobs without an account: they count as account '' with 1 share"
                )
            elif "account" in levels and "user" in levels and (account, user) not in cur.tree.users:
                line = f"user {user} has no association in account {account}: counted with 1 share"
            elif "account" not in levels and "user" in levels and user not in cur.tree.user_names:
                line = f"user {user} has no association in Slurm's account tree: counted with 1 share"
            self._missing_seen.add((account, user))
            if line:
                log.warning("tenancy: %s", line)
                out.append(line)
        return out


__all__ = [
    "FALLBACK_LEVELS",
    "RETRY_S",
    "Resolved",
    "TenancyKeeper",
    "TreeSource",
    "TreeUnavailable",
    "resolve",
]
