"""One round's Decision into the audit log, in one transaction: the round, a row per decision, each app's
rho after it, and the jobs' new intents.

Written before any Slurm action of the round (daemon/loop.py): a round the store refused is run again at
the next cycle, and a crash after the commit finds every intent the actions need (daemon/reconcile.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from themis_slurm.core.decision import AppRecord, Decision, Grant, Preemption, Renewal
from themis_slurm.state.rows import AppRow, DecisionRow, JobRow
from themis_slurm.state.store import Store


@dataclass(frozen=True)
class InPlace:
    """A renewal themisd makes instead of a migration the round decided (daemon/planning.instead_of_migrations):
    recorded as a renewal of the job kept in place, naming the job it kept from moving there."""

    renewal: Renewal  # Y keeps its GPUs (cause RenewalCause.IN_PLACE)
    instead_of: str  # X, the lease holder the round moved onto Y's GPUs (preempted now, as every migration)


@dataclass(frozen=True)
class RoundFacts:
    """What the rounds table says of a round besides its Decision."""

    time: float
    mode: str
    trigger: str
    latency_s: float
    fairness_knob: float


def _columns(item: Grant | Renewal | Preemption, rec: AppRecord | None) -> tuple[str, dict[str, Any]]:
    """The action and the columns of one grant, renewal or preemption (a grant also carries the record of
    the app it started)."""
    if isinstance(item, Grant):
        payment = rec.payment_fraction if rec else None
        return "grant", dict(record=rec, payment=payment, nodes=item.nodes, lease_expiry=item.lease_expiry,
                             source=item.source)  # fmt: skip
    if isinstance(item, Renewal):
        return "renewal", dict(lease_expiry=item.lease_expiry, cause=item.cause, cut_s=item.cut_s)
    return "preemption", dict(cause=item.cause)


def decision_rows(
    round_id: int, now: float, d: Decision, in_place: Mapping[str, InPlace]
) -> Iterator[DecisionRow]:
    """The audit rows of `d`, in the order they are stored: grants, renewals, preemptions (each with its
    app's rho before and after), the apps' records, then the renewals made in place of a migration."""
    recs = d.apps
    for item in (*d.grants, *d.renewals, *d.preemptions):
        rec = recs.get(item.app_id)
        action, columns = _columns(item, rec)
        yield DecisionRow.of(round_id, now, item.app_id, item.job_id, action, gpus=len(item.gpus),
                             rho_before=rec.rho_before if rec else None, rho_after=rec.rho_after if rec else None,
                             **columns)  # fmt: skip
    for rec in recs.values():
        yield DecisionRow.of(round_id, now, rec.app_id, None, "app", record=rec, rho_before=rec.rho_before,
                             rho_after=rec.rho_after, payment=rec.payment_fraction,
                             gpus=rec.won_gpus + rec.leftover_gpus)  # fmt: skip
    for y, ip in in_place.items():
        r = ip.renewal
        yield DecisionRow.of(round_id, now, r.app_id, y, "renewal", gpus=len(r.gpus), lease_expiry=r.lease_expiry,
                             cause=r.cause, instead_of=ip.instead_of)  # fmt: skip


def record_round(
    store: Store,
    facts: RoundFacts,
    d: Decision,
    apps: Mapping[str, AppRow],
    rows: Mapping[str, JobRow],
    in_place: Mapping[str, InPlace],
) -> int:
    """Writes round `d` in one transaction: its row in ``rounds`` (with the worst rho among the apps it saw,
    before its allocation), its decisions (:func:`decision_rows`), each recorded app's rho after it (`apps`:
    the apps' rows as they stand), and `rows`, the jobs' rows it changed. Returns the round's id."""
    standing = [r.rho_before for r in d.apps.values() if math.isfinite(r.rho_before)]
    with store.tx():
        rid = store.add_round(
            facts.time,
            facts.mode,
            facts.trigger,
            d.solver,
            d.offered_gpus,
            len(d.grants),
            len(d.renewals),
            len(d.preemptions),
            facts.latency_s,
            max(standing, default=None),
            facts.fairness_knob,
        )
        store.add_decisions(decision_rows(rid, facts.time, d, in_place))
        store.put_apps(
            replace(apps[rec.app_id], rho=rec.rho_after) for rec in d.apps.values() if rec.app_id in apps
        )
        store.put_jobs(rows.values())
    return rid
