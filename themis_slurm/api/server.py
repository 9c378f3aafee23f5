"""The read-only HTTP JSON server: a stdlib HTTPServer with bounded threads, in a daemon thread next to the metrics.

Routes (GET and HEAD only; anything else is 405 with ``Allow: GET, HEAD``):

    /v1/cluster  /v1/apps[?user=]  /v1/jobs[?user=&app=]  /v1/leases  /v1/rounds[?limit=]
    /v1/jobs/<id>/explain  /v1/topology

Every request opens the database read-only, identifies the caller from its munge credential, builds the
document with views.py and closes the database. Errors are JSON ``{"error": message, "status": code}``
with the proper status: 400 bad parameter, 404 unknown path or job, 405 method, 503 database or Slurm
unreadable, 500 a bug (logged with its traceback). Nothing here writes anything.

Limits (BoundedHTTPServer): one thread accepts connections and reads every request head (request line
and headers) without blocking; at most ``workers`` threads (16) build and send responses; the listen
backlog is ``backlog`` (256); a head not complete within ``timeout`` (5 s, in total: trickling a byte at
a time does not extend it) gets 408 and is closed; a response not sent within ``write_timeout`` (30 s) is
abandoned; beyond ``max_connections`` (512) open connections a new one gets 503. An idle or slow client
therefore costs a file descriptor, never a thread, and cannot delay other clients' requests.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import queue
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from themis_slurm.api import views
from themis_slurm.api.auth import Authenticator, Decoder, unmunge_decoder, user_name
from themis_slurm.api.cluster import CachedSnapshot, SnapshotSource
from themis_slurm.api.slurmconf import SlurmConfInfo, read_slurm_conf
from themis_slurm.api.wire import (  # noqa: F401 (DEFAULT_LISTEN: re-exported by the api package)
    DEFAULT_BACKLOG,
    DEFAULT_LISTEN,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_TIMEOUT_S,
    DEFAULT_WORKERS,
    DEFAULT_WRITE_TIMEOUT_S,
)
from themis_slurm.state.errors import StateUnavailable
from themis_slurm.state.reader import StateFactory, reader_factory
from themis_slurm.state.round_input import RoundTerms

log = logging.getLogger("themis.api")
MAX_HEAD_BYTES = 64 * 1024  # request line + headers; larger heads get 431


def _json_default(o: Any) -> Any:
    if isinstance(o, set | frozenset | tuple):
        return sorted(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def dumps(doc: Any) -> bytes:
    """JSON with non-finite floats as null (JSON has no Infinity)."""
    def clean(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [clean(v) for v in x]
        return x

    return (json.dumps(clean(doc), default=_json_default, indent=1) + "\n").encode()


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8787`` for IPv6); ValueError names the accepted form."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"listen address {listen!r} is not HOST:PORT (e.g. {DEFAULT_LISTEN})")
    return host.strip("[]") or "127.0.0.1", int(port)


@dataclass
class ApiApp:
    """The request-independent parts: where the state is, who is privileged, where the snapshot comes from."""

    state: StateFactory
    auth: Authenticator
    conf: SlurmConfInfo
    snapshot: SnapshotSource
    last_cycle: Callable[[], float | None] | None = None
    snapshot_error: Callable[[], str | None] | None = None
    clock: Callable[[], float] = time.time
    #: what themisd's config says of leases, read at each request (a SIGHUP may change it): T_id/T_sh of each
    #: app are made from it (state/finish.py); None: no estimates
    round_terms: Callable[[], RoundTerms] | None = None
    pending_actions: Callable[[], Sequence[dict[str, Any]]] | None = None  # themisd's retried actions

    def handle(self, path: str, query: str, auth_header: str | None) -> tuple[int, Any]:
        """(status, document) for one GET; pure of HTTP so tests can call it directly."""
        identity, why = self.auth.identify(auth_header)
        viewer = views.make_viewer(identity, why, self.conf)
        try:
            params = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=False))
            view = views.route(path)
            if view is None:
                return 404, {"error": f"no such endpoint {path!r}; endpoints: {', '.join(views.ROUTES)}"}
            with self.state() as state:
                snap = self.snapshot()
                ctx = views.Context(state, snap, viewer, self.conf, now=self.clock(), snapshot_error=self._snap_error(),
                                    last_cycle=self.last_cycle() if self.last_cycle else None,
                                    round_terms=self.round_terms() if self.round_terms else None,
                                    pending_actions=self.pending_actions() if self.pending_actions else ())
                return 200, view(ctx, params)
        except views.BadRequest as e:
            return 400, {"error": str(e)}
        except views.NotFound as e:
            return 404, {"error": str(e)}
        except (StateUnavailable, views.Unavailable) as e:
            return 503, {"error": str(e)}
        except Exception as e:  # a bug: say so, keep serving
            log.exception("API error on %s", path)
            return 500, {"error": f"internal error ({type(e).__name__}: {e}); see themisd's log"}

    def _snap_error(self) -> str | None:
        if self.snapshot_error is not None:
            return self.snapshot_error()
        return getattr(self.snapshot, "error", None)


class _Handler(BaseHTTPRequestHandler):
    server_version = "themisd-api"
    app: ApiApp  # set on the subclass made per server

    def setup(self) -> None:
        head = None
        if isinstance(self.request, tuple):  # (socket, the request head BoundedHTTPServer already read)
            self.request, head = self.request
        super().setup()
        if head is not None:
            self.rfile.close()
            self.rfile = io.BytesIO(head)

    def _send(self, status: int, doc: Any, head: bool = False, allow: str | None = None) -> None:
        if status >= 400 and isinstance(doc, dict):
            doc = {**doc, "status": status}
        body = dumps(doc)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        if allow:
            self.send_header("Allow", allow)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _get(self, head: bool) -> None:
        url = urlsplit(self.path)
        status, doc = self.app.handle(url.path, url.query, self.headers.get("Authorization"))
        self._send(status, doc, head)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._get(False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._get(True)

    def _refuse(self) -> None:
        self._send(405, {"error": f"method {self.command} not allowed: the Themis API is read-only (GET, HEAD)"},
                   allow="GET, HEAD")

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse  # noqa: N815

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("api %s " + fmt, self.address_string(), *args)


def _status_response(status: int, reason: str, message: str) -> bytes:
    body = dumps({"error": message, "status": status})
    return (f"HTTP/1.0 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode() + body


@dataclass
class _Head:
    """A connection whose request head is still arriving."""

    addr: Any
    deadline: float
    buf: bytearray = field(default_factory=bytearray)


class BoundedHTTPServer(HTTPServer):
    """An HTTPServer whose threads, queue and waits are all bounded (see the module docstring).

    serve_forever() is one loop over a selector: it accepts, reads request heads from every connection
    without blocking and drops those past their deadline. A complete head goes to a queue served by at
    most `workers` threads (started on demand, then kept), which run the handler with the head as its
    rfile and the socket in blocking mode with `write_timeout`. HTTP/1.0: one request per connection.
    """

    _LISTEN, _WAKE = "listen", "wake"

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *,
                 workers: int = DEFAULT_WORKERS, backlog: int = DEFAULT_BACKLOG,
                 timeout: float = DEFAULT_TIMEOUT_S, write_timeout: float = DEFAULT_WRITE_TIMEOUT_S,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS) -> None:
        if workers < 1 or backlog < 1 or max_connections < 1:
            raise ValueError("API workers, backlog and max_connections must be at least 1")
        if not timeout > 0 or not write_timeout > 0:
            raise ValueError("API timeouts must be positive")
        self.workers = workers
        self.request_queue_size = backlog  # read by server_activate()'s listen()
        self.header_timeout = timeout
        self.write_timeout = write_timeout
        self.max_connections = max_connections
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self._jobs: queue.SimpleQueue[tuple[socket.socket, Any, bytes] | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # one token per worker waiting for a job
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._open = 0  # accepted and not yet closed
        self._pending: dict[socket.socket, _Head] = {}  # insertion order is deadline order
        self._stop = False
        self._stopped = threading.Event()
        self._stopped.set()
        self._wake_r, self._wake_w = socket.socketpair()  # lets shutdown() interrupt the selector at once
        try:
            super().__init__(address, handler)  # bind and listen(backlog)
        except BaseException:
            self._wake_r.close()
            self._wake_w.close()
            raise

    # -- the selector thread ------------------------------------------------------------------------
    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._stopped.clear()
        self.socket.setblocking(False)
        self._wake_r.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(self.socket, selectors.EVENT_READ, self._LISTEN)
        sel.register(self._wake_r, selectors.EVENT_READ, self._WAKE)
        try:
            while not self._stop:
                wait = poll_interval
                if self._pending:
                    first = next(iter(self._pending.values()))
                    wait = max(0.0, min(wait, first.deadline - time.monotonic()))
                for key, _ in sel.select(wait):
                    if key.data is self._LISTEN:
                        self._accept(sel)
                    elif key.data is self._WAKE:
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    elif key.fileobj in self._pending:
                        self._read(sel, key.fileobj)  # type: ignore[arg-type]
                self._expire(sel)
        finally:
            for sock in list(self._pending):
                self._drop(sel, sock)
            sel.close()
            self._stopped.set()

    def _accept(self, sel: selectors.BaseSelector) -> None:
        for _ in range(64):  # drain a burst, but let reads and expiries run too
            try:
                sock, addr = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # EMFILE and the like: back off instead of spinning
                log.warning("status API cannot accept connections: %s", e)
                time.sleep(0.05)
                return
            with self._lock:
                full = self._open >= self.max_connections
                if not full:
                    self._open += 1
            if full:
                log.debug("api %s refused: %d connections open", addr, self.max_connections)
                self._reject(sock, 503, "Service Unavailable",
                             f"too many connections (more than {self.max_connections}); retry shortly")
                continue
            sock.setblocking(False)
            self._pending[sock] = _Head(addr, time.monotonic() + self.header_timeout)
            sel.register(sock, selectors.EVENT_READ)

    def _read(self, sel: selectors.BaseSelector, sock: socket.socket) -> None:
        head = self._pending[sock]
        try:
            data = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client went away
            self._drop(sel, sock)
            return
        start = max(0, len(head.buf) - 3)
        head.buf += data
        if head.buf.find(b"\r\n\r\n", start) >= 0 or head.buf.find(b"\n\n", start) >= 0:
            sel.unregister(sock)
            del self._pending[sock]
            self._dispatch(sock, head.addr, bytes(head.buf))
        elif len(head.buf) > MAX_HEAD_BYTES:
            self._drop(sel, sock, (431, "Request Header Fields Too Large",
                                   f"request line and headers exceed {MAX_HEAD_BYTES} bytes"))

    def _expire(self, sel: selectors.BaseSelector) -> None:
        now = time.monotonic()
        while self._pending:
            sock, head = next(iter(self._pending.items()))
            if head.deadline > now:
                return
            log.debug("api %s dropped: no complete request within %g s", head.addr, self.header_timeout)
            self._drop(sel, sock, (408, "Request Timeout",
                                   f"no complete request within {self.header_timeout:g} s"))

    def _drop(self, sel: selectors.BaseSelector, sock: socket.socket,
              answer: tuple[int, str, str] | None = None) -> None:
        sel.unregister(sock)
        del self._pending[sock]
        if answer:
            self._reject(sock, *answer)
        else:
            sock.close()
        self._release()

    @staticmethod
    def _reject(sock: socket.socket, status: int, reason: str, message: str) -> None:
        """A short error answer, best effort and without blocking, then close."""
        with contextlib.suppress(OSError):
            sock.setblocking(False)
            sock.send(_status_response(status, reason, message))
        sock.close()

    def _release(self) -> None:
        with self._lock:
            self._open -= 1

    # -- the workers --------------------------------------------------------------------------------
    def _dispatch(self, sock: socket.socket, addr: Any, head: bytes) -> None:
        if not self._idle.acquire(blocking=False):
            with self._lock:
                if len(self._threads) < self.workers:
                    t = threading.Thread(target=self._work, name=f"themis-api-worker-{len(self._threads) + 1}",
                                         daemon=True)
                    self._threads.append(t)
                    t.start()
        self._jobs.put((sock, addr, head))

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            sock, addr, head = job
            try:
                sock.setblocking(True)
                sock.settimeout(self.write_timeout)
                self.finish_request((sock, head), addr)  # type: ignore[arg-type]
            except Exception:
                self.handle_error(sock, addr)
            finally:
                self.shutdown_request(sock)
                self._release()
            self._idle.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        err = sys.exc_info()[1]
        if isinstance(err, ConnectionError | TimeoutError):  # the client left or stopped reading
            log.debug("api %s: %s", client_address, err)
        else:
            log.exception("API error answering %s", client_address)

    # -- stopping -----------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stops serve_forever() and waits for it; queued requests are still answered by the workers."""
        self._stop = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._stopped.wait()

    def server_close(self) -> None:
        super().server_close()
        with self._lock:
            for _ in self._threads:
                self._jobs.put(None)
        self._wake_r.close()
        self._wake_w.close()

    @property
    def threads(self) -> int:
        """Worker threads started so far (never more than `workers`)."""
        return len(self._threads)


class ApiServer:
    """Handle on a running API server: `.url`, `.stop()`."""

    def __init__(self, httpd: BoundedHTTPServer, thread: threading.Thread) -> None:
        self.httpd = httpd
        self.thread = thread
        host, port = httpd.server_address[:2]
        self.url = f"http://{host if ':' not in str(host) else f'[{host}]'}:{port}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def build_app(store: str | Path | StateFactory, slurm_conf: str | None = None, *,
              snapshot: SnapshotSource | None = None, partitions: tuple[str, ...] = ("gpu",),
              operators: tuple[str, ...] = (), decoder: Decoder | None = None,
              last_cycle: Callable[[], float | None] | None = None,
              names: Callable[[int], str] = user_name, round_terms: Callable[[], RoundTerms] | None = None,
              pending_actions: Callable[[], Sequence[dict[str, Any]]] | None = None) -> ApiApp:
    """The ApiApp for a state database path (or a factory of StateReaders) and a slurm.conf."""
    conf = read_slurm_conf(slurm_conf)
    factory = reader_factory(store) if isinstance(store, str | Path) else store
    privileged = (*operators, *([conf.slurm_user] if conf.slurm_user else []))
    auth = Authenticator(decoder or unmunge_decoder(conf.munge_socket), privileged, names)
    source = snapshot or CachedSnapshot(partitions, slurm_conf or None)
    return ApiApp(factory, auth, conf, source, last_cycle, round_terms=round_terms, pending_actions=pending_actions)


def start_api_server(store_path_or_factory: str | Path | StateFactory, listen: str = DEFAULT_LISTEN,
                     slurm_conf: str | None = None, *, workers: int = DEFAULT_WORKERS,
                     backlog: int = DEFAULT_BACKLOG, timeout: float = DEFAULT_TIMEOUT_S,
                     write_timeout: float = DEFAULT_WRITE_TIMEOUT_S,
                     max_connections: int = DEFAULT_MAX_CONNECTIONS, **options: Any) -> ApiServer:
    """Serve the API on `listen` in a daemon thread; returns a handle with ``.stop()`` and ``.url``.

    Options (keyword): ``snapshot`` (a callable returning the daemon's last Snapshot: no extra Slurm
    calls; without it the server reads Slurm itself, at most every 5 s), ``partitions`` (managed
    partitions, for that standalone read), ``operators`` (user names or uids that see everything, besides
    root and the SlurmUser), ``decoder`` and ``names`` (munge decoding and uid -> user name, for tests), ``last_cycle`` (a callable giving
    the time of the daemon's last cycle, for the data age), ``round_terms`` (a callable giving the lease terms
    of themisd's config, state.round_input.RoundTerms, from which T_id/T_sh per app are made for /v1/apps;
    without it the estimates are null), ``pending_actions`` (themisd's Slurm actions that failed or were put off
    and are being retried, shown by /v1/cluster).

    Limits (see BoundedHTTPServer): ``workers`` handler threads, listen ``backlog``, ``timeout`` seconds for
    a request's line and headers, ``write_timeout`` seconds to send a response, ``max_connections`` open.
    """
    app = build_app(store_path_or_factory, slurm_conf, **options)
    handler = type("ThemisApiHandler", (_Handler,), {"app": app})
    httpd = BoundedHTTPServer(parse_listen(listen), handler, workers=workers, backlog=backlog, timeout=timeout,
                              write_timeout=write_timeout, max_connections=max_connections)
    thread = threading.Thread(target=httpd.serve_forever, name="themis-api", daemon=True)
    thread.start()
    log.info("status API on http://%s:%d/v1/cluster (started %s)", *httpd.server_address[:2],
             time.strftime("%H:%M:%S"))
    return ApiServer(httpd, thread)
