"""The API server's limits (issue 10): bounded handler threads, a real backlog, header and connection limits.

No timing thresholds: short server timeouts set by the test, and generous client timeouts that only stop a
broken server from hanging the suite.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from themis_slurm.api import ApiServer, start_api_server
from themis_slurm.api.server import DEFAULT_BACKLOG, DEFAULT_WORKERS, MAX_HEAD_BYTES

from . import world

HALF = b"GET /v1/cluster HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: MUNGE cred-bob\r\n"  # no blank line
CLIENT_TIMEOUT = 5.0


@pytest.fixture
def serve(tmp_path: Path, db: Path) -> Iterator[Callable[..., ApiServer]]:
    conf = tmp_path / "slurm.conf"
    conf.write_text(world.SLURM_CONF_PRIVATE)
    started: list[ApiServer] = []

    def start(snapshot: Callable[[], object] | None = None, **limits: object) -> ApiServer:
        snap = world.snapshot()
        srv = start_api_server(db, "127.0.0.1:0", str(conf), snapshot=snapshot or (lambda: snap),
                               decoder=world.fake_decoder, names=world.names, **limits)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


def address(srv: ApiServer) -> tuple[str, int]:
    return srv.httpd.server_address[:2]  # type: ignore[return-value]


def get(srv: ApiServer, path: str = "/v1/jobs") -> int:
    req = urllib.request.Request(f"{srv.url}{path}", headers={"Authorization": "MUNGE cred-bob"})
    with urllib.request.urlopen(req, timeout=CLIENT_TIMEOUT) as res:
        json.loads(res.read())
        return res.status


def half_sent(srv: ApiServer) -> socket.socket:
    s = socket.create_connection(address(srv), timeout=CLIENT_TIMEOUT)
    s.sendall(HALF)
    return s


def read_to_eof(s: socket.socket) -> bytes:
    """Everything the server sends until it closes; socket.timeout (a test failure) if it never does."""
    s.settimeout(CLIENT_TIMEOUT)
    out = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            return out
        if not chunk:
            return out
        out += chunk


def server_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """Threads started since `before`, other than the test's own clients: the server's."""
    return [t for t in threading.enumerate() if t not in before and not t.name.startswith("test-client")]


def test_limits_are_what_was_set(serve: Callable[..., ApiServer]) -> None:
    srv = serve(workers=3, backlog=64, timeout=0.5, write_timeout=2.0, max_connections=10)
    assert srv.httpd.request_queue_size == 64
    assert (srv.httpd.workers, srv.httpd.header_timeout, srv.httpd.write_timeout) == (3, 0.5, 2.0)
    assert srv.httpd.max_connections == 10
    default = serve()
    assert default.httpd.request_queue_size == DEFAULT_BACKLOG >= 128
    assert default.httpd.workers == DEFAULT_WORKERS
    assert get(default) == 200


@pytest.mark.parametrize("bad", [{"workers": 0}, {"backlog": 0}, {"timeout": 0}, {"max_connections": 0}])
def test_bad_limits_are_refused(serve: Callable[..., ApiServer], bad: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="API"):
        serve(**bad)


def test_half_sent_request_is_closed_after_the_timeout(serve: Callable[..., ApiServer]) -> None:
    srv = serve(timeout=0.3)
    with half_sent(srv) as s:
        answer = read_to_eof(s)
    assert answer.startswith(b"HTTP/1.0 408 ")
    assert b"no complete request within 0.3 s" in answer
    assert get(srv) == 200  # and the server still serves


def test_a_trickled_head_does_not_extend_the_deadline(serve: Callable[..., ApiServer]) -> None:
    srv = serve(timeout=0.5)
    closed = False
    with socket.create_connection(address(srv), timeout=CLIENT_TIMEOUT) as s:
        s.sendall(b"GET /v1/cluster HTTP/1.0\r\nX-Slow: ")
        for _ in range(100):  # a byte every 50 ms: each read is quick, the whole head never completes
            try:
                s.sendall(b"a")
            except OSError:
                closed = True
                break
            if select.select([s], [], [], 0.05)[0]:  # the server answered: 408, then EOF
                answer = read_to_eof(s)
                closed = answer == b"" or answer.startswith(b"HTTP/1.0 408 ")
                break
    assert closed, "the server kept a connection that sent one header byte every 50 ms for 5 s"


def test_idle_connections_take_no_worker_and_do_not_delay_others(serve: Callable[..., ApiServer]) -> None:
    before = set(threading.enumerate())
    srv = serve(workers=2, timeout=30.0)  # idle connections would outlive the test: none is dropped
    idle = [half_sent(srv) for _ in range(10)]
    try:
        for _ in range(3):
            assert get(srv) == 200  # not queued behind the 10 idle ones
        assert srv.httpd.threads <= 2
        assert len(server_threads(before)) <= 2 + 1  # the workers and the accepting thread
    finally:
        for s in idle:
            s.close()


def test_concurrent_requests_are_all_answered_by_at_most_workers_threads(
        serve: Callable[..., ApiServer]) -> None:
    snap = world.snapshot()
    lock = threading.Lock()
    active = peak = 0

    def slow_snapshot() -> object:  # runs inside every request: counts requests handled at once
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.02)
        with lock:
            active -= 1
        return snap

    before = set(threading.enumerate())
    srv = serve(snapshot=slow_snapshot, workers=3)
    most = 0
    with ThreadPoolExecutor(max_workers=40, thread_name_prefix="test-client") as pool:
        futures = [pool.submit(get, srv) for _ in range(80)]
        while not all(f.done() for f in futures):
            most = max(most, len(server_threads(before)))
            time.sleep(0.005)
        statuses = [f.result() for f in futures]
    assert statuses == [200] * 80
    assert 1 <= peak <= 3
    assert most <= 3 + 1 and srv.httpd.threads <= 3  # the workers and the accepting thread


def test_connections_beyond_the_maximum_get_503(serve: Callable[..., ApiServer]) -> None:
    srv = serve(max_connections=2, timeout=30.0)
    first, second = half_sent(srv), half_sent(srv)
    try:
        with socket.create_connection(address(srv), timeout=CLIENT_TIMEOUT) as third:
            answer = read_to_eof(third)
        assert answer.startswith(b"HTTP/1.0 503 ") and b"too many connections" in answer
    finally:
        first.close()
    for _ in range(100):  # the server notices the close on its next read
        with socket.create_connection(address(srv), timeout=CLIENT_TIMEOUT) as s:
            s.sendall(b"GET /v1/cluster HTTP/1.0\r\n\r\n")
            if read_to_eof(s).startswith(b"HTTP/1.0 200 "):
                break
        time.sleep(0.02)
    else:
        pytest.fail("a closed connection never freed its slot")
    second.close()


def test_an_oversized_head_gets_431(serve: Callable[..., ApiServer]) -> None:
    srv = serve()
    with socket.create_connection(address(srv), timeout=CLIENT_TIMEOUT) as s:
        with contextlib.suppress(OSError):  # closed under our feet: also a refusal
            s.sendall(b"GET /v1/cluster HTTP/1.0\r\nX-Big: " + b"a" * (MAX_HEAD_BYTES + 1024))
        answer = read_to_eof(s)
    assert answer == b"" or answer.startswith(b"HTTP/1.0 431 ")


def test_stop_closes_waiting_connections(serve: Callable[..., ApiServer]) -> None:
    srv = serve(timeout=30.0)
    with half_sent(srv) as s:
        time.sleep(0.05)  # accepted
        srv.stop()
        assert read_to_eof(s) == b""
