"""The HTTP layer: JSON over a real socket, read-only methods, the munge header."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from themis_slurm.api import ApiServer, start_api_server
from themis_slurm.api.server import dumps, parse_listen

from . import world


@pytest.fixture
def server(tmp_path: Path, db: Path) -> Iterator[ApiServer]:
    conf = tmp_path / "slurm.conf"
    conf.write_text(world.SLURM_CONF_PRIVATE)
    snap = world.snapshot()
    srv = start_api_server(db, "127.0.0.1:0", str(conf), snapshot=lambda: snap, decoder=world.fake_decoder,
                           names=world.names)
    yield srv
    srv.stop()


def call(url: str, method: str = "GET", auth: str | None = None) -> tuple[int, dict, dict]:
    req = urllib.request.Request(url, method=method, headers={"Authorization": auth} if auth else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as res:
            return res.status, dict(res.headers), json.loads(res.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read() or b"{}")


def test_get_json_with_credential(server: ApiServer) -> None:
    status, headers, doc = call(f"{server.url}/v1/jobs", auth="MUNGE cred-bob")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert [j["job"] for j in doc["jobs"]] == ["20", "21"]


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_other_methods_are_refused(server: ApiServer, method: str) -> None:
    status, headers, doc = call(f"{server.url}/v1/cluster", method)
    assert status == 405 and headers["Allow"] == "GET, HEAD"
    assert "read-only" in doc["error"] and doc["status"] == 405


def test_head_and_errors(server: ApiServer) -> None:
    assert call(f"{server.url}/v1/cluster", "HEAD")[0] == 200
    status, _, doc = call(f"{server.url}/v1/jobs/1%2F2/explain")
    assert status == 400 and "not a Slurm job id" in doc["error"]


def test_dumps_has_no_infinity() -> None:
    assert json.loads(dumps({"x": float("inf"), "y": [float("nan"), 1.5]})) == {"x": None, "y": [None, 1.5]}


def test_parse_listen() -> None:
    assert parse_listen("[::1]:8787") == ("::1", 8787)
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_listen("localhost")
