"""What themisd keeps and exports so that tenancy can be shown (issue 33 item 5): the tree in force in the
store (for the status API), each app record's tenant, quota and GPUs, and per-tenant metrics that come and
go with the tenants."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit.slurm.fake_slurm import FakeRunner
from themis_slurm.daemon.loop import Daemon

from .conftest import tenancy_config
from .fake_slurm import FakeSlurm


def gauge(d: Daemon, name: str, level: str, account: str, user: str = "") -> float | None:
    return d.metrics.registry.get_sample_value(name, {"level": level, "account": account, "user": user})


def test_tree_records_and_metrics_of_the_tenants(
    tmp_path: Path, slurm: FakeSlurm, runner: FakeRunner, make_daemon: Callable[..., Daemon]
) -> None:
    jobs = [slurm.submit("alice", app, 2, 600.0, account="A") for app in ("x", "y")]
    jobs.append(slurm.submit("bob", "z", 2, 600.0, account="A"))
    jobs.append(slurm.submit("carol", "w", 2, 600.0, account="B"))
    d = make_daemon(tenancy_config(tmp_path, levels="auto"))
    d.cycle()
    slurm.advance(5.0)
    d.cycle()  # the granted jobs run now
    stored = d.store.tenancy()
    assert stored is not None
    tree, line, read_at = stored
    assert tree == d._tree and tree.account_shares == {"A": 3.0, "B": 1.0} and read_at is not None
    assert line == "account -> user -> app, 2 accounts, 3 users (shares from slurm)"
    recs = d.store.query(
        "SELECT app_key, tenant, tenant_quota, tenant_gpus FROM decisions WHERE action = 'app'"
    )
    assert {r["app_key"]: r["tenant"] for r in recs} == {
        "alice/x": '["user", ["A", "alice"]]',
        "alice/y": '["user", ["A", "alice"]]',
        "bob/z": '["user", ["A", "bob"]]',
        "carol/w": '["user", ["B", "carol"]]',
    }
    assert all(r["tenant_quota"] is not None for r in recs)
    # shares as the rounds use them: A 3/4 (alice, bob 3/8 each), B 1/4
    assert gauge(d, "themis_tenant_share", "account", "A") == pytest.approx(0.75)
    assert gauge(d, "themis_tenant_share", "user", "A", "alice") == pytest.approx(0.375)
    assert gauge(d, "themis_tenant_share", "user", "B", "carol") == pytest.approx(0.25)
    running = {m.app_key: m.gpus for m in slurm.snapshot().managed if m.state == "RUNNING"}
    assert gauge(d, "themis_tenant_gpus", "user", "A", "alice") == running.get("alice/x", 0) + running.get(
        "alice/y", 0
    )
    assert gauge(d, "themis_tenant_gpus", "account", "A") == sum(
        v for k, v in running.items() if k != "carol/w"
    )
    assert gauge(d, "themis_tenant_quota", "account", "A") == pytest.approx(
        gauge(d, "themis_tenant_quota", "user", "A", "alice")
        + gauge(d, "themis_tenant_quota", "user", "A", "bob")
    )
    # carol's work ends: her series (and account B's) go, the others stay
    slurm.cancel(jobs[3], "COMPLETED")
    d.cycle()
    assert gauge(d, "themis_tenant_share", "user", "B", "carol") is None
    assert gauge(d, "themis_tenant_gpus", "account", "B") is None
    assert gauge(d, "themis_tenant_quota", "user", "B", "carol") is None
    assert gauge(d, "themis_tenant_share", "account", "A") == pytest.approx(1.0)


def test_flat_stores_the_flat_tree_and_exports_no_tenants(
    tmp_path: Path, slurm: FakeSlurm, make_daemon: Callable[..., Daemon]
) -> None:
    slurm.submit("alice", "x", 1, 600.0)
    d = make_daemon(tenancy_config(tmp_path, levels=("app",)))
    d.cycle()
    stored = d.store.tenancy()
    assert stored is not None and stored[0].flat and stored[1].startswith("app (every app 1/N")
    samples = [
        s for m in d.metrics.registry.collect() if m.name.startswith("themis_tenant") for s in m.samples
    ]
    assert samples == []
    recs = d.store.query("SELECT tenant, tenant_quota FROM decisions WHERE action = 'app'")
    assert recs and all(r["tenant"] is None and r["tenant_quota"] is None for r in recs)
    # written once, not every cycle
    before = d.store.query("SELECT updated FROM tenancy")[0][0]
    slurm.advance(5.0)
    d.cycle()
    assert d.store.query("SELECT updated FROM tenancy")[0][0] == before
