"""themisd keeps each active tenant's book for paced quotas (core/quota.py, store schema v8): what its share
of the cluster has owed it since it became active, and the work of its jobs that finished; the book goes
when the tenant has no jobs left, and the rounds get the books."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from themis_slurm.daemon.config import Config, TenancyConfig
from themis_slurm.daemon.loop import Daemon
from themis_slurm.daemon.planning import build_round
from themis_slurm.state.store import Store

from .conftest import daemon_config, run
from .fake_slurm import FakeSlurm

ALICE, BOB = ("user", ("", "alice")), ("user", ("", "bob"))


def user_levels(tmp_path: Path) -> Config:
    cfg = daemon_config(tmp_path / "state")
    return replace(cfg, tenancy=TenancyConfig(levels=("user", "app"), shares="equal"))


def test_books_integrate_each_users_share_and_its_finished_work(
    tmp_path: Path, slurm: FakeSlurm, make_daemon: Callable[..., Daemon]
) -> None:
    # 8 GPUs; alice splits 3 jobs into 3 apps, bob runs one app of 3: each user owed 4 GPUs x t
    for i, work in enumerate((100.0, 2000.0, 2000.0)):
        slurm.submit("alice", f"a{i}", 1, work, est_s=work)
    for work in (100.0, 2000.0, 2000.0):
        slurm.submit("bob", "b", 1, work, est_s=work)
    d = make_daemon(user_levels(tmp_path))
    d.cycle()
    t0 = slurm.now
    books = d.store.tenant_books()
    assert set(books) == {ALICE, BOB} and all(b.entitled == 0 and b.frac == pytest.approx(0.5) for b in books.values())
    run(d, slurm, 300.0)
    d.cycle()
    books = d.store.tenant_books()
    for ent in (ALICE, BOB):
        assert books[ent].book(slurm.now, 8).entitled == pytest.approx(4.0 * (slurm.now - t0))
        assert books[ent].finished == pytest.approx(100.0)  # the 100 s job of each ended; one GPU each
    # the round gets them
    inp = build_round(slurm.snapshot(), d.store.jobs(), d.store.apps(active_only=True), d.cfg, slurm.now,
                      tenancy=d._tree, books=d._books)
    assert inp.state.tenant_books[ALICE].entitled == pytest.approx(4.0 * (slurm.now - t0))


def test_a_tenant_without_jobs_loses_its_book_and_starts_afresh(
    tmp_path: Path, slurm: FakeSlurm, make_daemon: Callable[..., Daemon]
) -> None:
    slurm.submit("alice", "a", 1, 50.0, est_s=50.0)
    slurm.submit("bob", "b", 1, 5000.0, est_s=5000.0)
    d = make_daemon(user_levels(tmp_path))
    run(d, slurm, 120.0)
    assert set(d.store.tenant_books()) == {BOB}, "alice's only job ended: her busy period is over"
    assert d.store.tenant_books()[BOB].frac == pytest.approx(1.0)
    slurm.submit("alice", "again", 1, 500.0, est_s=500.0)
    run(d, slurm, 10.0)
    assert d.store.tenant_books()[ALICE].finished == 0.0 and d.store.tenant_books()[BOB].frac == pytest.approx(0.5)


def test_flat_keeps_no_books_and_a_reload_to_flat_clears_them(
    tmp_path: Path, slurm: FakeSlurm, make_daemon: Callable[..., Daemon]
) -> None:
    slurm.submit("alice", "a", 1, 5000.0, est_s=5000.0)
    d = make_daemon()
    run(d, slurm, 20.0)
    assert d.store.tenant_books() == {}
    d.reload(user_levels(tmp_path))
    run(d, slurm, 10.0)
    assert set(d.store.tenant_books()) == {ALICE}
    d.reload(replace(d.cfg, tenancy=TenancyConfig(levels=("app",))))
    run(d, slurm, 10.0)
    assert d.store.tenant_books() == {}
    assert Store(d.cfg.db_path).tenant_books() == {}  # committed
