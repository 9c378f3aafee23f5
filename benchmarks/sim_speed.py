"""Simulator speed: the philly_mix1 trace on 1,024 GPUs per policy, and a generated 100,000-job run on 8,192 GPUs.

Reports wall time (simulation only, trace loading excluded), event instants per second and policy calls per
second. The Philly trace lives outside the project (../shared/traces/philly_mix1.csv); when it is absent that
part is skipped with a message.

    python benchmarks/sim_speed.py                        # table; philly at --round-interval 60
    python benchmarks/sim_speed.py --round-interval 0     # exact: a policy call at every event instant
    python benchmarks/sim_speed.py --quick --json         # 10% of philly, a 10,000-job generated run
    python benchmarks/sim_speed.py --policies themis,fifo --big-policies fifo
    python benchmarks/sim_speed.py --contended --budget 600   # issue #14's contended run, per policy
    python benchmarks/sim_speed.py --contended --workers 2    # the same, two policies at a time

Cluster: 8-GPU nodes in racks of 16 nodes (1,024 GPUs = 8 racks; 8,192 GPUs = 64 racks).

``--contended`` runs instead the whole-simulation case of issues #13 and #14: the paper workload's 84 apps
(4,697 jobs) arriving one per hour on 64 GPUs (2 racks x 8 nodes x 4 GPUs), every other setting at its
default (a policy call at every event instant, Themis with ``--solver auto``). Each policy runs in its own
process with a time budget (``--budget``, seconds); a policy that exceeds it is stopped and reported as
unfinished, with how far (in simulated hours) it got. ``--workers N`` runs N policies at a time, longest
first (``CONTENDED_ORDER``); the last line gives the wall time of them all and their CPU seconds. Each
row also gives the run's max rho, mean JCT and GPU-hours (issue #34's targets on this workload).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from themis_slurm.core.topology import Topology
from themis_slurm.policies import NAMES, make_policy
from themis_slurm.sim.engine import SimConfig, Simulator
from themis_slurm.sim.loaders import load_trace
from themis_slurm.sim.metrics import compute
from themis_slurm.sim.trace import PROFILE_MODELS, Trace, TraceJob

PHILLY = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "philly_mix1.csv"


def generated(n_jobs: int, gpus: int, seed: int = 0, load: float = 0.9) -> Trace:
    """Philly-like jobs: mostly 1 GPU, lognormal run times (median 10 min), Poisson arrivals at `load`."""
    rng = np.random.default_rng(seed)
    sizes = rng.choice([1, 2, 4, 8], n_jobs, p=[0.85, 0.05, 0.06, 0.04])
    dur = np.minimum(rng.lognormal(np.log(600.0), 1.0, n_jobs), 48 * 3600.0)
    mean_work = float(np.mean(sizes * dur))
    gaps = rng.exponential(mean_work / (load * gpus), n_jobs)
    arrivals = np.cumsum(gaps) - gaps[0]
    apps = rng.integers(0, max(1, n_jobs // 200), n_jobs)
    models = [PROFILE_MODELS[i] for i in rng.integers(0, len(PROFILE_MODELS), apps.max() + 1)]
    jobs = tuple(
        TraceJob(f"g{i}", f"app{apps[i]}", f"u{apps[i] % 50}", float(arrivals[i]), int(sizes[i]), float(dur[i]),
                 models[apps[i]])  # fmt: skip
        for i in range(n_jobs)
    )
    return Trace(jobs, f"generated({n_jobs} jobs, {gpus} GPUs, load {load})")


def cluster(gpus: int) -> Topology:
    nodes = gpus // 8
    return Topology.uniform(max(1, nodes // 16), min(16, nodes), 8)


def run(name: str, trace: Trace, topo: Topology, cfg: SimConfig) -> dict:
    policy = make_policy(name)  # every knob at its default (Themis: ArbiterConfig's)
    res = Simulator(trace, topo, policy, cfg).run()
    return {
        "policy": name,
        "jobs": len(trace),
        "gpus": topo.size,
        "wall_s": round(res.wall_s, 2),
        "events": res.events,
        "policy_calls": res.policy_calls,
        "events_per_s": round(res.events / res.wall_s, 1) if res.wall_s > 0 else None,
        "calls_per_s": round(res.policy_calls / res.wall_s, 1) if res.wall_s > 0 else None,
        "round_interval_s": cfg.round_interval_s,
    }


def _contended_worker(name: str, out) -> None:  # module level: a child process runs it
    from themis_slurm.sim.workload_paper import paper_workload

    topo = Topology.uniform(2, 8, 4)
    trace = paper_workload(0, n_apps=84, app_interarrival_s=3600.0, cluster_gpus=topo.size)
    policy = make_policy(name)
    inner = policy.schedule
    calls = [0]

    def schedule(ctx):  # report how far the simulation got (every 100 calls), for a run stopped at its budget
        calls[0] += 1
        if calls[0] % 100 == 0:
            out.put(("at", (ctx.state.now, calls[0])))
        return inner(ctx)

    policy.schedule = schedule  # type: ignore[method-assign]
    t0 = time.process_time()
    res = Simulator(trace, topo, policy, SimConfig()).run()
    cpu_s = round(time.process_time() - t0, 1)
    s = compute(res).summary  # issue #34's targets on this run: max rho, mean JCT and GPU-hours beside the speed
    out.put(("done", {"policy": name, "jobs": len(trace), "gpus": topo.size, "cpu_s": cpu_s,
                      "events": res.events, "policy_calls": res.policy_calls, "max_rho": round(s.max_rho, 3),
                      "mean_jct_h": round(s.mean_jct_s / 3600.0, 2), "gpu_h": round(s.gpu_hours)}))  # fmt: skip


#: Longest first (CPU seconds measured on the contended run): with two workers Themis takes one core and
#: the baselines the other, so that both stay busy to the end (longest-processing-time-first scheduling).
CONTENDED_ORDER = ("themis", "tiresias", "ftf", "maxmin", "fairshare", "slaq", "gandiva", "optimus", "slurm", "srtf",
                   "fifo")  # fmt: skip


def contended(names: list[str], budget_s: float, workers: int = 1) -> list[dict]:
    """Each policy on the contended workload in a child process, at most `workers` at a time (longest
    first, :data:`CONTENDED_ORDER`), each stopped after `budget_s` seconds of wall time."""
    import multiprocessing as mp
    import queue

    ctx = mp.get_context("fork")
    order = [n for n in CONTENDED_ORDER if n in names] + [n for n in names if n not in CONTENDED_ORDER]
    todo, running, rows = list(order), {}, {}
    while todo or running:
        while todo and len(running) < max(1, workers):
            name = todo.pop(0)
            print(f"contended: {name} ...", file=sys.stderr, flush=True)
            q = ctx.Queue()
            proc = ctx.Process(target=_contended_worker, args=(name, q))
            proc.start()
            running[name] = [proc, q, time.perf_counter(), 0.0, 0, None]
        for name, slot in list(running.items()):
            proc, q, t0, _, _, row = slot
            try:
                while True:
                    kind, value = q.get_nowait()
                    if kind == "at":
                        slot[3], slot[4] = value
                    else:
                        slot[5] = row = value
            except queue.Empty:
                pass
            over = time.perf_counter() - t0 >= budget_s
            if row is None and not over and (proc.is_alive() or not q.empty()):
                continue
            if row is None:
                proc.kill()
                row = {"policy": name, "jobs": 4697, "gpus": 64, "cpu_s": f">{budget_s:g}", "events": "",
                       "policy_calls": f">{slot[4]}", "note": f"stopped at {slot[3] / 3600:.0f} simulated h"}  # fmt: skip
            proc.join()
            row["wall_s"] = round(time.perf_counter() - t0, 1)
            rows[name] = {"run": "contended", **row}
            del running[name]
        time.sleep(0.2)
    return [rows[n] for n in order]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--quick", action="store_true", help="10%% of philly and a 10,000-job generated run")
    ap.add_argument("--policies", default=None, help="philly policies (default: all registered)")
    ap.add_argument("--big-policies", default="fifo", help="policies for the generated run (default fifo)")
    ap.add_argument("--round-interval", type=float, default=60.0,
                    help="seconds between policy calls (0: at every event; default 60)")  # fmt: skip
    ap.add_argument("--big-jobs", type=int, default=100_000)
    ap.add_argument("--trace", type=Path, default=PHILLY)
    ap.add_argument("--contended", action="store_true", help="only the contended 84-app run (module docstring)")
    ap.add_argument("--budget", type=float, default=600.0, help="--contended: seconds per policy (default 600)")
    ap.add_argument("--workers", type=int, default=1,
                    help="--contended: policies run at once, one process each, longest first (default 1)")
    args = ap.parse_args(argv)
    names = args.policies.split(",") if args.policies else list(NAMES)
    cfg = SimConfig(round_interval_s=args.round_interval)
    rows: list[dict] = []
    notes: list[str] = []
    if args.contended:
        t0 = time.perf_counter()
        rows = contended(names, args.budget, args.workers)
        total = time.perf_counter() - t0
        cpu = sum(float(r["cpu_s"]) for r in rows if not str(r["cpu_s"]).startswith(">"))
        if args.json:
            print(json.dumps({"rows": rows, "total_wall_s": round(total, 1), "total_cpu_s": round(cpu, 1),
                              "workers": args.workers}, indent=2))  # fmt: skip
            return 0
        head = ("policy", "cpu_s", "wall_s", "events", "policy_calls", "max_rho", "mean_jct_h", "gpu_h", "note")
        _print_table(head, rows)
        print(f"(all policies: {total:.0f} s wall with {args.workers} worker(s), {cpu:.0f} s of CPU; target <= 180 s)")
        return 0
    if args.trace.is_file():
        philly = load_trace(args.trace, "chronus", skip_bad=True).shifted()
        if args.quick:
            philly = philly.head_jobs(len(philly) // 10)
        for n in names:
            print(f"philly_mix1: {n} ...", file=sys.stderr, flush=True)
            rows.append({"run": "philly_mix1", **run(n, philly, cluster(1024), cfg)})
    else:
        notes.append(f"philly_mix1 skipped: {args.trace} not found")
        print(notes[-1], file=sys.stderr)
    n_big = 10_000 if args.quick else args.big_jobs
    big = generated(n_big, 8192)
    for n in args.big_policies.split(","):
        print(f"generated {n_big} jobs: {n} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        row = run(n, big, cluster(8192), cfg)
        row["total_s"] = round(time.perf_counter() - t0, 2)
        rows.append({"run": "generated", **row})
    if args.json:
        print(json.dumps({"rows": rows, "notes": notes}, indent=2))
        return 0
    head = ("run", "policy", "jobs", "gpus", "wall_s", "events", "policy_calls", "events_per_s", "calls_per_s")
    _print_table(head, rows)
    print(f"(round interval {args.round_interval:g} s)")
    for n in notes:
        print(n)
    return 0


def _print_table(head: tuple[str, ...], rows: list[dict]) -> None:
    table = [head, *[tuple(str(r.get(k, "")) for k in head) for r in rows]]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for i, r in enumerate(table):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
        if i == 0:
            print("-" * (sum(widths) + 2 * (len(widths) - 1)))


if __name__ == "__main__":
    raise SystemExit(main())
