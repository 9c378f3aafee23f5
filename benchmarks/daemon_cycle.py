"""One themisd cycle: wall time and Slurm calls with many pending and running jobs.

Modes:

    python benchmarks/daemon_cycle.py                         # in memory (tests' FakeSlurm), 2000 pending + 500 running
    python benchmarks/daemon_cycle.py --slurm --pending 2000  # the real cluster of $SLURM_CONF (submits with sbatch)
    python benchmarks/daemon_cycle.py --compare               # side by side: Slurm 22.05 and 25.11 clusters
                                                              # (cluster.sh up --slurm V), cli and pyslurm
                                                              # backends, 0 / 500 / 2000 held jobs

In memory it measures the daemon's own cost (reconcile, accounting, database, round) on a 128-node x
4-GPU cluster with 500 running 1-GPU jobs and 2000 held ones, for an idle cycle (nothing due) and for a
cycle whose leases all expire at once (a full round). With --slurm it submits a held job array as user
--user (job_submit.lua holds it), runs cycles in observe mode (so nothing is started) with the backend
--backend and reports the wall time of the snapshot and of the whole cycle and the number of Slurm calls
per cycle, then cancels its jobs. --compare does that for every Slurm version, backend (pyslurm only on
25.11, where it exists) and job count, and prints one table (--json: the rows). The target (issue 5) is
under 2 s per cycle and a constant number of Slurm reads per cycle.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from themis_slurm.core.topology import Topology  # noqa: E402
from themis_slurm.daemon.config import parse  # noqa: E402
from themis_slurm.daemon.loop import Daemon  # noqa: E402
from themis_slurm.state.store import Store  # noqa: E402


def in_memory(pending: int, running: int, cycles: int) -> dict[str, object]:
    from tests.unit.daemon.fake_slurm import FakeSlurm

    nodes = max(1, (running + 3) // 4)
    topo = Topology.uniform(racks=-(-nodes // 16), nodes_per_rack=min(16, nodes), gpus_per_node=4,
                            islands_per_node=2)
    slurm = FakeSlurm(topo)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = parse({"state_dir": tmp, "metrics": {"listen": ""}, "scheduler": {"min_runtime_s": 0}})
        d = Daemon(cfg, slurm, Store(cfg.db_path))
        for i in range(running):
            slurm.submit(f"u{i % 50}", f"run{i % 200}", 1, 1e9, est_s=3600.0)
        t0 = time.perf_counter()
        first = d.cycle()  # grants and starts `running` jobs
        setup_s = time.perf_counter() - t0
        slurm.advance(1)
        for i in range(pending):
            slurm.submit(f"u{i % 50}", f"wait{i % 400}", 1 + i % 2, 1e9, est_s=3600.0)
        d.cycle()  # records the new jobs
        idle = []
        for _ in range(cycles):
            slurm.advance(1)
            idle.append(d.cycle())
        slurm.advance(cfg.scheduler.lease_s + 1)
        full = d.cycle()  # every lease expired: a round over all apps
        d.store.close()
    return {
        "mode": "in-memory", "pending": pending, "running": sum(j.state == "RUNNING" for j in slurm.jobs.values()),
        "gpus": topo.size, "first_cycle_s": round(setup_s, 3), "first_grants": first.grants,
        "idle_cycle_s": round(statistics.median(c.duration_s for c in idle), 4),
        "idle_round": any(c.trigger for c in idle),
        "expiry_cycle_s": round(full.duration_s, 3), "expiry_round_s": round(full.round_s, 3),
        "expiry_decisions": {"grants": full.grants, "renewals": full.renewals, "preemptions": full.preemptions},
    }  # fmt: skip


def on_slurm(pending: int, cycles: int, user: str | None, backend: str = "cli") -> dict[str, object]:
    from themis_slurm.slurm.backends import make_backend
    from themis_slurm.slurm.model import AdapterConfig

    arrays: list[str] = []
    left = pending
    while left > 0:  # MaxArraySize defaults to 1001: submit arrays of at most 1000 tasks
        n = min(1000, left)
        args = ["sbatch", "--parsable", "-p", "gpu", "--gres=gpu:1", f"--array=0-{n - 1}",
                "--comment=themis:app=bench,est=10m", "--output=/dev/null", "--wrap=sleep 600"]
        if user:
            args = ["runuser", "-u", user, "--", *args]
        res = subprocess.run(args, capture_output=True, text=True, check=True, cwd="/tmp")
        arrays.append(res.stdout.strip().split(";")[0])
        left -= n
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = parse({"state_dir": tmp, "mode": "observe", "metrics": {"listen": ""},
                         "slurm": {"job_submit_conf": ""}})
            b, _ = make_backend(backend, AdapterConfig(slurm_conf=os.environ.get("SLURM_CONF")))
            d = Daemon(cfg, b, Store(cfg.db_path))
            d.cycle()  # the first cycle records every job (and the CLI finds its node listing): not timed
            reps = [d.cycle() for _ in range(cycles)]
            seen = len(d.last_snapshot.managed) if d.last_snapshot else 0
            d.store.close()
    finally:
        if arrays:
            subprocess.run(["scancel", *arrays], check=False)
    return {
        "mode": "slurm", "backend": backend, "slurm": _slurm_version(), "pending": pending,
        "managed_seen": seen,
        "cycle_s_median": round(statistics.median(r.duration_s for r in reps), 3),
        "cycle_s_max": round(max(r.duration_s for r in reps), 3),
        "snapshot_s_median": round(statistics.median(r.snapshot_s for r in reps), 3),
        "slurm_calls_per_cycle": sorted({r.slurm_calls for r in reps}),
    }  # fmt: skip


def _slurm_version() -> str:
    out = subprocess.run(["sinfo", "--version"], capture_output=True, text=True, check=False).stdout.split()
    return out[1] if len(out) > 1 else "?"


def _cluster_up(version: str) -> None:
    """Brings the local cluster up on `version` (replacing the other one) and takes its environment."""
    sh = REPO / "slurm_conf" / "cluster.sh"
    shape = Path(os.environ.get("THEMIS_CLUSTER_DIR", "/var/tmp/themis-cluster")) / "shape"
    force = ["--force"] if shape.exists() and f"slurm={version}" not in shape.read_text() else []
    out = subprocess.run([str(sh), "up", "--slurm", version, *force], capture_output=True, text=True, check=True)
    plain = ":".join(d for d in os.environ["PATH"].split(":") if not d.startswith("/opt/slurm-25.11/"))
    os.environ["PATH"] = plain
    for line in out.stdout.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        os.environ[key] = value.replace("$PATH", plain)


def compare(versions: list[str], pendings: list[int], cycles: int, user: str | None) -> list[dict[str, object]]:
    import importlib.util

    rows = []
    for v in versions:
        _cluster_up(v)
        backends = ["cli"] + (["pyslurm"] if v == "25.11" and importlib.util.find_spec("pyslurm") else [])
        for b in backends:
            for n in pendings:
                rows.append(on_slurm(n, cycles, user, b))
                print(f"  done: Slurm {v} {b} {n} held", file=sys.stderr)
    return rows


def table(rows: list[dict[str, object]]) -> str:
    head = ("SLURM", "BACKEND", "HELD", "SEEN", "SNAPSHOT_S", "CYCLE_S", "CYCLE_MAX_S", "CALLS/CYCLE")
    body = [(r["slurm"], r["backend"], r["pending"], r["managed_seen"], f"{r['snapshot_s_median']:.3f}",
             f"{r['cycle_s_median']:.3f}", f"{r['cycle_s_max']:.3f}",
             ",".join(map(str, r["slurm_calls_per_cycle"]))) for r in rows]  # type: ignore[call-overload]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body, strict=True)]
    return "\n".join("  ".join(str(x).rjust(w) for x, w in zip(line, widths, strict=True)) for line in (head, *body))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slurm", action="store_true", help="use the real cluster of $SLURM_CONF")
    ap.add_argument("--pending", type=int, default=2000)
    ap.add_argument("--running", type=int, default=500, help="in-memory mode only")
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--user", default="themis-alice" if os.geteuid() == 0 else None,
                    help="submit as this user (root's jobs are fine too)")
    ap.add_argument("--backend", choices=("cli", "pyslurm", "auto"), default="cli", help="with --slurm")
    ap.add_argument("--compare", action="store_true", help="Slurm versions x backends x held jobs, one table")
    ap.add_argument("--versions", default="22.05,25.11", help="with --compare")
    ap.add_argument("--held", default="0,500,2000", help="with --compare: held job counts")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.compare:
        rows = compare(a.versions.split(","), [int(x) for x in a.held.split(",")], a.cycles, a.user)
        print(json.dumps(rows) if a.json else table(rows))
        return
    out = (on_slurm(a.pending, a.cycles, a.user, a.backend) if a.slurm
           else in_memory(a.pending, a.running, a.cycles))
    print(json.dumps(out, indent=None if a.json else 2))


if __name__ == "__main__":
    main()

