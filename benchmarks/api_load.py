"""The status API under load (issue 10): many concurrent authenticated GETs, and many idle half-sent connections.

Starts the real API server in this process on 127.0.0.1 (an ephemeral port) over the unit tests' world
(tests/unit/api/world.py: a real state database, a fixed snapshot, the tests' munge decoder, so no munged is
needed), then:

1. ``--clients`` (200) concurrent clients, in a separate process so they do not share the server's GIL,
   each do ``--requests`` (5) authenticated ``GET /v1/jobs``: count, p50, p99, max latency, errors.
2. ``--idle`` (200) connections that send half a request and then nothing: the threads this process holds
   while they are open, the latency of one GET meanwhile, and how many the server has dropped after its
   header timeout (plus a margin).

    python benchmarks/api_load.py                    # table
    python benchmarks/api_load.py --json             # the same as JSON
    python benchmarks/api_load.py --workers 8 --timeout 2

Loopback only, bounded: every request has a 30 s client timeout and the load phase stops issuing requests
after --deadline seconds. The target is a p99 under 1 s on a 2-core machine and every idle connection
dropped.
"""

from __future__ import annotations

import argparse
import http.client
import inspect
import json
import os
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from themis_slurm.api import start_api_server  # noqa: E402

HALF_REQUEST = b"GET /v1/cluster HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: MUNGE cred-bob\r\n"  # no blank line


def os_threads() -> int:
    """Threads of this process (the kernel's count, so it includes any non-Python thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except OSError:
        pass
    return threading.active_count()


def get(host: str, port: int, path: str = "/v1/jobs", timeout: float = 30.0) -> float:
    """Seconds for one authenticated GET on a fresh connection; raises on anything but 200."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Authorization": "MUNGE cred-bob"})
        res = conn.getresponse()
        res.read()
        if res.status != 200:
            raise RuntimeError(f"HTTP {res.status}")
    finally:
        conn.close()
    return time.perf_counter() - t0


def clients(host: str, port: int, n: int, requests: int, deadline_s: float) -> dict[str, Any]:
    """`n` threads, released together, each doing `requests` GETs; latencies and errors."""
    lat: list[float] = []
    errors: dict[str, int] = {}
    lock = threading.Lock()
    start = threading.Barrier(n)
    stop_at = time.monotonic() + deadline_s

    def one() -> None:
        start.wait()
        for _ in range(requests):
            if time.monotonic() > stop_at:
                return
            try:
                dt = get(host, port)
            except Exception as e:
                with lock:
                    errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                continue
            with lock:
                lat.append(dt)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(deadline_s + 35)
    return {"latencies": lat, "errors": errors, "wall_s": time.perf_counter() - t0}


def quantile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=100, method="inclusive")[round(q * 100) - 1]


def load_phase(url_host: str, port: int, a: argparse.Namespace) -> dict[str, Any]:
    """Runs `clients` in a child process (its own GIL) while this process samples its thread count."""
    cmd = [sys.executable, __file__, "--_clients", f"{url_host}:{port}", "--clients", str(a.clients),
           "--requests", str(a.requests), "--deadline", str(a.deadline)]
    peak = os_threads()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    while proc.poll() is None:
        peak = max(peak, os_threads())
        time.sleep(0.02)
    out = json.loads(proc.stdout.read() if proc.stdout else "{}")
    lat = out["latencies"]
    return {
        "clients": a.clients, "requests": len(lat) + sum(out["errors"].values()), "ok": len(lat),
        "errors": sum(out["errors"].values()), "error_kinds": out["errors"],
        "p50_s": round(quantile(lat, 0.50), 4), "p99_s": round(quantile(lat, 0.99), 4),
        "max_s": round(max(lat), 4) if lat else None, "wall_s": round(out["wall_s"], 2),
        "server_threads_peak": peak,
    }  # fmt: skip


def closed_by_peer(socks: list[socket.socket], wait_s: float) -> tuple[int, float | None]:
    """How many of `socks` the server closes (EOF, maybe after a short error answer) within wait_s; when the last went."""
    open_ = {s.fileno(): s for s in socks}
    closed = 0
    last = None
    end = time.monotonic() + wait_s
    with selectors.DefaultSelector() as sel:
        for s in socks:
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
        while open_ and time.monotonic() < end:
            for key, _ in sel.select(max(0.0, end - time.monotonic())):
                s = key.fileobj
                try:
                    data = s.recv(65536)  # type: ignore[union-attr]
                except (ConnectionResetError, BrokenPipeError):
                    data = b""
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(s)
                    open_.pop(key.fd, None)
                    closed += 1
                    last = time.monotonic()
    return closed, last


def idle_phase(host: str, port: int, a: argparse.Namespace, header_timeout: float) -> dict[str, Any]:
    before = os_threads()
    socks = []
    t0 = time.monotonic()
    for _ in range(a.idle):
        s = socket.create_connection((host, port), timeout=5)
        s.sendall(HALF_REQUEST)
        socks.append(s)
    time.sleep(1.0)  # let the server accept them all
    held = os_threads()
    try:
        get_s: float | str = round(get(host, port, timeout=header_timeout + 10), 4)
    except Exception as e:
        get_s = f"failed: {type(e).__name__}"
    wait = header_timeout + a.margin
    dropped, last = closed_by_peer(socks, wait)
    after = os_threads()
    for s in socks:
        s.close()
    return {
        "idle": a.idle, "threads_before": before, "threads_while_idle": held, "get_while_idle_s": get_s,
        "header_timeout_s": header_timeout, "dropped": dropped,
        "last_dropped_after_s": round(last - t0, 2) if last else None, "waited_s": round(time.monotonic() - t0, 2),
        "threads_after": after,
    }  # fmt: skip


def serve(a: argparse.Namespace, tmp: Path) -> Any:
    from tests.unit.api import world
    from themis_slurm.daemon.config import Config  # the lease terms themisd's default config gives

    db = world.build_store(tmp / "state")
    conf = tmp / "slurm.conf"
    conf.write_text(world.SLURM_CONF_PRIVATE)
    snap = world.snapshot()
    extra: dict[str, Any] = {}
    accepted = inspect.signature(start_api_server).parameters
    for key in ("workers", "timeout", "backlog"):
        if getattr(a, key) is not None:
            if key not in accepted:
                raise SystemExit(f"this server does not take {key}=")
            extra[key] = getattr(a, key)
    return start_api_server(db, "127.0.0.1:0", str(conf), snapshot=lambda: snap, decoder=world.fake_decoder,
                            names=world.names, round_terms=lambda: Config().round_terms, **extra)


def table(load: dict[str, Any], idle: dict[str, Any], settings: dict[str, Any]) -> str:
    rows = [
        f"server: workers={settings['workers']} backlog={settings['backlog']} header timeout={settings['timeout']} s",
        "",
        f"{'clients':>8} {'requests':>9} {'errors':>7} {'p50 s':>8} {'p99 s':>8} {'max s':>8} {'wall s':>7} "
        f"{'threads':>8}",
        f"{load['clients']:>8} {load['requests']:>9} {load['errors']:>7} {load['p50_s']:>8} {load['p99_s']:>8} "
        f"{load['max_s']!s:>8} {load['wall_s']:>7} {load['server_threads_peak']:>8}",
        "",
        f"{'idle':>5} {'threads before':>15} {'while idle':>11} {'GET meanwhile s':>16} {'dropped':>8} "
        f"{'last after s':>13} {'waited s':>9} {'threads after':>14}",
        f"{idle['idle']:>5} {idle['threads_before']:>15} {idle['threads_while_idle']:>11} "
        f"{idle['get_while_idle_s']!s:>16} {idle['dropped']:>8} {idle['last_dropped_after_s']!s:>13} "
        f"{idle['waited_s']:>9} "
        f"{idle['threads_after']:>14}",
    ]
    if load["error_kinds"]:
        rows.append(f"errors: {load['error_kinds']}")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--requests", type=int, default=5, help="GETs per client")
    ap.add_argument("--idle", type=int, default=200, help="idle half-sent connections")
    ap.add_argument("--deadline", type=float, default=60.0, help="stop issuing requests after this (s)")
    ap.add_argument("--margin", type=float, default=3.0, help="wait this long past the header timeout (s)")
    ap.add_argument("--workers", type=int, default=None, help="server worker threads (default: the server's)")
    ap.add_argument("--timeout", type=float, default=None, help="server header timeout (default: the server's)")
    ap.add_argument("--backlog", type=int, default=None, help="listen backlog (default: the server's)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--_clients", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.clients = min(a.clients, 1000)
    a.idle = min(a.idle, 900)  # stay under the usual 1024 open files
    if a._clients:  # the child process of load_phase
        host, _, port = a._clients.rpartition(":")
        print(json.dumps(clients(host, int(port), a.clients, a.requests, a.deadline)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        srv = serve(a, Path(tmp))
        try:
            host, port = srv.httpd.server_address[:2]
            settings = {
                "workers": getattr(srv.httpd, "workers", "unbounded"),
                "backlog": getattr(srv.httpd, "request_queue_size", None),
                "timeout": getattr(srv.httpd, "header_timeout", None),
            }
            load = load_phase(host, port, a)
            idle = idle_phase(host, port, a, settings["timeout"] or 5.0)
        finally:
            srv.stop()
    out = {"settings": settings, "load": load, "idle": idle, "cpus": os.cpu_count()}
    print(json.dumps(out) if a.json else table(load, idle, settings))


if __name__ == "__main__":
    main()
