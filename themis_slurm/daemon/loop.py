"""One poll cycle of themisd: the imperative shell around the pure parts (reconcile, planning, the arbiter).

A cycle is the steps of :data:`STEPS`, in order, over one :class:`~themis_slurm.daemon.cycle.Cycle`:

    read_slurm         one bulk read of Slurm (the snapshot every decision of the cycle is made from)
    reconcile_intents  each recorded intent against what Slurm shows: record, act, record (reconcile.py)
    plan_round         the tenancy tree, service, estimates and contention up to now, the round's input,
                       and whether a round is due (planning.py)
    decide             the arbiter's round within Slurm's limits and the nodes' room (rounds.py), and the
                       intents it sets
    record             the round, its decisions and the new intents in one transaction (state/record.py)
    act                warn the jobs the round preempted, then start the granted jobs whose nodes have room
    report             metrics and the CycleReport

docs/design.md ("The daemon cycle") says what each step reads and writes, and why. Renewals are a database
write only. Every Slurm action is preceded by a committed intent and followed by a committed outcome;
actions are idempotent; so a crash anywhere is repaired by the next cycle's reconcile (see reconcile.py).
Errors of single Slurm actions are logged and counted, and the next cycle retries them; an error reading
Slurm ends the cycle. Observe mode never calls an action (guarded in acting.py as well as in reconcile).
Actions are sent only while the cycle's read is fresh (acting.py, ``slurm.act_within_s``); each action
command has its own short timeout (``slurm.action_timeout_s``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from themis_slurm.core.arbiter import run_round
from themis_slurm.core.calibration import Calibration
from themis_slurm.core.decision import Decision
from themis_slurm.core.state import ClusterState
from themis_slurm.core.tenancy import FLAT, Entity, Tenancy
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App
from themis_slurm.daemon.acting import Actor, PendingAction, start_granted, warn_preempted
from themis_slurm.daemon.calibration import Calibrations
from themis_slurm.daemon.config import Config
from themis_slurm.daemon.cycle import Cycle, CycleReport
from themis_slurm.daemon.metrics import Metrics, tenant_members
from themis_slurm.daemon.planning import (
    account,
    advance_apps,
    advance_books,
    as_applied,
    build_round,
    instead_of_migrations,
    intents_after,
    round_due,
    settled,
)
from themis_slurm.daemon.reconcile import Fix, reconcile
from themis_slurm.daemon.rounds import checked_round, count_round, log_decision
from themis_slurm.daemon.tenancy import TenancyKeeper
from themis_slurm.gc_pause import collector_paused
from themis_slurm.slurm.model import ManagedJob, SlurmBackend, Snapshot
from themis_slurm.slurm.shares import SharesReader
from themis_slurm.state.jobs import done_and_work, submitted, unknown_profile_note
from themis_slurm.state.record import RoundFacts, record_round
from themis_slurm.state.round_input import cluster_gpus_of
from themis_slurm.state.rows import AppRow, BookRow, JobRow, Learned
from themis_slurm.state.store import Store
from themis_slurm.tenant_levels import summarise

log = logging.getLogger("themisd")

# Reasons a released job may stay pending for that say nothing about the job itself (the GPUs were not free
# yet, a scheduling pass had not run, it was held again): no reason to keep it out of the next rounds.
NOT_THE_JOBS_FAULT = frozenset({"", "None", "Priority", "Resources", "JobHeldUser", "JobHeldAdmin",
                                "BeginTime", "job_requeued_in_held_state"})  # fmt: skip

Step = Callable[["Daemon", Cycle], None]


# ------------------------------------------------------------------------------------------ the steps
def read_slurm(d: Daemon, c: Cycle) -> None:
    """One bulk read of Slurm; when it fails, the cycle ends here (counted and logged; the next one retries)."""
    try:
        snap = d.backend.snapshot()
    except Exception as e:
        d.metrics.slurm_errors.labels("snapshot").inc()
        log.error("reading Slurm failed, cycle skipped: %s", e)
        c.report = CycleReport(time.time(), d.perf() - c.started, 0, d.perf() - c.started, 0, errors=1)
        return
    c.snap_s = d.perf() - c.started
    c.snap, c.now = snap, snap.time
    d.last_snapshot = snap
    d.metrics.slurm_seconds.labels("snapshot").observe(snap.latency_s or c.snap_s)
    d.metrics.slurm_calls.inc(snap.slurm_calls)
    warnings = frozenset(snap.warnings)
    for w in sorted(warnings - d._seen_warnings):
        log.warning("slurm: %s", w)
    d._seen_warnings = warnings
    c.jobs = {m.job_id: m for m in snap.managed}
    d.actor.begin(snap.time, c.started, c.jobs)


def reconcile_intents(d: Daemon, c: Cycle) -> None:
    """Each recorded intent against what Slurm shows (reconcile.py): record the intent, act, record the outcome."""
    c.rows = d.store.jobs()
    c.fixes = reconcile(c.now, c.jobs, c.rows, d.cfg)
    for fix in c.fixes:
        if fix.action is not None and not d.actor.fresh(fix.action, c.jobs[fix.job_id]):
            continue  # left whole to the next cycle: the read it was made from is stale
        prev = c.rows.get(fix.job_id)
        _record_fix(d, c, fix)
        if fix.action is not None:
            _act_on_fix(d, c, fix, prev)
    if any(f.kind != "new" for f in c.fixes):
        d._last_signature = None  # intents changed: a round may decide something new


def plan_round(d: Daemon, c: Cycle) -> None:
    """The tree the round uses, every job's service and estimate and every app's clock up to now, the
    round's input, and whether a round could decide anything."""
    assert c.snap is not None
    d._tree = d.tenancy.tenancy(c.now)  # refreshed every tenancy.refresh_s and after a reload
    cur = d.tenancy.current
    if cur is not None and (cur.tenancy, cur.line, d.tenancy.read_at) != d._stored_tree:
        with d.store.tx():  # the status API shows levels and shares from it (no Slurm call)
            d.store.put_tenancy(cur.tenancy, cur.line, d.tenancy.read_at, c.now)
        d._stored_tree = (cur.tenancy, cur.line, d.tenancy.read_at)
    c.apps = _account(d, c)
    d.tenancy.check_apps((a.account, a.owner) for a in c.apps.values())
    gone = [j for j, v in d._learned.items() if j not in c.jobs or v.until <= c.now]
    if gone:
        with d.store.tx():
            d.store.forget_learned(gone)
        d._learned = {j: v for j, v in d._learned.items() if j not in gone}
    c.inp = build_round(c.snap, c.rows, c.apps, d.cfg, c.now, {j: v.why for j, v in d._learned.items()},
                        tenancy=d._tree, books=d._books)  # fmt: skip
    c.trigger = round_due(c.inp, d._last_signature)


def decide(d: Daemon, c: Cycle) -> None:
    """The arbiter's round, checked against Slurm's limits and the nodes' room (rounds.py), as themisd
    carries it out (no migrations: planning.as_applied) and the intents it sets. A round that fails is
    logged and left to the next cycle (nothing was written)."""
    if c.trigger is None:
        return
    assert c.snap is not None and c.inp is not None
    t0 = d.perf()
    c.signature = c.inp.signature  # as round_due saw it (the room check takes full nodes' GPUs out of the round)
    try:
        with collector_paused():  # themis_slurm/gc_pause.py: the round's garbage goes by reference counting
            inp, decision = checked_round(c.inp, c.rows, c.snap, d.arbitrate)
    except Exception:
        log.exception("arbiter round failed (trigger: %s); state kept, retried next cycle", c.trigger)
        return
    c.round_s = d.perf() - t0
    if d.cfg.mode == "enforce" and any(g.migrated for g in decision.grants):  # the round's jobs, for their kind
        c.in_place = instead_of_migrations(decision, c.rows, {j.id: j for a in inp.state.apps for j in a.jobs})
    c.decision = as_applied(decision, c.in_place)  # logged and recorded as carried out (issue 38 item 10)
    c.new_rows = intents_after(c.decision, c.rows, d.cfg, c.now, c.in_place)


def record(d: Daemon, c: Cycle) -> None:
    """The round, its decisions, the apps' rho and the new intents, in one transaction (state/record.py),
    before any of its actions; then its log lines and metrics."""
    if c.decision is None or c.trigger is None:
        return
    mode, knob = d.cfg.mode, d.cfg.scheduler.fairness_knob
    record_round(d.store, RoundFacts(c.now, mode, c.trigger, c.round_s, knob), c.decision, c.apps, c.new_rows,
                 c.in_place)  # fmt: skip
    d._last_signature = c.signature  # only once recorded: a round the store refused runs again
    c.rows.update(c.new_rows)
    d._quotas = {rec.tenant: rec.tenant_quota for rec in c.decision.apps.values() if rec.tenant}
    log_decision(c.decision, c.trigger, c.round_s, mode, knob)
    for y, ip in c.in_place.items():
        log.info("renew app=%s job=%s in place instead of moving job %s onto its GPUs "
                 "(one preemption instead of two)", ip.renewal.app_id, y, ip.instead_of)  # fmt: skip
    count_round(d.metrics, c.decision, mode, c.round_s)


def act(d: Daemon, c: Cycle) -> None:
    """In enforce mode: SIGUSR1 to the jobs the round preempted, then the starts of granted jobs whose nodes
    have room now (acting.py). Observe mode sends nothing."""
    if d.cfg.mode != "enforce":
        return
    assert c.snap is not None
    if c.decision is not None:
        warn_preempted(d.actor, d.store, c.decision, c.rows, c.jobs)
    start_granted(d.actor, d.store, c.snap, c.jobs, c.rows)


def report(d: Daemon, c: Cycle) -> None:
    """The cycle's metrics (GPUs by state, apps, jobs by intent, tenants, calibration) and its CycleReport."""
    assert c.snap is not None and c.inp is not None
    a = d.actor
    if a.deferred:
        log.warning("%d Slurm action(s) put off to the next cycle: this cycle's read of Slurm grew older "
                    "than slurm.act_within_s (%gs) while acting", a.deferred, d.cfg.slurm.act_within_s)
    _count_cycle(d, c)
    duration = d.perf() - c.started
    d.metrics.cycle_seconds.observe(duration)
    d.metrics.last_cycle.set(c.now)
    d.last_cycle_time = c.now
    dec = c.decision
    rnd = {} if dec is None else dict(round_s=c.round_s, grants=len(dec.grants), renewals=len(dec.renewals),
                                      preemptions=len(dec.preemptions), decision=dec)  # fmt: skip
    c.report = CycleReport(c.now, duration, c.snap.slurm_calls + a.actions, c.snap_s, len(c.fixes),
                           trigger=c.trigger, actions=a.actions, errors=a.errors, deferred=a.deferred,
                           **rnd)  # type: ignore[arg-type]  # fmt: skip


#: The cycle, in order (the module docstring; docs/design.md, "The daemon cycle").
STEPS: tuple[Step, ...] = (read_slurm, reconcile_intents, plan_round, decide, record, act, report)


# ------------------------------------------------------------------------------------------ their parts
def _record_fix(d: Daemon, c: Cycle, fix: Fix) -> None:
    """A fix's intent (or a job's end, with what it did) and its event, in one transaction."""
    assert c.snap is not None
    with d.store.tx():
        if fix.before is None:
            old = c.rows.pop(fix.job_id, None)
            if old is not None:
                old = settled(old, *c.snap.finished_times.get(fix.job_id, (None, None)))
                _book_finished(d, old, c.snap.finished.get(fix.job_id), c.now)
            d.store.delete_job(fix.job_id)
        else:
            d.store.put_job(fix.before)
            c.rows[fix.job_id] = fix.before
        d.store.add_event(c.now, fix.kind, fix.reason, fix.job_id, fix.app_key)
    d.metrics.events.labels(fix.kind).inc()
    mj = c.jobs.get(fix.job_id)
    if fix.kind == "release-timeout" and mj is not None and mj.reason not in NOT_THE_JOBS_FAULT:
        learned = Learned(f"{mj.reason}: Slurm kept it pending when Themis released it", c.now + d.cfg.scheduler.lease_s)
        with d.store.tx():
            d.store.put_learned(fix.job_id, learned.why, learned.until)
        d._learned[fix.job_id] = learned
        log.warning("job %s (app %s) not granted again for %.0f s: %s", fix.job_id, fix.app_key,
                    d.cfg.scheduler.lease_s, learned.why)  # fmt: skip
    if fix.kind == "started" and mj is not None and fix.before is not None:
        _check_placement(d, c.snap.topology, fix.before, mj)
    level = logging.DEBUG if fix.kind == "new" and fix.action is None else logging.INFO
    if fix.kind in ("new", "adopted") and mj is not None and unknown_profile_note(mj, d.cfg.models):
        level = logging.WARNING  # a class job_submit.lua accepts and themis.yaml lacks (config check says so)
    log.log(level, "%s app=%s job=%s: %s", fix.kind, fix.app_key, fix.job_id, fix.reason)


def _act_on_fix(d: Daemon, c: Cycle, fix: Fix, prev: JobRow | None) -> None:
    """A fix's action, and its outcome recorded (an action Slurm refused because the job started after all
    leaves the row as it was)."""
    assert fix.action is not None
    args = (dict(fix.before.planned_nodes),) if fix.action == "start" and fix.before is not None else ()
    ok = d.actor.act(fix.action, c.jobs[fix.job_id], *args)
    if ok is None and fix.kind == "release-timeout" and prev is not None:
        with d.store.tx():  # it started after all (not held): still `starting`, the next read shows it
            d.store.put_job(prev)
        c.rows[fix.job_id] = prev
    if ok and fix.after is not None:
        after = fix.after
        if fix.action == "warn":  # the grace runs from when the signal went out
            after = replace(after, warn_time=d.actor.now())
        with d.store.tx():
            d.store.put_job(after)
        c.rows[fix.job_id] = after


def _check_placement(d: Daemon, topo: Topology, row: JobRow, mj: ManagedJob) -> None:
    """Slurm picks GPU indices inside a node (nothing pins them): log and count what the job really got.

    Accounting (service, rho) always uses the GPUs Slurm reports; this only makes a plan that did not
    come true visible, so that logs and `explain` never claim a placement the job does not have.
    """
    if not mj.gpu_ids:
        return
    actual = topo.level_of(mj.gpu_ids)
    where = ",".join(f"{topo.gpus[g].node}:{topo.gpus[g].index}" for g in sorted(mj.gpu_ids))
    if not row.planned_gpus or set(row.planned_gpus) == set(mj.gpu_ids):
        log.info("placed app=%s job=%s gpus=%s level=%s (as planned)", mj.app_key, mj.job_id, where,
                 actual.name.lower())  # fmt: skip
        return
    planned = topo.level_of(row.planned_gpus)
    changed = planned != actual
    d.metrics.placement_mismatch.labels(str(changed).lower()).inc()
    log.log(logging.WARNING if changed else logging.INFO,
            "placed app=%s job=%s gpus=%s level=%s, not as planned (%s level on other GPUs of the same "
            "nodes: Slurm chooses GPU indices inside a node); rho uses the real placement", mj.app_key,
            mj.job_id, where, actual.name.lower(), planned.name.lower())  # fmt: skip


def _book_finished(d: Daemon, row: JobRow, state: str | None, now: float) -> None:
    """A job left: what it did stays in its app's T_id (App.finished_work) and its tenant's book, and a job
    that ended COMPLETED joins its user's calibration history (cancelled, failed or timed-out jobs, and jobs
    that left unseen, say nothing about how good their estimate was)."""
    app = d.store.apps().get(row.app_key)
    if app is not None:
        done, _, _ = done_and_work(row.work, row.done_service, row.progress)
        d.store.put_app(replace(app, finished_work=app.finished_work + done))
        if not d._tree.flat:  # and in its tenant's book (paced quotas)
            shell = App(row.app_key, app.owner, app.arrival, account=app.account)
            d.store.add_tenant_finished(d._tree.path(shell)[-1], done)
    if state == "COMPLETED":
        d.calibrations.completed(row, app.owner if app is not None else row.app_key.partition("/")[0], now)


def _account(d: Daemon, c: Cycle) -> dict[str, AppRow]:
    """Service, estimates, progress and contention, written in one transaction (changed rows only); the
    active apps."""
    assert c.snap is not None
    changed: list[JobRow] = []
    delta: dict[str, float] = {}
    cal = d.calibrations.now(c.rows, c.jobs)
    for jid, row in c.rows.items():
        mj = c.jobs.get(jid)
        if mj is None:
            continue
        new, notes = account(row, mj, c.snap.topology, c.now, d.cfg, cal.factor(mj.user))
        for note in notes:
            log.warning("estimate app=%s job=%s: %s", mj.app_key, jid, note)
        if new != row:
            changed.append(new)
            delta[mj.app_key] = delta.get(mj.app_key, 0.0) + new.service_s - row.service_s
    old_apps = d.store.apps()
    submits = {jid: submitted(row, mj) for jid, row in c.rows.items() if (mj := c.jobs.get(jid)) is not None}
    apps = advance_apps(old_apps, c.snap.managed, c.now, delta, submits, tenancy=d._tree)
    old_books = d.store.tenant_books()
    d._books = advance_books(old_books, apps, d._tree, c.now, cluster_gpus_of(c.snap))
    with d.store.tx():
        d.store.put_jobs(changed)
        d.store.put_apps(app for key, app in apps.items() if old_apps.get(key) != app)
        if d._books or old_books:
            d.store.put_tenant_books(d._books)
    for new in changed:
        c.rows[new.job_id] = new
    return {k: a for k, a in apps.items() if a.active}


def _count_cycle(d: Daemon, c: Cycle) -> None:
    """GPUs by state, apps, retried actions, calibration, jobs by intent and the tenants' gauges."""
    snap, inp = c.snap, c.inp
    assert snap is not None and inp is not None
    starting = set().union(*inp.held.values()) if inp.held else set()
    managed_used = set(snap.managed_used) or {g for m in snap.managed for g in m.gpu_ids}
    d.metrics.set_gpus({
        "total": snap.topology.size,
        "free": len(snap.free - starting),
        "starting": len(starting),
        "leased": len(managed_used),
        "unmanaged": len(snap.unmanaged),
        "unavailable": len(snap.unavailable),
    })  # fmt: skip
    d.metrics.apps.set(len(c.apps))
    d.metrics.actions_retrying.set(len(d.actor.backlog))
    cal = d.calibration()
    d.metrics.calibration_users.set(len(cal.by_user))
    d.metrics.calibration_cluster.set(cal.cluster)
    d.metrics.set_jobs(r.intent for r in c.rows.values())
    d.metrics.set_tenants(summarise(d._tree, tenant_members(c.apps, snap.managed), d._quotas).levels)


# ------------------------------------------------------------------------------------------ the daemon
class Daemon:
    """themisd between cycles: config, backend, store, metrics, the actions' backlog, what releases taught,
    the tenancy tree and books, and the signature of the last recorded round. :meth:`cycle` runs STEPS."""

    def __init__(self, cfg: Config, backend: SlurmBackend, store: Store, metrics: Metrics | None = None,
                 perf: Callable[[], float] = time.perf_counter) -> None:
        self.cfg = cfg
        self.backend = backend
        self.store = store
        self.metrics = metrics or Metrics()
        self.perf = perf
        self.actor = Actor(backend, self.metrics, lambda: self.cfg, perf)
        self.calibrations = Calibrations(store, lambda: self.cfg, self.metrics)
        self._last_signature: object = None
        self._seen_warnings: frozenset[str] = frozenset()
        # job id -> (why, until): a released job that Slurm kept pending for a reason Themis cannot see on a
        # held job (QOS/association limits, ...) is not granted again before `until` (one lease); kept in the
        # store too, so that a restart does not grant the same impossible start again
        self._learned: dict[str, Learned] = store.learned()
        self.last_snapshot: Snapshot | None = None  # served by the status API (no extra Slurm reads)
        self.last_cycle_time: float | None = None
        # tenancy (issue 33): the account tree the apps' shares come from, read through the backend's runner
        # (both backends have one; a backend without it cannot read the tree: daemon/tenancy.py's fallback)
        runner = getattr(backend, "runner", None)
        self.tenancy = TenancyKeeper(cfg.tenancy, SharesReader(runner, cfg.slurm.action_timeout_s)
                                     if runner is not None else None)  # fmt: skip
        self._tree: Tenancy = FLAT  # this cycle's (set at the start of each cycle)
        self._books: dict[Entity, BookRow] = {}  # the tenants' books for paced quotas (planning.advance_books)
        self._stored_tree: object = None  # the tree last written for the status API (store v9 `tenancy`)
        self._quotas: dict[Entity, float | None] = {}  # each tenant's quota in the last round (metrics)

    def cycle(self) -> CycleReport:
        """One poll cycle: the steps of STEPS in order, until one ends it (the module docstring)."""
        c = Cycle(self.perf())
        self.actor.reset()
        for step in STEPS:
            step(self, c)
            if c.report is not None:
                break
        assert c.report is not None
        return c.report

    def arbitrate(self, state: ClusterState) -> Decision:
        """The core's round under the configured arbiter."""
        return run_round(state, self.cfg.scheduler.arbiter())

    def reload(self, new: Config) -> None:
        """Applies a validated new config; keys bound at start are reported and keep their old value."""
        fixed = self.cfg.restart_only_changes(new)
        if fixed:
            log.warning("config reload: %s change(s) need a restart; keeping the old value(s)", ", ".join(fixed))
            new = replace(new, state_dir=self.cfg.state_dir, metrics=self.cfg.metrics, api=self.cfg.api,
                          slurm=replace(self.cfg.slurm, job_submit_conf=new.slurm.job_submit_conf))
        if new.mode != self.cfg.mode:
            log.warning("config reload: mode %s -> %s", self.cfg.mode, new.mode)
        self.cfg = new
        self._last_signature = None
        self.tenancy.configure(new.tenancy)  # the tree is read again at the next cycle (SIGHUP)
        self.calibrations.reset()

    @property
    def backlog(self) -> dict[str, PendingAction]:
        """Job id -> the Slurm action that failed or was put off (acting.py)."""
        return self.actor.backlog

    def pending_actions(self) -> list[dict[str, object]]:
        """The backlog as the status API shows it (oldest first)."""
        return self.actor.pending_actions()

    def calibration(self) -> Calibration:
        """Every user's estimate calibration as the last accounting made it (from the finished jobs in the
        store and that cycle's present jobs); before any, from the finished jobs alone."""
        return self.calibrations.current()
