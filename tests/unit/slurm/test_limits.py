"""QOS and association limits read up front (slurm/limits.py; issue 38 item 8).

The sacctmgr lines are what Slurm 22.05 and 25.11 printed on the local cluster (identical on both) for a
QOS `normal` with GrpTRES gres/gpu=12, MaxTRESPerUser gres/gpu=4 and MaxJobsPerUser=3, the account
themis-test with GrpTRES gres/gpu=8 and MaxJobs=5 (inherited by its users), and MaxJobs=2 for themis-alice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from themis_slurm.slurm.backend import CliBackend
from themis_slurm.slurm.limits import (
    ASSOC_FIELDS,
    QOS_FIELDS,
    SACCTMGR_QOS,
    SCONTROL_CONFIG,
    LimitReader,
    Limits,
    LimitView,
    QosLimits,
    count_usage,
    parse_assocs,
    parse_config,
    parse_qos,
    sacctmgr_assoc,
    tres_gpus,
)
from themis_slurm.slurm.model import AdapterConfig

from .fake_slurm import FakeRunner, job, squeue
from .test_snapshot import ALL_NODES, conf_dir, sinfo

QOS = "normal||gres/gpu=12|3|gres/gpu=4||||\n"
ASSOCS = (
    "root|||||||\nroot|root||||||\nthemis-test|||root||gres/gpu=8|5|\nthemis-test|themis-alice|||||2|\n"
    "themis-test|themis-bob|||||5|\nthemis-test|themis|||||5|\n"
)
ENFORCED = "AccountingStorageEnforce = associations,limits,qos\nClusterName             = themis-local\n"
NOT_ENFORCED = "AccountingStorageEnforce = none\nClusterName             = themis-local\n"


def qos_line(name: str = "normal", **values: str) -> str:
    """One line of SACCTMGR_QOS's output, fields by name (QOS_FIELDS)."""
    return "|".join(values.get(f, name if f == "Name" else "") for f in QOS_FIELDS) + "\n"


def assoc_line(account: str, user: str = "", partition: str = "", **values: str) -> str:
    """One line of sacctmgr_assoc's output, fields by name (ASSOC_FIELDS)."""
    given = {"Account": account, "User": user, "Partition": partition, **values}
    return "|".join(given.get(f, "") for f in ASSOC_FIELDS) + "\n"


def limits(qos: str = QOS, assocs: str = ASSOCS) -> Limits:
    q, p1 = parse_qos(qos)
    a, p2 = parse_assocs(assocs)
    assert not p1 and not p2, p1 + p2
    return Limits(True, q, a)


def test_the_commands_and_what_they_print_parse() -> None:
    assert SCONTROL_CONFIG == ["scontrol", "show", "config"]
    assert SACCTMGR_QOS[:5] == ["sacctmgr", "-n", "-P", "show", "qos"]
    assert sacctmgr_assoc("themis-local")[5] == "cluster=themis-local"
    assert parse_config(ENFORCED) == (frozenset({"associations", "limits", "qos"}), "themis-local")
    assert parse_config(NOT_ENFORCED) == (frozenset(), "themis-local")
    lim = limits()
    assert lim.qos["normal"] == QosLimits("normal", grp_gpus=12, max_jobs_per_user=3, max_gpus_per_user=4)
    alice = lim.assocs[("themis-test", "themis-alice", "")]
    assert (alice.max_jobs, alice.grp_gpus, alice.parent) == (2, None, "")
    acct = lim.assocs[("themis-test", "", "")]
    assert (acct.grp_gpus, acct.max_jobs, acct.parent) == (8, 5, "root")
    assert tres_gpus("cpu=8,gres/gpu=4,mem=1G") == 4 and tres_gpus("cpu=8") is None
    assert tres_gpus("gres/gpu:a100=2") is None  # typed TRES limits are not read (module docstring)


def test_bad_lines_are_skipped_with_a_message_naming_the_field_and_value() -> None:
    q, problems = parse_qos(qos_line(GrpJobs="x") + "short|1\n")
    assert q == {} and problems == [
        "QOS line skipped (expected 9 fields): 'short|1'",
        "QOS normal skipped: QOS normal GrpJobs: 'x' is not a whole number",
    ]
    a, problems = parse_assocs(assoc_line("acct", "u", MaxJobs="-2"))
    assert a == {} and problems == [
        "association acct/u skipped: association acct/u MaxJobs: '-2' is negative"
    ]


def test_a_qos_limit_takes_the_place_of_the_associations_limit_of_the_same_kind() -> None:
    lim = limits()
    names = [b.name for b in lim.bounds("themis-alice", "themis-test", "gpu", "normal")]
    # QOS GrpTRES is set: the account's GrpTRES is not used; QOS MaxJobsPerUser is set: not alice's MaxJobs
    assert names == [
        "QOS normal GrpTRES gres/gpu=12",
        "QOS normal MaxTRESPerUser gres/gpu=4 for themis-alice",
        "QOS normal MaxJobsPerUser=3 for themis-alice",
    ]
    plain = limits(qos=qos_line())
    names = [b.name for b in plain.bounds("themis-alice", "themis-test", "gpu", "normal")]
    assert names == [
        "association themis-test/themis-alice MaxJobs=2",
        "account themis-test GrpTRES gres/gpu=8",
    ]
    assert Limits(False, plain.qos, plain.assocs).bounds("themis-alice", "themis-test", "gpu", "normal") == []


def test_use_counts_running_jobs_of_every_partition_and_binds_at_the_limit() -> None:
    lim = limits(qos=qos_line())
    jobs = [
        ("RUNNING", "themis-alice", "themis-test", "debug", "normal", 4),  # not managed: counts too
        ("RUNNING", "themis-bob", "themis-test", "gpu", "normal", 3),
        ("COMPLETING", "themis-bob", "themis-test", "gpu", "normal", 4),  # slurmctld no longer counts it
        ("PENDING", "themis-alice", "themis-test", "gpu", "normal", 8),
    ]
    view = LimitView(lim, count_usage(lim, jobs))
    # the account has 7 of its 8 GPUs in use: one more GPU fits, two do not
    assert view.blocked("themis-bob", "themis-test", "gpu", "normal", 1) is None
    why = view.blocked("themis-bob", "themis-test", "gpu", "normal", 2)
    assert why == (
        "AssocGrpGRES: account themis-test GrpTRES gres/gpu=8, 7 GPU(s) in use (Slurm would keep it pending)"
    )
    # alice runs 1 job of her MaxJobs=2: one more may start
    assert view.blocked("themis-alice", "themis-test", "gpu", "normal", 1) is None
    alice2 = LimitView(
        lim, count_usage(lim, [*jobs, ("RUNNING", "themis-alice", "themis-test", "gpu", "normal", 0)])
    )
    assert alice2.blocked("themis-alice", "themis-test", "gpu", "normal", 1).startswith(
        "AssocMaxJobsLimit: association themis-test/themis-alice MaxJobs=2, 2 job(s) running"
    )
    # another account's user is not bound by themis-test's GrpTRES
    assert view.blocked("carol", "other", "gpu", "normal", 8) is None


def test_per_job_limits_mean_never_while_they_stand() -> None:
    lim = limits(qos=qos_line(MaxTRES="gres/gpu=4"))
    assert lim.per_job("themis-bob", "themis-test", "gpu", "normal", 8).startswith(
        "QOSMaxGRESPerJob: it asks for 8 GPUs and QOS normal allows 4 per job"
    )
    assert lim.per_job("themis-bob", "themis-test", "gpu", "normal", 4) is None
    assoc = limits(qos=qos_line(), assocs=assoc_line("themis-test", "themis-bob", MaxTRES="gres/gpu=2"))
    assert assoc.per_job("themis-bob", "themis-test", "gpu", "normal", 3).startswith("AssocMaxGRESPerJob")
    least = limits(qos=qos_line(MinTRES="gres/gpu=2"))
    assert least.per_job("themis-bob", "themis-test", "gpu", "normal", 1).startswith("QOSMinGRES")


def test_partition_association_and_the_parent_chain() -> None:
    assocs = (
        assoc_line("root", GrpTRES="gres/gpu=6")
        + assoc_line("team", ParentName="root")
        + assoc_line("team", "u")
        + assoc_line("team", "u", "gpu", GrpTRES="gres/gpu=1")
    )
    lim = limits(qos=qos_line(), assocs=assocs)
    names = [b.name for b in lim.bounds("u", "team", "gpu", "normal")]
    assert names == ["association team/u/gpu GrpTRES gres/gpu=1", "account root GrpTRES gres/gpu=6"]
    names = [b.name for b in lim.bounds("u", "team", "debug", "normal")]
    assert names == ["account root GrpTRES gres/gpu=6"]


def _backend(
    tmp_path: Path, jobs: list[dict], config: str = ENFORCED, qos: str = QOS, assocs: str | Exception = ASSOCS
) -> tuple[CliBackend, FakeRunner]:
    runner = FakeRunner(
        {
            ("squeue",): squeue(*jobs),
            ("sinfo",): sinfo(*ALL_NODES),
            ("scontrol", "show", "config"): config,
            ("sacctmgr", "-n", "-P", "show", "qos"): qos,
            ("sacctmgr", "-n", "-P", "show", "assoc"): assocs,
        }
    )
    clock = iter(float(t) for t in range(1000, 10_000, 10))
    return CliBackend(
        runner, AdapterConfig(slurm_conf=str(conf_dir(tmp_path))), clock=lambda: next(clock)
    ), runner


def _running(job_id: int, user: str, gpus: int, node: str, partition: str = "gpu", **kw: object) -> dict:
    return job(
        job_id,
        user=user,
        state="RUNNING",
        partition=partition,
        gres=f"gres:gpu:{gpus}",
        nodes=node,
        gres_detail=[f"gpu:a100:{gpus}(IDX:0-{gpus - 1})"],
        **kw,
    )  # type: ignore[arg-type]


def test_the_snapshot_blocks_a_waiting_job_a_limit_binds_and_explains_why(tmp_path: Path) -> None:
    # alice runs 4 GPUs in the unmanaged debug partition: QOS normal's MaxTRESPerUser gres/gpu=4 binds for her
    jobs = [
        _running(10, "themis-alice", 4, "node1", partition="debug", account="themis-test"),
        job(11, user="themis-alice", account="themis-test"),
        job(12, user="themis-bob", account="themis-test"),
    ]
    for j in jobs:
        j["qos"] = "normal"
    b, runner = _backend(tmp_path, jobs)
    s = b.snapshot()
    blocked = {m.job_id: m.blocked for m in s.managed}
    assert blocked["11"] == (
        "QOSMaxGRESPerUser: QOS normal MaxTRESPerUser gres/gpu=4 for themis-alice, 4 GPU(s) "
        "in use (Slurm would keep it pending)"
    )
    assert blocked["12"] is None
    assert s.limits is not None and s.limits.enforced
    assert ["sacctmgr", "-n", "-P", "show", "assoc", "cluster=themis-local"] in [c[:6] for c in runner.calls]
    runner.calls.clear()
    b.snapshot()  # within READ_EVERY_S: no limit reads
    assert not [c for c in runner.calls if c[0] == "sacctmgr" or c[:3] == ["scontrol", "show", "config"]]


def test_no_sacctmgr_where_slurm_enforces_no_limits(tmp_path: Path) -> None:
    jobs = [_running(10, "themis-alice", 4, "node1", account="themis-test"), job(11, user="themis-alice")]
    b, runner = _backend(tmp_path, jobs, config=NOT_ENFORCED)
    s = b.snapshot()
    assert s.limits is None and all(m.blocked is None for m in s.managed)
    assert not [c for c in runner.calls if c[0] == "sacctmgr"]


def test_an_unreadable_limit_is_a_warning_and_the_last_limits_stay(tmp_path: Path) -> None:
    from themis_slurm.slurm.runner import SlurmCommandError

    reader = LimitReader(every_s=0.0)
    assert reader.update(1.0, ENFORCED, QOS, ASSOCS) == []
    before = reader.current
    reader.failed(2.0)
    assert reader.current is before and before.enforced
    b, _ = _backend(tmp_path, [], assocs=SlurmCommandError(["sacctmgr"], 1, "slurmdbd is not answering"))
    s = b.snapshot()
    assert any(
        w.startswith("QOS/association limits not readable") and "slurmdbd is not answering" in w
        for w in s.warnings
    ), s.warnings
    assert s.limits is None


@pytest.mark.parametrize("flags", ["limits", "safe", "all", "associations,limits"])
def test_every_flag_that_enforces_limits(flags: str) -> None:
    reader = LimitReader()
    reader.update(0.0, f"AccountingStorageEnforce = {flags}\nClusterName = c\n", QOS, ASSOCS)
    assert reader.current.enforced
    reader.update(0.0, "AccountingStorageEnforce = associations,qos\nClusterName = c\n", QOS, ASSOCS)
    assert not reader.current.enforced
