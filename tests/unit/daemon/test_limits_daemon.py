"""QOS and association limits in the daemon (issue 38 item 8): a job a limit binds is not granted.

Before, such a job was granted, Slurm kept it pending (QOSMaxGRESPerUser, AssocGrpGRES, ...), its GPUs
idled until the release timed out, and only then was the limit "learned" for a lease. FakeSlurm enforces
the limits as slurmctld does (a released job over one stays pending) and its snapshots carry them as the
CLI backend reads them (slurm/limits.py).
"""

from __future__ import annotations

from themis_slurm.core.decision import Decision, Grant, GrantSource
from themis_slurm.daemon.planning import build_round, grants_over_limits, without_waiting
from themis_slurm.slurm.limits import Limits, QosLimits
from themis_slurm.state.round_input import limit_blocked
from themis_slurm.state.rows import JobRow

from .conftest import daemon_config, run
from .fake_slurm import FakeSlurm

PER_USER_2 = Limits(True, {"normal": QosLimits("normal", max_gpus_per_user=2)})


def _row(jid: str, intent: str, gpus: int = 1) -> JobRow:
    return JobRow(jid, int(jid), "alice/a", intent, gpus, 600.0, 0.0)


def test_jobs_themis_started_count_before_slurm_runs_them(slurm: FakeSlurm) -> None:
    slurm.limits = PER_USER_2
    a = [slurm.submit("alice", "a", 1, 600.0) for _ in range(3)]
    snap = slurm.snapshot()
    assert all(m.blocked is None for m in snap.managed)  # Slurm runs nothing of alice's yet
    rows = {a[0]: _row(a[0], "starting"), a[1]: _row(a[1], "granted"), a[2]: _row(a[2], "waiting")}
    assert limit_blocked(snap, rows) == {
        a[2]: "QOSMaxGRESPerUser: QOS normal MaxTRESPerUser gres/gpu=2 for alice, "
        "2 GPU(s) in use (Slurm would keep it pending)"
    }
    rows[a[1]] = _row(a[1], "waiting")
    assert limit_blocked(snap, rows) == {}
    slurm.limits = Limits(False, PER_USER_2.qos)  # AccountingStorageEnforce without limits: nothing binds
    assert limit_blocked(slurm.snapshot(), {**rows, a[1]: _row(a[1], "granted")}) == {}


def test_grants_that_pass_a_limit_together_are_found_in_grant_order(slurm: FakeSlurm) -> None:
    slurm.limits = PER_USER_2
    a = [slurm.submit("alice", "a", 1, 600.0) for _ in range(3)]
    b = slurm.submit("bob", "b", 1, 600.0)
    snap = slurm.snapshot()
    rows = {j: _row(j, "waiting") for j in [*a, b]}
    grants = tuple(
        Grant(j, "x", frozenset({k}), {"node1": 1}, "gpu", 60.0, GrantSource.LEFTOVER)
        for k, j in enumerate([*a, b])
    )
    over = grants_over_limits(Decision(now=0.0, grants=grants), snap, rows)
    assert list(over) == [a[2]] and over[a[2]].endswith("with the other grants of this round")
    cfg = daemon_config(__import__("pathlib").Path("/nonexistent"))
    inp = build_round(snap, rows, {}, cfg, snap.time)
    assert {j.id for app in inp.state.apps for j in app.jobs} == {*a, b}
    cut = without_waiting(inp, over)
    assert {j.id for app in cut.state.apps for j in app.jobs} == {a[0], a[1], b}
    assert cut.signature == inp.signature and cut.ineligible[a[2]] == over[a[2]]


def test_a_user_at_a_qos_limit_gets_no_grant_and_no_release_times_out(make_daemon, slurm: FakeSlurm) -> None:
    """alice may run 2 GPUs (QOS MaxTRESPerUser); she and bob each submit four 1-GPU jobs on 8 free GPUs.
    Before: the first round granted alice 4 GPUs; two of her jobs stayed pending until their release timed
    out (20 s of 2 idle GPUs), were held and re-planned."""
    slurm.limits = PER_USER_2
    alice = [slurm.submit("alice", "a", 1, 300.0) for _ in range(4)]
    bob = [slurm.submit("bob", "b", 1, 300.0) for _ in range(4)]
    d = make_daemon()
    most = 0
    for _ in range(150):
        rep = d.cycle()
        rows = d.store.jobs()
        busy = [j for j in alice if j in rows and rows[j].intent in ("granted", "starting", "running")]
        most = max(most, len(busy))
        slurm.advance(5)
        if not slurm.jobs:
            break
    assert not slurm.jobs, {j: (x.state, x.held) for j, x in slurm.jobs.items()}
    assert most == 2, most  # never more than her limit granted, started or running at once
    events = d.store.query("SELECT kind, job_id FROM events WHERE kind = 'release-timeout'")
    assert not events, [tuple(e) for e in events]
    assert d.store.learned() == {}
    assert all(slurm.starts_seen[j] == 1 for j in alice + bob), slurm.starts_seen  # each started once
    del rep


def test_the_first_round_grants_within_the_limit(make_daemon, slurm: FakeSlurm) -> None:
    """On 8 free GPUs with only alice waiting (4 jobs, limit 2 GPUs), the first round grants two: the round
    runs again without the grants that pass the limit together, and the other two wait, not eligible."""
    slurm.limits = PER_USER_2
    alice = [slurm.submit("alice", "a", 1, 300.0) for _ in range(4)]
    d = make_daemon()
    rep = d.cycle()
    assert rep.decision is not None and rep.grants == 2, rep
    rows = d.store.jobs()
    assert sorted(rows[j].intent for j in alice) == ["starting", "starting", "waiting", "waiting"]
    run(d, slurm, 10)
    waiting = [j for j in alice if d.store.jobs()[j].intent == "waiting"]
    snap = slurm.snapshot()
    assert all(
        m.blocked and m.blocked.startswith("QOSMaxGRESPerUser") for m in snap.managed if m.job_id in waiting
    )
