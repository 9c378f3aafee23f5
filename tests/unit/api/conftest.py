"""Fixtures: the world's database, slurm.conf files with and without PrivateData, an ApiApp factory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from themis_slurm.api.server import ApiApp, build_app
from themis_slurm.daemon.config import Config  # the lease terms themisd's default config gives

from . import world


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return world.build_store(tmp_path / "state")


@pytest.fixture
def make_app(tmp_path: Path, db: Path) -> Callable[..., ApiApp]:
    def make(private: bool = True, snapshot: bool = True, operators: tuple[str, ...] = ()) -> ApiApp:
        conf = tmp_path / ("private.conf" if private else "public.conf")
        conf.write_text(world.SLURM_CONF_PRIVATE if private else world.SLURM_CONF_PUBLIC)
        snap = world.snapshot() if snapshot else None
        return build_app(db, str(conf), snapshot=lambda: snap, decoder=world.fake_decoder, names=world.names,
                         operators=operators, last_cycle=lambda: world.NOW, round_terms=lambda: Config().round_terms)

    return make
