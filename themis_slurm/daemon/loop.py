"""One poll cycle of themisd: the imperative shell around the pure parts (reconcile, planning, the arbiter).

A cycle is: one bulk Slurm read (snapshot) -> reconcile intent with reality (record, act, record) ->
account service, estimates and contention -> if a round is due, run it and record the Decision and the
new intents in one transaction -> act on it in a safe order (warn losers first; start a granted job only
once every node it was granted has room) -> metrics. Renewals are a database write only.

Every Slurm action is preceded by a committed intent and followed by a committed outcome; actions are
idempotent; so a crash anywhere is repaired by the next cycle's reconcile (see reconcile.py). Errors of
single Slurm actions are logged and counted, and the next cycle retries them; an error reading Slurm skips
the cycle. Observe mode never calls an action (guarded here as well as in reconcile).

Time. Every decision of a cycle is made from one read of Slurm, so every action is taken only while that
read is fresh (``slurm.act_within_s``): once a slow controller has made the cycle late, the remaining
actions wait for the next cycle's read instead of acting on a stale view (holding a job that has started
since, say). Each action command has its own short timeout (``slurm.action_timeout_s``). The times an
action's effect is measured from (a release's start timeout, a warning's grace) are taken when the action
was sent (`Daemon._now`), not when the cycle's read began. Actions that failed or waited are listed in
`Daemon.backlog` (the status API shows them) until they are done or their job is gone.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from themis_slurm import reasons
from themis_slurm.core.arbiter import run_round
from themis_slurm.core.calibration import (
    NONE,
    Calibration,
    UserHistory,
    calibrate,
    finished_ratio,
    with_present,
)
from themis_slurm.core.decision import Decision
from themis_slurm.core.state import ClusterState
from themis_slurm.core.tenancy import FLAT, Entity, Tenancy
from themis_slurm.core.workload import App
from themis_slurm.daemon import room
from themis_slurm.daemon.config import Config
from themis_slurm.daemon.estimates import present_by_user
from themis_slurm.daemon.metrics import Metrics, tenant_members
from themis_slurm.daemon.planning import (
    account,
    advance_apps,
    advance_books,
    as_applied,
    build_round,
    grants_over_limits,
    instead_of_migrations,
    intents_after,
    round_due,
    settled,
    startable,
    without_waiting,
)
from themis_slurm.daemon.reconcile import Fix, reconcile
from themis_slurm.daemon.tenancy import TenancyKeeper
from themis_slurm.gc_pause import collector_paused
from themis_slurm.slurm.actions import ActionRefused
from themis_slurm.slurm.model import ManagedJob, SlurmBackend, Snapshot
from themis_slurm.slurm.shares import SharesReader
from themis_slurm.state.held import held_for_granted
from themis_slurm.state.intents import Intent
from themis_slurm.state.jobs import done_and_work, submitted
from themis_slurm.state.record import InPlace, RoundFacts, record_round
from themis_slurm.state.round_input import RoundInput, cluster_gpus_of
from themis_slurm.state.rows import AppRow, BookRow, JobRow
from themis_slurm.state.store import Store
from themis_slurm.tenant_levels import summarise

log = logging.getLogger("themisd")
#: Finished jobs kept per user for calibration: at least this many, more when the window is larger (a
#: config reload that widens the window then has the history at once).
HISTORY_KEPT = 200

# Reasons a released job may stay pending for that say nothing about the job itself (the GPUs were not free
# yet, a scheduling pass had not run, it was held again): no reason to keep it out of the next rounds.
#: Rounds run again at most this often when grants pass a Slurm limit together (_within_limits).
LIMIT_RERUNS = 3
#: Rounds run again at most this often when grants do not fit the CPUs or memory of their nodes (_within_room).
ROOM_RERUNS = 3

NOT_THE_JOBS_FAULT = frozenset({"", "None", "Priority", "Resources", "JobHeldUser", "JobHeldAdmin",
                                "BeginTime", "job_requeued_in_held_state"})


@dataclass(frozen=True)
class PendingAction:
    """A Slurm action that failed or was put off, retried by later cycles until it is done or moot."""

    job_id: str
    app_key: str
    action: str
    since: float  # when it first failed or was put off
    tries: int
    error: str  # Slurm's message, the timeout, or why it was put off


@dataclass(frozen=True)
class CycleReport:
    """What one cycle did (for tests, the benchmark and the debug log)."""

    time: float
    duration_s: float
    slurm_calls: int
    snapshot_s: float
    fixes: int
    trigger: str | None = None
    round_s: float = 0.0
    grants: int = 0
    renewals: int = 0
    preemptions: int = 0
    actions: int = 0
    errors: int = 0
    decision: Decision | None = None
    deferred: int = 0  # actions put off to the next cycle (the cycle's read had grown stale)


def _nodes(nodes: Mapping[str, int]) -> str:
    return ",".join(f"{n}:{c}" for n, c in sorted(nodes.items())) or "-"


def _t(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else time.strftime("%H:%M:%S", time.localtime(x))


class Daemon:
    """themisd's state between cycles: config, backend, store, metrics, and the last idle signature."""

    def __init__(self, cfg: Config, backend: SlurmBackend, store: Store, metrics: Metrics | None = None,
                 perf: Callable[[], float] = time.perf_counter) -> None:
        self.cfg = cfg
        self.backend = backend
        self.store = store
        self.metrics = metrics or Metrics()
        self.perf = perf
        self._last_signature: object = None
        self._seen_warnings: frozenset[str] = frozenset()
        self._actions = 0
        self._errors = 0
        self._deferred = 0
        self._snap_time = 0.0  # the current cycle's read: wall time, and perf() when it began
        self._snap_perf = 0.0
        #: job id -> the action that failed or was put off (served by the status API, pruned every cycle)
        self.backlog: dict[str, PendingAction] = {}
        # job id -> (why, until): a released job that Slurm kept pending for a reason Themis cannot see on a
        # held job (QOS/association limits, ...) is not granted again before `until` (one lease); kept in the
        # store too, so that a restart does not grant the same impossible start again
        self._learned: dict[str, tuple[str, float]] = store.learned()
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
        # calibration: the histories read from the store when needed, the Calibration they make alone
        # (`_finished_cal`, until a job finishes) and with this cycle's present jobs (`_calibration`)
        self._histories: dict[str, UserHistory] | None = None
        self._finished_cal: Calibration | None = None
        self._calibration: Calibration | None = None
        self._cal_sources: dict[str, str] = {}  # user -> where their factor came from, last logged

    # ------------------------------------------------------------------------------------------ config
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
        self._histories = self._finished_cal = self._calibration = None

    # ------------------------------------------------------------------------------------------ actions
    def _now(self) -> float:
        """Wall time now, on the clock of the cycle's read: the read's time plus what the cycle spent since."""
        return self._snap_time + (self.perf() - self._snap_perf)

    def _fresh(self, action: str, *mjs: ManagedJob) -> bool:
        """True while the cycle's read is recent enough to act on; else the actions are put off (backlog)."""
        age = self.perf() - self._snap_perf
        if age <= self.cfg.slurm.act_within_s:
            return True
        for mj in mjs:
            self._deferred += 1
            self._pending(action, mj, f"put off: this cycle's read of Slurm is {age:.0f} s old "
                                      f"(slurm.act_within_s {self.cfg.slurm.act_within_s:g})")
        return False

    def pending_actions(self) -> list[dict[str, object]]:
        """The backlog as the status API shows it (oldest first)."""
        return [{"job": p.job_id, "app": p.app_key, "action": p.action, "since": p.since, "tries": p.tries,
                 "error": p.error} for p in sorted(self.backlog.values(), key=lambda p: (p.since, p.job_id))]

    def _pending(self, action: str, mj: ManagedJob, error: str) -> None:
        old = self.backlog.get(mj.job_id)
        same = old is not None and old.action == action
        self.backlog[mj.job_id] = PendingAction(mj.job_id, mj.app_key, action, old.since if same else self._now(),
                                                (old.tries if same else 0) + 1, error)  # fmt: skip

    def _act(self, action: str, mj: ManagedJob, *args: object) -> bool | None:
        """Calls one backend action, timing it: True when done, False (logged, counted, in the backlog) when
        Slurm failed, None when the adapter refused it because the job is not in the state it is for."""
        if self.cfg.mode != "enforce":
            raise RuntimeError(f"observe mode must not {action} job {mj.job_id}")
        t0 = self.perf()
        self._actions += 1
        try:
            getattr(self.backend, action)(mj, *args)
        except ActionRefused as e:  # the job is not in the state the action is for (it started, say)
            log.warning("slurm %s not sent app=%s job=%s: %s", action, mj.app_key, mj.job_id, e)
            self.backlog.pop(mj.job_id, None)
            return None
        except Exception as e:  # a Slurm command failed: the next cycle's reconcile retries
            self._errors += 1
            self.metrics.slurm_errors.labels(action).inc()
            log.error("slurm %s failed app=%s job=%s: %s", action, mj.app_key, mj.job_id, e)
            self._pending(action, mj, str(e))
            return False
        finally:
            self.metrics.slurm_seconds.labels(action).observe(self.perf() - t0)
            self.metrics.slurm_calls.inc()
        self.backlog.pop(mj.job_id, None)
        return True

    # ------------------------------------------------------------------------------------------ cycle
    def cycle(self) -> CycleReport:
        """One poll cycle (see the module docstring)."""
        c0 = self.perf()
        self._actions = self._errors = self._deferred = 0
        try:
            snap = self.backend.snapshot()
        except Exception as e:
            self.metrics.slurm_errors.labels("snapshot").inc()
            log.error("reading Slurm failed, cycle skipped: %s", e)
            return CycleReport(time.time(), self.perf() - c0, 0, self.perf() - c0, 0, errors=1)
        snap_s = self.perf() - c0
        self.last_snapshot = snap
        self.metrics.slurm_seconds.labels("snapshot").observe(snap.latency_s or snap_s)
        self.metrics.slurm_calls.inc(snap.slurm_calls)
        now = snap.time
        self._snap_time, self._snap_perf = now, c0
        self._log_warnings(snap.warnings)
        jobs = {m.job_id: m for m in snap.managed}
        self.backlog = {j: p for j, p in self.backlog.items() if j in jobs}

        rows = self.store.jobs()
        fixes = reconcile(now, jobs, rows, self.cfg)
        for fix in fixes:
            self._apply_fix(fix, jobs, rows, now, snap)
        if any(f.kind != "new" for f in fixes):
            self._last_signature = None  # intents changed: a round may decide something new

        self._tree = self.tenancy.tenancy(now)  # refreshed every tenancy.refresh_s and after a reload
        cur = self.tenancy.current
        if cur is not None and (cur.tenancy, cur.line, self.tenancy.read_at) != self._stored_tree:
            with self.store.tx():  # the status API shows levels and shares from it (no Slurm call)
                self.store.put_tenancy(cur.tenancy, cur.line, self.tenancy.read_at, now)
            self._stored_tree = (cur.tenancy, cur.line, self.tenancy.read_at)
        apps = self._account(snap, jobs, rows, now)
        self.tenancy.check_apps((a.account, a.owner) for a in apps.values())

        gone = [j for j, v in self._learned.items() if j not in jobs or v[1] <= now]
        if gone:
            with self.store.tx():
                self.store.forget_learned(gone)
            self._learned = {j: v for j, v in self._learned.items() if j not in gone}
        inp = build_round(snap, rows, apps, self.cfg, now, {j: why for j, (why, _) in self._learned.items()},
                          tenancy=self._tree, books=self._books)
        trigger = round_due(inp, self._last_signature)
        report = dict(trigger=trigger)
        if trigger is not None:
            report.update(self._round(inp, trigger, jobs, rows, apps, now))
        if self.cfg.mode == "enforce":
            self._start_granted(snap, jobs, rows, now)

        if self._deferred:
            log.warning("%d Slurm action(s) put off to the next cycle: this cycle's read of Slurm grew older "
                        "than slurm.act_within_s (%gs) while acting", self._deferred, self.cfg.slurm.act_within_s)
        self._metrics(snap, inp, rows, apps)
        duration = self.perf() - c0
        self.metrics.cycle_seconds.observe(duration)
        self.metrics.last_cycle.set(now)
        self.last_cycle_time = now
        return CycleReport(now, duration, snap.slurm_calls + self._actions, snap_s, len(fixes),
                           actions=self._actions, errors=self._errors, deferred=self._deferred,
                           **report)  # type: ignore[arg-type]

    def _log_warnings(self, warnings: Iterable[str]) -> None:
        current = frozenset(warnings)
        for w in sorted(current - self._seen_warnings):
            log.warning("slurm: %s", w)
        self._seen_warnings = current

    def _apply_fix(self, fix: Fix, jobs: Mapping[str, ManagedJob], rows: dict[str, JobRow], now: float,
                   snap: Snapshot) -> None:
        """Record the intent, act, record the outcome (reconcile.py explains why in this order).

        A fix with an action is left whole to the next cycle once the read it was made from is stale.
        """
        if fix.action is not None and not self._fresh(fix.action, jobs[fix.job_id]):
            return
        prev = rows.get(fix.job_id)
        with self.store.tx():
            if fix.before is None:
                old = rows.pop(fix.job_id, None)
                if old is not None:
                    old = settled(old, *snap.finished_times.get(fix.job_id, (None, None)))
                    self._book_finished(old, snap.finished.get(fix.job_id), now)
                self.store.delete_job(fix.job_id)
            else:
                self.store.put_job(fix.before)
                rows[fix.job_id] = fix.before
            self.store.add_event(now, fix.kind, fix.reason, fix.job_id, fix.app_key)
        self.metrics.events.labels(fix.kind).inc()
        mj = jobs.get(fix.job_id)
        if fix.kind == "release-timeout" and mj is not None and mj.reason not in NOT_THE_JOBS_FAULT:
            why = f"{mj.reason}: Slurm kept it pending when Themis released it"
            with self.store.tx():
                self.store.put_learned(fix.job_id, why, now + self.cfg.scheduler.lease_s)
            self._learned[fix.job_id] = (why, now + self.cfg.scheduler.lease_s)
            log.warning("job %s (app %s) not granted again for %.0f s: %s", fix.job_id, fix.app_key,
                        self.cfg.scheduler.lease_s, why)
        if fix.kind == "started" and mj is not None and fix.before is not None:
            self._check_placement(fix.before, mj)
        level = logging.DEBUG if fix.kind == "new" and fix.action is None else logging.INFO
        log.log(level, "%s app=%s job=%s: %s", fix.kind, fix.app_key, fix.job_id, fix.reason)
        if fix.action is None:
            return
        args = (dict(fix.before.planned_nodes),) if fix.action == "start" and fix.before is not None else ()
        ok = self._act(fix.action, jobs[fix.job_id], *args)
        if ok is None and fix.kind == "release-timeout" and prev is not None:
            with self.store.tx():  # it started after all (not held): still `starting`, the next read shows it
                self.store.put_job(prev)
            rows[fix.job_id] = prev
        if ok and fix.after is not None:
            after = fix.after
            if fix.action == "warn":  # the grace runs from when the signal went out
                after = replace(after, warn_time=self._now())
            with self.store.tx():
                self.store.put_job(after)
            rows[fix.job_id] = after

    def _check_placement(self, row: JobRow, mj: ManagedJob) -> None:
        """Slurm picks GPU indices inside a node (nothing pins them): log and count what the job really got.

        Accounting (service, rho) always uses the GPUs Slurm reports; this only makes a plan that did not
        come true visible, so that logs and `explain` never claim a placement the job does not have.
        """
        topo = self.last_snapshot.topology if self.last_snapshot is not None else None
        if topo is None or not mj.gpu_ids:
            return
        actual = topo.level_of(mj.gpu_ids)
        where = ",".join(f"{topo.gpus[g].node}:{topo.gpus[g].index}" for g in sorted(mj.gpu_ids))
        if not row.planned_gpus or set(row.planned_gpus) == set(mj.gpu_ids):
            log.info("placed app=%s job=%s gpus=%s level=%s (as planned)", mj.app_key, mj.job_id, where,
                     actual.name.lower())
            return
        planned = topo.level_of(row.planned_gpus)
        changed = planned != actual
        self.metrics.placement_mismatch.labels(str(changed).lower()).inc()
        log.log(logging.WARNING if changed else logging.INFO,
                "placed app=%s job=%s gpus=%s level=%s, not as planned (%s level on other GPUs of the same "
                "nodes: Slurm chooses GPU indices inside a node); rho uses the real placement", mj.app_key,
                mj.job_id, where, actual.name.lower(), planned.name.lower())

    def _book_finished(self, row: JobRow, state: str | None, now: float) -> None:
        """A job left: what it did stays in its app's T_id (App.finished_work), and a job that ended
        COMPLETED joins its user's calibration history (cancelled, failed or timed-out jobs, and jobs that
        left unseen, say nothing about how good their estimate was)."""
        app = self.store.apps().get(row.app_key)
        if app is not None:
            done, _, _ = done_and_work(row.work, row.done_service, row.progress)
            self.store.put_app(replace(app, finished_work=app.finished_work + done))
            if not self._tree.flat:  # and in its tenant's book (paced quotas)
                shell = App(row.app_key, app.owner, app.arrival, account=app.account)
                self.store.add_tenant_finished(self._tree.path(shell)[-1], done)
        if state != "COMPLETED" or finished_ratio(row.est_work, row.done_service) is None:
            return
        user = app.owner if app is not None else row.app_key.partition("/")[0]
        cal = self.cfg.estimates.calibration()
        self.store.add_finished(row.job_id, user, row.app_key, now, row.est_work, row.done_service,
                                keep=max(cal.window, HISTORY_KEPT))
        self._histories = self._finished_cal = None  # read again (a few rows per user) at the next accounting
        self.metrics.calibration_samples.inc()
        log.info("calibration app=%s job=%s: completed after %.0f of an estimated %.0f GPU-s (ratio %.2f)",
                 row.app_key, row.job_id, row.done_service, row.est_work, row.done_service / row.est_work)

    def calibration(self) -> Calibration:
        """Every user's estimate calibration as the last accounting made it (from the finished jobs in the
        store and that cycle's present jobs); before any, from the finished jobs alone."""
        if self._calibration is not None:
            return self._calibration
        return self._learned_calibration()

    def _learned_calibration(self) -> Calibration:
        """What the finished jobs in the store say (cached until one more job finishes or the config is
        reloaded)."""
        if self._finished_cal is not None:
            return self._finished_cal
        cal = self.cfg.estimates.calibration()
        if not cal.enabled:
            self._finished_cal = NONE
            return NONE
        if self._histories is None:
            self._histories = {
                user: UserHistory.of(((r, w) for e, w in pairs if (r := finished_ratio(e, w)) is not None),
                                     cal.window)
                for user, pairs in self.store.finished_history(cal.window).items()
            }
        self._finished_cal = calibrate(self._histories, cal)
        return self._finished_cal

    def _calibrate_now(self, rows: Mapping[str, JobRow], jobs: Mapping[str, ManagedJob]) -> Calibration:
        """This cycle's calibration: the finished jobs' with what the present jobs add (core/calibration.py:
        started jobs past their estimates raise their users' at once; users without evidence are held to
        their peers' claims). A user whose factor comes from a new place is logged once."""
        learned = self._learned_calibration()
        cal = self.cfg.estimates.calibration()
        present = present_by_user(rows, jobs, self.cfg.estimates) if cal.enabled else {}
        now = with_present(learned, self._histories or {}, present, cal)
        self._calibration = now
        for user in present:
            source = now.source(user)
            if self._cal_sources.get(user) != source:
                self._cal_sources[user] = source
                log.info("calibration user=%s: factor %.3g from %s", user, now.factor(user), source)
        for user in [u for u in self._cal_sources if u not in present]:
            del self._cal_sources[user]
        return now

    def _account(self, snap: Snapshot, jobs: Mapping[str, ManagedJob], rows: dict[str, JobRow],
                 now: float) -> dict[str, AppRow]:
        """Service, estimates, progress and contention, written in one transaction (changed rows only)."""
        changed: list[JobRow] = []
        delta: dict[str, float] = {}
        cal = self._calibrate_now(rows, jobs)
        for jid, row in rows.items():
            mj = jobs.get(jid)
            if mj is None:
                continue
            new, notes = account(row, mj, snap.topology, now, self.cfg, cal.factor(mj.user))
            for note in notes:
                log.warning("estimate app=%s job=%s: %s", mj.app_key, jid, note)
            if new != row:
                changed.append(new)
                delta[mj.app_key] = delta.get(mj.app_key, 0.0) + new.service_s - row.service_s
        old_apps = self.store.apps()
        submits = {jid: submitted(row, mj) for jid, row in rows.items() if (mj := jobs.get(jid)) is not None}
        apps = advance_apps(old_apps, snap.managed, now, delta, submits, tenancy=self._tree)
        old_books = self.store.tenant_books()
        self._books = advance_books(old_books, apps, self._tree, now, cluster_gpus_of(snap))
        with self.store.tx():
            self.store.put_jobs(changed)
            self.store.put_apps(app for key, app in apps.items() if old_apps.get(key) != app)
            if self._books or old_books:
                self.store.put_tenant_books(self._books)
        for new in changed:
            rows[new.job_id] = new
        return {k: a for k, a in apps.items() if a.active}

    # ------------------------------------------------------------------------------------------ round
    def _round(self, inp: RoundInput, trigger: str, jobs: Mapping[str, ManagedJob], rows: dict[str, JobRow],
               apps: Mapping[str, AppRow], now: float) -> dict[str, object]:
        cfg = self.cfg
        t0 = self.perf()
        signature = inp.signature  # as round_due saw it (the room check takes full nodes' GPUs out of the round)
        try:
            with collector_paused():  # themis_slurm/gc_pause.py: the round's garbage goes by reference counting
                def rerun(state: ClusterState) -> Decision:
                    return run_round(state, cfg.scheduler.arbiter())

                inp = self._narrowed_to_room(inp, rows)
                inp, decision = self._within_limits(inp, rerun(inp.state), rows, rerun)
                inp, decision = self._within_room(inp, decision, rows,
                                                  lambda i: self._within_limits(i, rerun(i.state), rows, rerun))
        except Exception:
            log.exception("arbiter round failed (trigger: %s); state kept, retried next cycle", trigger)
            return {}
        latency = self.perf() - t0
        mode = cfg.mode
        in_place: dict[str, InPlace] = {}
        if mode == "enforce" and any(g.migrated for g in decision.grants):  # the round's jobs, for their kind
            in_place = instead_of_migrations(decision, rows, {j.id: j for a in inp.state.apps for j in a.jobs})
        decision = as_applied(decision, in_place)  # logged and recorded as carried out (issue 38 item 10)
        new_rows = intents_after(decision, rows, cfg, now, in_place)
        knob = cfg.scheduler.fairness_knob
        record_round(self.store, RoundFacts(now, mode, trigger, latency, knob), decision, apps, new_rows, in_place)
        self._last_signature = signature  # only once recorded: a round the store refused runs again
        rows.update(new_rows)
        self._quotas = {rec.tenant: rec.tenant_quota for rec in decision.apps.values() if rec.tenant}
        self._log_decision(decision, trigger, latency, mode, knob)
        for y, ip in in_place.items():
            log.info("renew app=%s job=%s in place instead of moving job %s onto its GPUs "
                     "(one preemption instead of two)", ip.renewal.app_id, y, ip.instead_of)

        m = self.metrics
        m.rounds.labels(mode).inc()
        m.round_seconds.observe(latency)
        for action, n in (("grant", len(decision.grants)), ("renewal", len(decision.renewals)),
                          ("preemption", len(decision.preemptions))):
            m.decisions.labels(action, mode).inc(n)
        rhos = [r.rho_after for r in decision.apps.values() if math.isfinite(r.rho_after)]
        for x in rhos:
            m.rho.observe(x)
        m.rho_worst.set(max(rhos, default=0.0))

        if mode == "enforce":
            # the `warning` intents were committed with the round; the outcomes go in one transaction
            # (a crash before it re-sends SIGUSR1: at least once, as documented)
            warned: list[JobRow] = []
            for p in decision.preemptions:
                row = rows.get(p.job_id)
                if row is None or row.intent != Intent.WARNING or p.job_id not in jobs:
                    continue
                m.preemptions.inc()
                if self._fresh("warn", jobs[p.job_id]) and self._act("warn", jobs[p.job_id]):
                    warned.append(replace(row, intent=Intent.WARNED, warn_time=self._now()))
            with self.store.tx():
                self.store.put_jobs(warned)
            rows.update((r.job_id, r) for r in warned)
        return dict(round_s=latency, grants=len(decision.grants), renewals=len(decision.renewals),
                    preemptions=len(decision.preemptions), decision=decision)

    def _within_limits(self, inp: RoundInput, decision: Decision, rows: Mapping[str, JobRow],
                       rerun: Callable[[ClusterState], Decision]) -> tuple[RoundInput, Decision]:
        """The round again without the grants that would pass a QOS or association limit together (each
        waiting job was checked alone before the round: slurm/limits.py); at most `LIMIT_RERUNS` times,
        then such grants are dropped (their GPUs wait for the next round)."""
        snap = self.last_snapshot
        if snap is None or snap.limits is None or not snap.limits.enforced:
            return inp, decision
        for k in range(LIMIT_RERUNS + 1):
            over = grants_over_limits(decision, snap, rows)
            if not over:
                break
            for jid, why in sorted(over.items()):
                log.info("limit: job %s not granted in this round: %s", jid, why)
            inp = without_waiting(inp, over)
            if k == LIMIT_RERUNS:
                decision = replace(decision, grants=tuple(g for g in decision.grants if g.job_id not in over))
            else:
                decision = rerun(inp.state)
        return inp, decision

    def _narrowed_to_room(self, inp: RoundInput, rows: Mapping[str, JobRow]) -> RoundInput:
        """The round's input with each waiting job that needs CPUs or memory allowed only where they could be
        free (daemon/room.py)."""
        snap = self.last_snapshot
        if snap is None or not snap.room:
            return inp
        state, cut = room.narrowed(inp.state, snap, rows, inp.waiting, inp.expired)
        for jid, nodes in sorted(cut.items()):
            log.debug("room: job %s may go to %s only (CPUs/memory free)", jid, ",".join(sorted(nodes)) or "no node")
        return inp if state is inp.state else replace(inp, state=state)

    def _within_room(self, inp: RoundInput, decision: Decision, rows: Mapping[str, JobRow],
                     rerun: Callable[[RoundInput], tuple[RoundInput, Decision]]) -> tuple[RoundInput, Decision]:
        """The round's grants checked against the CPUs and memory of their nodes (daemon/room.py): a grant
        that does not fit is moved to GPUs of the same placement level on nodes that have the room, else the
        round runs again with that job cut to those nodes (at most `ROOM_RERUNS` times, then such grants are
        dropped and their GPUs wait for the next round)."""
        snap = self.last_snapshot
        if snap is None or not snap.room:
            return inp, decision
        for k in range(ROOM_RERUNS + 1):
            checked = room.check(decision, inp.state, snap, rows)
            for jid, (old, new) in sorted(checked.moved.items()):
                log.info("room: job %s moved from %s to %s: its CPUs/memory do not fit there with this round's "
                         "other grants", jid, _nodes(snap.topology.nodes_of(old)), _nodes(snap.topology.nodes_of(new)))
            decision = checked.decision
            if not checked.short:
                break
            for jid, nodes in sorted(checked.short.items()):
                log.info("room: job %s not granted where the round placed it: its CPUs/memory do not fit there; "
                         "it fits on %s", jid, ",".join(sorted(nodes)) or "no node now")
            if k == ROOM_RERUNS:
                break  # the short grants were left out of checked.decision
            inp, decision = rerun(replace(inp, state=room.cut_to(inp.state, checked.short)))
        return inp, decision

    def _log_decision(self, d: Decision, trigger: str, latency: float, mode: str, knob: float) -> None:
        """One line per decision, in words made by themis_slurm.reasons from the Decision's typed fields."""
        verb = "" if mode == "enforce" else "would "
        log.info("round (%s) solver=%s offered=%d grants=%d renewals=%d preemptions=%d reserved=%d in %.3fs%s",
                 trigger, d.solver, d.offered_gpus, len(d.grants), len(d.renewals), len(d.preemptions),
                 len(d.reserved_gpus), latency, "" if mode == "enforce" else " [observe: nothing applied]")
        recs = d.apps
        for aid, rec in recs.items():
            if reasons.holds_gpus_idle(rec.reservation):
                log.info("%sreserve app=%s: %s", verb, aid, reasons.reservation(rec.reservation))
        for g in d.grants:
            rec = recs.get(g.app_id)
            log.info("%sgrant app=%s job=%s gpus=%d nodes=%s planned_level=%s lease_until=%s reason=%s: %s", verb,
                     g.app_id, g.job_id, len(g.gpus), _nodes(g.nodes), g.level, _t(g.lease_expiry), g.source,
                     reasons.app_record(rec, knob) if rec else "")
        for r in d.renewals:
            log.info("%srenew app=%s job=%s gpus=%d lease_until=%s reason=%s", verb, r.app_id, r.job_id,
                     len(r.gpus), _t(r.lease_expiry), reasons.renewal(r))
        for p in d.preemptions:
            rec = recs.get(p.app_id)
            log.info("%spreempt app=%s job=%s gpus=%d reason=%s (rho %.3f)", verb, p.app_id, p.job_id,
                     len(p.gpus), reasons.preemption_cause(p.cause), rec.rho_before if rec else float("nan"))

    # ------------------------------------------------------------------------------------------ starts
    def _start_granted(self, snap: Snapshot, jobs: Mapping[str, ManagedJob], rows: dict[str, JobRow],
                       now: float) -> None:
        """Pin and release every granted job whose nodes have room now (intent `starting` first).

        The release time is when the releases go out; starts the cycle has no time left for go back to
        `granted` and wait for the next cycle's read.
        """
        held = held_for_granted(snap, rows.values())
        ids = [jid for jid in startable(held, rows, snap.topology) if jid in jobs and jobs[jid].state == "PENDING"]
        if not ids or not self._fresh("start", *(jobs[jid] for jid in ids)):
            return
        granted = {jid: rows[jid] for jid in ids}
        t = self._now()
        starting = [replace(granted[jid], intent=Intent.STARTING, release_time=t) for jid in ids]
        with self.store.tx():  # all intents first, in one commit; then the (idempotent) starts
            self.store.put_jobs(starting)
        sent: list[JobRow] = []  # each with the time its release went out (one commit after the starts)
        back: list[JobRow] = []
        for i, row in enumerate(starting):
            mj = jobs[row.job_id]
            if not self._fresh("start", *(jobs[r.job_id] for r in starting[i:])):
                back = [granted[r.job_id] for r in starting[i:]]
                break
            rows[row.job_id] = row
            log.info("start app=%s job=%s nodes=%s", mj.app_key, mj.job_id, _nodes(row.planned_nodes))
            if self._act("start", mj, dict(row.planned_nodes)):
                rows[row.job_id] = replace(row, release_time=self._now())
                sent.append(rows[row.job_id])
        with self.store.tx():
            self.store.put_jobs([*sent, *back])

    # ------------------------------------------------------------------------------------------ metrics
    def _metrics(self, snap: Snapshot, inp: RoundInput, rows: Mapping[str, JobRow],
                 apps: Mapping[str, AppRow]) -> None:
        starting = set().union(*inp.held.values()) if inp.held else set()
        managed_used = set(snap.managed_used) or {g for m in snap.managed for g in m.gpu_ids}
        self.metrics.set_gpus({
            "total": snap.topology.size,
            "free": len(snap.free - starting),
            "starting": len(starting),
            "leased": len(managed_used),
            "unmanaged": len(snap.unmanaged),
            "unavailable": len(snap.unavailable),
        })  # fmt: skip
        self.metrics.apps.set(len(apps))
        self.metrics.actions_retrying.set(len(self.backlog))
        cal = self.calibration()
        self.metrics.calibration_users.set(len(cal.by_user))
        self.metrics.calibration_cluster.set(cal.cluster)
        self.metrics.set_jobs(r.intent for r in rows.values())
        self.metrics.set_tenants(summarise(self._tree, tenant_members(apps, snap.managed), self._quotas).levels)
