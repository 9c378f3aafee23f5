"""The read-only HTTP JSON server: stdlib ThreadingHTTPServer in a daemon thread, next to the metrics.

Routes (GET and HEAD only; anything else is 405 with ``Allow: GET, HEAD``):

    /v1/cluster  /v1/apps[?user=]  /v1/jobs[?user=&app=]  /v1/leases  /v1/rounds[?limit=]
    /v1/jobs/<id>/explain  /v1/topology

Every request opens the database read-only, identifies the caller from its munge credential, builds the
document with views.py and closes the database. Errors are JSON ``{"error": message, "status": code}``
with the proper status: 400 bad parameter, 404 unknown path or job, 405 method, 503 database or Slurm
unreadable, 500 a bug (logged with its traceback). Nothing here writes anything.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from themis_slurm.api import views
from themis_slurm.api.auth import Authenticator, Decoder, unmunge_decoder, user_name
from themis_slurm.api.cluster import CachedSnapshot, SnapshotSource
from themis_slurm.api.db import StateFactory, StateUnavailable, reader_factory
from themis_slurm.api.estimates import finish_times
from themis_slurm.api.slurmconf import SlurmConfInfo, read_slurm_conf

log = logging.getLogger("themis.api")
DEFAULT_LISTEN = "127.0.0.1:8787"


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
                                    estimator=finish_times)
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


class ApiServer:
    """Handle on a running API server: `.url`, `.stop()`."""

    def __init__(self, httpd: ThreadingHTTPServer, thread: threading.Thread) -> None:
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
              names: Callable[[int], str] = user_name) -> ApiApp:
    """The ApiApp for a state database path (or a factory of StateReaders) and a slurm.conf."""
    conf = read_slurm_conf(slurm_conf)
    factory = reader_factory(store) if isinstance(store, str | Path) else store
    privileged = (*operators, *([conf.slurm_user] if conf.slurm_user else []))
    auth = Authenticator(decoder or unmunge_decoder(conf.munge_socket), privileged, names)
    source = snapshot or CachedSnapshot(partitions, slurm_conf or None)
    return ApiApp(factory, auth, conf, source, last_cycle)


def start_api_server(store_path_or_factory: str | Path | StateFactory, listen: str = DEFAULT_LISTEN,
                     slurm_conf: str | None = None, **options: Any) -> ApiServer:
    """Serve the API on `listen` in a daemon thread; returns a handle with ``.stop()`` and ``.url``.

    Options (keyword): ``snapshot`` (a callable returning the daemon's last Snapshot: no extra Slurm
    calls; without it the server reads Slurm itself, at most every 5 s), ``partitions`` (managed
    partitions, for that standalone read), ``operators`` (user names or uids that see everything, besides
    root and the SlurmUser), ``decoder`` and ``names`` (munge decoding and uid -> user name, for tests), ``last_cycle`` (a callable giving
    the time of the daemon's last cycle, for the data age).
    """
    app = build_app(store_path_or_factory, slurm_conf, **options)
    handler = type("ThemisApiHandler", (_Handler,), {"app": app})
    httpd = ThreadingHTTPServer(parse_listen(listen), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, name="themis-api", daemon=True)
    thread.start()
    log.info("status API on http://%s:%d/v1/cluster (started %s)", *httpd.server_address[:2],
             time.strftime("%H:%M:%S"))
    return ApiServer(httpd, thread)
