"""Estimate errors over several error draws: how much of the evaluation's one-draw result is the draw.

docs/evaluation.md runs each estimate error (uniform 1-3x over-estimates, lognormal(0.5) errors), with and
without progress reports, on one draw of the errors (seed 0; benchmarks/paper_eval.py). Max rho is one
app's fate, so it can swing with the draw: this runs the same experiments (the 84-app paper workload on 64
GPUs, calibration on, reports every 600 s) on several draws and prints max rho per draw beside the run with
exact estimates, which does not depend on the draw.

    python benchmarks/estimate_seeds.py                         # Themis, draws 0-3 (about 3 min, 2 workers)
    python benchmarks/estimate_seeds.py --seeds 0,1,2,3,4,5 --policies themis,ftf --json

Only the draw of the errors changes with the seed: the workload, Themis's lottery and every other setting
are the evaluation's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import paper_eval as pe  # noqa: E402 - the evaluation's own experiments, planned the same way

EXPERIMENTS = ("estimates_uniform:1:3", "estimates_uniform:1:3+progress", "estimates_lognormal:0.5",
               "estimates_lognormal:0.5+progress")  # fmt: skip
REFERENCE = "estimates_none"  # exact estimates: no draw


def run(job: tuple[pe.Task, int]) -> tuple[str, str, int, float, float]:
    """(experiment, policy, seed, max rho, p95 rho) of one task on one draw of the errors."""
    task, seed = job
    key, policy, m, _, _ = pe.run_task(replace(task, cfg=replace(task.cfg, seed=seed)))
    return key, policy, seed, m.summary.max_rho, m.summary.p95_rho


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0,1,2,3", help="draws of the errors (comma-separated; default 0,1,2,3)")
    ap.add_argument("--policies", default="themis", help=f"of {', '.join(pe.ESTIMATE_POLICIES)} (default themis)")
    ap.add_argument("--workers", type=int, default=2, help="simulations in parallel (default 2)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    args = ap.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds must be whole numbers separated by commas, got {args.seeds!r}")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    bad = [p for p in policies if p not in pe.ESTIMATE_POLICIES]
    if bad or not policies:
        ap.error(f"--policies: {', '.join(bad) or 'none given'} not among {', '.join(pe.ESTIMATE_POLICIES)}")

    ev = pe.Eval(pe.FULL, Path("."), Path("."), args.workers)
    ev.plan()
    tasks = {(t.key, t.policy): t for t in ev.tasks if t.key in (*EXPERIMENTS, REFERENCE) and t.policy in policies}
    jobs = [(tasks[(REFERENCE, p)], seeds[0]) for p in policies]
    jobs += [(tasks[(k, p)], s) for k in EXPERIMENTS for p in policies for s in seeds]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        rows = list(pool.map(run, jobs))
    ref = {p: mx for k, p, _, mx, _ in rows if k == REFERENCE}
    got = {(k, p, s): (mx, p95) for k, p, s, mx, p95 in rows if k != REFERENCE}

    if args.json:
        out = {p: {"exact_max_rho": ref[p], **{k: {str(s): {"max_rho": got[(k, p, s)][0], "p95_rho": got[(k, p, s)][1]}
                                                   for s in seeds} for k in EXPERIMENTS}} for p in policies}  # fmt: skip
        print(json.dumps(out, indent=2))
        return 0
    head = ["policy", "experiment", *(f"draw {s}" for s in seeds), "mean", "worst", "within 10% of exact"]
    lines = []
    for p in policies:
        for k in EXPERIMENTS:
            vals = [got[(k, p, s)][0] for s in seeds]
            within = sum(v <= 1.1 * ref[p] for v in vals)
            lines.append([p, k.removeprefix("estimates_"), *(f"{v:.3f}" for v in vals),
                          f"{statistics.mean(vals):.3f}", f"{max(vals):.3f}", f"{within} of {len(vals)}"])  # fmt: skip
    widths = [max(len(r[i]) for r in [head, *lines]) for i in range(len(head))]
    print("  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)))
    print("-" * (sum(widths) + 2 * (len(widths) - 1)))
    for r in lines:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
    print("max rho with exact estimates: " + ", ".join(f"{p} {ref[p]:.3f}" for p in policies))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
