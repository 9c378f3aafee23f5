"""Tenancy experiments (issue #33): does splitting work into apps buy GPU time, and do account shares hold?

(a) Splitting. Users A and B each submit the same 32 one-GPU jobs at time 0 (run times drawn once, 10 min to
    2 h, the same list for both: equal work); B's jobs are one app, A's are split into k apps (k = 1, 2, 8,
    32). On 8 and 16 GPUs, Themis with the levels ``app`` (the paper's 1/N per app, today's) and with
    ``user,app``: each user's GPU time over the window while both have waiting work, and A/B. The target
    (docs/evaluation.md): A/B within 5% of 1 with the hierarchy on.
(b) Shares. Accounts X (3 shares; users x1, x2 with two apps each) and Y (1 share; user y1 with four apps),
    each with more one-GPU jobs than the cluster (10 min to 2 h), all at time 0, on 16 GPUs: each account's
    GPU time over the first few leases (``--leases``, 600 s each by default) while both wait, and X/Y, with
    the levels ``account,user,app`` and the shares 3:1 (target: within 10% of 3), and with ``app`` alone.

Everything is measured with the core as it is when the script runs (Themis's defaults, ArbiterConfig) by the
simulator (sim/engine.py) and sim/metrics.py's contested_gpu_time; each simulation is deterministic.

    python benchmarks/tenancy.py                 # both tables, a few seconds
    python benchmarks/tenancy.py --json
    python benchmarks/tenancy.py --job-gpus 2    # (a) with 2-GPU gangs (16 jobs each) instead
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from themis_slurm.core.arbiter import ArbiterConfig  # noqa: E402
from themis_slurm.core.tenancy import Tenancy  # noqa: E402
from themis_slurm.core.topology import Topology  # noqa: E402
from themis_slurm.policies import make_policy  # noqa: E402
from themis_slurm.sim.engine import SimConfig, Simulator  # noqa: E402
from themis_slurm.sim.metrics import contested_gpu_time, spans_of  # noqa: E402
from themis_slurm.sim.tenants import make_tenancy, splitting_trace  # noqa: E402
from themis_slurm.sim.trace import Trace, TraceJob  # noqa: E402

SPLITS = (1, 2, 8, 32)
CLUSTERS = (8, 16)
JOBS_PER_USER = 32
SEED = 0


def run_times(n: int, seed: int) -> list[float]:
    """n run times, 10 min to 2 h, seeded: the same list for every user of an experiment."""
    rng = random.Random(seed)
    return [float(rng.randint(600, 7200)) for _ in range(n)]


def topology(gpus: int) -> Topology:
    return Topology.uniform(1, gpus // 4, 4)


def splitting(gpus: int, k: int, levels: str, works: list[float], job_gpus: int = 1) -> dict:
    t0 = time.perf_counter()
    res = Simulator(splitting_trace(works, k, gpus=job_gpus), topology(gpus), make_policy("themis", ArbiterConfig()),
                    SimConfig(tenancy=make_tenancy(levels))).run()  # fmt: skip
    window, got = contested_gpu_time(spans_of(res), lambda app: app.split("/")[0], ["A", "B"])
    return {"gpus": gpus, "k": k, "levels": levels, "window_h": window / 3600, "a_gpu_h": got["A"] / 3600,
            "b_gpu_h": got["B"] / 3600, "a_over_b": got["A"] / got["B"] if got["B"] else float("inf"),
            "preemptions": res.preemptions, "wall_s": time.perf_counter() - t0}  # fmt: skip


def shares_trace(gpus: int, seed: int) -> Trace:
    """X: users x1, x2 (two apps each); Y: user y1 (four apps); each account 3 clusters' worth of jobs."""
    per_account = 3 * gpus
    works = run_times(per_account, seed)
    layout = {"X": [("x1", "x1/a"), ("x1", "x1/b"), ("x2", "x2/a"), ("x2", "x2/b")],
              "Y": [("y1", "y1/a"), ("y1", "y1/b"), ("y1", "y1/c"), ("y1", "y1/d")]}  # fmt: skip
    jobs = []
    for account, apps in layout.items():
        for i, w in enumerate(works):
            user, app = apps[i % len(apps)]
            jobs.append(TraceJob(f"{account}{i}", app, user, 0.0, 1, w, account=account))
    return Trace(tuple(jobs), "shares: accounts X (3) and Y (1)")


def shares(gpus: int, levels: tuple[str, ...], lease_s: float, leases: int) -> dict:
    t0 = time.perf_counter()
    tenancy = Tenancy(levels, {"X": 3.0, "Y": 1.0}) if levels != ("app",) else Tenancy()
    trace = shares_trace(gpus, SEED)
    account = {j.app_id: j.account for j in trace.jobs}
    res = Simulator(trace, topology(gpus), make_policy("themis", ArbiterConfig(lease_s=lease_s)),
                    SimConfig(tenancy=tenancy)).run()  # fmt: skip
    window, got = contested_gpu_time(spans_of(res), account.__getitem__, ["X", "Y"], until=leases * lease_s)
    return {"gpus": gpus, "levels": ",".join(levels), "window_s": window, "x_gpu_h": got["X"] / 3600,
            "y_gpu_h": got["Y"] / 3600, "x_over_y": got["X"] / got["Y"] if got["Y"] else float("inf"),
            "wall_s": time.perf_counter() - t0}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--leases", type=int, default=4, help="(b): the window, in leases from time 0 (default 4)"
    )
    ap.add_argument("--lease", type=float, default=ArbiterConfig().lease_s, help="(b): lease length, seconds")
    ap.add_argument("--job-gpus", type=int, choices=(1, 2, 4), default=1,
                    help="(a): GPUs per job; the same GPU-hours (32 / this many jobs each)")  # fmt: skip
    args = ap.parse_args(argv)
    n_jobs = JOBS_PER_USER // args.job_gpus
    works = run_times(n_jobs, SEED)
    split = [
        splitting(g, k, lv, works, args.job_gpus)
        for g in CLUSTERS
        for k in SPLITS
        for lv in ("app", "user,app")
    ]
    share = [shares(16, lv, args.lease, args.leases) for lv in (("account", "user", "app"), ("app",))]
    if args.json:
        print(json.dumps({"splitting": split, "job_gpus": args.job_gpus, "jobs_per_user": n_jobs, "shares": share,
                          "lease_s": args.lease, "leases": args.leases},
                         indent=1))  # fmt: skip
        return 0
    print(f"(a) splitting: A's {n_jobs} {args.job_gpus}-GPU jobs in k apps vs B's same jobs as one app, both at 0; "
          "GPU time while both wait")  # fmt: skip
    print(
        "| GPUs | k | levels app: A/B (A, B GPU-h; window h) | levels user,app: A/B (A, B GPU-h; window h) |"
    )
    print("|---|---|---|---|")
    by = {(r["gpus"], r["k"], r["levels"]): r for r in split}
    for g in CLUSTERS:
        for k in SPLITS:
            cells = []
            for lv in ("app", "user,app"):
                r = by[(g, k, lv)]
                cells.append(
                    f"{r['a_over_b']:.2f} ({r['a_gpu_h']:.1f}, {r['b_gpu_h']:.1f}; {r['window_h']:.1f})"
                )
            print(f"| {g} | {k} | " + " | ".join(cells) + " |")
    print()
    print(f"(b) shares: accounts X (3 shares) and Y (1) on 16 GPUs, both saturated; GPU time over the first "
          f"{args.leases} leases of {args.lease:g} s while both wait")  # fmt: skip
    print("| levels | X/Y | X GPU-h | Y GPU-h | window s |")
    print("|---|---|---|---|---|")
    for r in share:
        print(
            f"| {r['levels']} | {r['x_over_y']:.2f} | {r['x_gpu_h']:.2f} | {r['y_gpu_h']:.2f} | {r['window_s']:.0f} |"
        )
    wall = sum(r["wall_s"] for r in split + share)
    print(f"\n{len(split) + len(share)} simulations, {wall:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
