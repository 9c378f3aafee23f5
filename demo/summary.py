"""The demo's closing summary: every app's rho, preemptions and GPU time, and the cluster's GPU utilisation.

Reads the status API through the CLI's client (falling back to the state database), so it shows exactly
what `themis apps --all` and `themis status` know. Run by demo/run.sh.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from themis_slurm.cli.client import Client, load_settings
from themis_slurm.cli.output import Column, TableOptions, render, rho_text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", type=Path, required=True)
    p.add_argument("--elapsed", type=float, required=True, help="seconds the workload ran")
    p.add_argument("--gpus", type=int, required=True, help="GPUs in the cluster")
    args = p.parse_args()
    client = Client(load_settings(args.config, None))
    apps = client.get("/v1/apps", {"all": "1"})["apps"]
    cluster = client.get("/v1/cluster")
    cols = (
        Column("app", "APP", lambda a: a["app"]),
        Column("rho", "RHO(last)", lambda a: rho_text(a["rho"]), True),
        Column("preemptions", "PREEMPTIONS", lambda a: a["preemptions"], True),
        Column("gpu_min", "GPU_MINUTES", lambda a: f"{a['service_gpu_s'] / 60:.1f}", True),
        Column("state", "STATE", lambda a: "running" if a["active"] else "finished"),
    )
    apps.sort(key=lambda a: a["app"])
    print(render(apps, cols, [c.name for c in cols], TableOptions()))
    used = sum(a["service_gpu_s"] for a in apps)
    rhos = [a["rho"] for a in apps if a["rho"] is not None]
    util = used / (args.gpus * args.elapsed) if args.elapsed > 0 else 0.0
    rounds = cluster["rounds"]
    print(f"\n{len(apps)} apps; worst rho {max(rhos, default=float('nan')):.2f}; "
          f"{sum(a['preemptions'] for a in apps)} preemption(s) in {rounds['total']} round(s) "
          f"(mean round {1000 * (rounds['mean_latency_s'] or 0):.0f} ms)")
    print(f"GPU utilisation: {used / 60:.1f} GPU-minutes used of {args.gpus * args.elapsed / 60:.1f} "
          f"available in {args.elapsed:.0f} s = {util:.0%}")


if __name__ == "__main__":
    main()
