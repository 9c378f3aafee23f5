"""From snapshot and store to a round, and from a Decision back to intents (pure).

* :func:`account` adds the service a running job attained since the last cycle and refreshes its estimate;
  :func:`advance_apps` and :func:`advance_books` bring the apps' contention clocks and the tenants' books
  up to now.
* :func:`build_round` makes the core's ClusterState under this config (state/round_input.py: the same input
  the status API's finish-time estimates are made from).
* :func:`round_due` says whether a round can decide anything: a lease expired, or GPUs are free while work
  waits and that situation changed since the last round (so an idle cluster, or one where nothing fits,
  costs one comparison per cycle); :func:`grants_over_limits` and :func:`without_waiting` run it again
  within Slurm's limits.
* :func:`instead_of_migrations` turns a migration onto a preempted holder's GPUs into that holder's
  renewal (the daemon does not migrate), :func:`as_applied` the Decision into what is carried out;
  :func:`intents_after` turns a Decision into the new rows; :func:`startable` says which granted jobs can
  be started now (every node they were granted has room).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import replace

from themis_slurm.core.calibration import calibrated_work
from themis_slurm.core.decision import Decision, PreemptionCause, Renewal, RenewalCause
from themis_slurm.core.gpu_types import class_speeds, speed_on, with_type_speeds
from themis_slurm.core.placement import get_profile
from themis_slurm.core.tenancy import FLAT, Entity, Tenancy, entity_fractions
from themis_slurm.core.tenancy import contention as tree_contention
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App, Job
from themis_slurm.daemon.config import Config
from themis_slurm.daemon.estimates import checked_progress, estimate
from themis_slurm.slurm.model import ManagedJob, Snapshot
from themis_slurm.state.intents import Intent
from themis_slurm.state.jobs import effective_ckpt, kept_after, profile_of
from themis_slurm.state.record import InPlace
from themis_slurm.state.round_input import RoundInput, round_input, starts_unseen
from themis_slurm.state.rows import AppRow, BookRow, JobRow

log = logging.getLogger("themisd")
FOREVER = math.inf


# ---------------------------------------------------------------------------------------- accounting
def account(row: JobRow, mj: ManagedJob, topo: Topology, now: float, cfg: Config,
            calibration: float = 1.0) -> tuple[JobRow, list[str]]:
    """The row with attained service and estimate brought up to `now`, and notes to log (once each).

    `calibration` is the factor of the job's user (core/calibration.py): the estimate the arbiter sees is
    the clamped estimate x factor. Lowered, never below ``estimates.min_s`` on the job's GPUs, so
    calibration never gives a user an estimate they could not have asked for with est=; raised (a user
    whose jobs outrun their estimates), never above the job's time limit (Slurm ends it there) nor
    ``estimates.max_s``.
    """
    notes: list[str] = []
    est = estimate(mj, cfg.estimates)
    est_work = est.work(mj.gpus)
    work = calibrated_work(est_work, calibration)
    if calibration <= 1.0:
        work = min(est_work, max(work, cfg.estimates.min_s * mj.gpus))
    else:
        limit = mj.time_limit_s if mj.time_limit_s is not None and mj.time_limit_s > 0 else math.inf
        work = max(est_work, min(work, min(limit, cfg.estimates.max_s) * mj.gpus))
    progress, pnote = checked_progress(mj)
    row, progress, rnotes = runs_settled(row, mj, progress)
    notes += rnotes
    if progress is not None and row.progress is not None and progress < row.progress:
        # progress only moves forward: reporting less would make the app look worse off and win auctions
        pnote = (f"progress report {progress:g} is below the last accepted {row.progress:g}: ignored "
                 "(progress only moves forward)")
        progress = None
    if est.note and est.note != row.est_note:
        notes.append(f"estimate: {est.note}")
    if pnote and pnote != row.progress_note:
        notes.append(pnote)
    service, done_svc, until = row.service_s, row.done_service, row.accounted_until
    if mj.state == "RUNNING":
        since = max(until if until is not None else -FOREVER, mj.start_time if mj.start_time else now)
        dt = max(0.0, now - since)
        ids = [g for g in mj.gpu_ids if 0 <= g < topo.size]
        n = len(ids) or mj.gpus
        profile = get_profile(profile_of(mj, cfg.models))
        factor = profile.factor(topo.level_of(ids)) if ids else 1.0
        if ids and topo.heterogeneous:  # x its speed on that GPU type (themis.yaml gpu_types:)
            sped = with_type_speeds(topo, cfg.type_speeds)
            factor *= speed_on(sped, class_speeds(cfg.class_speeds, profile.name), ids)
        service += n * dt
        done_svc += n * factor * dt
        until = now
    new = replace(row, work=work, est_work=est_work, est_factor=work / est_work, est_source=est.source,
                  est_note=est.note, service_s=service, done_service=done_svc, progress=progress if progress is not None else row.progress,
                  progress_note=pnote, accounted_until=until, gpus=mj.gpus)  # fmt: skip
    return new, notes


def runs_settled(
    row: JobRow, mj: ManagedJob, progress: float | None
) -> tuple[JobRow, float | None, list[str]]:
    """The row with its runs settled before this cycle's service is added (state/jobs.py, "checkpoints").

    A run that ended in a requeue (the job pending again, or running a later run) keeps what its saves
    kept: its work since its last save goes, and so does a progress report that described it. A run that
    started is counted from its StartTime. The first report of the run after a requeue shows whether the
    job resumed. Where its owner did not say how it saves, a report below the progress accepted before
    means it restarted from an older state: themisd takes it that the job does not checkpoint. Where the
    owner said it never saves, a report above it means it did: the claim (which would make every requeue
    look like a loss of its whole run, and the job look further behind than it is) is set aside. Until
    then, a report equal to the last one of a run that lost work is the Comment left over from that run
    (a job's Comment survives its requeue): it is not taken again. Returns the row, the report to use
    this cycle and notes for the log.
    """
    notes: list[str] = []
    ckpt = effective_ckpt(mj, row)
    started = mj.start_time if mj.state == "RUNNING" and mj.start_time else None
    if row.run_start is not None and (mj.state == "PENDING" or (started is not None and started > row.run_start)):
        end = row.accounted_until if row.accounted_until is not None else row.run_start
        run_s = end - row.run_start
        kept = kept_after(row, ckpt, end)
        lost = row.done_service - kept
        row = replace(row, done_service=kept, run_start=None, run_base=kept, resumed_from=row.progress,
                      progress=row.progress if lost <= 0.0 else None)  # fmt: skip
        if lost > 0.0:
            notes.append(f"its run of {run_s:.0f} s ended: {lost:.0f} GPU-s of work since its last save lost "
                         f"({ckpt_text(ckpt)})")
    if started is not None and row.run_start is None:
        row = replace(row, run_start=started, run_base=row.done_service)
    if row.resumed_from is not None and started is not None and progress is not None \
            and progress != row.resumed_from:
        if progress < row.resumed_from and not mj.ckpt_given and not row.ckpt_learned:
            notes.append(f"progress restarted at {progress:g} after a requeue (it was {row.resumed_from:g}): "
                         "taken to not checkpoint (a preemption loses its whole run); say so with "
                         "--themis-ckpt=no, or how often it saves")
            row = replace(row, ckpt_learned="no", progress=None, done_service=0.0, run_base=0.0)
        elif progress > row.resumed_from and mj.ckpt_given and ckpt == math.inf:  # not yet set aside
            notes.append(f"progress went on at {progress:g} after a requeue (it was {row.resumed_from:g}) although "
                         "--themis-ckpt=no says it never saves: taken to save at Themis's warning")
            row = replace(row, ckpt_learned="yes")
        row = replace(row, resumed_from=None)
    elif row.resumed_from is not None and progress == row.resumed_from and row.progress is None:
        progress = None  # the Comment still says what the lost run reported: not a report of this run
    return row, progress, notes


def ckpt_text(ckpt: float | None) -> str:
    """How a job saves, for the log and `themis explain`."""
    if ckpt is None:
        return "it saves at Themis's warning"
    if ckpt == math.inf:
        return "it does not checkpoint"
    return f"it saves every {ckpt:.0f} s"


def settled(row: JobRow, start: float | None, end: float | None) -> JobRow:
    """The row with its last run's service ending where Slurm says the run ended, not at the last poll.

    `account` adds service between the polls that saw a job running; the stretch from the last such poll
    to the job's end (a late or blocked cycle can make it minutes, or a whole run that started and ended
    unseen) is added here from Slurm's StartTime and EndTime, and service counted past EndTime (a poll
    that still saw the job running) is taken back. The run's placement factor is the job's so far.
    """
    if start is None or end is None or end < start:
        return row
    since = max(row.accounted_until if row.accounted_until is not None else -FOREVER, start)
    dt = end - since
    if dt == 0:
        return row
    factor = row.done_service / row.service_s if row.service_s > 0 else 1.0
    return replace(row, service_s=max(0.0, row.service_s + row.gpus * dt),
                   done_service=max(0.0, row.done_service + row.gpus * factor * dt), accounted_until=end)


def first_account(mjs: Iterable[ManagedJob], submits: Mapping[str, float]) -> str:
    """The account of an app's first job (earliest submission, then job id): the app's account for its life.

    An app whose jobs run under several accounts (a tag reused with ``-A``) is placed under one of them,
    the one it arrived with, so that its place in the tree does not move as its jobs come and go."""
    first = min(mjs, key=lambda m: (submits.get(m.job_id, m.submit_time), m.slurm_id, m.job_id))
    return first.account


def advance_apps(apps: Mapping[str, AppRow], jobs: Iterable[ManagedJob], now: float,
                 service_delta: Mapping[str, float], submits: Mapping[str, float] | None = None,
                 tenancy: Tenancy = FLAT) -> dict[str, AppRow]:
    """Contention clocks, peak GPUs, service and account of every app; apps without jobs become inactive.

    N, what each app's clock integrates from now on, is the app's effective number of contenders under
    `tenancy` (core/tenancy.py: 1 / its fraction of the cluster in the account -> user -> app tree of the
    apps with at least one active job); with the levels [app] it is the number of those apps, the paper's
    N. An app that went idle counts the same N as the others from now on (it contends with nobody, but
    its clock must keep running). An app that comes back after it went idle starts afresh (new arrival): a
    new sweep under an old name is a new app, arriving with the first submission of its jobs (`submits`,
    job id -> :func:`submitted`; SubmitTime as read for the others), under its first job's account
    (:func:`first_account`). A tree that changed since the last cycle applies from `now`: the time so far
    stays booked at the N it had.
    """
    submits = submits or {}
    by_app: dict[str, list[ManagedJob]] = {}
    for mj in jobs:
        by_app.setdefault(mj.app_key, []).append(mj)
    n = float(len(by_app))
    accounts: dict[str, str] = {}
    for key, mjs in by_app.items():
        old = apps.get(key)
        keep = old is not None and old.active and old.account
        accounts[key] = old.account if keep and old is not None else first_account(mjs, submits)
    if tenancy.flat:
        each = dict.fromkeys(by_app, n)
    else:
        each = tree_contention(tenancy, [App(key, apps[key].owner if key in apps else mjs[0].user, 0.0,
                                        account=accounts[key]) for key, mjs in by_app.items()])
    out: dict[str, AppRow] = {}
    for key, mjs in by_app.items():
        old = apps.get(key)
        demand = sum(m.gpus for m in mjs)
        if old is None or not old.active:
            arrival = min(min(submits.get(m.job_id, m.submit_time) for m in mjs), now)
            row = AppRow(key, mjs[0].user, arrival, now, now, 0.0, max(1.0, each[key]), peak_gpus=demand,
                         account=accounts[key])
        else:
            row = old.with_clock(old.clock.advance(now, each[key]))
            row = replace(row, peak_gpus=max(row.peak_gpus, demand), account=accounts[key])
        out[key] = replace(row, service_s=row.service_s + service_delta.get(key, 0.0))
    for key, old in apps.items():
        if key not in by_app and old.active:
            out[key] = replace(old.with_clock(old.clock.advance(now, n)), active=0)
    return out


# ---------------------------------------------------------------------------------------- granted jobs
def startable(held: Mapping[str, frozenset[int]], rows: Mapping[str, JobRow], topo: Topology) -> list[str]:
    """Granted jobs whose held GPUs are complete on every node, in grant order."""
    out = []
    for jid, gpus in held.items():
        row = rows[jid]
        if row.intent != Intent.GRANTED:
            continue
        if topo.nodes_of(gpus) == dict(sorted(row.planned_nodes.items())):
            out.append(jid)
    return sorted(out, key=lambda j: (rows[j].grant_time or 0.0, j))


# ---------------------------------------------------------------------------------------- the round
def advance_books(books: Mapping[Entity, BookRow], apps: Mapping[str, AppRow], tenancy: Tenancy, now: float,
                  cluster_gpus: float) -> dict[Entity, BookRow]:
    """Every active tenant's book at `now` (paced quotas, core/quota.py), from the active `apps` (advanced
    for this cycle): what each was owed since the last cycle at the fraction it had then is added, and its
    fraction is taken anew; a tenant new (or back after it had no jobs) starts an empty book; a tenant
    without active apps has none (its busy period ended). Empty when flat."""
    active = [App(k, a.owner, a.arrival, account=a.account) for k, a in apps.items() if a.active]
    out: dict[Entity, BookRow] = {}
    for ent, frac in entity_fractions(tenancy, active).items():
        old = books.get(ent)
        if old is None:
            out[ent] = BookRow(0.0, 0.0, frac, now)
        else:
            owed = old.entitled + max(0.0, now - old.updated) * cluster_gpus * old.frac
            out[ent] = BookRow(owed, old.finished, frac, now)
    return out


def build_round(snapshot: Snapshot, rows: Mapping[str, JobRow], apps: Mapping[str, AppRow], cfg: Config,
                now: float, learned: Mapping[str, str] | None = None, tenancy: Tenancy = FLAT,
                books: Mapping[Entity, BookRow] | None = None) -> RoundInput:
    """The arbiter's ClusterState for this cycle under `cfg` (state/round_input.py)."""
    return round_input(snapshot, rows, apps, cfg.round_terms, now, learned, tenancy, books)


def grants_over_limits(decision: Decision, snapshot: Snapshot, rows: Mapping[str, JobRow]) -> dict[str, str]:
    """The round's new grants that Slurm would not start because of a limit, taken in grant order on top of
    what runs and what Themis started (each round checks jobs one by one, before the round: two grants
    of one user may pass a limit together that each passes alone). Moves of running jobs count nothing."""
    jobs, usage = starts_unseen(snapshot, rows)
    view = snapshot.limits
    if usage is None or view is None:
        return {}
    out: dict[str, str] = {}
    for g in decision.grants:
        mj = jobs.get(g.job_id)
        if g.migrated or mj is None or mj.state != "PENDING":
            continue
        part = mj.partition.split(",")[0]
        why = view.blocked(mj.user, mj.account, part, mj.qos, mj.gpus, usage)
        if why is not None:
            out[g.job_id] = f"{why}, with the other grants of this round"
        else:
            usage.add(view.limits.bounds(mj.user, mj.account, part, mj.qos), mj.gpus)
    return out


def without_waiting(inp: RoundInput, why: Mapping[str, str]) -> RoundInput:
    """The round's input without these waiting jobs (listed as not eligible, with why); the signature of the
    round (free GPUs, waiting jobs) stays the original's, so the next cycle does not run it again."""
    apps = []
    for app in inp.state.apps:
        jobs = tuple(j for j in app.jobs if j.id not in why)
        if jobs:
            apps.append(app if len(jobs) == len(app.jobs) else replace(app, jobs=jobs))
    state = replace(inp.state, apps=tuple(apps), job_index=None)
    return replace(inp, state=state, ineligible={**inp.ineligible, **why})


def round_due(inp: RoundInput, last_signature: object) -> str | None:
    """Why a round should run now, or None when it could not change anything."""
    if inp.expired:
        return f"{len(inp.expired)} lease(s) expired"
    if inp.waiting and inp.state.free and inp.signature != last_signature:
        return f"{len(inp.state.free)} free GPU(s), {len(inp.waiting)} waiting job(s)"
    return None


# ---------------------------------------------------------------------------------------- decision -> rows
def instead_of_migrations(decision: Decision, rows: Mapping[str, JobRow], jobs: Mapping[str, Job]) -> dict[str, InPlace]:
    """Migrations onto the home of a preempted job of the same app and kind become that job's renewal.

    The daemon does not migrate: a migration (a lease holder X moved to other GPUs) is a preemption of X
    now and a grant in a later round. When the round moves X exactly onto the GPUs of a holder Y of the
    same app that it preempts, renewing Y in place gives the app the same GPUs with one preemption instead
    of two. This is the daemon-only case the core's keep-in-place phase (core.keep_in_place) does not
    cover: the core swaps a *waiting* job X landing on Y's home, but leaves a *moving holder* X alone,
    since in the core a migration is one atomic move. "The same kind" is the core's (:attr:`Job.kind`: shape
    and profile, so the same throughput there), read from the round's `jobs`. Returns {Y: InPlace}.
    """
    granted = {g.job_id for g in decision.grants}
    homes = {p.job_id: p.gpus for p in decision.preemptions if p.job_id not in granted}
    out: dict[str, InPlace] = {}
    for g in decision.grants:
        x = jobs.get(g.job_id)
        if not g.migrated or x is None:
            continue
        for y, home in homes.items():
            row, yj = rows.get(y), jobs.get(y)
            if (y not in out and home == g.gpus and row is not None and row.intent == Intent.RUNNING
                    and yj is not None and yj.app_id == x.app_id and yj.kind == x.kind):
                renewal = Renewal(job_id=y, app_id=g.app_id, gpus=g.gpus, lease_expiry=g.lease_expiry,
                                  cause=RenewalCause.IN_PLACE)
                out[y] = InPlace(renewal, g.job_id)
                break
    return out


def as_applied(decision: Decision, in_place: Mapping[str, InPlace]) -> Decision:
    """The decision as themisd carries it out once `in_place` (:func:`instead_of_migrations`) is taken.

    For each Y renewed in place instead of X: X's grant (its move onto Y's GPUs) is not made, so it is
    dropped; X is preempted without a destination (cause LOST: it waits for a later round); Y is not
    preempted. Without this the log and the decisions table said "grant X" and "preempt X: moved to other
    GPUs" in the same round while X was only preempted (issue 38 item 10: a one-GPU array task "moved in
    the round it was granted"), and Y both preempted and renewed. The app keeps the same GPUs; the
    AppRecords are unchanged. Y's renewal itself is recorded from `in_place` (cause IN_PLACE).
    """
    if not in_place:
        return decision
    instead = {ip.instead_of for ip in in_place.values()}
    grants = tuple(g for g in decision.grants if not (g.migrated and g.job_id in instead))
    preemptions = tuple(replace(p, cause=PreemptionCause.LOST) if p.job_id in instead else p
                        for p in decision.preemptions if p.job_id not in in_place)
    return replace(decision, grants=grants, preemptions=preemptions)


def intents_after(decision: Decision, rows: Mapping[str, JobRow], cfg: Config, now: float,
                  in_place: Mapping[str, InPlace]) -> dict[str, JobRow]:
    """The rows a decision changes; `in_place`: the enforce-mode :func:`instead_of_migrations` (computed
    once by the caller; empty in observe mode). Observe mode only moves leases forward (rounds at lease pace)."""
    out: dict[str, JobRow] = {}
    lease_s = cfg.scheduler.lease_s
    if cfg.mode != "enforce":
        for r in decision.renewals:
            if r.job_id in rows and rows[r.job_id].intent == Intent.RUNNING:
                out[r.job_id] = replace(rows[r.job_id], lease_start=now, lease_expiry=now + lease_s)
        for p in decision.preemptions:
            if p.job_id in rows and rows[p.job_id].intent == Intent.RUNNING:
                out[p.job_id] = replace(rows[p.job_id], lease_start=now, lease_expiry=now + lease_s)
        return out
    preempted = {p.job_id for p in decision.preemptions} - set(in_place)
    # a moved job keeps its destination through the warning and the requeue (reconcile.py grants it then),
    # unless an in-place renewal kept another job there instead
    instead = {ip.instead_of for ip in in_place.values()}
    moved_to = {g.job_id: g for g in decision.grants if g.migrated and g.job_id not in instead}
    for p in decision.preemptions:
        row = rows.get(p.job_id)
        if row is not None and row.intent == Intent.RUNNING and p.job_id in preempted:
            g = moved_to.get(p.job_id)
            out[p.job_id] = replace(row, intent=Intent.WARNING, planned_nodes=dict(g.nodes) if g else {},
                                    planned_gpus=g.gpus if g else frozenset(), grant_time=now if g else None)
    for jid, ip in in_place.items():
        out[jid] = replace(rows[jid], lease_start=now, lease_expiry=ip.renewal.lease_expiry)
    for r in decision.renewals:
        row = rows.get(r.job_id)
        if row is not None and row.intent == Intent.RUNNING and r.job_id not in preempted:
            out[r.job_id] = replace(row, lease_start=now, lease_expiry=r.lease_expiry)
    for g in decision.grants:
        row = rows.get(g.job_id)
        if row is None or g.job_id in preempted or row.intent != Intent.WAITING:
            continue  # a migration is a preemption now and a new grant in a later round
        out[g.job_id] = replace(row, intent=Intent.GRANTED, planned_nodes=dict(g.nodes), planned_gpus=g.gpus,
                                grant_time=now, lease_start=None, lease_expiry=g.lease_expiry,
                                release_time=None)  # fmt: skip
    return out
