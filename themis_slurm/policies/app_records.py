"""The :class:`AppRecord` of every app in a baseline's call (:meth:`BaselineScratchpad.decision
<themis_slurm.policies.scratchpad.BaselineScratchpad.decision>`), so `explain` works for baselines exactly
as for Themis.

The records are built when first read (core/decision.LazyRecords): the simulator never reads them, and a
contended cluster has thousands of waiting jobs whose reasons would otherwise be worded at every call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from themis_slurm.core.decision import AppRecord, Grant, Outcome
from themis_slurm.core.fairness import FairnessModel, job_throughput
from themis_slurm.core.workload import App, Job

if TYPE_CHECKING:  # the scratchpad calls this module for its records
    from themis_slurm.policies.scratchpad import BaselineScratchpad


@dataclass(frozen=True)
class _Tally:
    """Per app, what the call did: throughput before and after, the grants, the jobs active at its end and
    the running jobs it preempted for good."""

    before: dict[str, float]
    after: dict[str, float]
    started: dict[str, list[Grant]]
    held: dict[str, int]
    lost: dict[str, list[str]]


def _tally(pad: BaselineScratchpad) -> _Tally:
    topo, jobs, kept = pad.topo, pad.jobs, pad.holding()
    before: dict[str, float] = dict.fromkeys(pad.apps, 0.0)
    after: dict[str, float] = dict.fromkeys(pad.apps, 0.0)
    for jid, lease in pad.running.items():
        x = job_throughput(jobs[jid], lease.gpus, topo)
        before[jobs[jid].app_id] += x
        if jid not in pad.preempted:
            after[jobs[jid].app_id] += x
    started: dict[str, list[Grant]] = {}
    for g in pad.granted.values():
        after[g.app_id] += job_throughput(jobs[g.job_id], g.gpus, topo)
        started.setdefault(g.app_id, []).append(g)
    # per app, counted from the few active and preempted jobs instead of scanning every app's jobs
    # (a contended cluster has thousands waiting): active = kept or granted, each job once
    held: dict[str, int] = {}
    for jid in kept:
        aid = jobs[jid].app_id
        held[aid] = held.get(aid, 0) + 1
    for jid, g in pad.granted.items():
        if jid not in kept:
            held[g.app_id] = held.get(g.app_id, 0) + 1
    lost: dict[str, list[str]] = {}
    for jid in pad.preempted:
        if jid not in pad.granted:
            lost.setdefault(jobs[jid].app_id, []).append(jid)
    return _Tally(before, after, started, held, lost)


def _note(pad: BaselineScratchpad, app: App, t: _Tally, why_wait: dict[str, str]) -> tuple[str, int, int]:
    """(the record's note, GPUs started, jobs waiting) of one app."""
    gs = t.started.get(app.id, [])
    n_gpus = sum(len(g.gpus) for g in gs)
    lost = t.lost.get(app.id, ())
    held = t.held.get(app.id, 0)
    n_waiting = len(app.jobs) - held
    parts = [f"{pad.policy}: {held} running"]
    if gs:
        parts.append(f"started {len(gs)} job(s) on {n_gpus} GPU(s)")
    if lost:
        parts.append(f"{len(lost)} preempted ({pad.preempted[lost[0]]})")
    if n_waiting:
        first = ""
        if why_wait:
            reported = pad.reported_waiting(app)
            first = why_wait[reported.id] if reported is not None else ""
        parts.append(f"{n_waiting} waiting" + (f" ({first})" if first else ""))
    parts.extend(pad.notes.get(app.id, []))
    return "; ".join(parts), n_gpus, n_waiting


def app_records(pad: BaselineScratchpad, order: Sequence[Job]) -> dict[str, AppRecord]:
    """An AppRecord per app (Decision.apps); `order` is the policy's ranking of the waiting jobs."""
    model = FairnessModel(pad.topo, pad.state.cluster_gpus or pad.topo.size)
    rank: dict[str, int] = {}
    for j in order:
        if j.app_id not in rank and j.id not in pad.running:
            rank[j.app_id] = len(rank) + 1
    t = _tally(pad)
    why_wait = pad.why_wait  # runs the put-off wordings: reasons and notes
    records: dict[str, AppRecord] = {}
    for app in pad.state.apps:
        aid = app.id
        note, n_gpus, n_waiting = _note(pad, app, t, why_wait)
        records[aid] = AppRecord(
            app_id=aid,
            rho_before=model.rho(app, pad.now, t.before[aid]),
            rho_after=model.rho(app, pad.now, t.after[aid]),
            rank=rank.get(aid),
            bid=False,
            won_gpus=n_gpus,
            kept_gpus=n_gpus,
            leftover_gpus=0,
            note=note,
            outcome=Outcome.POLICY if n_waiting or t.started.get(aid) else Outcome.NOTHING_WAITING,
            ranked=len(rank),
        )
    return records
