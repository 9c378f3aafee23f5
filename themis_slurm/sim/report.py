"""Presenting metrics: a table for people, a JSON summary for scripts, and files for the record.

``--json`` prints ``{"policies": {name: {max_rho, median_rho, p95_rho, jain, frac_rho_le_1, gpu_hours,
makespan_s, mean_app_completion_s, mean_jct_s, median_jct_s, p95_jct_s, mean_slowdown, preemptions, lost_gpu_h,
utilization}}}``; a sweep prints
``{"sweep": {"param": name, "runs": [{"value": v, "policies": {...}}, ...]}}``.
A replayed Slurm history (``--format sacct``) adds a row ``slurm (actual)``: the same metrics computed from
Slurm's own start and end times (:func:`~themis_slurm.sim.metrics.actual_metrics`); what the record cannot
give (preemptions, events, policy calls, wall time) is ``-`` in the table and null in JSON.
``--out DIR`` writes summary.csv / summary.json (every summary metric per policy, and per sweep value),
apps_<policy>.csv (every app's T_sh, T_id, rho, contention...), tenants_<policy>.csv (below), and PNGs:
rho_cdf.png, jct_cdf.png, utilization.png, and for sweeps sweep_<metric>.png (plus the per-value files under value_<v>/).

Per user and per account (:class:`~themis_slurm.sim.metrics.TenantMetrics`). tenants_<policy>.csv has one
row per account, then one per user, with the columns:

* ``level``: ``account`` or ``user``; ``name``: the account (``""`` for jobs without one) or user name;
* ``n_apps``, ``n_jobs``: its apps and jobs;
* ``gpu_seconds``: GPU time its jobs held over the whole run (restart costs and slow placements included);
* ``waiting_s``: how long it had waiting work (a job arrived, unfinished, holding no GPU);
* ``gpu_seconds_waiting``: the GPU time it held during those times;
* ``share_waiting``: that over all the GPU time held during those times (empty: it never waited): with
  equal shares and everybody waiting, about 1 / the number of tenants waiting;
* ``max_rho``: the worst rho of its apps (T_id on the nested share when levels above the app count);
* ``mean_jct_s``: its jobs' mean completion time.

With levels above the app (``--levels user,app`` or ``account,user,app``) the table adds these (GPU time in
hours) under the policies' rows, and ``--json`` adds ``"tenants": {policy: {"accounts": {name: {...}},
"users": {name: {...}}}}`` beside ``"policies"``; with the levels ``app`` (the default) both are what they
always were.
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
from themis_slurm.sim.metrics import SUMMARY_KEYS, AppMetrics, Metrics, Summary, TenantMetrics
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
    ("median_jct_s", "JCT p50", "{:,.2f}"),
    ("p95_jct_s", "JCT p95", "{:,.2f}"),
    ("mean_slowdown", "slowdown", "{:,.1f}"),
    ("preemptions", "preempt", "{:,d}"),
    ("lost_gpu_h", "lost GPU-h", "{:,.1f}"),
    ("wall_s", "wall s", "{:.1f}"),
)
_HOURS = {"makespan_s", "mean_app_completion_s", "mean_jct_s", "median_jct_s", "p95_jct_s"}


def _known(d: Mapping[str, Any]) -> dict[str, Any]:
    """NaN (a metric the row cannot have, e.g. preemptions of ``slurm (actual)``) as null for JSON."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in d.items()}


_TENANT_KEYS = ("n_apps", "n_jobs", "gpu_seconds", "waiting_s", "gpu_seconds_waiting", "share_waiting", "max_rho",
                "mean_jct_s")  # fmt: skip


def _tiered(metrics: Mapping[str, Metrics]) -> bool:
    """Whether any run counted levels above the app (then the tenants are shown)."""
    return any(m.levels != ("app",) for m in metrics.values())


def tenants_dict(m: Metrics) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {"accounts": {}, "users": {}}
    for t in m.tenants:
        out["accounts" if t.level == "account" else "users"][t.name] = _known({k: getattr(t, k) for k in _TENANT_KEYS})
    return out


def summary_dict(metrics: Mapping[str, Metrics]) -> dict[str, Any]:
    out: dict[str, Any] = {"policies": {name: _known(m.summary.public()) for name, m in metrics.items()}}
    if _tiered(metrics):
        out["tenants"] = {name: tenants_dict(m) for name, m in metrics.items()}
    return out


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
    table = _align(rows)
    if _tiered(metrics):
        table += "\n\n" + format_tenants(metrics)
    return table


def _align(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows]  # fmt: skip
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def _tenant_row(policy: str, t: TenantMetrics) -> list[str]:
    share = "-" if math.isnan(t.share_waiting) else f"{t.share_waiting:.0%}"
    return [policy, t.level, t.name or "-", str(t.n_apps), str(t.n_jobs), f"{t.gpu_seconds / 3600:,.1f}",
            f"{t.waiting_s / 3600:,.2f}", f"{t.gpu_seconds_waiting / 3600:,.1f}", share, f"{t.max_rho:.2f}",
            f"{t.mean_jct_s / 3600:,.2f}"]  # fmt: skip


def format_tenants(metrics: Mapping[str, Metrics]) -> str:
    """Per account and per user of each policy: GPU time, GPU time and share while waiting, worst rho, JCT."""
    rows = [["policy", "level", "name", "apps", "jobs", "GPU-h", "wait h", "GPU-h waiting", "share waiting",
             "max rho", "JCT h"]]  # fmt: skip
    rows += [_tenant_row(name, t) for name, m in metrics.items() for t in m.tenants]
    return _align(rows)


def format_sweep(param: str, runs: Sequence[SweepRun]) -> str:
    return "\n\n".join(f"{param} = {r.value:g}\n{format_table(r.metrics)}" for r in runs)


def _nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s)


def _write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


def write_run(out: Path, metrics: Mapping[str, Metrics], meta: Mapping[str, Any] | None = None) -> list[Path]:
    """summary.csv/json, apps_<policy>.csv, rho_cdf.png, jct_cdf.png and utilization.png in `out` (created)."""
    out.mkdir(parents=True, exist_ok=True)
    keys = [f.name for f in fields(Summary)]
    _write_csv(out / "summary.csv", ["policy", *keys],
               [[name, *(getattr(m.summary, k) for k in keys)] for name, m in metrics.items()])  # fmt: skip
    doc = {"meta": dict(meta or {}), "public_keys": list(SUMMARY_KEYS),
           "policies": {name: _known(asdict(m.summary)) for name, m in metrics.items()}}  # fmt: skip
    (out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
    app_keys = [f.name for f in fields(AppMetrics)]
    tenant_keys = [f.name for f in fields(TenantMetrics)]
    written = [out / "summary.csv", out / "summary.json"]
    for name, m in metrics.items():
        p = out / f"apps_{_slug(name)}.csv"
        _write_csv(p, app_keys, [[getattr(a, k) for k in app_keys] for a in m.apps])
        written.append(p)
        p = out / f"tenants_{_slug(name)}.csv"
        _write_csv(p, tenant_keys, [["" if _nan(getattr(t, k)) else getattr(t, k) for k in tenant_keys]
                                    for t in m.tenants])  # fmt: skip
        written.append(p)
    written.append(plots.rho_cdf(metrics, out / "rho_cdf.png"))
    written.append(plots.jct_cdf(metrics, out / "jct_cdf.png"))
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
