"""Sentences about round outcomes, made from the typed fields of a Decision: the one renderer.

The core returns decisions as data (themis_slurm.core.decision: Outcome, KeptBy, RenewalCause,
PreemptionCause, ReservationNote, Grant.source); themisd stores those fields as columns of its audit log.
Words are made only at the edges, here, for themisd's log lines, the API's ``explain`` document and the
`themis explain` command, so rewording a sentence changes no stored data and breaks no reader. Nothing
outside this module turns outcomes into prose, and nothing anywhere parses prose back.

Every function takes plain values (or core.decision types) so that a decision row read back from the
database renders exactly as the Decision did when it was made.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from themis_slurm.core.decision import (
    AppRecord,
    GrantSource,
    KeptBy,
    Outcome,
    PreemptionCause,
    Renewal,
    RenewalCause,
    ReservationNote,
)


def reservation(note: ReservationNote) -> str:
    """The wide gang a round reserved GPUs for (AppRecord.reservation)."""
    if note.started:
        return f"job {note.job_id} started on its reservation ({note.gpus} GPUs)"
    if note.held:
        return (f"{note.held} of {note.gpus} GPU(s) reserved for job {note.job_id}, "
                f"complete in {note.start_in_s:.0f} s")
    return (f"job {note.job_id} starts on {note.gpus} GPU(s) whose leases end in {note.start_in_s:.0f} s "
            "(none held idle meanwhile)")


def holds_gpus_idle(note: ReservationNote | None) -> bool:
    """A reservation that keeps free GPUs out of the pool this round (what themisd logs as `reserve`)."""
    return note is not None and not note.started and note.held > 0


def app_outcome(outcome: Outcome | str, rank: int | None = None, ranked: int | None = None,
                won_gpus: int = 0, kept_gpus: int = 0, kept_by: KeptBy | str = KeptBy.ALL,
                payment_fraction: float | None = None, leftover_gpus: int = 0,
                note: ReservationNote | None = None, fairness_knob: float | None = None) -> str:
    """What a round did for an app, e.g. ``bid (rank 1), won 2 GPU(s), kept 1 after hidden payment c=0.500``.

    `fairness_knob` (the round's f) is named for an app that was not offered the pool.
    """
    outcome, kept_by = Outcome(outcome), KeptBy(kept_by)
    if outcome is Outcome.NOTHING_WAITING:
        text = "nothing waiting"
    elif outcome is Outcome.LOST:
        text = f"bid (rank {rank}) but won nothing"
    elif outcome is Outcome.POLICY:
        text = "scheduled by a baseline policy" + (f" (rank {rank} of {ranked})" if rank is not None else "")
    elif outcome is Outcome.WON:
        text = f"bid (rank {rank}), won {won_gpus} GPU(s)"
        if kept_by is KeptBy.PAYMENT:
            c = "?" if payment_fraction is None else f"{payment_fraction:.3f}"
            text += f", kept {kept_gpus} after hidden payment c={c}"
        elif kept_by is KeptBy.VISIBILITY:
            text += f", kept {kept_gpus} (rho down to the worst outside the auction)"
        elif kept_by is KeptBy.QUOTA:
            text += f", kept {kept_gpus} (its user or account is at its share of the cluster)"
    else:
        f = "?" if fairness_knob is None else f"{fairness_knob}"
        text = f"not offered (rank {rank} of {ranked}; f={f})"
    if leftover_gpus:
        text += f"; {leftover_gpus} GPU(s) from leftover"
    if note is not None:
        text += f"; {reservation(note)}"
    return text


def app_record(rec: AppRecord, fairness_knob: float | None = None) -> str:
    """:func:`app_outcome` of a core AppRecord."""
    return app_outcome(rec.outcome, rec.rank, rec.ranked, rec.won_gpus, rec.kept_gpus, rec.kept_by,
                       rec.payment_fraction, rec.leftover_gpus, rec.reservation, fairness_knob)


def grant(source: GrantSource | str, app_text: str) -> str:
    """Why a job was started: its grant's source (auction, leftover, reservation) and its app's outcome."""
    return f"{source}: {app_text}"  # a stored row's text as it is (an old row may hold any word)


def renewal_cause(cause: RenewalCause | str, cut_s: float | None = None, instead_of: str | None = None) -> str:
    """Why a lease holder keeps its GPUs. `instead_of`: the job an in-place renewal kept from moving."""
    cause = RenewalCause(cause)
    if cause is RenewalCause.NOT_PREEMPTIBLE:
        return "not preemptible: keeps its GPUs"
    if cause is RenewalCause.POLICY:
        return "kept running by the (baseline) policy"
    if cause is RenewalCause.WIDE_GANG:
        return "a started wide gang keeps its GPUs (its app is not clearly ahead; restarting needs them all free at once)"
    if cause is RenewalCause.UNSAVED:
        return ("keeps its GPUs: a preemption would throw away more unsaved work than its lease frees (it does not "
                "checkpoint; its app is not clearly ahead)")
    if cause is RenewalCause.RESERVATION:
        return ("the reservation's wide gang keeps its GPUs (its app is the worst-ranked bidder with a wide gang; "
                "restarting needs them all free at once)")
    if cause is RenewalCause.IN_PLACE:
        return f"renewed in place instead of moving job {instead_of or '?'} onto its GPUs"
    text = "won its GPUs back in the auction" if cause is RenewalCause.WON_BACK else "kept its GPUs as leftover"
    if cut_s is not None:
        text += f" (lease cut to {cut_s:.0f} s: hidden payment)"
    return text


def renewal(r: Renewal, instead_of: str | None = None) -> str:
    return renewal_cause(r.cause, r.cut_s, instead_of)


def preemption_cause(cause: PreemptionCause | str) -> str:
    """Why a lease holder loses its GPUs."""
    if PreemptionCause(cause) is PreemptionCause.MOVED:
        return "lease expired; moved to other GPUs"
    if PreemptionCause(cause) is PreemptionCause.POLICY:
        return "taken back by the (baseline) policy"
    return "lease expired and lost the auction"


# ------------------------------------------------------------------------------------------ stored rows
class StoredDecision(Protocol):
    """What the sentences read of a decision row of the audit log (state.rows.DecisionRow)."""

    @property
    def action(self) -> str: ...
    @property
    def outcome(self) -> str | None: ...
    @property
    def rank(self) -> int | None: ...
    @property
    def ranked(self) -> int | None: ...
    @property
    def won_gpus(self) -> int | None: ...
    @property
    def kept_gpus(self) -> int | None: ...
    @property
    def kept_by(self) -> str | None: ...
    @property
    def payment(self) -> float | None: ...
    @property
    def leftover_gpus(self) -> int | None: ...
    @property
    def reservation_job(self) -> str | None: ...
    @property
    def reservation_gpus(self) -> int | None: ...
    @property
    def reservation_held(self) -> int | None: ...
    @property
    def reservation_start_in_s(self) -> float | None: ...
    @property
    def reservation_started(self) -> int | None: ...
    @property
    def source(self) -> str | None: ...
    @property
    def cause(self) -> str | None: ...
    @property
    def cut_s(self) -> float | None: ...
    @property
    def instead_of(self) -> str | None: ...


def note_of(row: StoredDecision) -> ReservationNote | None:
    """The ReservationNote of a decision row (columns reservation_*), None when it has none."""
    if row.reservation_job is None:
        return None
    return ReservationNote(str(row.reservation_job), int(row.reservation_gpus or 0), int(row.reservation_held or 0),
                           float(row.reservation_start_in_s or 0.0), bool(row.reservation_started))


def app_row(row: StoredDecision, fairness_knob: float | None = None) -> str | None:
    """:func:`app_outcome` of a decision row's columns (outcome, rank, ...); None for a row without them
    (written by an older daemon: show its stored text as it is)."""
    if row.outcome is None:
        return None
    return app_outcome(row.outcome, row.rank, row.ranked, row.won_gpus or 0, row.kept_gpus or 0,
                       row.kept_by or KeptBy.ALL, row.payment, row.leftover_gpus or 0, note_of(row), fairness_knob)


def job_row(row: StoredDecision, fairness_knob: float | None = None) -> str | None:
    """The sentence of a grant, renewal or preemption row from its columns; None for an older daemon's row."""
    if row.action == "grant" and row.source is not None:
        return grant(str(row.source), app_row(row, fairness_knob) or "")
    if row.action == "renewal" and row.cause is not None:
        return renewal_cause(row.cause, row.cut_s, row.instead_of)
    if row.action == "preemption" and row.cause is not None:
        return preemption_cause(row.cause)
    return None


# ------------------------------------------------------------------------------------------ tenancy
@dataclass(frozen=True)
class LevelAtShare:
    """An account or user that held its quota in a round (tenancy levels, core/quota.py): `gpus` it held
    after the round, its `quota` then, its `share` of the cluster (fraction; None unknown)."""

    level: str  # "account" or "user"
    name: str
    account: str  # a user's account ("" when accounts do not count)
    gpus: int
    quota: float
    share: float | None = None


@dataclass(frozen=True)
class AppAhead:
    """Another app of the same tenant, ranked before the job's app (further behind), that got GPUs."""

    app: str
    rank: int | None
    rho: float | None
    gpus: int


def at_quota(gpus: int, quota: float | None, wanted: int) -> bool:
    """True when a tenant holding `gpus` has no room for `wanted` more within `quota` (core/quota.room:
    whole GPUs up to the quota)."""
    return quota is not None and gpus + max(1, wanted) > math.floor(quota + 1e-9)


def _share(share: float | None) -> str:
    return "" if share is None else f", {share:.1%} of the cluster now"


def _level_words(lv: LevelAtShare, you: bool) -> str:
    """One level at its share: "your account vision is at its share (...)" / "you (alice) are at ..."."""
    quota = f"quota of {lv.quota:.2f} GPU(s) in that round{_share(lv.share)}"
    if lv.level == "account":
        who = f"your account {lv.name}" if you else f"account {lv.name}"
        return f"{who} is at its share: it holds {lv.gpus} GPU(s) against its {quota}; other accounts came first"
    within = f" in account {lv.account}" if lv.account else ""
    others = "other users of the account" if lv.account else "other users"
    if you:
        return (f"you ({lv.name}) are at your share{within}: you hold {lv.gpus} GPU(s) against your {quota}; "
                f"{others} came first")
    return f"user {lv.name} is at its share{within}: it holds {lv.gpus} GPU(s) against its {quota}; {others} came first"


def tenancy_limit(at_share: Sequence[LevelAtShare], ahead: Sequence[AppAhead], kept_by_quota: bool = False,
                  you: bool = False, tenant: tuple[str, str] = ("user", "")) -> str | None:
    """Which level of the tenancy tree held a waiting job back in its app's last round, in words; None when
    none did.

    `at_share`: the levels (top-down) at their quota (the highest one is named: an account at its share
    bounds all its users); `ahead`: other apps of the job's tenant ranked before its app (further behind)
    that got GPUs; `kept_by_quota`: its app won GPUs in the auction but kept fewer because its tenant
    reached its quota; `you`: the reader owns the job; `tenant`: (level, name) of the job's tenant.
    """
    parts = []
    if at_share:
        text = _level_words(at_share[0], you)
        if kept_by_quota:
            text = f"it kept only what fits the quota because {text}"
        parts.append(text)
    if ahead:
        level, name = tenant
        whose = "of yours" if you and level == "user" else f"of {level} {name}"
        items = ", ".join(f"{a.app} (rank {'-' if a.rank is None else a.rank}, "
                          f"rho {'-' if a.rho is None else f'{a.rho:.2f}'}, got {a.gpus} GPU(s))" for a in ahead)
        verb = "another app" if len(ahead) == 1 else "other apps"
        are = "is" if len(ahead) == 1 else "are"
        parts.append(f"{verb} {whose} {are} further behind and went first: {items}")
    return "; ".join(parts) or None


def _free_text(cpus: int | None, mem: int | None) -> str:
    parts = [] if cpus is None else [f"{cpus} CPU(s)"]
    if mem is not None:
        parts.append(f"{mem // 1024}G of memory" if mem % 1024 == 0 else f"{mem}M of memory")
    return " and ".join(parts) or "room"


def room_short(cpus: int, mem: int, short: Mapping[str, tuple[int | None, int | None]],
               fits: Sequence[str]) -> str | None:
    """Why a waiting job's CPUs or memory keep it off some of the nodes it may use, in words; None when no
    node is short. `cpus`/`mem`: what it needs per node (MiB); `short`: node -> (CPUs, MiB) free there now,
    for the nodes too busy for it; `fits`: the nodes that have its room now. Slurm would not start it on a
    short node, so Themis does not grant it there (daemon/room.py)."""
    if not short:
        return None
    need = _free_text(cpus if cpus else None, mem if mem else None)
    busy = "; ".join(f"{n}: {_free_text(c, m)} free" for n, (c, m) in sorted(short.items()))
    if not fits:
        return (f"no node it may use has its {need} per node free now ({busy}): it waits for jobs there to "
                f"end (Slurm would not start it there)")
    return f"its {need} per node are free now only on {','.join(sorted(fits))} (not on {busy})"
