"""Reservations (issue 38 item 5): a future reservation keeps jobs whose time limit crosses it off its nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.slurm.fake_slurm import FakeRunner, conf_dir, job, node, sinfo, squeue
from themis_slurm.slurm.backend import CliBackend
from themis_slurm.slurm.model import AdapterConfig
from themis_slurm.slurm.reservations import ReservationReader, parse_reservations, reserved_for
from themis_slurm.slurm.scontrol import parse_time

# what `scontrol show reservation -o` printed here (Slurm 22.05, then 25.11) for an inactive reservation
LINE_2205 = ("ReservationName=probe StartTime=2026-12-04T16:50:26 EndTime=2026-12-04T17:50:26 Duration=01:00:00 "
             "Nodes=node4 NodeCnt=1 CoreCnt=16 Features=(null) PartitionName=(null) Flags=SPEC_NODES TRES=cpu=16 "
             "Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a "
             "MaxStartDelay=(null)")
LINE_2511 = ("ReservationName=maint StartTime=2026-12-04T16:50:26 EndTime=2026-12-04T17:50:26 Duration=01:00:00 "
             "Nodes=node[3-4] NodeCnt=2 CoreCnt=32 Features=(null) PartitionName=(null) Flags=MAINT,SPEC_NODES "
             "TRES=cpu=32 AllowedPartitions=(null) QOS=(null) Users=root Groups=(null) Accounts=(null) "
             "Licenses=(null) State=INACTIVE BurstBuffer=(null) MaxStartDelay=(null)")
START = float(parse_time("2026-12-04T16:50:26") or 0)


def test_both_versions_lines_parse() -> None:
    found, problems = parse_reservations(f"{LINE_2205}\n{LINE_2511}\n")
    assert problems == []
    assert [(r.name, r.nodes, r.state, r.end - r.start) for r in found] == [
        ("probe", frozenset({"node4"}), "INACTIVE", 3600.0), ("maint", frozenset({"node3", "node4"}), "INACTIVE", 3600.0)]
    assert parse_reservations("No reservations in the system\n") == ([], [])
    _, bad = parse_reservations("ReservationName=x StartTime=soon EndTime=later Nodes=node1")
    assert len(bad) == 1 and "bad time" in bad[0]


@pytest.mark.parametrize(("limit", "blocked"), [(None, True), (7200.0, True), (1800.0, False), (3540.0, False)])
def test_a_job_must_end_before_a_reservation_starts(limit: float | None, blocked: bool) -> None:
    [r] = parse_reservations(LINE_2205)[0]
    now = START - 3600
    nodes, why = reserved_for([r], now, limit)
    assert (nodes == {"node4"}) is blocked and (why.startswith("reservation probe on node4 from")) is blocked
    assert reserved_for([r], START + 7200, None) == (frozenset(), "")  # over
    assert reserved_for([r], now, None, own="probe") == (frozenset(), "")  # the job's own reservation


def test_the_snapshot_keeps_long_jobs_off_reserved_nodes_for_now(tmp_path: Path) -> None:
    long_job, short_job, big = job(1), job(2), job(3, gres="", tres_per_job="gres/gpu:16", node_count=4)
    long_job["time_limit"] = 120  # minutes: crosses the reservation an hour from now
    short_job["time_limit"] = 30
    big["time_limit"] = 120
    runner = FakeRunner({("squeue",): squeue(long_job, short_job, big), ("sinfo",): sinfo(*[node(f"node{i}") for i in range(1, 5)]),
                         ("scontrol", "show", "reservation"): LINE_2205})
    b = CliBackend(runner, AdapterConfig(slurm_conf=str(conf_dir(tmp_path))), clock=lambda: START - 3600)
    s = b.snapshot()
    jobs = {m.job_id: m for m in s.managed}
    assert jobs["1"].allowed_nodes == frozenset({"node1", "node2", "node3"})
    assert "reservation probe on node4" in jobs["1"].limits and "time limit of 120 min" in jobs["1"].limits
    assert jobs["2"].allowed_nodes is None  # ends before it starts
    assert jobs["3"].blocked is None  # 16 GPUs do fit the cluster: later, not never
    assert jobs["3"].allowed_nodes == frozenset({"node1", "node2", "node3"})
    assert b.snapshot().slurm_calls == 2  # read again only after READ_EVERY_S


def test_a_failed_read_keeps_the_last_reservations() -> None:
    r = ReservationReader(every_s=60)
    assert r.due(0.0) and r.update(0.0, LINE_2205) == [] and len(r.current) == 1
    assert not r.due(30.0) and r.due(61.0)
    r.failed(61.0)
    assert len(r.current) == 1 and not r.due(100.0)
