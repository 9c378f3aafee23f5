"""The simulator's tenancy: which levels of the account -> user -> app tree count, and the shares file.

A trace says who ran each job (``TraceJob.user``, ``TraceJob.account``) but not what each account or user
is entitled to: on a Slurm cluster that is sacctmgr's shares, which a trace does not carry. ``themis
simulate --shares FILE`` gives them as CSV, with a header::

    account,user,shares
    vision,,3
    nlp,,1
    vision,alice,2
    ,bob,1

A row with an empty user is the account's own shares (vision 3, nlp 1); a row with both is a user's shares
inside that account (alice 2 in vision); a row with an empty account is a user's shares when the account
level is off (bob, with ``--levels user,app``; without such a row a user there has the sum of its rows in
its accounts). Shares are raw numbers >= 0 (Slurm's RawShares), compared among siblings only; an entity
without a row has 1 (core/tenancy.py, ``Tenancy.default_shares``). Every problem is a :class:`SharesError`
naming the file, the line, the field and the value.
"""

from __future__ import annotations

from collections.abc import Sequence

from themis_slurm.core.tenancy import LEVELS, Tenancy
from themis_slurm.sim.loaders._common import PathArg, RowContext, check_header, check_width, header_and_rows
from themis_slurm.sim.trace import Trace, TraceError, TraceJob

COLUMNS: tuple[str, ...] = ("account", "user", "shares")


class SharesError(TraceError):
    """A shares file that cannot be read, located to file:line and field (same form as a trace's errors)."""


def parse_levels(text: str) -> tuple[str, ...]:
    """``"account,user,app"`` -> ("account", "user", "app"); bad input is a ValueError naming the value."""
    levels = tuple(part.strip() for part in text.split(",") if part.strip())
    for lv in levels:
        if lv not in LEVELS:
            raise ValueError(f"unknown level {lv!r} in {text!r}; the levels are {', '.join(LEVELS)}")
    if len(set(levels)) != len(levels):
        raise ValueError(f"a level is named twice in {text!r}")
    if not levels or levels[-1] != "app" or list(levels) != [lv for lv in LEVELS if lv in levels]:
        raise ValueError(f"{text!r}: give some of account, user (in that order) and then app, e.g. user,app")
    return levels


def load_shares(path: PathArg) -> tuple[dict[str, float], dict[tuple[str, str], float]]:
    """(account shares, (account, user) shares) from a shares CSV (module docstring)."""
    name = str(path)
    try:
        line, header, rows = header_and_rows(path)
        pos = check_header(name, line, header, COLUMNS)
    except TraceError as exc:
        raise SharesError(exc.path, exc.line, exc.field, exc.value, exc.expected) from None
    accounts: dict[str, float] = {}
    users: dict[tuple[str, str], float] = {}
    first: dict[tuple[str, str], int] = {}
    try:
        for number, row in rows:
            ctx = RowContext(name, number)
            check_width(ctx, row, len(header), header)
            account, user = row[pos["account"]], row[pos["user"]]
            if not account and not user:
                raise ctx.error(
                    "account", account, "set (or a user): a row gives an account's or a user's shares"
                )
            shares = ctx.number("shares", row[pos["shares"]], minimum=0)
            key = (account, user)
            if key in first:
                what = f"account {account!r}" if not user else f"user {user!r} of account {account!r}"
                raise ctx.error("user" if user else "account", user or account,
                                f"given once ({what} already on line {first[key]})")  # fmt: skip
            first[key] = number
            if user:
                users[key] = shares
            else:
                accounts[account] = shares
    except TraceError as exc:
        raise SharesError(exc.path, exc.line, exc.field, exc.value, exc.expected) from None
    return accounts, users


def make_tenancy(levels: Sequence[str] | str = ("app",), shares: PathArg | None = None) -> Tenancy:
    """The :class:`~themis_slurm.core.tenancy.Tenancy` of `levels` (a sequence or ``"user,app"``) with the
    shares of the file `shares` (None: every entity has 1). Flat levels with a shares file is an error: the
    shares would silently do nothing."""
    lv = parse_levels(levels) if isinstance(levels, str) else tuple(levels)
    if shares is None:
        return Tenancy(lv)
    if lv == ("app",):
        raise ValueError("a shares file needs the account or user level (levels app gives every app 1/N)")
    accounts, users = load_shares(shares)
    return Tenancy(lv, accounts, users)


def splitting_trace(works: Sequence[float], k: int, *, gpus: int = 1, account_a: str = "",
                    account_b: str = "") -> Trace:  # fmt: skip
    """The splitting experiment's workload (issue #33): users A and B each submit one job of each run time
    in `works` (seconds, on `gpus` GPUs), all at time 0. B's jobs are one app, ``B/all``; A's are split
    round-robin into `k` apps ``A/0`` .. (fewer when there are fewer jobs than `k`). Equal work, so any
    difference in what they get comes from how A packaged it."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if not works:
        raise ValueError("works must name at least one job")
    jobs = []
    for i, w in enumerate(works):
        jobs.append(TraceJob(f"a{i}", f"A/{i % k}", "A", 0.0, gpus, float(w), account=account_a))
        jobs.append(TraceJob(f"b{i}", "B/all", "B", 0.0, gpus, float(w), account=account_b))
    return Trace(tuple(jobs), f"splitting: A's {len(works)} jobs in {min(k, len(works))} app(s), B's in one")


__all__ = ["COLUMNS", "SharesError", "load_shares", "make_tenancy", "parse_levels", "splitting_trace"]
