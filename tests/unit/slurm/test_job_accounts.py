"""A job's Slurm account (issue 33), read by all three parsers: squeue --json, scontrol show job -o, pyslurm.

The fixtures in tests/fixtures/shares were captured from a cluster with accounting (capture.sh): alice's
job under the sub-account themis-fx-cv, bob's under themis-fx-nlp; the older fixtures of
tests/fixtures/slurm come from clusters without accounting, where Slurm shows no account.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.slurm.fake_slurm import job
from tests.unit.slurm.test_pyslurm_backend import pjob
from tests.unit.slurm.test_snapshot import by_id, snap
from themis_slurm.slurm.parse import job_from_json, parse_squeue_json
from themis_slurm.slurm.pyslurm_backend import job_from_pyslurm
from themis_slurm.slurm.scontrol import parse_scontrol_jobs

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
VERSIONS = ("2205", "2511")


def read(folder: str, name: str) -> str:
    return (FIXTURES / folder / name).read_text()


@pytest.mark.parametrize("v", VERSIONS)
def test_json_and_scontrol_read_the_account(v: str) -> None:
    from_json = sorted(
        (j.user_name, j.account) for j in parse_squeue_json(read("shares", f"squeue_accounts_{v}.json"))
    )
    from_kv = sorted(
        (j.user_name, j.account)
        for j in parse_scontrol_jobs(read("shares", f"scontrol_show_job_accounts_{v}.txt"))
    )
    assert from_json == from_kv == [("themis-alice", "themis-fx-cv"), ("themis-bob", "themis-fx-nlp")]


@pytest.mark.parametrize(("json_name", "kv_name"), [
    ("squeue_2205.json", "scontrol_show_job_2205.txt"),
    ("squeue_2511.json", "scontrol_show_job_2511.txt"),
])  # fmt: skip
def test_without_accounting_there_is_no_account(json_name: str, kv_name: str) -> None:
    """`"account": ""` in the JSON, ``Account=(null)`` in scontrol's lines: both read as no account."""
    assert {j.account for j in parse_squeue_json(read("slurm", json_name))} == {""}
    assert {j.account for j in parse_scontrol_jobs(read("slurm", kv_name))} == {""}


def test_pyslurm_reads_the_account_like_squeue() -> None:
    j = job(7, account="vision", gres="gres/gpu:1")
    got = job_from_pyslurm(pjob(j))
    assert got.account == "vision" and got == job_from_json(j)
    assert job_from_pyslurm(pjob(job(8, gres="gres/gpu:1"))).account == ""  # pyslurm's None for no account


def test_the_managed_job_carries_its_account(tmp_path: Path) -> None:
    s = snap(
        tmp_path,
        [
            job(1, account="vision"),
            job(2, user="bob"),
            job(3, array_job_id=3, array_task_string="0-1", account="nlp"),
        ],
    )
    got = {jid: mj.account for jid, mj in by_id(s).items()}  # type: ignore[attr-defined]
    assert got == {"1": "vision", "2": "", "3_0": "nlp", "3_1": "nlp"}
