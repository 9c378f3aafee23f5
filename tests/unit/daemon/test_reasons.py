"""Decisions are data: themis_slurm.reasons words the typed fields exactly as the core's reasons read, and
a decision stored as columns renders the same sentence after a round trip through the database."""

from __future__ import annotations

import random
from pathlib import Path

from tests.unit.core.instances import random_state
from themis_slurm import reasons
from themis_slurm.core.arbiter import ArbiterConfig, run_round
from themis_slurm.core.decision import Decision, RenewalCause, ReservationNote
from themis_slurm.state.reader import StateReader, connect_ro
from themis_slurm.state.store import Store

CONFIGS = [ArbiterConfig(), ArbiterConfig(fairness_knob=0.5, lease_s=1.0, reserve_wide_gangs=True),
           ArbiterConfig(fairness_knob=0.0, solver="fast", restart_cost_s=0.0),
           ArbiterConfig(lease_s=2.0, reserve_wide_gangs=True, seed=3)]


def _decisions(n: int = 120) -> list[tuple[Decision, ArbiterConfig]]:
    rng = random.Random(7)
    out = []
    for _ in range(n):
        cfg = CONFIGS[rng.randrange(len(CONFIGS))]
        out.append((run_round(random_state(rng), cfg), cfg))
    return out


def test_every_outcome_is_worded_from_its_fields() -> None:
    """Over random rounds, each record's sentence carries its typed fields (the renderer was checked equal
    to the core's former prose, word for word, before the core stopped writing it)."""
    seen = {"won": 0, "payment": 0, "leftover": 0, "reservation": 0, "renewal": 0, "preemption": 0}
    for d, cfg in _decisions():
        for rec in d.apps.values():
            text = reasons.app_record(rec, cfg.fairness_knob)
            assert text and rec.note == ""
            if rec.bid or rec.outcome == "not_offered":
                assert f"rank {rec.rank}" in text
            if rec.outcome == "won":
                assert f"won {rec.won_gpus} GPU(s)" in text
            if rec.kept_by == "payment":
                assert f"c={rec.payment_fraction:.3f}" in text
            if rec.leftover_gpus:
                assert f"{rec.leftover_gpus} GPU(s) from leftover" in text
            if rec.reservation is not None:
                assert f"job {rec.reservation.job_id}" in text
            seen["won"] += rec.outcome == "won"
            seen["payment"] += rec.kept_by == "payment"
            seen["leftover"] += rec.leftover_gpus > 0
            seen["reservation"] += rec.reservation is not None
        for r in d.renewals:
            text = reasons.renewal(r)
            assert text and (r.cut_s is None or f"{r.cut_s:.0f} s" in text)
            seen["renewal"] += 1
        for p in d.preemptions:
            assert reasons.preemption_cause(p.cause)
            seen["preemption"] += 1
    assert all(seen.values()), seen  # every kind of sentence was exercised


def test_reservation_and_in_place_wording() -> None:
    assert reasons.reservation(ReservationNote("7", 4, 2, 30.4, False)) == \
        "2 of 4 GPU(s) reserved for job 7, complete in 30 s"
    assert reasons.holds_gpus_idle(ReservationNote("7", 4, 2, 30.0, False))
    assert not reasons.holds_gpus_idle(ReservationNote("7", 4, 0, 30.0, False))
    assert not reasons.holds_gpus_idle(ReservationNote("7", 4, 4, 0.0, True))
    assert reasons.renewal_cause(RenewalCause.IN_PLACE, instead_of="12") == \
        "renewed in place instead of moving job 12 onto its GPUs"


def test_stored_columns_render_the_same_sentences(tmp_path: Path) -> None:
    store = Store(tmp_path / "themis.db")
    expected: dict[int, str] = {}
    with store.tx():
        for d, cfg in _decisions(40):
            rid = store.add_round(d.now, "enforce", "t", d.solver, d.offered_gpus, 0, 0, 0, 0.0,
                                  fairness_knob=cfg.fairness_knob)
            for rec in d.apps.values():
                store.add_decision(rid, d.now, rec.app_id, None, "app", payment=rec.payment_fraction, record=rec)
                expected[int(store.query("SELECT MAX(id) FROM decisions")[0][0])] = reasons.app_record(
                    rec, cfg.fairness_knob)
            for g in d.grants:
                rec = d.apps[g.app_id]
                store.add_decision(rid, d.now, g.app_id, g.job_id, "grant", payment=rec.payment_fraction,
                                   record=rec, source=g.source)
                expected[int(store.query("SELECT MAX(id) FROM decisions")[0][0])] = reasons.grant(
                    g.source, reasons.app_record(rec, cfg.fairness_knob))
            for r in d.renewals:
                store.add_decision(rid, d.now, r.app_id, r.job_id, "renewal", cause=r.cause, cut_s=r.cut_s)
                expected[int(store.query("SELECT MAX(id) FROM decisions")[0][0])] = reasons.renewal(r)
    store.close()
    with StateReader(connect_ro(tmp_path / "themis.db")) as state:
        rows = state.decisions(("app", "grant", "renewal"))
        knobs = {r.id: r.fairness_knob for r in state.rounds(1000)}
    assert len(rows) == len(expected) > 100
    for row in rows:
        knob = knobs[row.round_id]
        got = reasons.app_row(row, knob) if row.action == "app" else reasons.job_row(row, knob)
        assert got == expected[row.id]
        assert row.reason == ""  # new rows store data, not prose
