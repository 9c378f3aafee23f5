"""A small Themis world for the API and CLI unit tests: a real daemon Store in a temp folder and a Snapshot.

Cluster: 2 racks x 1 node x 4 GPUs (2 NVLink islands each) = 8 GPUs. Apps and jobs:

* themis-alice/sweep: job 10 running on node1 (2 GPUs, lease ends at NOW+40), job 11 waiting (2 GPUs)
* themis-bob/job-20:  job 20 running on node2 (4 GPUs, lease ends at NOW+100)
* themis-bob/job-21:  job 21 waiting (2 GPUs), lost round 2
GPUs 2,3 on node1 are free. Round 1 granted 10 and 20; round 2 preempted nothing, bob/job-21 won nothing.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from themis_slurm.core.decision import AppRecord, KeptBy, Outcome
from themis_slurm.core.topology import Topology
from themis_slurm.slurm.model import ManagedJob, Snapshot
from themis_slurm.state.rows import AppRow, JobRow
from themis_slurm.state.store import Store

NOW = 1_700_000_000.0
ALICE, BOB = "themis-alice", "themis-bob"
UIDS = {0: "root", 1001: ALICE, 1002: BOB, 64030: "slurm"}
CREDS = {"cred-alice": 1001, "cred-bob": 1002, "cred-root": 0}


def topo() -> Topology:
    return Topology.uniform(racks=2, nodes_per_rack=1, gpus_per_node=4, islands_per_node=2)


def managed(job_id: str, app: str, user: str, state: str, gpus: int, gpu_ids: frozenset[int] = frozenset(),
            node_gpus: dict[str, int] | None = None) -> ManagedJob:
    return ManagedJob(job_id=job_id, slurm_id=int(job_id.split("_")[0]), app_key=app, user=user, state=state,
                      held=state == "PENDING", gpus=gpus, gpus_per_node=None, nodes=None,
                      node_gpus=node_gpus or {}, gpu_ids=gpu_ids, est_s=600.0, time_limit_s=None, profile=None,
                      progress=None, progress_error=None, requeue_ok=True, restart_cnt=0,
                      submit_time=NOW - 300, start_time=NOW - 60 if state == "RUNNING" else None,
                      required_nodes=(), priority=0, partition="gpu", name=f"train{job_id}")


def snapshot() -> Snapshot:
    t = topo()
    jobs = (
        managed("10", f"{ALICE}/sweep", ALICE, "RUNNING", 2, frozenset({0, 1}), {"node1": 2}),
        managed("11", f"{ALICE}/sweep", ALICE, "PENDING", 2),
        managed("20", f"{BOB}/job-20", BOB, "RUNNING", 4, frozenset({4, 5, 6, 7}), {"node2": 4}),
        managed("21", f"{BOB}/job-21", BOB, "PENDING", 2),
    )
    return Snapshot(time=NOW, topology=t, free=frozenset({2, 3}), unmanaged=frozenset(),
                    unavailable=frozenset(), managed=jobs, slurm_calls=2,
                    managed_used=frozenset({0, 1, 4, 5, 6, 7}))


def app_row(key: str, rho: float, arrival: float = NOW - 300) -> AppRow:
    return AppRow(app_key=key, owner=key.split("/")[0], arrival=arrival, clock_since=arrival, clock_last=NOW,
                  clock_integral=600.0, clock_current=2.0, peak_gpus=4, service_s=120.0, rho=rho)


def job_row(job_id: str, app: str, intent: str, gpus: int, **kw: object) -> JobRow:
    return JobRow(job_id=job_id, slurm_id=int(job_id), app_key=app, intent=intent, gpus=gpus,
                  work=600.0 * gpus, first_seen=NOW - 300, **kw)  # type: ignore[arg-type]


def _rec(app: str, before: float, after: float, outcome: Outcome, rank: int, won: int = 0, kept: int = 0,
         c: float | None = None, kept_by: KeptBy = KeptBy.ALL) -> AppRecord:
    return AppRecord(app_id=app, rho_before=before, rho_after=after, rank=rank,
                     bid=outcome in (Outcome.LOST, Outcome.WON), won_gpus=won, kept_gpus=kept, payment_fraction=c,
                     outcome=outcome, ranked=3, kept_by=kept_by)


def build_store(state_dir: Path) -> Path:
    """Writes the world into themis.db under state_dir with the daemon's own Store; returns the db path."""
    store = Store(state_dir / "themis.db")
    a_sweep, b20, b21 = f"{ALICE}/sweep", f"{BOB}/job-20", f"{BOB}/job-21"
    with store.tx():
        store.put_app(app_row(a_sweep, 1.4))
        store.put_app(app_row(b20, 1.1))
        store.put_app(app_row(b21, 2.5))
        store.put_app(replace(app_row(f"{ALICE}/old", 0.9), active=0))
        store.put_job(job_row("10", a_sweep, "running", 2, lease_start=NOW - 60, lease_expiry=NOW + 40,
                              planned_nodes={"node1": 2}, planned_gpus=frozenset({0, 1}), accounted_until=NOW))
        store.put_job(job_row("11", a_sweep, "waiting", 2))
        store.put_job(job_row("20", b20, "running", 4, lease_start=NOW - 60, lease_expiry=NOW + 100,
                              planned_nodes={"node2": 4}, planned_gpus=frozenset({4, 5, 6, 7})))
        store.put_job(job_row("21", b21, "waiting", 2, submit_time=NOW - 900))  # requeued since: Slurm says NOW - 300
        r1 = store.add_round(NOW - 60, "enforce", "8 free GPU(s), 3 waiting job(s)", "exact", 8, 2, 0, 0, 0.004,
                             fairness_knob=0.8)
        sweep1 = _rec(a_sweep, 3.0, 1.4, Outcome.WON, 1, won=2, kept=2, c=1.0)
        store.add_decision(r1, NOW - 60, a_sweep, "10", "grant", rho_before=3.0, rho_after=1.4, payment=1.0, gpus=2,
                           nodes={"node1": 2}, lease_expiry=NOW + 40, record=sweep1, source="auction")
        store.add_decision(r1, NOW - 60, a_sweep, None, "app", rho_before=3.0, rho_after=1.4, payment=1.0, gpus=2,
                           record=sweep1)
        b20_1 = _rec(b20, 2.0, 1.1, Outcome.WON, 2, won=4, kept=4, c=0.8, kept_by=KeptBy.PAYMENT)
        store.add_decision(r1, NOW - 60, b20, "20", "grant", rho_before=2.0, rho_after=1.1, payment=0.8, gpus=4,
                           nodes={"node2": 4}, lease_expiry=NOW + 100, record=b20_1, source="auction")
        store.add_decision(r1, NOW - 60, b20, None, "app", rho_before=2.0, rho_after=1.1, payment=0.8, gpus=4,
                           record=b20_1)
        store.add_decision(r1, NOW - 60, b21, None, "app", rho_before=2.5, rho_after=2.5, gpus=0,
                           record=_rec(b21, 2.5, 2.5, Outcome.NOT_OFFERED, 3))
        r2 = store.add_round(NOW - 10, "enforce", "2 free GPU(s), 2 waiting job(s)", "fast", 2, 0, 0, 0, 0.002,
                             fairness_knob=0.8)
        store.add_decision(r2, NOW - 10, b21, None, "app", rho_before=2.5, rho_after=2.5, gpus=0,
                           record=_rec(b21, 2.5, 2.5, Outcome.LOST, 1))
        store.add_decision(r2, NOW - 10, a_sweep, None, "app", rho_before=1.4, rho_after=1.4, gpus=0,
                           record=_rec(a_sweep, 1.4, 1.4, Outcome.LOST, 2))
        store.add_event(NOW - 5, "rehold", "released outside Themis: held again", "21", b21)
    store.close()
    return state_dir / "themis.db"


SLURM_CONF_PRIVATE = """ClusterName=test
SlurmUser=slurm
AuthInfo=socket=/tmp/nowhere/munge.sock,cred_expire=30
PrivateData=jobs,usage   # hide others' jobs
"""
SLURM_CONF_PUBLIC = "ClusterName=test\nSlurmUser=slurm\n"


def fake_decoder(credential: str) -> int:
    from themis_slurm.api.auth import AuthError

    if credential not in CREDS:
        raise AuthError("munge credential refused: Invalid credential")
    return CREDS[credential]


def names(uid: int) -> str:
    return UIDS.get(uid, str(uid))
