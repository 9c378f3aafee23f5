"""One full Themis round (bids, winner determination, hidden payments, leftover) at growing sizes.

All GPUs free: the cold-start worst case. Rounds are timed as themisd and the simulator run them, with
Python's cyclic garbage collector paused (themis_slurm/gc_pause.py says why); the ``gc on ms`` column
times today's code with the collector as the interpreter runs it by default. Beside it, on the same
state, the ``ftf`` baseline (Gavel's finish-time fairness): its solve (the bisection on the largest rho,
:func:`min_max_rho` over :meth:`FtfPolicy.rows`) and its whole round (the solve plus realising the time
fractions as grants). Prints the median wall time per size and, where the exact solver finishes within
its time limit, the fast solver's objective relative to the exact one.

Side by side: with ``--baseline REF`` (default: 2a5d07f, the core before the data-structure work of
issue #13) the package as of that git commit is extracted into a temporary directory under another
name, imported next to today's, and both run the same rounds in one process, alternately (repeat by
repeat, so that load from other processes hits both alike); the table then shows both medians, the
speed-up and whether the two Decisions are identical. ``--baseline none`` runs today's code only.

    python benchmarks/round_latency.py                 # table, today's code vs the baseline commit
    python benchmarks/round_latency.py --json          # the same as JSON
    python benchmarks/round_latency.py --quick         # the two smaller sizes only
    python benchmarks/round_latency.py --baseline none # today's code only
    python benchmarks/round_latency.py --levels account,user,app   # today's code with tenancy (core/tenancy.py)

With ``--levels`` the generated states of today's code carry accounts (8, shares 1 to 4) and users (50, shares
1 to 3) and the apps' contention comes from the tree; the baseline runs the same apps without a tree, so
"identical" is not compared (n/a) and the speed-up is the cost of tenancy plus everything since the baseline.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import random
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from themis_slurm.gc_pause import collector_paused

SIZES = [(32, 128, 128), (128, 512, 512), (512, 2048, 2048), (2048, 10000, 8192)]
MODELS = ["vgg16", "alexnet", "resnet50", "inception3", "googlenet", "vgg19"]
REPO = Path(__file__).resolve().parents[1]
BASELINE = "2a5d07f"
MODULES = ("agent", "arbiter", "auction", "fairness", "placement", "state", "topology", "workload")


def load(package: str) -> SimpleNamespace:
    """The core modules of `package` (themis_slurm, or a baseline copy) as one namespace."""
    return SimpleNamespace(**{m: importlib.import_module(f"{package}.core.{m}") for m in MODULES})


def load_baseline(ref: str) -> SimpleNamespace:
    """themis_slurm as of git commit `ref`, importable as themis_slurm_baseline (a temporary copy)."""
    tar = subprocess.run(["git", "-C", str(REPO), "archive", ref, "themis_slurm"], capture_output=True, check=True)
    root = Path(tempfile.mkdtemp(prefix="themis-baseline-"))
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as tf:
        tf.extractall(root, filter="data")
    pkg = root / "themis_slurm_baseline"
    (root / "themis_slurm").rename(pkg)
    for py in pkg.rglob("*.py"):
        py.write_text(py.read_text().replace("themis_slurm.", "themis_slurm_baseline."))
    sys.path.insert(0, str(root))
    return load("themis_slurm_baseline")


def make_state(n_apps: int, n_jobs: int, n_gpus: int, seed: int = 0, core: SimpleNamespace | None = None,
               levels: tuple[str, ...] | None = None):
    """A cluster of 8-GPU nodes (2 NVLink islands) in racks of 16 nodes, and a Philly-like job mix; with
    `levels`, apps in 8 accounts of 50 users and the tree with random shares (today's code only)."""
    core = core or load("themis_slurm")
    App, Job = core.workload.App, core.workload.Job
    rng = random.Random(seed)
    nodes = n_gpus // 8
    racks = max(1, nodes // 16)
    topo = core.topology.Topology.uniform(racks, nodes // racks, 8, islands_per_node=2)
    per_app = [n_jobs // n_apps + (1 if i < n_jobs % n_apps else 0) for i in range(n_apps)]
    apps = []
    for a, k in enumerate(per_app):
        model = rng.choice(MODELS)
        jobs = tuple(
            Job(f"a{a}j{i}", f"a{a}", g, rng.uniform(1800, 36000) * g, profile=model, submit=float(i))
            for i in range(k)
            for g in [rng.choices([1, 2, 4, 8], weights=[70, 10, 12, 8])[0]]
        )
        apps.append(App(f"a{a}", f"user{a % 50}", rng.uniform(0, 100), jobs, contention=max(1.0, n_apps / 4)))
    if not levels:
        return core.state.ClusterState(topo, 100.0, frozenset(range(topo.size)), (), tuple(apps))
    import dataclasses

    from themis_slurm.core import tenancy as tn

    apps = [dataclasses.replace(a, account=f"acct{int(a.owner[4:]) % 8}") for a in apps]
    tree = tn.Tenancy(levels, {f"acct{k}": rng.randint(1, 4) for k in range(8)},
                      {(f"acct{u % 8}", f"user{u}"): rng.randint(1, 3) for u in range(50)})  # fmt: skip
    n = tn.contention(tree, apps)
    apps = [dataclasses.replace(a, contention=n[a.id]) for a in apps]
    return core.state.ClusterState(topo, 100.0, frozenset(range(topo.size)), (), tuple(apps), tenancy=tree)


def digest(d) -> tuple:
    """What a Decision decides (grants, renewals, preemptions, per-app numbers), comparable across versions."""
    return (
        [(g.job_id, sorted(g.gpus), g.source) for g in d.grants],
        [(r.job_id, sorted(r.gpus), r.lease_expiry) for r in d.renewals],
        [(p.job_id, sorted(p.gpus)) for p in d.preemptions],
        sorted((a.app_id, a.rho_after, a.won_gpus, a.kept_gpus, a.payment_fraction) for a in d.apps.values()),
        d.objective,
        sorted(d.idle_gpus),
    )


def gap_to_exact(core: SimpleNamespace, state, exact_limit_s: float) -> tuple[float | str | None, float | None]:
    """Fast vs exact winner determination on this round's bidders (f = 0.8)."""
    model = core.fairness.FairnessModel(state.topology, state.topology.size)
    agents = [core.agent.Agent(a, model, state.now, 0.0, a.jobs) for a in state.apps]
    agents.sort(key=lambda ag: -ag.rho_base)
    bidders = agents[: max(1, int(0.2 * len(agents)))]
    pool = core.placement.Pool(state.topology, state.free)
    fast = core.auction.FastSolver().solve(bidders, pool)
    t = time.perf_counter()
    try:
        ex = core.auction.ExactSolver(node_alternatives=False, time_limit_s=exact_limit_s)
        exact = ex.solve_candidates(ex.candidates(bidders, pool))
        exact_s = time.perf_counter() - t
        gap = 1.0 - fast.objective / exact.objective if exact_s <= exact_limit_s and exact.objective > 0 else None
        return gap, exact_s
    except Exception as exc:  # report, do not hide: the table says why there is no gap
        return f"exact failed: {exc}", None


def time_ftf(state, repeats: int) -> tuple[float, float]:
    """Median seconds of ftf's solve and of its whole round (policy call) on `state` (today's code only)."""
    from themis_slurm.policies import make_policy
    from themis_slurm.policies.base import PolicyContext
    from themis_slurm.policies.ftf import FtfPolicy, min_max_rho

    capacity = float(state.managed_gpus)
    solve, whole = [], []
    for _ in range(repeats):
        ctx = PolicyContext(state, frozenset({"arrival"}))
        t = time.perf_counter()
        min_max_rho(FtfPolicy().rows(ctx, capacity), capacity)
        solve.append(time.perf_counter() - t)
        policy = make_policy("ftf")
        t = time.perf_counter()
        policy.schedule(PolicyContext(state, frozenset({"arrival"})))
        whole.append(time.perf_counter() - t)
    return statistics.median(solve), statistics.median(whole)


def bench(size: tuple[int, int, int], repeats: int, exact_limit_s: float, base: SimpleNamespace | None,
          levels: tuple[str, ...] | None = None) -> dict:
    new = load("themis_slurm")
    runs = {"new": (new, make_state(*size, core=new, levels=levels), new.arbiter.ArbiterConfig(solver="fast"))}
    if base is not None:
        runs["baseline"] = (base, make_state(*size, core=base), base.arbiter.ArbiterConfig(solver="fast"))
    times: dict[str, list[float]] = {k: [] for k in [*runs, "gc_on"]}
    last = {}
    for _ in range(repeats):
        for name, (core, state, cfg) in runs.items():  # alternate: noise from other processes hits both
            with collector_paused():  # as themisd and the simulator run a round (themis_slurm/gc_pause.py)
                t = time.perf_counter()
                last[name] = core.arbiter.run_round(state, cfg)
                times[name].append(time.perf_counter() - t)
        core, state, cfg = runs["new"]
        t = time.perf_counter()
        core.arbiter.run_round(state, cfg)  # the collector as the interpreter runs it by default
        times["gc_on"].append(time.perf_counter() - t)
    d = last["new"]
    ftf_solve, ftf_round = time_ftf(runs["new"][1], repeats)
    gap, exact_s = gap_to_exact(new, runs["new"][1], exact_limit_s) if exact_limit_s > 0 else (None, None)
    row = {
        "apps": size[0],
        "jobs": size[1],
        "gpus": size[2],
        "median_ms": statistics.median(times["new"]) * 1000,
        "min_ms": min(times["new"]) * 1000,
        "gc_on_median_ms": statistics.median(times["gc_on"]) * 1000,
        "repeats": repeats,
        "granted_gpus": sum(len(g.gpus) for g in d.grants),
        "grants": len(d.grants),
        "ftf_solve_ms": ftf_solve * 1000,
        "ftf_round_ms": ftf_round * 1000,
        "fast_vs_exact_gap": gap,
        "exact_s": exact_s,
    }
    if base is not None:
        row["baseline_median_ms"] = statistics.median(times["baseline"]) * 1000
        row["baseline_min_ms"] = min(times["baseline"]) * 1000
        row["speedup"] = row["baseline_median_ms"] / row["median_ms"]
        row["identical"] = None if levels else digest(d) == digest(last["baseline"])
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--quick", action="store_true", help="only the two smaller sizes")
    ap.add_argument("--sizes", type=int, nargs="+", help=f"run only these sizes (0-based, of {SIZES})")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--exact-limit", type=float, default=60.0, help="seconds the exact solver may take (0: skip)")
    ap.add_argument("--baseline", default=BASELINE, help=f"git commit to compare with (default {BASELINE}; none: off)")
    ap.add_argument("--levels", default="", help="tenancy levels for today's code, e.g. account,user,app")
    args = ap.parse_args()
    levels = tuple(x.strip() for x in args.levels.split(",") if x.strip()) or None
    base = None if args.baseline.lower() == "none" else load_baseline(args.baseline)
    sizes = [SIZES[i] for i in args.sizes] if args.sizes else SIZES[:2] if args.quick else SIZES
    rows = [bench(s, args.repeats if s[2] <= 2048 else max(1, args.repeats // 2), args.exact_limit, base, levels)
            for s in sizes]  # fmt: skip
    if args.json:
        print(json.dumps({"benchmark": "round_latency", "baseline": args.baseline, "levels": levels, "rows": rows},
                         indent=2))
        return
    head = (f"{'apps':>5} {'jobs':>6} {'gpus':>5} {'median ms':>10} {'min ms':>8} {'gc on ms':>9} {'granted':>8}"
            f" {'fast/exact gap':>15}"
            f" {'ftf solve ms':>12} {'ftf round ms':>12}")  # fmt: skip
    if base is not None:
        head += f" {'base ms':>9} {'speed-up':>8} {'identical':>9}"
    print(head)
    for r in rows:
        gap = r["fast_vs_exact_gap"]
        gap_s = f"{gap * 100:.3f}%" if isinstance(gap, float) else ("n/a (>limit)" if gap is None else "error")
        line = (f"{r['apps']:>5} {r['jobs']:>6} {r['gpus']:>5} {r['median_ms']:>10.1f} {r['min_ms']:>8.1f} "
                f"{r['gc_on_median_ms']:>9.1f} {r['granted_gpus']:>8} {gap_s:>15} {r['ftf_solve_ms']:>12.1f} "
                f"{r['ftf_round_ms']:>12.1f}")  # fmt: skip
        if base is not None:
            same = "n/a" if r["identical"] is None else "yes" if r["identical"] else "NO"
            line += f" {r['baseline_median_ms']:>9.1f} {r['speedup']:>7.2f}x {same:>9}"
        print(line)


if __name__ == "__main__":
    main()
