"""`themis status`, `themis apps` and `themis explain` with tenancy levels (issue 33 item 5): the apps grouped
under their accounts and users (sshare-like), and without levels exactly today's tables."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from api import tenancy_world as tw
from api import world

from themis_slurm.api import ApiServer, start_api_server

from .conftest import Run

FLAT_APPS = """RANK  APP                 OWNER         RUN  WAIT  GPUS   RHO  T_ID  T_SH
   1  themis-bob/job-21   themis-bob      0     1     0  2.50     -     -
   2  themis-alice/sweep  themis-alice    1     1     2  1.40     -     -
   3  themis-bob/job-20   themis-bob      1     0     4  1.10     -     -
"""

TREE_APPS = """ACCOUNT/USER/APP        SHARE  GPUS  QUOTA   RHO  RANK  RUN  WAIT  T_ID  T_SH
vision                  75.0%     4   6.00  3.00     -    3     1     -     -
  themis-alice          37.5%     3   3.00  3.00     -    2     1     -     -
    themis-alice/ft     18.8%     1      -  3.00     1    1     0     -     -
    themis-alice/sweep  18.8%     2      -  1.40     3    1     1     -     -
  themis-carol          37.5%     1   3.00  0.90     -    1     0     -     -
    themis-carol/c      37.5%     1      -  0.90     5    1     0     -     -
nlp                     25.0%     4   4.00  2.50     -    1     1     -     -
  themis-bob            25.0%     4   4.00  2.50     -    1     1     -     -
    themis-bob/job-21   12.5%     0      -  2.50     2    0     1     -     -
    themis-bob/job-20   12.5%     4      -  1.10     4    1     0     -     -
"""


@pytest.fixture
def tree_server(tmp_path: Path, slurm_conf: Path) -> Iterator[ApiServer]:
    db = tw.build_store(tmp_path / "tree")
    snap = tw.snapshot()
    srv = start_api_server(
        db,
        "127.0.0.1:0",
        str(slurm_conf),
        snapshot=lambda: snap,
        decoder=world.fake_decoder,
        names=world.names,
    )
    srv.httpd.RequestHandlerClass.app.clock = lambda: world.NOW  # type: ignore[attr-defined]
    yield srv
    srv.stop()


def test_flat_apps_table_is_todays(run: Run, server: ApiServer) -> None:
    assert run("apps", "--url", server.url, user="root").output == FLAT_APPS
    status = run("status", "--url", server.url, user="root").output
    assert FLAT_APPS.replace("  T_ID  T_SH", "  PREEMPT").replace("     -     -\n", "        0\n") in status
    assert "tenancy:" not in status and "SHARE" not in status


def test_apps_grouped_under_accounts_and_users(run: Run, tree_server: ApiServer) -> None:
    assert run("apps", "--url", tree_server.url, user="root").output == TREE_APPS
    flat = run(
        "apps", "--url", tree_server.url, "--flat", "-o", "rank,app,account,share", "-P", user="root"
    ).output
    assert flat.splitlines()[:3] == [
        "RANK|APP|ACCOUNT|SHARE",
        "1|themis-alice/ft|vision|18.8%",
        "2|themis-bob/job-21|nlp|12.5%",
    ]


def test_apps_tree_fields_and_parsable(run: Run, tree_server: ApiServer) -> None:
    out = run(
        "apps",
        "--url",
        tree_server.url,
        "-o",
        "level,account,user,app,shares,quota,gpus",
        "-P",
        "-h",
        user="root",
    ).output.splitlines()
    assert out[:3] == [
        "account|vision|-|-|3|6.00|4",
        "user|vision|themis-alice|-|1|3.00|3",
        "app|vision|themis-alice|themis-alice/ft|-|-|1",
    ]
    own = run(
        "apps", "--url", tree_server.url, "-o", "tenant,share", "-P", "-h", user="bob"
    ).output.splitlines()
    assert own[:4] == [
        "nlp|25.0%",
        "  themis-bob|25.0%",
        "    themis-bob/job-21|12.5%",
        "    themis-bob/job-20|12.5%",
    ]
    assert "themis-alice" not in "".join(own[:4]) and own[4].startswith("themis: note: PrivateData")


def test_status_groups_apps_and_names_the_tree(run: Run, tree_server: ApiServer) -> None:
    out = run("status", "--url", tree_server.url, user="root").output
    lines = out.splitlines()
    head = lines.index(next(x for x in lines if x.startswith("ACCOUNT/USER/APP")))
    assert lines[head].split() == [
        "ACCOUNT/USER/APP",
        "SHARE",
        "GPUS",
        "QUOTA",
        "RHO",
        "RANK",
        "RUN",
        "WAIT",
        "PREEMPT",
    ]
    assert lines[head + 1].split() == ["vision", "75.0%", "4", "6.00", "3.00", "-", "3", "1", "-"]
    assert lines[head + 3].split() == ["themis-alice/ft", "18.8%", "1", "-", "3.00", "1", "1", "0", "0"]
    assert f"tenancy: {tw.LINE}" in out
    flat = run("status", "--url", tree_server.url, "--flat", user="root").output
    assert "RANK  APP" in flat and "ACCOUNT/USER/APP" not in flat


def test_explain_says_which_level_held_the_job(run: Run, tree_server: ApiServer) -> None:
    out = run("explain", "11", "--url", tree_server.url, user="alice").output
    why = next(x for x in out.splitlines() if x.startswith("Why:"))
    assert "you (themis-alice) are at your share in account vision" in why
    assert "another app of yours is further behind and went first: themis-alice/ft" in why
    ten = next(x for x in out.splitlines() if x.startswith("Tenancy:"))
    assert ten == (
        "Tenancy:   account vision: 75.0% of the cluster, 4 GPU(s) now, quota 6.00; user themis-alice: "
        "37.5% of the cluster, 3 GPU(s) now, quota 3.00"
    )
    out = run("explain", "21", "--url", tree_server.url, user="bob").output
    assert "because your account nlp is at its share: it holds 4 GPU(s) against its quota of 4.00" in out
