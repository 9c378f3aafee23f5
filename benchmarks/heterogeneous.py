"""Themis on a cluster of several GPU types against the other policies, on the Gavel traces (issue #37 part 2).

Every trace of ``../shared/traces/gavel`` (``dev120_seed7.trace`` and the five ``reference/gen160_seed*.trace``)
loaded with Gavel's ``simulation_throughputs.json``: each job's run time on a v100 and its measured speed on
p100 and k80 relative to it (themis_slurm/sim/loaders/gavel.py, ``type_speeds``). The cluster is a mix of
types, each on nodes and racks of its own (default ``v100:16,p100:8,k80:8``, 4-GPU nodes, 2 nodes a rack:
themis_slurm/sim/gpu_mix.py). Every policy runs on the same jobs with the simulator's defaults (the
``themis simulate`` ones); each places a job on one type (the baselines: the fastest type for the job with
room; ftf: Gavel's heterogeneity-aware finish-time fairness, policies/ftf_perf.py). Measured for each: max,
p95 and median rho (T_id over the private share of each type, core/fairness.py), mean JCT, GPU-hours.

    python benchmarks/heterogeneous.py                 # the table (about 2 minutes on 2 cores)
    python benchmarks/heterogeneous.py --json
    python benchmarks/heterogeneous.py --traces dev120_seed7 --policies themis,ftf,slurm --mix v100:8,k80:8

Skips, saying so, when the trace directory (``--gavel``) is absent.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from themis_slurm.core.arbiter import ArbiterConfig  # noqa: E402
from themis_slurm.policies.registry import NAMES  # noqa: E402
from themis_slurm.sim.engine import SimConfig  # noqa: E402
from themis_slurm.sim.gpu_mix import mixed_cluster, parse_gpu_mix  # noqa: E402
from themis_slurm.sim.loaders.gavel import load_gavel  # noqa: E402
from themis_slurm.sim.runner import run_policies  # noqa: E402

GAVEL = ROOT.parent / "shared" / "traces" / "gavel"
MIX = "v100:16,p100:8,k80:8"


def traces(gavel: Path, wanted: str | None) -> list[Path]:
    """The Gavel traces under `gavel` (names without .trace, comma-separated, in `wanted`; None: all)."""
    found = sorted(gavel.glob("*.trace")) + sorted((gavel / "reference").glob("*.trace"))
    if wanted is None:
        return found
    names = [w.strip() for w in wanted.split(",") if w.strip()]
    out = [p for p in found if p.stem in names]
    missing = set(names) - {p.stem for p in out}
    if missing:
        raise SystemExit(
            f"--traces: no trace {', '.join(sorted(missing))}; known: {', '.join(p.stem for p in found)}"
        )
    return out


def run_trace(path: Path, throughputs: Path, mix: str, policies: list[str]) -> list[dict]:
    """One row per policy on one trace (module docstring)."""
    topo = mixed_cluster(parse_gpu_mix(mix), nodes_per_rack=2, gpus_per_node=4)
    trace = load_gavel(path, throughputs=throughputs, type_speeds=True).shifted()
    rows = []
    for name in policies:
        t0 = time.perf_counter()
        m = run_policies(trace, topo, [name], ArbiterConfig(), SimConfig())[name]
        s = m.summary
        rows.append({"trace": path.stem, "policy": name, "max_rho": s.max_rho, "p95_rho": s.p95_rho,
                     "median_rho": s.median_rho, "mean_jct_h": s.mean_jct_s / 3600.0, "gpu_hours": s.gpu_hours,
                     "preemptions": s.preemptions, "wall_s": time.perf_counter() - t0})  # fmt: skip
    return rows


def table(rows: list[dict]) -> str:
    head = f"{'trace':<16} {'policy':<10} {'max rho':>8} {'p95 rho':>8} {'med rho':>8} {'JCT h':>7} {'GPU-h':>7} {'preempt':>8}"
    out = [head, "-" * len(head)]
    for r in rows:
        out.append(f"{r['trace']:<16} {r['policy']:<10} {r['max_rho']:8.2f} {r['p95_rho']:8.2f} {r['median_rho']:8.2f} "
                   f"{r['mean_jct_h']:7.2f} {r['gpu_hours']:7.0f} {r['preemptions']:8d}")  # fmt: skip
    return "\n".join(out)


def summary(rows: list[dict], policies: list[str]) -> str:
    """Per policy over the traces: mean max rho, traces where it has the lowest max rho, mean JCT vs slurm's."""
    by = {(r["trace"], r["policy"]): r for r in rows}
    names = sorted({r["trace"] for r in rows})
    out = [f"{'policy':<10} {'mean max rho':>12} {'lowest on':>9} {'mean JCT h':>10} {'JCT vs slurm':>12}"]
    for p in policies:
        mine = [by[(t, p)] for t in names]
        lowest = sum(
            1 for t in names if by[(t, p)]["max_rho"] <= min(by[(t, q)]["max_rho"] for q in policies) + 1e-9
        )
        jct = sum(r["mean_jct_h"] for r in mine) / len(mine)
        vs = ""
        if "slurm" in policies:
            ratios = [by[(t, p)]["mean_jct_h"] / by[(t, "slurm")]["mean_jct_h"] for t in names]
            vs = f"{sum(ratios) / len(ratios) - 1.0:+.1%}"
        out.append(f"{p:<10} {sum(r['max_rho'] for r in mine) / len(mine):12.2f} {lowest:>5}/{len(names):<3} "
                   f"{jct:10.2f} {vs:>12}")  # fmt: skip
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--gavel", type=Path, default=GAVEL, help="the Gavel trace directory (default: %(default)s)"
    )
    ap.add_argument("--traces", help="comma-separated trace names (default: all)")
    ap.add_argument("--policies", help="comma-separated policies (default: all registered)")
    ap.add_argument("--mix", default=MIX, help="GPU types, type:gpus[:speed],... (default: %(default)s)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    a = ap.parse_args(argv)
    throughputs = a.gavel / "simulation_throughputs.json"
    if not throughputs.is_file():
        print(f"skipped: {throughputs} is absent (the shared Gavel traces and throughputs)")
        return 0
    policies = [p.strip() for p in a.policies.split(",")] if a.policies else list(NAMES)
    unknown = [p for p in policies if p not in NAMES]
    if unknown:
        raise SystemExit(f"--policies: unknown {', '.join(unknown)}; known: {', '.join(NAMES)}")
    rows = [r for t in traces(a.gavel, a.traces) for r in run_trace(t, throughputs, a.mix, policies)]
    if a.json:
        print(json.dumps({"mix": a.mix, "rows": rows}, indent=1))
    else:
        print(f"cluster {a.mix} (4-GPU nodes, 2 a rack); Gavel traces with measured per-type speeds\n")
        print(table(rows))
        print()
        print(summary(rows, policies))
    return 0


if __name__ == "__main__":
    sys.exit(main())
