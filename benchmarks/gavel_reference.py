"""Gavel's own results against ours, like for like, on the five reference traces (issue #34, items 4 and 5).

For each trace of ``../shared/traces/gavel/reference`` (Gavel's generator; its README says how Gavel was
run), five runs of the same 160 jobs: Gavel's ``finish_time_fairness`` and ``max_min_fairness`` (finish
times read from the results CSV), and our ``ftf``, ``maxmin`` and ``themis`` put through our simulator the
README's way (one node of 32 GPUs, 360 s policy rounds and lease, no restart cost, each job its own app:
themis_slurm/sim/gavel_reference.py). Every run is measured with the README's one rho definition from its
own finish times (themis_slurm/sim/job_rho.py): max, p95 and median rho, the share of jobs above 1.05 and
mean JCT; for our ftf and maxmin also the max rho against Gavel's counterpart and the median over jobs of
|our finish - Gavel's finish|.

``--gavel-steps`` runs our policies in Gavel's simulated world instead, where a job advances whole steps
per round and so holds its GPUs for one more, nearly idle, round at its end (gavel_reference.py): the
setting in which a policy's faithfulness to Gavel's is judged (docs/eval/discussion.md).

    python benchmarks/gavel_reference.py                  # the table, about 5 s
    python benchmarks/gavel_reference.py --json
    python benchmarks/gavel_reference.py --traces 11,14 --policies ftf --gavel-steps

Skips, saying so, when the reference directory (``--reference``) is absent.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from themis_slurm.sim.gavel_reference import (  # noqa: E402
    GAVEL_POLICIES,
    GPUS,
    ReferenceTrace,
    median_abs_finish_diff,
    read_results,
    reference_traces,
    run_like_for_like,
)
from themis_slurm.sim.job_rho import ABOVE, rhos_on, summarise  # noqa: E402

REFERENCE = ROOT.parent / "shared" / "traces" / "gavel" / "reference"
OURS = ("ftf", "maxmin", "themis")
#: the Gavel policy each of ours is compared with, finish time by finish time
COUNTERPART = {"ftf": "finish_time_fairness", "maxmin": "max_min_fairness"}
LABEL = {"finish_time_fairness": "Gavel FTF", "max_min_fairness": "Gavel max-min"}


def pick(traces: list[ReferenceTrace], wanted: str | None) -> list[ReferenceTrace]:
    """The traces named in `wanted` (comma-separated seeds like 11 or names like gen160_seed11)."""
    if wanted is None:
        return traces
    out = []
    for w in (x.strip() for x in wanted.split(",") if x.strip()):
        found = [t for t in traces if t.name == w or t.name.endswith(f"seed{w}")]
        if not found:
            raise SystemExit(f"--traces: no trace {w!r}; known: {', '.join(t.name for t in traces)}")
        out.extend(found)
    return out


def run_trace(t: ReferenceTrace, throughputs: Path, policies: list[str], gavel_steps: bool) -> dict:
    """Every run's summary on one trace (module docstring), Gavel's first."""
    gavel = read_results(t.results)
    rows = []
    for p in GAVEL_POLICIES:
        rows.append({"run": LABEL[p], **asdict(summarise(gavel[p], GPUS))})
    for p in policies:
        t0 = time.perf_counter()
        ours = run_like_for_like(t.trace, throughputs, p, gavel_steps)
        row = {"run": f"our {p}", **asdict(summarise(ours, GPUS)), "wall_s": time.perf_counter() - t0}
        # one yardstick for both: our finish times over Gavel FTF's T_id per job (rhos_on)
        row["max_rho_on_gavel_ftf"] = float(rhos_on(ours, gavel["finish_time_fairness"], GPUS).max())
        if p in COUNTERPART:
            ref = gavel[COUNTERPART[p]]
            row["max_rho_vs_gavel"] = row["max_rho"] / summarise(ref, GPUS).max_rho - 1.0
            row["median_abs_finish_diff_s"] = median_abs_finish_diff(ours, ref)
        rows.append(row)
    return {"trace": t.name, "runs": rows}


def table(results: list[dict], gavel_steps: bool) -> str:
    world = "Gavel's whole steps per round" if gavel_steps else "the reference README's like for like"
    head = (f"{'run':<14} {'max rho':>8} {'p95':>6} {'median':>7} {f'>{ABOVE:g}':>6} {'JCT h':>6} "
            f"{'max vs Gavel':>12} {'med |dF| s':>10} {'on FTF T_id':>11}")  # fmt: skip
    lines = [
        f"Our runs: {world}; rho by the reference README's definition, each run from its own finish times.",
        "",
    ]
    for r in results:
        lines += [r["trace"], head, "-" * len(head)]
        for row in r["runs"]:
            vs = f"{row['max_rho_vs_gavel']:+.1%}" if "max_rho_vs_gavel" in row else "-"
            diff = f"{row['median_abs_finish_diff_s']:.0f}" if "median_abs_finish_diff_s" in row else "-"
            on = f"{row['max_rho_on_gavel_ftf']:.3f}" if "max_rho_on_gavel_ftf" in row else "-"
            lines.append(f"{row['run']:<14} {row['max_rho']:>8.3f} {row['p95_rho']:>6.3f} {row['median_rho']:>7.3f} "
                         f"{row['share_above']:>6.0%} {row['mean_jct_s'] / 3600:>6.2f} {vs:>12} {diff:>10} {on:>11}")  # fmt: skip
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--reference", type=Path, default=REFERENCE, help=f"the reference directory (default {REFERENCE})"
    )
    ap.add_argument(
        "--throughputs", type=Path, help="Gavel's simulation_throughputs.json (default: beside --reference)"
    )
    ap.add_argument("--traces", help="comma-separated seeds or names (default: all)")
    ap.add_argument("--policies", default=",".join(OURS), help=f"ours to run (default {','.join(OURS)})")
    ap.add_argument(
        "--gavel-steps", action="store_true", help="run ours in Gavel's world of whole steps per round"
    )
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    a = ap.parse_args(argv)
    throughputs = a.throughputs or a.reference.parent / "simulation_throughputs.json"
    traces = reference_traces(a.reference) if a.reference.is_dir() else []
    if not traces or not throughputs.is_file():
        print(
            f"skipped: Gavel's reference results are not at {a.reference} (with {throughputs}); "
            "../shared/traces is optional, or give --reference"
        )
        return 0
    policies = [p.strip() for p in a.policies.split(",") if p.strip()]
    bad = [p for p in policies if p not in OURS]
    if bad or not policies:
        raise SystemExit(f"--policies: {', '.join(bad) or 'none given'}; choose from {', '.join(OURS)}")
    results = [run_trace(t, throughputs, policies, a.gavel_steps) for t in pick(traces, a.traces)]
    if a.json:
        print(json.dumps({"gavel_steps": a.gavel_steps, "gpus": GPUS, "traces": results}, indent=2))
    else:
        print(table(results, a.gavel_steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
