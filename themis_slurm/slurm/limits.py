"""QOS and association limits that keep Slurm from starting a job, read up front (issue 38 item 8).

Themis holds every managed job, so Slurm's reason for a waiting job is always the hold, never the limit
it would hit once released (AssocGrpGRES, QOSMaxGRESPerUser, ...). Before this module such a limit was
learned only after a release timed out: the job's GPUs idled for ``release_timeout_s``, then the job was
kept out of the rounds for a lease (daemon/loop.py, "learned"). Now the limits are read where Slurm
exposes them and a job is not granted while one binds.

What is read, at most every `READ_EVERY_S` seconds (limits change rarely, and each read costs RPCs):

* ``scontrol show config``: ``AccountingStorageEnforce`` (limits are enforced only with ``limits``,
  ``safe`` or ``all``; otherwise nothing else is read and nothing is blocked) and ``ClusterName``;
* ``sacctmgr -n -P show qos`` and ``sacctmgr -n -P show assoc cluster=NAME`` (slurmdbd's records; a
  user association's Max* values already carry what it inherits from its accounts).

The limits on GPUs (``gres/gpu`` in TRES, untyped) and on running jobs that Slurm checks when it starts a
job (src/slurmctld/acct_policy.c):

* the job's QOS: GrpTRES, GrpJobs, MaxTRESPerUser, MaxJobsPerUser, MaxTRESPerAccount, MaxJobsPerAccount,
  MaxTRESPerJob and MinTRESPerJob;
* its association (account, user, and partition where one exists for it): MaxJobs and MaxTRES (per job),
  and GrpTRES and GrpJobs there and on every parent account up to root.

A QOS limit takes the place of the association's limit of the same kind (Slurm's order: QOS first, the
first level that sets a limit is the one used): QOS GrpTRES of the association chain's GrpTRES, GrpJobs of
GrpJobs, MaxJobsPerUser of MaxJobs, MaxTRESPerJob of MaxTRES. Use is counted from Slurm's own job list
(every partition, managed or not): the GPUs and the number of jobs running or suspended, as slurmctld
counts them (a completing job no longer counts). Not read: partition QOS, typed TRES limits
(``gres/gpu:a100``), time limits (GrpTRESMins, GrpTRESRunMins, MaxWall). Those are still learned after a
release times out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

SCONTROL_CONFIG = ["scontrol", "show", "config"]
QOS_FIELDS = (
    "Name",
    "GrpJobs",
    "GrpTRES",
    "MaxJobsPerUser",
    "MaxTRESPerUser",
    "MaxJobsPerAccount",
    "MaxTRESPerAccount",
    "MaxTRES",
    "MinTRES",
)
ASSOC_FIELDS = ("Account", "User", "Partition", "ParentName", "GrpJobs", "GrpTRES", "MaxJobs", "MaxTRES")
SACCTMGR_QOS = ["sacctmgr", "-n", "-P", "show", "qos", "format=" + ",".join(QOS_FIELDS)]
#: Seconds between two reads of the limits.
READ_EVERY_S = 60.0
#: AccountingStorageEnforce flags under which Slurm enforces QOS and association limits.
ENFORCING = frozenset({"limits", "safe", "all"})
#: Job states whose GPUs and job slot count against the limits.
COUNTED = frozenset({"RUNNING", "SUSPENDED"})

GPU_TRES = "gres/gpu"


def sacctmgr_assoc(cluster: str) -> list[str]:
    """``sacctmgr -n -P show assoc cluster=NAME format=...`` (every cluster's associations otherwise)."""
    return ["sacctmgr", "-n", "-P", "show", "assoc", f"cluster={cluster}", "format=" + ",".join(ASSOC_FIELDS)]


# ------------------------------------------------------------------------------------------ parsing
def tres_gpus(text: str) -> int | None:
    """The untyped GPU count of a TRES list (``cpu=8,gres/gpu=4`` -> 4); None when it sets none."""
    for item in (text or "").split(","):
        key, _, value = item.strip().partition("=")
        if key.strip().lower() == GPU_TRES:
            return _count(value, f"TRES {text!r}")
    return None


def _count(value: str, where: str) -> int | None:
    value = value.strip()
    if not value or value in ("-1", "N"):
        return None
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"{where}: {value!r} is not a whole number") from None
    if n < 0:
        raise ValueError(f"{where}: {value!r} is negative")
    return n


def parse_config(text: str) -> tuple[frozenset[str], str]:
    """``scontrol show config`` -> (AccountingStorageEnforce flags, ClusterName)."""
    enforce: frozenset[str] = frozenset()
    cluster = ""
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "AccountingStorageEnforce":
            enforce = frozenset(
                f.strip().lower() for f in value.split(",") if f.strip() and f.strip() != "none"
            )
        elif key == "ClusterName":
            cluster = value
    return enforce, cluster


@dataclass(frozen=True)
class QosLimits:
    """One QOS's limits on GPUs and running jobs (None: not set)."""

    name: str
    grp_jobs: int | None = None
    grp_gpus: int | None = None
    max_jobs_per_user: int | None = None
    max_gpus_per_user: int | None = None
    max_jobs_per_account: int | None = None
    max_gpus_per_account: int | None = None
    max_gpus_per_job: int | None = None
    min_gpus_per_job: int | None = None


@dataclass(frozen=True)
class AssocLimits:
    """One association's limits (`user` "" for an account's own association; `partition` "" for any)."""

    account: str
    user: str = ""
    partition: str = ""
    parent: str = ""  # the parent account of an account association ("" for root and user associations)
    grp_jobs: int | None = None
    grp_gpus: int | None = None
    max_jobs: int | None = None
    max_gpus_per_job: int | None = None


def _rows(text: str, fields: Sequence[str], what: str) -> tuple[list[dict[str, str]], list[str]]:
    rows: list[dict[str, str]] = []
    problems: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < len(fields):
            problems.append(f"{what} line skipped (expected {len(fields)} fields): {line[:80]!r}")
            continue
        rows.append(dict(zip(fields, parts, strict=False)))
    return rows, problems


def parse_qos(text: str) -> tuple[dict[str, QosLimits], list[str]]:
    """``sacctmgr -n -P show qos format=QOS_FIELDS`` -> {name: QosLimits}, and problems with skipped lines."""
    rows, problems = _rows(text, QOS_FIELDS, "QOS")
    out: dict[str, QosLimits] = {}
    for r in rows:
        name = r["Name"].strip()
        try:
            out[name] = QosLimits(
                name,
                grp_jobs=_count(r["GrpJobs"], f"QOS {name} GrpJobs"),
                grp_gpus=tres_gpus(r["GrpTRES"]),
                max_jobs_per_user=_count(r["MaxJobsPerUser"], f"QOS {name} MaxJobsPerUser"),
                max_gpus_per_user=tres_gpus(r["MaxTRESPerUser"]),
                max_jobs_per_account=_count(r["MaxJobsPerAccount"], f"QOS {name} MaxJobsPerAccount"),
                max_gpus_per_account=tres_gpus(r["MaxTRESPerAccount"]),
                max_gpus_per_job=tres_gpus(r["MaxTRES"]),
                min_gpus_per_job=tres_gpus(r["MinTRES"]),
            )
        except ValueError as exc:
            problems.append(f"QOS {name} skipped: {exc}")
    return out, problems


def parse_assocs(text: str) -> tuple[dict[tuple[str, str, str], AssocLimits], list[str]]:
    """``sacctmgr -n -P show assoc format=ASSOC_FIELDS`` -> {(account, user, partition): AssocLimits}."""
    rows, problems = _rows(text, ASSOC_FIELDS, "association")
    out: dict[tuple[str, str, str], AssocLimits] = {}
    for r in rows:
        acct, user, part = r["Account"].strip(), r["User"].strip(), r["Partition"].strip()
        where = f"association {acct}/{user or '-'}" + (f"/{part}" if part else "")
        try:
            out[(acct, user, part)] = AssocLimits(
                acct, user, part, parent=r["ParentName"].strip(),
                grp_jobs=_count(r["GrpJobs"], f"{where} GrpJobs"), grp_gpus=tres_gpus(r["GrpTRES"]),
                max_jobs=_count(r["MaxJobs"], f"{where} MaxJobs"), max_gpus_per_job=tres_gpus(r["MaxTRES"]),
            )  # fmt: skip
        except ValueError as exc:
            problems.append(f"{where} skipped: {exc}")
    return out, problems


# ------------------------------------------------------------------------------------------ checking
@dataclass(frozen=True)
class Bound:
    """One limit a job counts towards: what it counts (GPUs or jobs) in which pool (`key`), up to `limit`."""

    key: tuple[str, ...]
    what: str  # "gpus" or "jobs"
    limit: int
    name: str  # "QOS normal MaxTRESPerUser gres/gpu=4 for themis-alice", for logs and `themis explain`
    reason: str  # Slurm's pending reason for it (QOSMaxGRESPerUser, ...)


@dataclass(frozen=True)
class Limits:
    """What Slurm enforces; `enforced` False (AccountingStorageEnforce without limits): nothing binds."""

    enforced: bool = False
    qos: Mapping[str, QosLimits] = field(default_factory=dict)
    assocs: Mapping[tuple[str, str, str], AssocLimits] = field(default_factory=dict)

    def _chain(self, account: str, user: str, partition: str) -> list[AssocLimits]:
        """The job's association, then its account's and each parent account's, up to root."""
        out: list[AssocLimits] = []
        own = self.assocs.get((account, user, partition)) or self.assocs.get((account, user, ""))
        if own is not None:
            out.append(own)
        seen: set[str] = set()
        acct = account
        while acct and acct not in seen:
            seen.add(acct)
            a = self.assocs.get((acct, "", ""))
            if a is None:
                break
            out.append(a)
            acct = a.parent
        return out

    def bounds(self, user: str, account: str, partition: str, qos: str) -> list[Bound]:
        """The shared limits a running job of this user, account, partition and QOS counts towards."""
        if not self.enforced:
            return []
        q = self.qos.get(qos)
        out: list[Bound] = []

        def add(key: tuple[str, ...], what: str, limit: int | None, name: str, reason: str) -> None:
            if limit is not None:
                out.append(Bound(key, what, limit, name, reason))

        if q is not None:
            add(("qos", qos), "gpus", q.grp_gpus, f"QOS {qos} GrpTRES {GPU_TRES}={q.grp_gpus}", "QOSGrpGRES")
            add(("qos", qos), "jobs", q.grp_jobs, f"QOS {qos} GrpJobs={q.grp_jobs}", "QOSGrpJobsLimit")
            add(
                ("qos-user", qos, user),
                "gpus",
                q.max_gpus_per_user,
                f"QOS {qos} MaxTRESPerUser {GPU_TRES}={q.max_gpus_per_user} for {user}",
                "QOSMaxGRESPerUser",
            )
            add(
                ("qos-user", qos, user),
                "jobs",
                q.max_jobs_per_user,
                f"QOS {qos} MaxJobsPerUser={q.max_jobs_per_user} for {user}",
                "QOSMaxJobsPerUserLimit",
            )
            add(
                ("qos-account", qos, account),
                "gpus",
                q.max_gpus_per_account,
                f"QOS {qos} MaxTRESPerAccount {GPU_TRES}={q.max_gpus_per_account} for account {account}",
                "QOSMaxGRESPerAccount",
            )
            add(
                ("qos-account", qos, account),
                "jobs",
                q.max_jobs_per_account,
                f"QOS {qos} MaxJobsPerAccount={q.max_jobs_per_account} for account {account}",
                "QOSMaxJobsPerAccount",
            )
        grp_gpus_set = q is not None and q.grp_gpus is not None
        grp_jobs_set = q is not None and q.grp_jobs is not None
        for k, a in enumerate(self._chain(account, user, partition)):
            key = ("assoc", a.account, a.user, a.partition)
            who = (
                f"account {a.account}"
                if not a.user
                else f"association {a.account}/{a.user}" + (f"/{a.partition}" if a.partition else "")
            )
            if not grp_gpus_set:
                add(key, "gpus", a.grp_gpus, f"{who} GrpTRES {GPU_TRES}={a.grp_gpus}", "AssocGrpGRES")
            if not grp_jobs_set:
                add(key, "jobs", a.grp_jobs, f"{who} GrpJobs={a.grp_jobs}", "AssocGrpJobsLimit")
            if k == 0 and a.user and (q is None or q.max_jobs_per_user is None):
                add(key + ("max",), "jobs", a.max_jobs, f"{who} MaxJobs={a.max_jobs}", "AssocMaxJobsLimit")
        return out

    def per_job(self, user: str, account: str, partition: str, qos: str, gpus: int) -> str | None:
        """Why a job of `gpus` GPUs can never start while the limits stand (per-job limits), or None."""
        if not self.enforced:
            return None
        q = self.qos.get(qos)
        if q is not None and q.max_gpus_per_job is not None:
            if gpus > q.max_gpus_per_job:
                return (
                    f"QOSMaxGRESPerJob: it asks for {gpus} GPUs and QOS {qos} allows "
                    f"{q.max_gpus_per_job} per job (MaxTRESPerJob)"
                )
        else:
            chain = self._chain(account, user, partition)
            own = chain[0] if chain and chain[0].user else None
            if own is not None and own.max_gpus_per_job is not None and gpus > own.max_gpus_per_job:
                return (
                    f"AssocMaxGRESPerJob: it asks for {gpus} GPUs and association {own.account}/{own.user} "
                    f"allows {own.max_gpus_per_job} per job (MaxTRES)"
                )
        if q is not None and q.min_gpus_per_job is not None and gpus < q.min_gpus_per_job:
            return (
                f"QOSMinGRES: it asks for {gpus} GPUs and QOS {qos} wants at least {q.min_gpus_per_job} per "
                "job (MinTRESPerJob)"
            )
        return None


class Usage:
    """GPUs and jobs counted against each limit pool (`Bound.key`), as Slurm counts them."""

    def __init__(self, counts: Mapping[tuple[tuple[str, ...], str], int] | None = None) -> None:
        self._n: dict[tuple[tuple[str, ...], str], int] = dict(counts or {})

    def copy(self) -> Usage:
        return Usage(self._n)

    def used(self, bound: Bound) -> int:
        return self._n.get((bound.key, bound.what), 0)

    def add(self, bounds: Iterable[Bound], gpus: int) -> None:
        """One running job of `gpus` GPUs counted in each pool of `bounds` (each pool and kind once)."""
        for key in {(b.key, b.what) for b in bounds}:
            self._n[key] = self._n.get(key, 0) + (gpus if key[1] == "gpus" else 1)


def first_binding(bounds: Iterable[Bound], usage: Usage, gpus: int) -> str | None:
    """Why one more job of `gpus` GPUs would pass a limit now, in Slurm's words (None: it would not)."""
    for b in bounds:
        used = usage.used(b)
        need = gpus if b.what == "gpus" else 1
        if used + need > b.limit:
            have = f"{used} GPU(s) in use" if b.what == "gpus" else f"{used} job(s) running"
            return f"{b.reason}: {b.name}, {have} (Slurm would keep it pending)"
    return None


@dataclass(frozen=True)
class LimitView:
    """The limits and their use as read for one snapshot: what the daemon and `themis explain` check."""

    limits: Limits
    usage: Usage

    @property
    def enforced(self) -> bool:
        return self.limits.enforced

    def blocked(
        self, user: str, account: str, partition: str, qos: str, gpus: int, extra: Usage | None = None
    ) -> str | None:
        """Why Slurm would not start this job now because of a limit (`extra`: use Slurm does not see yet,
        e.g. jobs Themis released that have not started), or None."""
        if not self.limits.enforced:
            return None
        never = self.limits.per_job(user, account, partition, qos, gpus)
        if never is not None:
            return never
        return first_binding(self.limits.bounds(user, account, partition, qos), extra or self.usage, gpus)


def count_usage(limits: Limits, jobs: Iterable[tuple[str, str, str, str, str, int]]) -> Usage:
    """Use of every pool from (state, user, account, partition, qos, gpus) of Slurm's jobs (all of them)."""
    usage = Usage()
    if not limits.enforced:
        return usage
    for state, user, account, partition, qos, gpus in jobs:
        if state in COUNTED:
            usage.add(limits.bounds(user, account, partition.split(",")[0], qos), gpus)
    return usage


class LimitReader:
    """Reads the limits at most every `READ_EVERY_S` seconds and keeps the last good answer."""

    def __init__(self, every_s: float = READ_EVERY_S) -> None:
        self.every_s = every_s
        self._at = -math.inf
        self.current = Limits()

    def due(self, now: float) -> bool:
        return now - self._at >= self.every_s

    def update(self, now: float, config: str, qos: str | None = None, assocs: str | None = None) -> list[str]:
        """Takes fresh answers (`qos`/`assocs` None: not read, as limits are not enforced); returns problems."""
        self._at = now
        enforce, _ = parse_config(config)
        if not enforce & ENFORCING or qos is None or assocs is None:
            self.current = Limits()
            return []
        q, p1 = parse_qos(qos)
        a, p2 = parse_assocs(assocs)
        self.current = Limits(True, q, a)
        return p1 + p2

    def failed(self, now: float) -> None:
        self._at = now  # try again after the interval; the last good answer stays


def needs_limits(config: str) -> tuple[bool, str]:
    """(whether Slurm enforces limits, ClusterName) from ``scontrol show config``."""
    enforce, cluster = parse_config(config)
    return bool(enforce & ENFORCING), cluster
