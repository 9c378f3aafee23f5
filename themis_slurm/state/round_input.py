"""The core's ClusterState as the stored rows and one snapshot of Slurm say it is (pure).

Free GPUs are the snapshot's free GPUs minus those held for granted jobs (state/held.py); running managed
jobs hold leases (a lease never ends before the minimum run time); jobs in transition (granted, starting,
being warned or requeued, completing) hold their GPUs with a lease that never expires, so the round neither
offers their GPUs nor plans them twice, while their throughput still counts in their app's rho. Waiting
jobs that Slurm would not start if released (slurm/eligibility.py; a QOS or association limit counting
Themis's own starts, :func:`limit_blocked`; what a timed-out release taught) are left out altogether.

themisd's round builds its input here (daemon/planning.py), and so do the status API's finish-time estimates
(state/finish.py), so both see the same apps; what they read of the configuration is :class:`RoundTerms`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from themis_slurm.core.gpu_types import with_type_speeds
from themis_slurm.core.placement import Profile
from themis_slurm.core.state import ClusterState
from themis_slurm.core.tenancy import FLAT, Entity, Tenancy
from themis_slurm.core.workload import App, Job, Lease
from themis_slurm.slurm.eligibility import ineligible
from themis_slurm.slurm.limits import Usage
from themis_slurm.slurm.model import ManagedJob, Snapshot
from themis_slurm.state.held import held_for_granted
from themis_slurm.state.intents import HELD_FOR_GRANTED, Intent
from themis_slurm.state.jobs import core_job, done_and_work, effective_ckpt, submitted, unsaved_work
from themis_slurm.state.rows import AppRow, BookRow, JobRow

FOREVER = math.inf


@dataclass(frozen=True)
class RoundTerms:
    """What the round's input and the finish-time estimates read of themisd's configuration (daemon/config.py,
    Config.round_terms): whether it enforces (observe mode rounds over running jobs that were never held),
    the lease of a running job without a stored one, the minimum run time no lease ends before, and what a
    job's throughput counts for while it holds no GPUs (scheduler.idle_throughput), and the site's own model
    classes (themis.yaml ``models:``, name -> Profile), which the jobs naming them carry into the core."""

    enforce: bool
    lease_s: float
    min_runtime_s: float
    idle_throughput: float
    profiles: Mapping[str, Profile] = field(default_factory=dict)
    #: themis.yaml ``gpu_types:``: each GPU type's default speed, and per model class (core/gpu_types.py)
    type_speeds: Mapping[str, float] = field(default_factory=dict)
    class_speeds: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class RoundInput:
    """The core's state plus what the loop needs to decide whether to run it."""

    state: ClusterState
    waiting: frozenset[str]
    expired: frozenset[str]
    held: Mapping[str, frozenset[int]]  # GPUs held for granted jobs not running yet (held_for_granted)
    leased: frozenset[int]
    ineligible: Mapping[str, str] = field(default_factory=dict)  # waiting jobs Slurm would not start -> why
    #: waiting jobs that need CPUs or memory -> the nodes that have them free now (Slurm's count): when a
    #: node frees its CPUs or memory (a job ended that held no GPUs), a job may now fit where it did not
    room_fit: frozenset[tuple[str, frozenset[str]]] = frozenset()

    @property
    def signature(self) -> tuple[frozenset[int], frozenset[str], frozenset[tuple[str, frozenset[str]]]]:
        """What a round depends on besides expired leases: an unchanged signature means the last round's
        answer stands (daemon/planning.round_due)."""
        return self.state.free, self.waiting, self.room_fit


def cluster_gpus_of(snapshot: Snapshot) -> int:
    """C of T_id: the managed GPUs Themis may use (the topology less the unavailable ones), at least 1."""
    return max(1, snapshot.topology.size - len(snapshot.unavailable))


@dataclass
class _Claims:
    """The leases, jobs and sets of one input being built: every GPU is claimed by one lease at most."""

    size: int
    held: Mapping[str, frozenset[int]]
    used: set[int] = field(default_factory=set)
    leases: list[Lease] = field(default_factory=list)
    jobs: dict[str, list[Job]] = field(default_factory=dict)  # by app
    accounts: dict[str, str] = field(
        default_factory=dict
    )  # an app's first job's account (when it has no row)
    waiting: set[str] = field(default_factory=set)
    expired: set[str] = field(default_factory=set)

    def claim(self, ids: Iterable[int]) -> frozenset[int]:
        mine = frozenset(g for g in ids if 0 <= g < self.size and g not in self.used)
        self.used.update(mine)
        return mine


def _add_job(
    c: _Claims, row: JobRow, mj: ManagedJob, terms: RoundTerms, now: float, blocked: Mapping[str, str]
) -> None:
    """One managed job into the input: a lease (running, or held while in transition), waiting, or left out."""
    jid = row.job_id
    done, work, _ = done_and_work(row.work, row.done_service, row.progress)
    preemptible = mj.requeue_ok
    unsaved = 0.0
    lease: Lease | None = None
    if row.intent == Intent.RUNNING and mj.state == "RUNNING" and mj.gpu_ids:
        start = row.lease_start if row.lease_start is not None else now
        expiry = row.lease_expiry if row.lease_expiry is not None else start + terms.lease_s
        ran_from = mj.start_time if mj.start_time else start
        expiry = max(expiry, ran_from + terms.min_runtime_s)
        lease = Lease(jid, c.claim(mj.gpu_ids), start, expiry)
        unsaved = unsaved_work(row, effective_ckpt(mj, row), now, done)
        if expiry <= now:
            c.expired.add(jid)
    elif row.intent in HELD_FOR_GRANTED and mj.state != "RUNNING":
        lease = Lease(jid, c.claim(c.held.get(jid, ())), now, FOREVER)
        preemptible = False
    elif row.intent == Intent.WAITING and mj.state == "PENDING" and (mj.held or not terms.enforce):
        if jid in blocked:
            return
        c.waiting.add(jid)
    elif mj.gpu_ids:
        # transitional running jobs, completing ones, unknown states: hold what Slurm says they hold;
        # a job being moved also keeps its destination out of the pool (held_for_granted)
        lease = Lease(jid, c.claim(mj.gpu_ids), now, FOREVER)
        c.claim(c.held.get(jid, ()))
        preemptible = False
    else:
        return
    if lease is not None:
        c.leases.append(lease)
    c.accounts.setdefault(mj.app_key, mj.account)
    c.jobs.setdefault(mj.app_key, []).append(
        core_job(mj, work, done, preemptible, row.service_s, submitted(row, mj), unsaved, terms.profiles,
                 terms.class_speeds)  # fmt: skip
    )


def round_input(
    snapshot: Snapshot,
    rows: Mapping[str, JobRow],
    apps: Mapping[str, AppRow],
    terms: RoundTerms,
    now: float,
    learned: Mapping[str, str] | None = None,
    tenancy: Tenancy = FLAT,
    books: Mapping[Entity, BookRow] | None = None,
) -> RoundInput:
    """The arbiter's ClusterState for this cycle (see the module docstring), under `tenancy` (the tree the
    apps' clocks were advanced with: each App carries its account, the state the tree) and with the
    tenants' `books` (daemon/planning.advance_books) for paced quotas; ``learned`` adds reasons not to
    grant a job that the daemon saw after a release timed out."""
    jobs = {m.job_id: m for m in snapshot.managed}
    c = _Claims(snapshot.topology.size, held_for_granted(snapshot, rows.values()))
    busy = {jid for jid, r in rows.items() if r.intent in HELD_FOR_GRANTED}
    blocked = ineligible(snapshot.managed, busy, learned)
    for jid, why in limit_blocked(snapshot, rows).items():  # QOS/association limits, Themis's starts counted
        blocked.setdefault(jid, why)
    for jid in sorted(rows):
        mj = jobs.get(jid)
        if mj is not None:
            _add_job(c, rows[jid], mj, terms, now, blocked)
    app_objs = []
    for key in sorted(c.jobs):
        a = apps.get(key)
        app_objs.append(
            App(
                key,
                a.owner if a else key.split("/", 1)[0],
                a.arrival if a else now,
                tuple(c.jobs[key]),
                a.clock.average if a else 1.0,
                a.finished_work if a else 0.0,
                a.peak_gpus if a else 0,
                account=a.account if a else c.accounts.get(key, ""),
            )
        )
    cluster_gpus = cluster_gpus_of(snapshot)
    tenant_books = (
        {} if tenancy.flat or not books else {e: b.book(now, cluster_gpus) for e, b in books.items()}
    )
    state = ClusterState(
        with_type_speeds(snapshot.topology, terms.type_speeds),
        now,
        frozenset(snapshot.free) - c.used,
        tuple(c.leases),
        tuple(app_objs),
        cluster_gpus=cluster_gpus,
        tenancy=tenancy,
        tenant_books=tenant_books,
    )
    waiting_blocked = {
        jid: why for jid, why in blocked.items() if jid in rows and rows[jid].intent == Intent.WAITING
    }
    return RoundInput(
        state,
        frozenset(c.waiting),
        frozenset(c.expired),
        c.held,
        frozenset(c.used),
        waiting_blocked,
        room_fit(snapshot, c.waiting),
    )


def room_fit(snapshot: Snapshot, waiting: Iterable[str]) -> frozenset[tuple[str, frozenset[str]]]:
    """Each waiting job that needs CPUs or memory with the nodes whose free CPUs and memory hold it now."""
    if not snapshot.room:
        return frozenset()
    jobs = {m.job_id: m for m in snapshot.managed}
    out = []
    for jid in waiting:
        mj = jobs.get(jid)
        if mj is not None and (mj.cpus_per_node or mj.mem_per_node):
            fit = frozenset(n for n, r in snapshot.room.items() if r.fits(mj.cpus_per_node, mj.mem_per_node))
            out.append((jid, fit))
    return frozenset(out)


# ---------------------------------------------------------------------------------------- Slurm's limits
def starts_unseen(
    snapshot: Snapshot, rows: Mapping[str, JobRow]
) -> tuple[dict[str, ManagedJob], Usage | None]:
    """The managed jobs by id, and the limits' use with the jobs Themis granted or released that Slurm
    does not run yet (it counts only running jobs): they will count as soon as they start. None when no
    limit is enforced."""
    view = snapshot.limits
    jobs = {m.job_id: m for m in snapshot.managed}
    if view is None or not view.enforced:
        return jobs, None
    usage = view.usage.copy()
    for jid, r in rows.items():
        mj = jobs.get(jid)
        if r.intent in HELD_FOR_GRANTED and mj is not None and mj.state == "PENDING":
            usage.add(view.limits.bounds(mj.user, mj.account, mj.partition.split(",")[0], mj.qos), mj.gpus)
    return jobs, usage


def limit_blocked(snapshot: Snapshot, rows: Mapping[str, JobRow]) -> dict[str, str]:
    """Waiting jobs a QOS or association limit keeps Slurm from starting (slurm/limits.py) -> why, counting
    the jobs Themis granted or released that have not started yet. (The snapshot already blocks what Slurm's
    own use binds; this adds what Themis's pending starts do.)"""
    jobs, usage = starts_unseen(snapshot, rows)
    view = snapshot.limits
    if usage is None or view is None:
        return {}
    out: dict[str, str] = {}
    for jid, r in rows.items():
        mj = jobs.get(jid)
        if r.intent == Intent.WAITING and mj is not None and mj.state == "PENDING" and mj.blocked is None:
            why = view.blocked(mj.user, mj.account, mj.partition.split(",")[0], mj.qos, mj.gpus, usage)
            if why is not None:
                out[jid] = why
    return out
