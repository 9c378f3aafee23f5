"""A round as themisd runs it: the arbiter's answer checked against what the core does not see, and the
lines and metrics that tell of it.

The core places GPUs; Slurm also counts QOS and association limits across a user's jobs, and the CPUs and
memory of each node. Each waiting job is checked alone before the round (state/round_input.py); here the
round's grants are checked together: a set of grants that would pass a limit together, or a grant whose
CPUs or memory do not fit its nodes with the round's other grants, makes the round run again without it
(at most a few times; then such grants are dropped and their GPUs wait for the next round).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from themis_slurm import reasons
from themis_slurm.core.decision import Decision
from themis_slurm.core.state import ClusterState
from themis_slurm.daemon import room
from themis_slurm.daemon.acting import nodes_text
from themis_slurm.daemon.metrics import Metrics
from themis_slurm.daemon.planning import grants_over_limits, without_waiting
from themis_slurm.slurm.model import Snapshot
from themis_slurm.state.round_input import RoundInput
from themis_slurm.state.rows import JobRow

log = logging.getLogger("themisd")
#: Rounds run again at most this often when grants pass a Slurm limit together (within_limits).
LIMIT_RERUNS = 3
#: Rounds run again at most this often when grants do not fit the CPUs or memory of their nodes (within_room).
ROOM_RERUNS = 3

Run = Callable[[ClusterState], Decision]


def checked_round(
    inp: RoundInput, rows: Mapping[str, JobRow], snap: Snapshot, run: Run
) -> tuple[RoundInput, Decision]:
    """The round `run` decides on `inp`, within Slurm's limits and the nodes' room (module docstring); the
    input it was last run on comes back with it."""
    inp = narrowed_to_room(inp, snap, rows)
    inp, decision = within_limits(inp, run(inp.state), snap, rows, run)
    return within_room(inp, decision, snap, rows, lambda i: within_limits(i, run(i.state), snap, rows, run))


def narrowed_to_room(inp: RoundInput, snap: Snapshot, rows: Mapping[str, JobRow]) -> RoundInput:
    """The round's input with each waiting job that needs CPUs or memory allowed only where they could be
    free (daemon/room.py)."""
    if not snap.room:
        return inp
    state, cut = room.narrowed(inp.state, snap, rows, inp.waiting, inp.expired)
    for jid, nodes in sorted(cut.items()):
        log.debug(
            "room: job %s may go to %s only (CPUs/memory free)", jid, ",".join(sorted(nodes)) or "no node"
        )
    return inp if state is inp.state else replace(inp, state=state)


def within_limits(
    inp: RoundInput, decision: Decision, snap: Snapshot, rows: Mapping[str, JobRow], run: Run
) -> tuple[RoundInput, Decision]:
    """The round again without the grants that would pass a QOS or association limit together (each
    waiting job was checked alone before the round: slurm/limits.py); at most `LIMIT_RERUNS` times,
    then such grants are dropped (their GPUs wait for the next round)."""
    if snap.limits is None or not snap.limits.enforced:
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
            decision = run(inp.state)
    return inp, decision


def within_room(
    inp: RoundInput,
    decision: Decision,
    snap: Snapshot,
    rows: Mapping[str, JobRow],
    rerun: Callable[[RoundInput], tuple[RoundInput, Decision]],
) -> tuple[RoundInput, Decision]:
    """The round's grants checked against the CPUs and memory of their nodes (daemon/room.py): a grant
    that does not fit is moved to GPUs of the same placement level on nodes that have the room, else the
    round runs again with that job cut to those nodes (at most `ROOM_RERUNS` times, then such grants are
    dropped and their GPUs wait for the next round)."""
    if not snap.room:
        return inp, decision
    for k in range(ROOM_RERUNS + 1):
        checked = room.check(decision, inp.state, snap, rows)
        for jid, (old, new) in sorted(checked.moved.items()):
            log.info("room: job %s moved from %s to %s: its CPUs/memory do not fit there with this round's "
                     "other grants", jid, nodes_text(snap.topology.nodes_of(old)),
                     nodes_text(snap.topology.nodes_of(new)))  # fmt: skip
        decision = checked.decision
        if not checked.short:
            break
        for jid, nodes in sorted(checked.short.items()):
            log.info(
                "room: job %s not granted where the round placed it: its CPUs/memory do not fit there; "
                "it fits on %s",
                jid,
                ",".join(sorted(nodes)) or "no node now",
            )
        if k == ROOM_RERUNS:
            break  # the short grants were left out of checked.decision
        inp, decision = rerun(replace(inp, state=room.cut_to(inp.state, checked.short)))
    return inp, decision


def _t(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else time.strftime("%H:%M:%S", time.localtime(x))


def log_decision(d: Decision, trigger: str, latency: float, mode: str, knob: float) -> None:
    """One line per decision, in words made by themis_slurm.reasons from the Decision's typed fields."""
    verb = "" if mode == "enforce" else "would "
    log.info("round (%s) solver=%s offered=%d grants=%d renewals=%d preemptions=%d reserved=%d in %.3fs%s",
             trigger, d.solver, d.offered_gpus, len(d.grants), len(d.renewals), len(d.preemptions),
             len(d.reserved_gpus), latency, "" if mode == "enforce" else " [observe: nothing applied]")  # fmt: skip
    recs = d.apps
    for aid, rec in recs.items():
        if reasons.holds_gpus_idle(rec.reservation):
            log.info("%sreserve app=%s: %s", verb, aid, reasons.reservation(rec.reservation))
    for g in d.grants:
        rec = recs.get(g.app_id)
        log.info("%sgrant app=%s job=%s gpus=%d nodes=%s planned_level=%s lease_until=%s reason=%s: %s", verb,
                 g.app_id, g.job_id, len(g.gpus), nodes_text(g.nodes), g.level, _t(g.lease_expiry), g.source,
                 reasons.app_record(rec, knob) if rec else "")  # fmt: skip
    for r in d.renewals:
        log.info("%srenew app=%s job=%s gpus=%d lease_until=%s reason=%s", verb, r.app_id, r.job_id,
                 len(r.gpus), _t(r.lease_expiry), reasons.renewal(r))  # fmt: skip
    for p in d.preemptions:
        rec = recs.get(p.app_id)
        log.info("%spreempt app=%s job=%s gpus=%d reason=%s (rho %.3f)", verb, p.app_id, p.job_id,
                 len(p.gpus), reasons.preemption_cause(p.cause), rec.rho_before if rec else float("nan"))  # fmt: skip


def count_round(m: Metrics, d: Decision, mode: str, latency: float) -> None:
    """The round's metrics: its count and latency, its decisions by action, and the apps' rho after it."""
    m.rounds.labels(mode).inc()
    m.round_seconds.observe(latency)
    for action, n in (
        ("grant", len(d.grants)),
        ("renewal", len(d.renewals)),
        ("preemption", len(d.preemptions)),
    ):
        m.decisions.labels(action, mode).inc(n)
    rhos = [r.rho_after for r in d.apps.values() if math.isfinite(r.rho_after)]
    for x in rhos:
        m.rho.observe(x)
    m.rho_worst.set(max(rhos, default=0.0))
