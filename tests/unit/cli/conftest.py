"""A live API server over the world's database (tests/unit/api/world.py) and a CLI runner that uses it.

The CLI's munge step is replaced by a fixed credential the server's fake decoder knows, so the tests run
without munged; which user the CLI is can be chosen per call.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from api import world  # tests/unit/api: the shared small world (tests/unit is on sys.path under pytest)
from click.testing import CliRunner, Result

from themis_slurm.api import ApiServer, start_api_server
from themis_slurm.cli import client as client_mod
from themis_slurm.cli.main import cli

Run = Callable[..., Result]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return world.build_store(tmp_path / "state")


@pytest.fixture
def slurm_conf(tmp_path: Path) -> Path:
    conf = tmp_path / "slurm.conf"
    conf.write_text(world.SLURM_CONF_PRIVATE)
    return conf


@pytest.fixture
def server(db: Path, slurm_conf: Path) -> Iterator[ApiServer]:
    snap = world.snapshot()
    srv = start_api_server(db, "127.0.0.1:0", str(slurm_conf), snapshot=lambda: snap,
                           decoder=world.fake_decoder, names=world.names)
    srv.app = srv.httpd.RequestHandlerClass.app  # type: ignore[attr-defined]
    srv.app.clock = lambda: world.NOW
    yield srv
    srv.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch) -> Run:
    """run(args..., user="alice") invokes `themis` in-process as that user (None: no credential)."""

    def invoke(*args: str, user: str | None = "alice") -> Result:
        header = (f"MUNGE cred-{user}", "") if user else (None, "munge is not installed (apt-get install munge)")
        monkeypatch.setattr(client_mod, "credential_header", lambda conf: header)
        monkeypatch.setenv("THEMISD_CONFIG", "/nonexistent/themis.yaml")
        return CliRunner().invoke(cli, list(args), catch_exceptions=False)

    return invoke
