"""Jobs that do not checkpoint: what a preemption costs them, and what telling Themis saves (issue #34, item 2).

A job that does not save its state at Themis's warning loses everything it did since its last checkpoint
when it loses its lease (``--themis-ckpt=no|<interval>``; :attr:`Job.unsaved` in the core). The bids,
the leftover and the ranking charge that loss to the app whose job would lose it (core/agent.py,
``Agent.lost_without``), so such a job is preempted only when that pays. Each case runs twice with Themis:
told (the simulator shows policies each running job's unsaved work, as themisd does) and blind (it does
not: every job looks as cheap to preempt as one that checkpoints, the mechanism before this change); the
baselines read no such thing and run once.

(a) The issue's case, on 16 GPUs (2 racks x 2 nodes x 4) with themisd's site values (rounds every 5 s,
    45 s leases as in the issue's runs, restart 60 s): user ``nockpt`` submits 32 one-GPU jobs of 4 minutes
    that never checkpoint, estimated at 2 minutes (too short, as in the issue); user ``ckpt`` submits 32
    equal jobs, honestly estimated, that checkpoint at the warning. Each job its own app.
(b) The paper workload (84 apps, 64 GPUs, 120 s rounds, 600 s leases) with a fraction of its jobs that never
    checkpoint (``themis simulate --no-checkpoint``), seed 0.

    python benchmarks/checkpoint_cost.py            # (a), a few seconds
    python benchmarks/checkpoint_cost.py --paper    # (a) and (b): slow, tens of minutes (see docs/eval/discussion.md)
    python benchmarks/checkpoint_cost.py --json     # the same numbers as JSON
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

# this checkout's themis_slurm, not an installed one
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from themis_slurm.core.arbiter import ArbiterConfig  # noqa: E402
from themis_slurm.core.decision import Decision  # noqa: E402
from themis_slurm.core.topology import Topology  # noqa: E402
from themis_slurm.policies import make_policy  # noqa: E402
from themis_slurm.sim.engine import SimConfig, SimResult, Simulator  # noqa: E402
from themis_slurm.sim.metrics import compute  # noqa: E402
from themis_slurm.sim.trace import TraceJob  # noqa: E402
from themis_slurm.sim.workload_paper import paper_workload  # noqa: E402

RUN_S, EST_S, JOBS = 240.0, 120.0, 32
WINDOW_S = 360.0  # the issue's six minutes
HORIZON_S = 4 * 3600.0  # a run not over by then is stuck (its ideal makespan is 20 minutes)
PAPER_HORIZON_S = 1000 * 3600.0  # the paper workload ends in 320-345 h under every policy when jobs checkpoint
PAPER_FRACTIONS = (0.3,)
PAPER_POLICIES = ("slurm", "ftf", "tiresias")


def issue_case() -> list[TraceJob]:
    """32 never-checkpointing one-GPU jobs estimated at half their run, and 32 honest ones that checkpoint."""
    jobs = []
    for user, est, ckpt, t0 in (("nockpt", EST_S, math.inf, 0.0), ("ckpt", RUN_S, None, 1.0)):
        for i in range(JOBS):
            jobs.append(TraceJob(f"{user}.{i}", f"{user}/job{i}", user, t0, 1, RUN_S, estimate_s=est,
                                 checkpoint_s=ckpt))
    return jobs


class _Stuck(Exception):
    """Raised by the observer when a run passes its horizon: its jobs may never finish."""


def _horizon(end_s: float):  # noqa: ANN202
    def watch(sim: Simulator, decision: Decision) -> None:
        if sim.now > end_s:
            raise _Stuck
    return watch


def run_issue(told: bool) -> SimResult | dict:
    """The run's result, or, when it has not ended by HORIZON_S (jobs preempted before they ever finish),
    what it had done by then: preemptions and finished jobs per user."""
    policy = make_policy("themis", ArbiterConfig(lease_s=45.0, restart_cost_s=60.0))
    cfg = SimConfig(round_interval_s=5.0, restart_cost_s=60.0, tell_unsaved=told)
    jobs = issue_case()
    preempted: dict[str, int] = {}

    def watch(sim: Simulator, decision: Decision) -> None:
        for p in decision.preemptions:
            user = p.job_id.split(".")[0]
            preempted[user] = preempted.get(user, 0) + 1
        if sim.now > HORIZON_S:
            raise _Stuck

    sim = Simulator(jobs, Topology.uniform(2, 2, 4), policy, cfg, observer=watch)
    try:
        return sim.run()
    except _Stuck:
        present = {j.id for j in sim.waiting_jobs()} | set(sim.running())
        done = {u: sum(1 for j in jobs if j.user == u and j.job_id not in present) for u in ("nockpt", "ckpt")}
        return {"preempted": preempted, "done": done}


def issue_row(told: bool) -> dict:
    res = run_issue(told)
    row: dict = {"themis": "told" if told else "blind"}
    if isinstance(res, dict):  # stuck: what it had done by the horizon
        for user in ("nockpt", "ckpt"):
            row[f"{user}_preemptions"] = res["preempted"].get(user, 0)
            row[f"{user}_done_by_6min"] = math.nan
            row[f"{user}_mean_jct_s"] = math.nan
            row[f"{user}_done_by_horizon"] = res["done"][user]
        row["lost_gpu_h"] = math.nan
        row["makespan_s"] = math.inf
        return row
    for user in ("nockpt", "ckpt"):
        mine = [j for j in res.jobs if j.job_id.startswith(user + ".")]
        row[f"{user}_preemptions"] = sum(j.preemptions for j in mine)
        row[f"{user}_done_by_6min"] = sum(1 for j in mine if j.finish <= WINDOW_S)
        row[f"{user}_mean_jct_s"] = statistics.fmean(j.jct for j in mine)
    row["lost_gpu_h"] = res.lost_work / 3600.0
    row["makespan_s"] = max(j.finish for j in res.jobs)
    return row


def paper_rows(fraction: float) -> list[dict]:
    trace = paper_workload(0)
    topo = Topology.uniform(2, 8, 4)
    base = SimConfig(round_interval_s=120.0, seed=0, no_checkpoint=fraction)
    runs = [("themis (told)", "themis", base), ("themis (blind)", "themis", replace(base, tell_unsaved=False))]
    runs += [(p, p, base) for p in PAPER_POLICIES]
    rows = []
    for label, name, cfg in runs:
        t0 = time.perf_counter()
        stuck = _horizon(PAPER_HORIZON_S)
        try:
            res = Simulator(trace, topo, make_policy(name, ArbiterConfig()), cfg, observer=stuck).run()
        except _Stuck:
            rows.append({"no_checkpoint": fraction, "policy": label, "stuck": True,
                         "wall_s": time.perf_counter() - t0})
            print(f"  {label}: not over after {PAPER_HORIZON_S / 3600:g} h", file=sys.stderr, flush=True)
            continue
        s = compute(res).summary
        rows.append({"no_checkpoint": fraction, "policy": label, "max_rho": s.max_rho, "median_rho": s.median_rho,
                     "mean_jct_h": s.mean_jct_s / 3600.0, "preemptions": s.preemptions,
                     "lost_gpu_h": s.lost_gpu_h, "gpu_hours": s.gpu_hours, "wall_s": time.perf_counter() - t0})
        print(f"  {label}: done in {rows[-1]['wall_s']:.0f} s", file=sys.stderr, flush=True)
    return rows


def issue_line(r: dict) -> list[str]:
    if r["makespan_s"] == math.inf:
        stuck = f"never: after {HORIZON_S / 3600:g} h"
        return [r["themis"], str(r["nockpt_preemptions"]), f"{r['nockpt_done_by_horizon']}/{JOBS} ({stuck})", "-",
                str(r["ckpt_preemptions"]), f"{r['ckpt_done_by_horizon']}/{JOBS} ({stuck})", "-", "-", stuck]
    return [r["themis"], str(r["nockpt_preemptions"]), f"{r['nockpt_done_by_6min']}/{JOBS}",
            f"{r['nockpt_mean_jct_s'] / 60:.1f}", str(r["ckpt_preemptions"]), f"{r['ckpt_done_by_6min']}/{JOBS}",
            f"{r['ckpt_mean_jct_s'] / 60:.1f}", f"{r['lost_gpu_h']:.2f}", f"{r['makespan_s'] / 60:.1f}"]


def paper_line(r: dict) -> list[str]:
    if r.get("stuck"):
        return [f"{r['no_checkpoint']:.0%}", r["policy"], f"not over after {PAPER_HORIZON_S / 3600:,.0f} h", "-", "-", "-",
                "-", "-", f"{r['wall_s']:.0f}"]
    return [f"{r['no_checkpoint']:.0%}", r["policy"], f"{r['max_rho']:.2f}", f"{r['median_rho']:.2f}",
            f"{r['mean_jct_h']:.1f}", f"{r['preemptions']:,d}", f"{r['lost_gpu_h']:,.0f}", f"{r['gpu_hours']:,.0f}",
            f"{r['wall_s']:.0f}"]


def table(head: list[str], lines: list[list[str]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    ap.add_argument("--paper", action="store_true", help="also (b), the paper workload (slow)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    issue = [issue_row(True), issue_row(False)]
    paper = [r for f in PAPER_FRACTIONS for r in paper_rows(f)] if args.paper else []
    if args.json:
        print(json.dumps({"issue_case": issue, "paper": paper}, indent=2))
        return 0
    print("(a) the issue's case: 32 never-checkpointing 4-minute jobs estimated at 2 minutes, 32 that checkpoint;"
          " 16 GPUs, 45 s leases, 60 s restarts")
    print(table(["Themis", "no-ckpt preemptions", "no-ckpt done by 6 min", "no-ckpt mean JCT min",
                 "ckpt preemptions", "ckpt done by 6 min", "ckpt mean JCT min", "lost GPU-h", "makespan min"],
                [issue_line(r) for r in issue]))
    if paper:
        print("\n(b) the paper workload, 64 GPUs, seed 0, a fraction of jobs never checkpointing")
        print(table(["no-ckpt", "policy", "max rho", "median rho", "mean JCT h", "preemptions", "lost GPU-h",
                     "GPU-h", "wall s"],
                    [paper_line(r) for r in paper]))
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
