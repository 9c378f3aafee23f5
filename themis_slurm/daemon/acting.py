"""themisd's Slurm actions: each one timed and counted, retried through a backlog, and sent only while the
cycle's read of Slurm is fresh.

Every decision of a cycle is made from one read of Slurm, so every action is taken only while that read is
fresh (``slurm.act_within_s``): once a slow controller has made the cycle late, the remaining actions wait
for the next cycle's read instead of acting on a stale view (holding a job that has started since, say).
The times an action's effect is measured from (a release's start timeout, a warning's grace) are taken when
the action was sent (:meth:`Actor.now`), not when the cycle's read began. Actions that failed or waited are
in :attr:`Actor.backlog` (the status API shows them) until they are done or their job is gone.

The two actions a round leads to are here too: warning the jobs it preempted, and starting the granted jobs
whose nodes have room (daemon/loop.py, the step ``act``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from themis_slurm.core.decision import Decision
from themis_slurm.daemon.config import Config
from themis_slurm.daemon.metrics import Metrics
from themis_slurm.daemon.planning import startable
from themis_slurm.slurm.actions import ActionRefused
from themis_slurm.slurm.model import ManagedJob, SlurmBackend, Snapshot
from themis_slurm.state.held import held_for_granted
from themis_slurm.state.intents import Intent
from themis_slurm.state.rows import JobRow
from themis_slurm.state.store import Store

log = logging.getLogger("themisd")


def nodes_text(nodes: Mapping[str, int]) -> str:
    """``node1:2,node2:2`` (``-`` for none), as the log lines name a placement."""
    return ",".join(f"{n}:{c}" for n, c in sorted(nodes.items())) or "-"


@dataclass(frozen=True)
class PendingAction:
    """A Slurm action that failed or was put off, retried by later cycles until it is done or moot."""

    job_id: str
    app_key: str
    action: str
    since: float  # when it first failed or was put off
    tries: int
    error: str  # Slurm's message, the timeout, or why it was put off


class Actor:
    """Sends themisd's Slurm actions (module docstring). `config` gives the configuration in force (a SIGHUP
    may change it between cycles)."""

    def __init__(
        self, backend: SlurmBackend, metrics: Metrics, config: Callable[[], Config], perf: Callable[[], float]
    ) -> None:
        self.backend = backend
        self.metrics = metrics
        self.config = config
        self.perf = perf
        #: job id -> the action that failed or was put off (served by the status API, pruned every cycle)
        self.backlog: dict[str, PendingAction] = {}
        self.actions = self.errors = self.deferred = 0  # this cycle's
        self._read_time = 0.0  # the current cycle's read: wall time, and perf() when it began
        self._read_perf = 0.0

    def begin(self, read_time: float, read_perf: float, jobs: Iterable[str]) -> None:
        """A new cycle read Slurm at `read_time` (perf() `read_perf`); the backlog keeps the jobs still there."""
        self._read_time, self._read_perf = read_time, read_perf
        live = set(jobs)
        self.backlog = {j: p for j, p in self.backlog.items() if j in live}

    def reset(self) -> None:
        self.actions = self.errors = self.deferred = 0

    def now(self) -> float:
        """Wall time now, on the clock of the cycle's read: the read's time plus what the cycle spent since."""
        return self._read_time + (self.perf() - self._read_perf)

    def fresh(self, action: str, *mjs: ManagedJob) -> bool:
        """True while the cycle's read is recent enough to act on; else the actions are put off (backlog)."""
        age = self.perf() - self._read_perf
        limit = self.config().slurm.act_within_s
        if age <= limit:
            return True
        for mj in mjs:
            self.deferred += 1
            self._pending(action, mj, f"put off: this cycle's read of Slurm is {age:.0f} s old "
                                      f"(slurm.act_within_s {limit:g})")  # fmt: skip
        return False

    def pending_actions(self) -> list[dict[str, object]]:
        """The backlog as the status API shows it (oldest first)."""
        return [
            {
                "job": p.job_id,
                "app": p.app_key,
                "action": p.action,
                "since": p.since,
                "tries": p.tries,
                "error": p.error,
            }
            for p in sorted(self.backlog.values(), key=lambda p: (p.since, p.job_id))
        ]

    def _pending(self, action: str, mj: ManagedJob, error: str) -> None:
        old = self.backlog.get(mj.job_id)
        same = old is not None and old.action == action
        self.backlog[mj.job_id] = PendingAction(mj.job_id, mj.app_key, action, old.since if same else self.now(),
                                                (old.tries if same else 0) + 1, error)  # fmt: skip

    def act(self, action: str, mj: ManagedJob, *args: object) -> bool | None:
        """Calls one backend action, timing it: True when done, False (logged, counted, in the backlog) when
        Slurm failed, None when the adapter refused it because the job is not in the state it is for."""
        if self.config().mode != "enforce":
            raise RuntimeError(f"observe mode must not {action} job {mj.job_id}")
        t0 = self.perf()
        self.actions += 1
        try:
            getattr(self.backend, action)(mj, *args)
        except ActionRefused as e:  # the job is not in the state the action is for (it started, say)
            log.warning("slurm %s not sent app=%s job=%s: %s", action, mj.app_key, mj.job_id, e)
            self.backlog.pop(mj.job_id, None)
            return None
        except Exception as e:  # a Slurm command failed: the next cycle's reconcile retries
            self.errors += 1
            self.metrics.slurm_errors.labels(action).inc()
            log.error("slurm %s failed app=%s job=%s: %s", action, mj.app_key, mj.job_id, e)
            self._pending(action, mj, str(e))
            return False
        finally:
            self.metrics.slurm_seconds.labels(action).observe(self.perf() - t0)
            self.metrics.slurm_calls.inc()
        self.backlog.pop(mj.job_id, None)
        return True


def warn_preempted(
    actor: Actor, store: Store, decision: Decision, rows: dict[str, JobRow], jobs: Mapping[str, ManagedJob]
) -> None:
    """SIGUSR1 to every job the round preempted. Their `warning` intents were committed with the round; the
    outcomes go in one transaction (a crash before it re-sends SIGUSR1: at least once, as documented)."""
    warned: list[JobRow] = []
    for p in decision.preemptions:
        row = rows.get(p.job_id)
        if row is None or row.intent != Intent.WARNING or p.job_id not in jobs:
            continue
        actor.metrics.preemptions.inc()
        if actor.fresh("warn", jobs[p.job_id]) and actor.act("warn", jobs[p.job_id]):
            warned.append(replace(row, intent=Intent.WARNED, warn_time=actor.now()))
    with store.tx():
        store.put_jobs(warned)
    rows.update((r.job_id, r) for r in warned)


def start_granted(
    actor: Actor, store: Store, snap: Snapshot, jobs: Mapping[str, ManagedJob], rows: dict[str, JobRow]
) -> None:
    """Pin and release every granted job whose nodes have room now (intent `starting` first).

    The release time is when the releases go out; starts the cycle has no time left for go back to
    `granted` and wait for the next cycle's read.
    """
    held = held_for_granted(snap, rows.values())
    ids = [
        jid for jid in startable(held, rows, snap.topology) if jid in jobs and jobs[jid].state == "PENDING"
    ]
    if not ids or not actor.fresh("start", *(jobs[jid] for jid in ids)):
        return
    granted = {jid: rows[jid] for jid in ids}
    t = actor.now()
    starting = [replace(granted[jid], intent=Intent.STARTING, release_time=t) for jid in ids]
    with store.tx():  # all intents first, in one commit; then the (idempotent) starts
        store.put_jobs(starting)
    sent: list[JobRow] = []  # each with the time its release went out (one commit after the starts)
    back: list[JobRow] = []
    for i, row in enumerate(starting):
        mj = jobs[row.job_id]
        if not actor.fresh("start", *(jobs[r.job_id] for r in starting[i:])):
            back = [granted[r.job_id] for r in starting[i:]]
            break
        rows[row.job_id] = row
        log.info("start app=%s job=%s nodes=%s", mj.app_key, mj.job_id, nodes_text(row.planned_nodes))
        if actor.act("start", mj, dict(row.planned_nodes)):
            rows[row.job_id] = replace(row, release_time=actor.now())
            sent.append(rows[row.job_id])
    with store.tx():
        store.put_jobs([*sent, *back])
