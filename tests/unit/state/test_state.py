"""themis_slurm.state: one round's record, the typed rows both the writer and the readers see, intents."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from tests.unit.core.instances import random_state
from themis_slurm.core.arbiter import ArbiterConfig, run_round
from themis_slurm.core.decision import Renewal, RenewalCause
from themis_slurm.state.intents import HELD_FOR_GRANTED, MOVING, TRANSITIONAL, Intent
from themis_slurm.state.reader import StateReader, connect_ro
from themis_slurm.state.record import InPlace, RoundFacts, record_round
from themis_slurm.state.rows import AppRow, JobRow
from themis_slurm.state.schema import MIGRATIONS
from themis_slurm.state.store import Store


def _app(key: str) -> AppRow:
    return AppRow(key, key.split("/")[0], 0.0, 0.0, 0.0, 0.0, 1.0)


def test_a_round_is_recorded_once_per_decision_and_read_back_typed(tmp_path: Path) -> None:
    rng = random.Random(3)
    d = next(d for d in (run_round(random_state(rng), ArbiterConfig()) for _ in range(200))
             if d.grants and d.apps and (d.renewals or d.preemptions))  # fmt: skip
    apps = {k: _app(k) for k in d.apps}
    y = d.grants[0]
    kept = InPlace(Renewal(y.job_id, y.app_id, y.gpus, 99.0, RenewalCause.IN_PLACE), "x1")
    row = JobRow("7", 7, y.app_id, "granted", 1, 60.0, 1.0, planned_nodes={"n1": 1})
    store = Store(tmp_path / "themis.db")
    rid = record_round(store, RoundFacts(d.now, "enforce", "t", 0.01, 0.8), d, apps, {"7": row}, {"y": kept})
    store.close()
    with StateReader(connect_ro(tmp_path / "themis.db")) as state:
        rows = state.decisions(("grant", "renewal", "preemption", "app"))
        (rnd,) = state.rounds(5)
        stored_apps = {a.app_key: a for a in state.apps()}
        assert state.jobs() == [row]
    assert rnd.id == rid and (rnd.grants, rnd.renewals, rnd.preemptions) == (
        len(d.grants),
        len(d.renewals),
        len(d.preemptions),
    )
    by_action = {a: [r for r in rows if r.action == a] for a in ("grant", "renewal", "preemption", "app")}
    assert [r.job_id for r in by_action["grant"]] == [g.job_id for g in d.grants]
    assert [r.job_id for r in by_action["renewal"]] == [r.job_id for r in d.renewals] + ["y"]
    assert by_action["renewal"][-1].instead_of == "x1" and by_action["renewal"][-1].cause == "in_place"
    assert [r.job_id for r in by_action["preemption"]] == [p.job_id for p in d.preemptions]
    assert {r.app_key for r in by_action["app"]} == set(d.apps)
    for r in by_action["grant"] + by_action["app"]:
        assert r.outcome == str(d.apps[r.app_key].outcome) and r.rank == d.apps[r.app_key].rank
    assert {k: a.rho for k, a in stored_apps.items()} == pytest.approx(
        {k: r.rho_after for k, r in d.apps.items()}
    )


def test_a_round_the_store_refuses_leaves_nothing(tmp_path: Path) -> None:
    d = run_round(random_state(random.Random(5)), ArbiterConfig())
    store = Store(tmp_path / "themis.db")
    store.db.execute(
        "CREATE TRIGGER no_jobs BEFORE INSERT ON jobs BEGIN SELECT RAISE(ABORT, 'disk said no'); END"
    )
    row = JobRow("7", 7, "a/x", "waiting", 1, 60.0, 1.0)
    with pytest.raises(sqlite3.IntegrityError, match="disk said no"):
        record_round(store, RoundFacts(d.now, "enforce", "t", 0.01, 0.8), d, {}, {"7": row}, {})
    assert store.query("SELECT COUNT(*) FROM rounds")[0][0] == 0
    assert store.query("SELECT COUNT(*) FROM decisions")[0][0] == 0


def test_rows_of_an_older_schema_read_with_their_defaults(tmp_path: Path) -> None:
    """A reader of a database an older themisd wrote (schema v4: no submit_time) gets the column's default."""
    store = Store(tmp_path / "themis.db", migrations=MIGRATIONS[:4])
    with store.tx():
        store.db.execute(
            "INSERT INTO jobs (job_id, slurm_id, app_key, intent, gpus, work, first_seen)"
            " VALUES ('1', 1, 'a/x', 'running', 2, 60.0, 5.0)"
        )
    store.close()
    with StateReader(connect_ro(tmp_path / "themis.db")) as state:
        (job,) = state.jobs()
    assert job.intent is Intent.RUNNING and job.submit_time is None and job.planned_nodes == {}


def test_intents_are_the_stored_strings_and_an_unknown_one_is_named() -> None:
    assert [str(i) for i in Intent] == ["waiting", "granted", "starting", "running", "warning", "warned",
                                        "requeueing"]  # fmt: skip
    assert HELD_FOR_GRANTED | MOVING == TRANSITIONAL and not HELD_FOR_GRANTED & MOVING
    assert Intent.RUNNING not in TRANSITIONAL and Intent.WAITING not in TRANSITIONAL
    with pytest.raises(ValueError, match="job 9: unknown intent 'paused'"):
        JobRow("9", 9, "a/x", "paused", 1, 1.0, 0.0)
