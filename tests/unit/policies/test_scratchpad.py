"""A baseline's allocation scratchpad checks the state it is given with the core's check, as the arbiter does."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import Lease
from themis_slurm.policies import NAMES, make_policy
from themis_slurm.policies.scratchpad import BaselineScratchpad

from .helpers import app, ctx, job, state

TOPO = Topology.uniform(1, 2, 2)


def _state():
    return state(TOPO, [app("A", [job("a1", "A"), job("a2", "A")]), app("B", [job("b1", "B", 2)])],
                 running={"a1": {0}})  # fmt: skip


def test_a_valid_state_is_accepted() -> None:
    pad = BaselineScratchpad(_state(), "test")
    assert set(pad.running) == {"a1"} and [j.id for j in pad.waiting()] == ["a2", "b1"]


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        (lambda s: replace(s, free=s.free | {0}), "both free and leased"),
        (lambda s: replace(s, free=s.free | {9}), "not in the topology"),
        (lambda s: replace(s, leases=(*s.leases, Lease("ghost", frozenset({1}), 0.0, math.inf))), "unknown job"),
        (lambda s: replace(s, apps=(*s.apps, app("C", [job("a2", "C")]))), "unique"),
    ],
)
def test_every_baseline_rejects_a_broken_state(broken, message) -> None:
    s = broken(_state())
    with pytest.raises(ValueError, match=message):
        BaselineScratchpad(s, "test")
    for name in NAMES:
        with pytest.raises(ValueError, match=message):
            make_policy(name).schedule(ctx(s))


def test_records_are_built_on_first_read_only_and_read_like_a_dict() -> None:
    """A baseline's AppRecords (a pass over every unfinished job) are computed when first read, once; the
    simulator applies decisions without reading them."""
    from themis_slurm.core.decision import LazyRecords

    pad = BaselineScratchpad(_state(), "test")
    built = []
    real = pad._records

    def counting(order):  # type: ignore[no-untyped-def]
        built.append(1)
        return real(order)

    pad._records = counting  # type: ignore[method-assign]
    d = pad.decision()
    assert isinstance(d.apps, LazyRecords) and built == []
    assert set(d.apps) == {"A", "B"} and len(d.apps) == 2 and built == [1]
    assert d.apps["A"].app_id == "A" and dict(d.apps) == real(()) and built == [1]
    assert d.apps == real(())  # Mapping equality with the eager records


@pytest.mark.parametrize("name", [n for n in NAMES if n != "themis"])
def test_every_baseline_records_its_outcome_as_data(name: str) -> None:
    """An app with work waiting (or started now) gets Outcome.POLICY, with its rank among the ranked apps;
    an app whose every job runs gets NOTHING_WAITING, as in a Themis round. Words come from reasons.py."""
    from themis_slurm import reasons
    from themis_slurm.core.decision import GrantSource, Outcome

    s = state(TOPO, [app("A", [job("a1", "A"), job("a2", "A")]), app("B", [job("b1", "B", 2)]),
                     app("C", [job("c1", "C")])], running={"a1": {0}, "c1": {1}})  # fmt: skip
    d = make_policy(name).schedule(ctx(s))
    assert d.grants and all(g.source in (GrantSource.POLICY, GrantSource.BACKFILL) for g in d.grants)
    assert d.apps["C"].outcome is Outcome.NOTHING_WAITING and d.apps["C"].rank is None
    for aid in ("A", "B"):
        rec = d.apps[aid]
        assert rec.outcome is Outcome.POLICY and rec.ranked == 2 and rec.rank in (1, 2)
        assert reasons.app_record(rec).startswith(f"scheduled by a baseline policy (rank {rec.rank} of 2)")


def _queue_on_a_full_cluster() -> BaselineScratchpad:
    """4 GPUs held by a1..a4; b1..b6 wait (one GPU each)."""
    held = [job(f"a{i}", "A") for i in range(1, 5)]
    queue = [job(f"b{i}", "B") for i in range(1, 7)]
    s = state(TOPO, [app("A", held), app("B", queue)], running={f"a{i}": {i - 1} for i in range(1, 5)})
    return BaselineScratchpad(s, "test")


def test_the_tail_of_a_full_queue_is_named_when_first_read() -> None:
    """priority_fill stops at a full cluster and leaves the rest of the queue to wait_rest: nothing is
    entered until the reasons are read, and then every job of the tail that holds no GPUs says why, as if
    the loop had named them one by one; a reason given before (or after) the tail is not overwritten."""
    from themis_slurm.policies.fill import priority_fill

    pad = _queue_on_a_full_cluster()
    queue = pad.waiting()
    pad.wait(queue[0], "first in line")
    priority_fill(pad, queue, lambda j, p: pad.fit(j, pool=p))
    assert pad._later and pad._why == {"b1": "first in line"}  # put off, not yet entered
    pad.explain_waiting(lambda j, why: f"explained {j.id} ({why})")  # overrides, after the tail as asked
    assert pad._why == {"b1": "first in line"}
    assert pad.why_wait == {"b1": "explained b1 (first in line)", **{f"b{i}": "does not fit" for i in range(2, 7)}}
    assert not pad._later


def test_a_preemption_enters_a_pending_tail_first() -> None:
    """A job preempted after the tail was left pending was running when the loop stopped, so it gets no
    'does not fit' from the tail; a job the tail named and that starts later loses its reason."""
    pad = _queue_on_a_full_cluster()
    queue = pad.waiting()
    pad.wait_rest([*queue, pad.jobs["a1"]], 0, "does not fit")
    pad.preempt("a1", "test")
    pad.grant(queue[0], pad.running["a1"].gpus)
    assert "a1" not in pad.why_wait and "b1" not in pad.why_wait
    assert {jid for jid, why in pad.why_wait.items() if why == "does not fit"} == {f"b{i}" for i in range(2, 7)}


def test_put_off_wordings_run_in_order_before_a_start() -> None:
    """A wording put off with later() sees the reasons and holders it would have seen at once: a grant
    after it first runs it (so it words b1, which then starts and drops its reason, and not b2), and a
    wording that reads the reasons itself sees those of the wordings asked for before it."""
    pad = _queue_on_a_full_cluster()
    b1, b2 = pad.jobs["b1"], pad.jobs["b2"]
    pad.wait_rest(pad.waiting(), 0, "does not fit")

    def reword(p: BaselineScratchpad) -> None:  # as tiresias and slaq do: the reported job's reason
        j = p.reported_waiting(p.apps["B"])
        assert j is not None
        p.why_wait[j.id] = f"queue 1: {p.why_wait[j.id]}"

    pad.later(reword)
    assert pad._why == {}
    pad.preempt("a1", "test")  # runs both wordings first: b1 is reworded while it still waits
    pad.grant(b1, pad.running["a1"].gpus)
    assert "b1" not in pad.why_wait and pad.why_wait[b2.id] == "does not fit"


def test_notes_put_off_are_made_for_the_records_after_the_others() -> None:
    """later() also puts notes off: they are made when the records are built (never in a call whose
    records nobody reads), after those added at once; maxmin's time shares are made this way."""
    pad = BaselineScratchpad(_state(), "test")
    asked = []

    def shares(p: BaselineScratchpad) -> None:
        asked.append(1)
        p.note("A", "share 1.50")
        p.note("B", "share 0.50")

    pad.later(shares)
    pad.note("A", "at once")
    decision = pad.decision()
    assert not asked  # nothing read yet
    assert decision.apps["A"].note.endswith("at once; share 1.50")
    assert decision.apps["B"].note.endswith("share 0.50")
    assert asked == [1]


def test_maxmin_reports_each_apps_time_share() -> None:
    d = make_policy("maxmin").schedule(ctx(_state()))
    # 4 GPUs over demands 2 and 2: each app's jobs get all their GPUs' time
    assert "maxmin time share 2.00 GPU(s)" in d.apps["A"].note
    assert "maxmin time share 2.00 GPU(s)" in d.apps["B"].note
