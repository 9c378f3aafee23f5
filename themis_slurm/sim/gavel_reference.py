"""Gavel's own results on its own traces (``../shared/traces/gavel/reference``) and our runs of the same jobs.

The reference directory (its README) holds ``gen160_seedS.trace`` (Gavel's generator) and
``gen160_seedS.gavel_results.csv``: per job, Gavel's simulator's finish times under its
``finish_time_fairness`` and ``max_min_fairness``, run on 32 GPUs in 360 s rounds with no restart cost.
:func:`run_like_for_like` puts the same jobs through our simulator the way that README asks (one node of 32
GPUs, 360 s policy rounds and lease, no restart cost, each job its own app); both sides are then measured
with one rho definition (:mod:`themis_slurm.sim.job_rho`). benchmarks/gavel_reference.py prints the table.

One more thing Gavel's simulator does that ours does not (measured in docs/eval/discussion.md): a job
advances int(steps/s x 360) whole steps per round (``scheduler/scheduler.py``, ``_get_num_steps``), a
little less than 360 s of its run, so nearly every job needs one more round for its last few steps, and the
GPUs of that round idle once those are done. ``gavel_steps=True`` models it, for checking how faithful a
Gavel-style policy is: each job's run time becomes its whole rounds x the quantum plus the leftover steps'
seconds, so that it takes the rounds it takes in Gavel; its rho is still measured against its true run
time alone.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

from themis_slurm.core.arbiter import ArbiterConfig
from themis_slurm.core.topology import Topology
from themis_slurm.policies import make_policy
from themis_slurm.sim.engine import SimConfig, Simulator
from themis_slurm.sim.job_rho import JobTimes
from themis_slurm.sim.loaders import load_trace
from themis_slurm.sim.loaders.gavel import LAYOUTS
from themis_slurm.sim.trace import Trace, TraceError

#: The reference runs' setting (reference README): GPUs, round and lease length (s).
GPUS = 32
QUANTUM_S = 360.0
#: Gavel's policies in the results CSV, by the column suffix ``finish_s_<name>``.
GAVEL_POLICIES = ("finish_time_fairness", "max_min_fairness")
_COLUMNS = ("job_id", "job_type", "gpus", "arrival_s", "run_time_alone_s")


@dataclass(frozen=True)
class ReferenceTrace:
    """One trace of the reference directory: its name (``gen160_seed11``), trace and results files."""

    name: str
    trace: Path
    results: Path


def reference_traces(directory: Path) -> list[ReferenceTrace]:
    """The traces of `directory` that have a results CSV beside them, by name."""
    out = []
    for trace in sorted(directory.glob("*.trace")):
        results = trace.with_suffix(".gavel_results.csv")
        if results.is_file():
            out.append(ReferenceTrace(trace.stem, trace, results))
    return out


def read_results(path: Path) -> dict[str, list[JobTimes]]:
    """Gavel's finish times per policy (``finish_time_fairness``, ``max_min_fairness``), as JobTimes in job
    order. TraceError naming the file, line, field and value for a missing column or a bad number."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        for col in (*_COLUMNS, *(f"finish_s_{p}" for p in GAVEL_POLICIES)):
            if col not in fields:
                raise TraceError(str(path), 1, col, None, "a column of Gavel's results (reference README)")
        out: dict[str, list[JobTimes]] = {p: [] for p in GAVEL_POLICIES}
        for i, row in enumerate(reader):
            line = i + 2

            def number(col: str, row: dict[str, str] = row, line: int = line) -> float:
                try:
                    v = float(row[col])
                except (TypeError, ValueError):
                    raise TraceError(str(path), line, col, row[col], "a number") from None
                if not math.isfinite(v) or v < 0:
                    raise TraceError(str(path), line, col, row[col], "a finite number >= 0")
                return v

            if int(number("job_id")) != i:
                raise TraceError(str(path), line, "job_id", row["job_id"], f"{i} (jobs in trace order)")
            gpus = number("gpus")
            if gpus < 1 or gpus != int(gpus):
                raise TraceError(str(path), line, "gpus", row["gpus"], "a whole number >= 1")
            arrival, alone = number("arrival_s"), number("run_time_alone_s")
            for p in GAVEL_POLICIES:
                out[p].append(JobTimes(arrival, number(f"finish_s_{p}"), int(gpus), alone))
    return out


def gavel_step_durations(trace_path: Path, throughputs: Path, quantum_s: float = QUANTUM_S,
                         gpu_type: str = "v100") -> dict[int, float]:  # fmt: skip
    """Each job's run time as Gavel's simulator takes it, by line of the trace (module docstring): with r its
    steps/s alone and n = int(r x quantum) the steps of one round, total // n whole rounds of `quantum_s`
    plus (total % n) / r seconds."""
    table = json.loads(Path(throughputs).read_text())[gpu_type]
    with open(trace_path) as f:
        rows = [(n, line.rstrip("\r\n").split("\t")) for n, line in enumerate(f, start=1) if line.strip()]
    width = len(rows[0][1]) if rows else 0
    if width not in LAYOUTS:
        raise TraceError(
            str(trace_path), rows[0][0] if rows else None, "columns", str(width), "a known Gavel layout"
        )
    pos = {c: i for i, c in enumerate(LAYOUTS[width])}
    out: dict[int, float] = {}
    for line, row in rows:
        job_type, steps, gpus = (
            row[pos["job_type"]],
            int(row[pos["total_steps"]]),
            int(row[pos["scale_factor"]]),
        )
        key = str((job_type, gpus))
        if key not in table:
            raise TraceError(
                str(trace_path),
                line,
                "job_type",
                f"{job_type} x {gpus} GPU(s)",
                f"a (job type, scale factor) in the {gpu_type} throughput table",
            )
        rate = float(table[key]["null"])
        per_round = int(rate * quantum_s)
        if per_round < 1:
            raise TraceError(
                str(trace_path), line, "job_type", job_type, f"at least one step per {quantum_s:g} s round"
            )
        whole, left = divmod(steps, per_round)
        out[line] = whole * quantum_s + left / rate
    return out


def like_for_like_trace(trace_path: Path, throughputs: Path,
                        gavel_steps: bool = False) -> tuple[Trace, list[str], dict[str, float]]:  # fmt: skip
    """(the trace our simulator runs, its job ids in Gavel's job order: the trace's lines, each job's true run
    time alone by id). Each job its own app (the Gavel loader's default); with `gavel_steps`, the trace's run
    times are as Gavel's simulator takes them."""
    trace = load_trace(trace_path, "gavel", throughputs=throughputs)
    alone = {j.job_id: j.duration_s for j in trace.jobs}
    if gavel_steps:
        steps = gavel_step_durations(trace_path, throughputs)
        jobs = tuple(replace(j, duration_s=steps[j.line]) for j in trace.jobs if j.line is not None)
        trace = replace(trace, jobs=jobs, notes=(*trace.notes, "run times in Gavel's whole steps per round"))
    return trace, [j.job_id for j in sorted(trace.jobs, key=lambda j: j.line or 0)], alone


def run_like_for_like(
    trace_path: Path, throughputs: Path, policy: str, gavel_steps: bool = False
) -> list[JobTimes]:
    """Our simulator's run of `policy` on a reference trace, the reference README's way: one node of 32
    GPUs, 360 s policy rounds and lease, no restart cost. Each job's times in Gavel's job order, with its
    true run time alone (what rho is measured against, whatever `gavel_steps`)."""
    trace, order, alone = like_for_like_trace(trace_path, throughputs, gavel_steps)
    knobs = replace(ArbiterConfig(), lease_s=QUANTUM_S, restart_cost_s=0.0)
    cfg = SimConfig(restart_cost_s=0.0, round_interval_s=QUANTUM_S)
    result = Simulator(trace, Topology.uniform(1, 1, GPUS), make_policy(policy, knobs), cfg).run()
    done = {j.job_id: j for j in result.jobs}
    missing = [jid for jid in order if jid not in done]
    if missing:
        raise RuntimeError(f"{policy}: jobs {missing[:5]} did not finish in the simulation")
    return [JobTimes(done[jid].arrival, done[jid].finish, done[jid].gpus, alone[jid]) for jid in order]


def median_abs_finish_diff(ours: list[JobTimes], theirs: list[JobTimes]) -> float:
    """The median over jobs of |our finish - their finish| (seconds), jobs matched by position."""
    if len(ours) != len(theirs) or not ours:
        raise ValueError(f"runs of different jobs: {len(ours)} against {len(theirs)}")
    diffs = sorted(abs(a.finish - b.finish) for a, b in zip(ours, theirs, strict=True))
    n = len(diffs)
    return diffs[n // 2] if n % 2 else (diffs[n // 2 - 1] + diffs[n // 2]) / 2.0
