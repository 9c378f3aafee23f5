"""Presenting metrics: a table for people, a JSON summary for scripts, and files for the record.

``--json`` prints ``{"policies": {name: {max_rho, median_rho, p95_rho, jain, frac_rho_le_1, gpu_hours,
makespan_s, mean_app_completion_s, mean_jct_s, preemptions, utilization}}}``; a sweep prints
``{"sweep": {"param": name, "runs": [{"value": v, "policies": {...}}, ...]}}``.
A replayed Slurm history (``--format sacct``) adds a row ``slurm (actual)``: the same metrics computed from
Slurm's own start and end times (:func:`~themis_slurm.sim.metrics.actual_metrics`); what the record cannot
give (preemptions, events, policy calls, wall time) is ``-`` in the table and null in JSON.
``--out DIR`` writes summary.csv / summary.json (every summary metric per policy, and per sweep value),
apps_<policy>.csv (every app's T_sh, T_id, rho, contention...), and PNGs: rho_cdf.png, utilization.png,
and for sweeps sweep_<metric>.png (plus the per-value files under value_<v>/).
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from themis_slurm.sim import plots
from themis_slurm.sim.metrics import SUMMARY_KEYS, AppMetrics, Metrics, Summary
from themis_slurm.sim.runner import SweepRun

SWEEP_METRICS = ("max_rho", "median_rho", "jain", "gpu_hours", "utilization")

_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("max_rho", "max rho", "{:.2f}"),
    ("median_rho", "med rho", "{:.2f}"),
    ("p95_rho", "p95 rho", "{:.2f}"),
    ("jain", "Jain", "{:.3f}"),
    ("frac_rho_le_1", "rho<=1", "{:.0%}"),
    ("gpu_hours", "GPU-h", "{:,.0f}"),
    ("utilization", "util", "{:.0%}"),
    ("makespan_s", "makespan h", "{:,.1f}"),
    ("mean_app_completion_s", "app done h", "{:,.2f}"),
    ("mean_jct_s", "JCT h", "{:,.2f}"),
    ("preemptions", "preempt", "{:,d}"),
    ("wall_s", "wall s", "{:.1f}"),
)
_HOURS = {"makespan_s", "mean_app_completion_s", "mean_jct_s"}


def _known(d: Mapping[str, Any]) -> dict[str, Any]:
    """NaN (a metric the row cannot have, e.g. preemptions of ``slurm (actual)``) as null for JSON."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in d.items()}


def summary_dict(metrics: Mapping[str, Metrics]) -> dict[str, Any]:
    return {"policies": {name: _known(m.summary.public()) for name, m in metrics.items()}}


def sweep_dict(param: str, runs: Sequence[SweepRun]) -> dict[str, Any]:
    return {"sweep": {"param": param, "runs": [{"value": r.value, **summary_dict(r.metrics)} for r in runs]}}


def format_table(metrics: Mapping[str, Metrics]) -> str:
    """One row per policy, fixed-width columns (times in hours)."""
    head = ["policy", *(label for _, label, _ in _COLUMNS)]
    rows = [head]
    for name, m in metrics.items():
        s = asdict(m.summary)
        row = [name]
        for key, _, fmt in _COLUMNS:
            v = s[key] / 3600.0 if key in _HOURS else s[key]
            row.append("-" if isinstance(v, float) and math.isnan(v) else fmt.format(v))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows]  # fmt: skip
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def format_sweep(param: str, runs: Sequence[SweepRun]) -> str:
    return "\n\n".join(f"{param} = {r.value:g}\n{format_table(r.metrics)}" for r in runs)


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s)


def _write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


def write_run(out: Path, metrics: Mapping[str, Metrics], meta: Mapping[str, Any] | None = None) -> list[Path]:
    """summary.csv/json, apps_<policy>.csv, rho_cdf.png and utilization.png in `out` (created)."""
    out.mkdir(parents=True, exist_ok=True)
    keys = [f.name for f in fields(Summary)]
    _write_csv(out / "summary.csv", ["policy", *keys],
               [[name, *(getattr(m.summary, k) for k in keys)] for name, m in metrics.items()])  # fmt: skip
    doc = {"meta": dict(meta or {}), "public_keys": list(SUMMARY_KEYS),
           "policies": {name: _known(asdict(m.summary)) for name, m in metrics.items()}}  # fmt: skip
    (out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
    app_keys = [f.name for f in fields(AppMetrics)]
    written = [out / "summary.csv", out / "summary.json"]
    for name, m in metrics.items():
        p = out / f"apps_{_slug(name)}.csv"
        _write_csv(p, app_keys, [[getattr(a, k) for k in app_keys] for a in m.apps])
        written.append(p)
    written.append(plots.rho_cdf(metrics, out / "rho_cdf.png"))
    written.append(plots.utilization(metrics, out / "utilization.png"))
    return written


def write_sweep(out: Path, param: str, runs: Sequence[SweepRun], meta: Mapping[str, Any] | None = None) -> list[Path]:
    """Each value's files under value_<v>/, plus sweep.csv/json and sweep_<metric>.png over all values."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for r in runs:
        written += write_run(out / f"value_{_slug(f'{r.value:g}')}", r.metrics, {**(meta or {}), param: r.value})
    keys = [f.name for f in fields(Summary)]
    rows = [[r.value, name, *(getattr(m.summary, k) for k in keys)] for r in runs for name, m in r.metrics.items()]
    _write_csv(out / "sweep.csv", [param, "policy", *keys], rows)
    (out / "sweep.json").write_text(json.dumps({"meta": dict(meta or {}), **sweep_dict(param, runs)}, indent=2) + "\n")
    written += [out / "sweep.csv", out / "sweep.json"]
    names = list(runs[0].metrics) if runs else []
    values = [r.value for r in runs]
    for metric in SWEEP_METRICS:
        series = {n: [getattr(r.metrics[n].summary, metric) for r in runs] for n in names}
        written.append(plots.sweep(param, values, series, metric, out / f"sweep_{metric}.png"))
    return written
