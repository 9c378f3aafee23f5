"""The demo's closing summary: what the rounds did, whether fairness improved, and each app's outcome.

Reads the status API through the CLI's client (what `themis apps --all` and `themis status` know), the
rounds and decisions from themisd's state database (read-only), and the jobs' own output for the
checkpoint/resume lines of docs/examples/ckpt_job.sh. Run by demo/run.sh; tests/slurm/test_demo.py checks
the three lines that say the mechanism showed (a lease changed hands, a renewal in place, the worst rho fell).
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

from themis_slurm.cli.client import Client, load_settings
from themis_slurm.cli.output import Column, TableOptions, render, rho_text
from themis_slurm.state.reader import StateReader, connect_ro
from themis_slurm.state.rows import DecisionRow

START_RE = re.compile(r"^start run=(\d+) step=(\d+)")
WARN_RE = re.compile(r"^SIGUSR1: checkpoint at step (\d+)")


def _rounds_table(rounds: list[dict[str, Any]], start: float) -> str:
    cols = (
        Column("n", "ROUND", lambda r: r["n"], True),
        Column("t", "T(s)", lambda r: f"{r['time'] - start:.0f}", True),
        Column("trigger", "TRIGGER", lambda r: r["trigger"]),
        Column("grants", "GRANTS", lambda r: r["grants"], True),
        Column("renewals", "RENEWALS", lambda r: r["renewals"], True),
        Column("preemptions", "PREEMPTIONS", lambda r: r["preemptions"], True),
        Column("worst_rho", "WORST_RHO", lambda r: rho_text(r["worst_rho"]), True),
    )
    return render(rounds, cols, [c.name for c in cols], TableOptions())


def _handoffs(db: StateReader, start: float) -> list[str]:
    """One line per round in which a lease expired and its GPUs went to another app."""
    rows = db.decisions(("grant", "preemption"))
    by_round: dict[int, dict[str, list[DecisionRow]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by_round[r.round_id][r.action].append(r)
    lines = []
    for acts in by_round.values():
        lost = acts.get("preemption", [])
        won = [g for g in acts.get("grant", []) if g.app_key not in {p.app_key for p in lost}]
        if not lost or not won:
            continue
        t = lost[0].time - start
        out = ", ".join(f"{p.app_key} job {p.job_id} ({p.gpus} GPUs)" for p in lost)
        to = ", ".join(_jobs_text(app, grants) for app, grants in _by_app(won).items())
        lines.append(f"  t={t:4.0f} s: lease not renewed for {out} -> {to}")
    return lines


def _by_app(rows: list[DecisionRow]) -> dict[str, list[DecisionRow]]:
    out: dict[str, list[DecisionRow]] = defaultdict(list)
    for r in rows:
        out[r.app_key].append(r)
    return out


def _jobs_text(app: str, grants: list[DecisionRow]) -> str:
    gpus = sum(g.gpus or 0 for g in grants)
    if len(grants) == 1:
        return f"{app} job {grants[0].job_id} ({gpus} GPUs)"
    return f"{app} {len(grants)} jobs ({gpus} GPUs)"


def _resumes(jobs_dir: Path) -> tuple[list[str], int]:
    """Jobs that resumed from a checkpoint after a requeue, and how many SIGUSR1 warnings the jobs saw."""
    lines, warnings = [], 0
    for out in sorted(jobs_dir.glob("*.out")):
        try:
            text = out.read_text(errors="replace").splitlines()
        except OSError:
            continue
        warnings += sum(1 for line in text if WARN_RE.match(line))
        for line in text:
            m = START_RE.match(line)
            if m and int(m.group(1)) > 0 and int(m.group(2)) > 0:
                lines.append(f"  {out.stem}: run {m.group(1)} resumed at step {m.group(2)}")
    return lines, warnings


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", type=Path, required=True)
    p.add_argument("--elapsed", type=float, required=True, help="seconds the workload ran")
    p.add_argument("--start", type=float, required=True, help="epoch seconds when the first job was submitted")
    p.add_argument("--gpus", type=int, required=True, help="GPUs in the cluster")
    p.add_argument("--jobs-dir", type=Path, required=True, help="where the jobs wrote their output")
    args = p.parse_args()
    settings = load_settings(args.config, None)
    client = Client(settings)
    apps = client.get("/v1/apps", {"all": "1"})["apps"]
    with StateReader(connect_ro(settings.db_path), str(settings.db_path)) as db:
        rounds = [{**asdict(r), "n": i} for i, r in enumerate(reversed(db.rounds(1000)), 1)]
        handoffs = _handoffs(db, args.start)
    resumes, warnings = _resumes(args.jobs_dir)

    print("Rounds (WORST_RHO: the worst-off app's rho when the round began):")
    print(_rounds_table(rounds, args.start))
    rhos = [(r["n"], r["worst_rho"]) for r in rounds if r["worst_rho"] is not None]
    if rhos:
        peak = max(rhos, key=lambda x: x[1])
        last = rhos[-1]
        verdict = "fell" if last[1] < peak[1] else "did not fall"
        print(f"\nWorst rho {verdict}: {peak[1]:.2f} at round {peak[0]} -> {last[1]:.2f} at round {last[0]}")
    print(f"\nLeases that changed hands: {len(handoffs)} round(s)")
    print("\n".join(handoffs) if handoffs else "  (none)")
    print(f"Renewed in place: {sum(r['renewals'] for r in rounds)} lease(s)")
    print(f"SIGUSR1 warnings seen by the jobs: {warnings}; resumed from a checkpoint: {len(resumes)} run(s)")
    if resumes:
        print("\n".join(resumes))

    cols = (
        Column("app", "APP", lambda a: a["app"]),
        Column("rho", "RHO(last)", lambda a: rho_text(a["rho"]), True),
        Column("preemptions", "PREEMPTIONS", lambda a: a["preemptions"], True),
        Column("gpu_min", "GPU_MINUTES", lambda a: f"{a['service_gpu_s'] / 60:.1f}", True),
        Column("state", "STATE", lambda a: "running" if a["active"] else "finished"),
    )
    apps.sort(key=lambda a: a["app"])
    print()
    print(render(apps, cols, [c.name for c in cols], TableOptions()))
    used = sum(a["service_gpu_s"] for a in apps)
    util = used / (args.gpus * args.elapsed) if args.elapsed > 0 else 0.0
    latency = [r["latency_s"] for r in rounds]
    print(f"\n{len(apps)} apps; {sum(r['preemptions'] for r in rounds)} preemption(s) in {len(rounds)} round(s) "
          f"(mean round {1000 * sum(latency) / max(1, len(latency)):.0f} ms)")
    print(f"GPU utilisation: {used / 60:.1f} GPU-minutes used of {args.gpus * args.elapsed / 60:.1f} "
          f"available in {args.elapsed:.0f} s = {util:.0%}")


if __name__ == "__main__":
    main()
