"""The small world (world.py) under tenancy levels account -> user -> app, for the tenancy views and CLI.

Accounts vision (3 shares: alice, carol, 1 share each) and nlp (1 share: bob). On top of world.py:

* themis-alice/ft (vision): job 12 running on node1 GPU 3 (1 GPU), given by the leftover in round 3
* themis-carol/c (vision):  job 30 running on node1 GPU 2 (1 GPU)
Round 3 (the last): alice's quota 3.00 holding 3 GPUs (ft rank 1 got 1 GPU, sweep rank 3 lost: its job 11
wants 2); carol's quota 3.00 holding 1; bob's (nlp's only user) 4.00 holding 4: job-21 won 2 GPUs and kept
none (quota). Now: vision 3/4 of the cluster (alice 3/8, carol 3/8), nlp 1/4.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from themis_slurm.core.decision import AppRecord, KeptBy, Outcome
from themis_slurm.core.tenancy import Tenancy
from themis_slurm.slurm.model import Snapshot
from themis_slurm.state.store import Store

from . import world
from .world import ALICE, BOB, NOW

CAROL = "themis-carol"
TREE = Tenancy(
    ("account", "user", "app"),
    {"vision": 3.0, "nlp": 1.0},
    {("vision", ALICE): 1.0, ("vision", CAROL): 1.0, ("nlp", BOB): 1.0},
)
LINE = "account -> user -> app, 2 accounts, 3 users (shares from slurm)"
ACCOUNT = {ALICE: "vision", CAROL: "vision", BOB: "nlp"}


def snapshot() -> Snapshot:
    snap = world.snapshot()
    extra = (
        world.managed("12", f"{ALICE}/ft", ALICE, "RUNNING", 1, frozenset({3}), {"node1": 1}),
        world.managed("30", f"{CAROL}/c", CAROL, "RUNNING", 1, frozenset({2}), {"node1": 1}),
    )
    return replace(
        snap, free=frozenset(), managed=snap.managed + extra, managed_used=snap.managed_used | {2, 3}
    )


def _rec(
    app: str,
    rho: float,
    outcome: Outcome,
    rank: int | None,
    tenant: tuple,
    quota: float,
    held: int,
    won: int = 0,
    kept: int = 0,
    leftover: int = 0,
    kept_by: KeptBy = KeptBy.ALL,
) -> AppRecord:
    return AppRecord(
        app_id=app,
        rho_before=rho,
        rho_after=rho,
        rank=rank,
        bid=outcome in (Outcome.LOST, Outcome.WON),
        won_gpus=won,
        kept_gpus=kept,
        leftover_gpus=leftover,
        outcome=outcome,
        ranked=3,
        kept_by=kept_by,
        tenant=tenant,
        tenant_quota=quota,
        tenant_gpus=held,
    )


def build_store(state_dir: Path, tree: Tenancy = TREE) -> Path:
    """world.build_store plus the tree, the accounts, carol's and alice's second app and round 3."""
    db = world.build_store(state_dir)
    store = Store(db)
    ft, sweep, c, b20, b21 = f"{ALICE}/ft", f"{ALICE}/sweep", f"{CAROL}/c", f"{BOB}/job-20", f"{BOB}/job-21"
    alice, carol, bob = ("user", ("vision", ALICE)), ("user", ("vision", CAROL)), ("user", ("nlp", BOB))
    with store.tx():
        store.put_tenancy(tree, LINE, NOW - 30, NOW - 30)
        for row in store.apps().values():
            store.put_app(replace(row, account=ACCOUNT[row.owner]))
        store.put_app(replace(world.app_row(ft, 3.0), account="vision"))
        store.put_app(replace(world.app_row(c, 0.9), account="vision"))
        store.put_job(world.job_row("12", ft, "running", 1, lease_start=NOW - 5, lease_expiry=NOW + 55))
        store.put_job(world.job_row("30", c, "running", 1, lease_start=NOW - 50, lease_expiry=NOW + 10))
        r3 = store.add_round(
            NOW - 5,
            "enforce",
            "1 free GPU(s), 3 waiting job(s)",
            "exact",
            1,
            1,
            0,
            0,
            0.003,
            fairness_knob=0.8,
        )
        for rec in (
            _rec(ft, 3.0, Outcome.LOST, 1, alice, 3.0, 3, leftover=1),
            _rec(b21, 2.5, Outcome.WON, 2, bob, 4.0, 4, won=2, kept=0, kept_by=KeptBy.QUOTA),
            _rec(sweep, 1.4, Outcome.LOST, 3, alice, 3.0, 3),
            _rec(b20, 1.1, Outcome.NOTHING_WAITING, None, bob, 4.0, 4),
            _rec(c, 0.9, Outcome.NOTHING_WAITING, None, carol, 3.0, 1),
        ):
            store.add_decision(
                r3,
                NOW - 5,
                rec.app_id,
                None,
                "app",
                rho_before=rec.rho_before,
                rho_after=rec.rho_after,
                gpus=rec.won_gpus + rec.leftover_gpus,
                record=rec,
            )
    store.close()
    return db
