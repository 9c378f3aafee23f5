"""API documents and privacy, through ApiApp.handle (no HTTP) over a real daemon Store."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from themis_slurm.api.server import ApiApp

from . import world

ALICE = "MUNGE cred-alice"
BOB = "MUNGE cred-bob"
ROOT = "MUNGE cred-root"


@pytest.fixture
def app(make_app: Callable[..., ApiApp]) -> ApiApp:
    a = make_app(private=True)
    a.clock = lambda: world.NOW
    return a


def get(app: ApiApp, path: str, auth: str | None = None, query: str = "") -> tuple[int, dict]:
    return app.handle(path, query, auth)


def test_cluster_counts_gpus_by_rack_and_state(app: ApiApp) -> None:
    status, doc = get(app, "/v1/cluster", ROOT)
    assert status == 200
    assert doc["gpus"] == {"total": 8, "free": 2, "starting": 0, "leased": 6, "unmanaged": 0, "unavailable": 0}
    assert {r["rack"]: (r["total"], r["free"], r["leased"]) for r in doc["racks"]} == {
        "rack1": (4, 2, 2), "rack2": (4, 0, 4)}
    assert [a["app"] for a in doc["apps"]] == ["themis-bob/job-21", "themis-alice/sweep", "themis-bob/job-20"]
    assert [a["rank"] for a in doc["apps"]] == [1, 2, 3]
    assert [x["job"] for x in doc["next_leases"]] == ["10", "20"]
    assert doc["rounds"]["total"] == 2
    assert doc["meta"]["data_age_s"] == 0.0 and doc["meta"]["source"] == "themisd"


def test_anonymous_caller_gets_aggregates_only(app: ApiApp) -> None:
    status, doc = get(app, "/v1/cluster")
    assert status == 200
    assert doc["apps"] == [] and doc["next_leases"] == []
    assert doc["aggregates"]["apps"] == 3 and doc["aggregates"]["rho_worst"] == 2.5
    assert doc["gpus"]["total"] == 8
    assert doc["meta"]["viewer"]["scope"] == "aggregates"
    assert "no munge credential sent" in doc["meta"]["viewer"]["note"]
    _, jobs = get(app, "/v1/jobs")
    assert jobs["jobs"] == [] and jobs["aggregates"]["jobs"] == 4


def test_invalid_credential_is_anonymous_and_says_why(app: ApiApp) -> None:
    _, doc = get(app, "/v1/jobs", "MUNGE forged")
    assert doc["jobs"] == []
    assert "Invalid credential" in doc["meta"]["viewer"]["note"]
    _, doc = get(app, "/v1/jobs", "Bearer x")
    assert "is not 'MUNGE <credential>'" in doc["meta"]["viewer"]["note"]


def test_private_data_shows_only_own_jobs_and_apps(app: ApiApp) -> None:
    _, doc = get(app, "/v1/jobs", ALICE)
    assert {j["job"] for j in doc["jobs"]} == {"10", "11"}
    assert doc["meta"]["viewer"] == {"user": "themis-alice", "uid": 1001, "scope": "own",
                                     "note": "PrivateData=jobs,usage: you see your own jobs and apps"}
    _, doc = get(app, "/v1/apps", BOB)
    assert {a["app"] for a in doc["apps"]} == {"themis-bob/job-20", "themis-bob/job-21"}
    _, doc = get(app, "/v1/cluster", BOB)
    assert [x["job"] for x in doc["next_leases"]] == ["20"]
    _, topo = get(app, "/v1/topology", BOB)
    jobs_seen = {g["job"] for r in topo["racks"] for n in r["nodes"] for i in n["islands"] for g in i["gpus"]}
    assert jobs_seen == {None, "20"}  # alice's GPUs show as leased, without her job id


def test_public_cluster_shows_everything_to_any_authenticated_user(make_app: Callable[..., ApiApp]) -> None:
    app = make_app(private=False)
    _, doc = get(app, "/v1/jobs", ALICE)
    assert {j["job"] for j in doc["jobs"]} == {"10", "11", "20", "21"}


@pytest.mark.parametrize("auth, operators", [(ROOT, ()), (ALICE, ("themis-alice",)), (ALICE, ("1001",))])
def test_root_and_operators_see_all(make_app: Callable[..., ApiApp], auth: str, operators: tuple[str, ...]) -> None:
    _, doc = get(make_app(private=True, operators=operators), "/v1/jobs", auth)
    assert len(doc["jobs"]) == 4 and doc["meta"]["viewer"]["scope"] == "all"


def test_slurm_user_sees_all(make_app: Callable[..., ApiApp]) -> None:
    app = make_app(private=True)
    app.auth.decoder = lambda cred: 64030  # the SlurmUser of slurm.conf
    _, doc = get(app, "/v1/jobs", "MUNGE x")
    assert len(doc["jobs"]) == 4


def test_jobs_filters_and_fields(app: ApiApp) -> None:
    _, doc = get(app, "/v1/jobs", ROOT, "user=themis-bob")
    assert [j["job"] for j in doc["jobs"]] == ["20", "21"]
    _, doc = get(app, "/v1/jobs", ALICE, "app=sweep")
    assert [j["job"] for j in doc["jobs"]] == ["10", "11"]
    j10 = doc["jobs"][0]
    assert j10 | {"service_gpu_s": 0} == j10 | {
        "job": "10", "app": "themis-alice/sweep", "user": "themis-alice", "state": "RUNNING", "intent": "running",
        "gpus": 2, "nodes": {"node1": 2}, "lease_end": world.NOW + 40, "service_gpu_s": 0}


def test_jobs_say_how_they_save_and_what_a_preemption_would_lose(app: ApiApp) -> None:
    _, doc = get(app, "/v1/jobs", ROOT)
    j10 = next(j for j in doc["jobs"] if j["job"] == "10")
    # no --themis-ckpt and nothing learned: it saves at Themis's warning, so a preemption loses nothing
    assert (j10["checkpoint"], j10["checkpoint_source"], j10["unsaved_gpu_s"]) == ("warning", "default", 0.0)


def test_jobs_show_the_first_submit_time(app: ApiApp) -> None:
    # Slurm moves a requeued job's SubmitTime to the requeue; themis jobs shows when it was submitted
    _, doc = get(app, "/v1/jobs", ROOT)
    submit = {j["job"]: j["submit_time"] for j in doc["jobs"]}
    assert submit["21"] == world.NOW - 900  # the store's first SubmitTime
    assert submit["20"] == world.NOW - 300  # a row without one (an older themisd's): Slurm's


def test_apps_have_finish_time_estimates_and_preemption_counts(app: ApiApp) -> None:
    _, doc = get(app, "/v1/apps", ROOT)
    sweep = next(a for a in doc["apps"] if a["app"] == "themis-alice/sweep")
    assert sweep["jobs_running"] == 1 and sweep["jobs_waiting"] == 1 and sweep["gpus_held"] == 2
    assert sweep["t_id_s"] > 0 and sweep["t_sh_s"] > 0
    assert all("preemptions" in a for a in doc["apps"])
    assert "themis-alice/old" not in {a["app"] for a in doc["apps"]}  # finished apps are history
    _, doc = get(app, "/v1/apps", ROOT, "all=1")
    assert "themis-alice/old" in {a["app"] for a in doc["apps"]}


def test_explain_running_job(app: ApiApp) -> None:
    status, doc = get(app, "/v1/jobs/10/explain", ALICE)
    assert status == 200
    assert doc["summary"].startswith("running on node1:2 under a lease until")
    assert "40 s left" in doc["summary"] and "rank 2 of 3" in doc["summary"]
    assert doc["app"]["rho"] == 1.4 and doc["app"]["rank"] == 2
    first = doc["rounds"][-1]
    assert first["app"]["bid"] and first["app"]["won_gpus"] == 2 and first["app"]["hidden_payment"] == 1.0
    assert first["job"] == [{"action": "grant", "reason": "auction: bid (rank 1), won 2 GPU(s)", "source": "auction",
                             "cause": None, "gpus": 2, "nodes": {"node1": 2}, "lease_end": world.NOW + 40}]
    assert doc["placement"] == {"planned": {"node1": 2}, "granted": {"node1": 2}, "current": {"node1": 2}}
    assert doc["lease"]["remaining_s"] == 40


def test_explain_waiting_job(app: ApiApp) -> None:
    _, doc = get(app, "/v1/jobs/21/explain", BOB)
    assert doc["summary"].startswith("waiting: in round 2")
    assert "bid (rank 1) but won nothing" in doc["summary"]
    assert [r["round"] for r in doc["rounds"]] == [2, 1]
    assert doc["rounds"][1]["app"]["offered"] is False
    assert doc["events"][0]["kind"] == "rehold"


def test_explain_hides_other_users_jobs_like_unknown_ones(app: ApiApp) -> None:
    s1, hidden = get(app, "/v1/jobs/20/explain", ALICE)
    s2, unknown = get(app, "/v1/jobs/999/explain", ALICE)
    assert s1 == s2 == 404
    assert hidden["error"].replace("20", "N") == unknown["error"].replace("999", "N")
    assert "squeue -j 999" in unknown["error"]


@pytest.mark.parametrize("path, query, status, text", [
    ("/v1/jobs/abc/explain", "", 400, "is not a Slurm job id"),
    ("/v1/jobs", "colour=red", 400, "unknown parameter 'colour' (accepted: user, app)"),
    ("/v1/rounds", "limit=0", 400, "not an integer in 1..1000"),
    ("/v1/nope", "", 404, "no such endpoint"),
    ("/v2/cluster", "", 404, "endpoints: /v1/cluster"),
])
def test_bad_requests(app: ApiApp, path: str, query: str, status: int, text: str) -> None:
    got, doc = get(app, path, ROOT, query)
    assert got == status and text in doc["error"]


def test_rounds_are_aggregates(app: ApiApp) -> None:
    _, doc = get(app, "/v1/rounds", None, "limit=1")
    assert [r["id"] for r in doc["rounds"]] == [2]


def test_no_snapshot_degrades(make_app: Callable[..., ApiApp]) -> None:
    app = make_app(snapshot=False)
    _, doc = get(app, "/v1/cluster", ROOT)
    assert doc["gpus"]["total"] is None and doc["gpus"]["leased"] == 6
    status, doc = get(app, "/v1/topology", ROOT)
    assert status == 503 and "snapshot" in doc["error"]


def test_missing_database_is_503(make_app: Callable[..., ApiApp], db) -> None:  # type: ignore[no-untyped-def]
    app = make_app()
    db.unlink()
    status, doc = get(app, "/v1/cluster", ROOT)
    assert status == 503 and "does not exist" in doc["error"]


def test_database_is_opened_read_only(app: ApiApp) -> None:
    import sqlite3

    with app.state() as state, pytest.raises(sqlite3.OperationalError, match="readonly"):
        state.db.execute("DELETE FROM jobs")


def test_explain_a_job_that_left_uses_the_audit_log(app: ApiApp, db) -> None:  # type: ignore[no-untyped-def]
    from themis_slurm.state.store import Store

    store = Store(db)
    with store.tx():
        store.delete_job("10")
    store.close()
    app.snapshot = lambda: None  # Slurm no longer shows it either
    status, doc = get(app, "/v1/jobs/10/explain", ALICE)
    assert status == 200 and doc["job"]["intent"] == "gone"
    assert doc["summary"].startswith("no longer active") and doc["placement"]["granted"] == {"node1": 2}


def test_explain_shows_rows_of_older_daemons_as_written(make_app: Callable[..., ApiApp], db) -> None:  # type: ignore[no-untyped-def]
    """Rows written before schema v3 have only their sentence: shown verbatim, never parsed for fields."""
    from themis_slurm.state.store import Store

    store = Store(db)
    with store.tx():
        rid = store.add_round(world.NOW - 5, "enforce", "old", "fast", 2, 0, 0, 0, 0.001)
        store.add_decision(rid, world.NOW - 5, "themis-bob/job-21", None, "app", "bid (rank 1) but won nothing",
                           2.5, 2.5, None, 0)
    store.close()
    _, doc = get(make_app(), "/v1/jobs/21/explain", BOB)
    old = doc["rounds"][0]["app"]
    assert old["reason"] == "bid (rank 1) but won nothing"
    assert (old["outcome"], old["rank"], old["bid"], old["offered"]) == (None, None, None, None)
    assert doc["rounds"][1]["app"]["offered"] is True and doc["rounds"][1]["app"]["rank"] == 1


def test_actions_themisd_retries_are_shown_to_their_owners(app: ApiApp) -> None:
    # issue 38 item 1: what could not be done in Slurm is visible, and only to whom the job is visible
    pending = [{"job": "20", "app": "themis-bob/job-20", "action": "warn", "since": world.NOW - 30, "tries": 4,
                "error": "scancel --batch --signal=USR1 20 timed out: no answer within 10 s"}]
    app.pending_actions = lambda: pending
    _, doc = get(app, "/v1/cluster", BOB)
    assert doc["pending_actions"] == pending
    _, doc = get(app, "/v1/cluster", ALICE)
    assert doc["pending_actions"] == []
    from themis_slurm.cli.output import TableOptions
    from themis_slurm.cli.status import render_status

    _, doc = get(app, "/v1/cluster", ROOT)
    screen = render_status(doc, TableOptions())
    assert "RETRYING" in screen and "timed out: no answer within 10 s" in screen


def _busy_world(tmp_path, db, cpus: int, mem: int) -> ApiApp:  # type: ignore[no-untyped-def]
    """The world with job 21 asking `cpus` CPUs and `mem` MiB per node, node1 busy (4 CPUs, 8G free), node2
    roomy (14 CPUs, 60G free)."""
    from dataclasses import replace

    from themis_slurm.api.server import build_app
    from themis_slurm.daemon.config import Config  # the lease terms themisd's default config gives
    from themis_slurm.slurm.model import NodeRoom

    snap = world.snapshot()
    jobs = tuple(replace(m, cpus_per_node=cpus, mem_per_node=mem) if m.job_id == "21" else m for m in snap.managed)
    snap = replace(snap, managed=jobs, room={"node1": NodeRoom(4, 8192), "node2": NodeRoom(14, 61440)})
    conf = tmp_path / "private.conf"
    conf.write_text(world.SLURM_CONF_PRIVATE)
    app = build_app(db, str(conf), snapshot=lambda: snap, decoder=world.fake_decoder, names=world.names,
                    last_cycle=lambda: world.NOW, round_terms=lambda: Config().round_terms)
    app.clock = lambda: world.NOW
    return app


def test_explain_names_the_nodes_too_busy_on_cpus_or_memory(tmp_path, db) -> None:  # type: ignore[no-untyped-def]
    """Issue 37: a waiting job whose CPUs or memory do not fit a node now is told which nodes have its room."""
    _, doc = get(_busy_world(tmp_path, db, 12, 4096), "/v1/jobs/21/explain", BOB)
    assert doc["room"] == {"cpus": 12, "mem_mib": 4096, "short": {"node1": {"cpus": 4, "mem_mib": 8192}},
                           "fits": ["node2"], "reason": doc["room"]["reason"]}
    assert ("its 12 CPU(s) and 4G of memory per node are free now only on node2 "
            "(not on node1: 4 CPU(s) and 8G of memory free)") in doc["summary"]

    _, doc = get(_busy_world(tmp_path, db, 2, 65536), "/v1/jobs/21/explain", BOB)
    assert doc["room"]["fits"] == [] and set(doc["room"]["short"]) == {"node1", "node2"}
    assert "no node it may use has its 2 CPU(s) and 64G of memory per node free now" in doc["summary"]
    assert "it waits for jobs there to end" in doc["summary"]


def test_explain_says_nothing_of_room_where_every_node_fits(tmp_path, db) -> None:  # type: ignore[no-untyped-def]
    _, doc = get(_busy_world(tmp_path, db, 2, 1024), "/v1/jobs/21/explain", BOB)
    assert doc["room"]["short"] == {} and doc["room"]["reason"] is None and "per node" not in doc["summary"]
    _, doc = get(_busy_world(tmp_path, db, 0, 0), "/v1/jobs/21/explain", BOB)
    assert doc["room"] is None
    _, doc = get(_busy_world(tmp_path, db, 12, 0), "/v1/jobs/10/explain", ALICE)  # running: not asked
    assert doc["room"] is None
