"""Fixtures for the daemon's unit tests: a small cluster in FakeSlurm and a Daemon on a temporary store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.unit.slurm.fake_slurm import FakeRunner
from themis_slurm.core.topology import Topology
from themis_slurm.daemon.config import Config, EstimatesConfig, SchedulerConfig, TenancyConfig, parse
from themis_slurm.daemon.loop import Daemon
from themis_slurm.slurm.shares import SHOW_CONFIG, SSHARE
from themis_slurm.state.store import Store

from .fake_slurm import FakeSlurm


def daemon_config(state_dir: Path, **scheduler: float) -> Config:
    """Short leases (60 s), 10 s grace, no minimum run time, no restart cost in bids: rounds happen within
    a few simulated cycles, and a 60 s restart cost would halve every bid against a 60 s lease. Tenancy:
    the app level alone (the paper's 1/N these tests were written for; FakeSlurm has no account tree, and
    test_tenancy_daemon.py sets its own levels)."""
    sched = dict(lease_minutes=1.0, grace_s=10.0, min_runtime_s=0.0, release_timeout_s=20.0, restart_cost_s=0.0)
    sched.update(scheduler)
    cfg = parse({"state_dir": str(state_dir), "poll_interval_s": 5, "metrics": {"listen": ""},
                 "api": {"listen": ""}, "failopen": {"heartbeat_file": str(state_dir.parent / "heartbeat")},
                 "tenancy": {"levels": ["app"]}},
                "test.yaml")
    return replace(cfg, scheduler=SchedulerConfig(**sched),
                   estimates=EstimatesConfig(default_s=600.0, min_s=10.0, max_s=86400.0))


@pytest.fixture
def topo() -> Topology:
    """2 nodes x 4 GPUs (two NVLink islands of 2 each) in one rack: 8 GPUs."""
    return Topology.uniform(racks=1, nodes_per_rack=2, gpus_per_node=4, islands_per_node=2)


@pytest.fixture
def slurm(topo: Topology) -> FakeSlurm:
    return FakeSlurm(topo)


@pytest.fixture
def make_daemon(tmp_path: Path, slurm: FakeSlurm) -> Iterator[Callable[..., Daemon]]:
    """Builds a Daemon on the shared FakeSlurm and a store in tmp_path (call again = a restart)."""
    stores: list[Store] = []

    def make(cfg: Config | None = None, **scheduler: float) -> Daemon:
        cfg = cfg or daemon_config(tmp_path / "state", **scheduler)
        store = Store(cfg.db_path)
        stores.append(store)
        return Daemon(cfg, slurm, store)

    yield make
    for s in stores:
        s.close()


def run(d: Daemon, slurm: FakeSlurm, seconds: float, step: float = 5.0) -> None:
    """Cycles every `step` simulated seconds for `seconds`."""
    t = 0.0
    while t < seconds:
        d.cycle()
        slurm.advance(step)
        t += step


#: `scontrol show config` and `sshare` as a cluster with accounting answers them: accounts A (3 shares: alice,
#: bob) and B (1: carol). For the tenancy tests (daemon/tenancy.py through the backend's runner).
CONFIG = "AccountingStorageType   = accounting_storage/slurmdbd\nClusterName             = test\n"
TREE = "root||\n root|root|1\n A||3\n  A|alice|1\n  A|bob|1\n B||1\n  B|carol|1\n"


def tenancy_config(tmp_path: Path, **tenancy: object) -> Config:
    return replace(daemon_config(tmp_path / "state"), tenancy=TenancyConfig(**tenancy))  # type: ignore[arg-type]


@pytest.fixture
def runner(slurm: FakeSlurm) -> FakeRunner:
    """The backend's runner (both real backends have one): answers scontrol show config and sshare."""
    r = FakeRunner({SHOW_CONFIG: CONFIG, SSHARE: TREE})
    slurm.runner = r  # type: ignore[attr-defined]
    return r
