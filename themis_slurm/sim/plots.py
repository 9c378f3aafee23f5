"""PNG figures of simulation results (matplotlib, Agg backend: no display needed, safe in CI).

Figures are kept small (about 6x4 in at 90 dpi) so they can live in docs/eval/ without bloating the repo.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from themis_slurm.sim.metrics import Metrics  # noqa: E402

DPI = 90
SIZE = (6.0, 4.0)
MAX_POINTS = 2000  # utilization series are averaged into at most this many bins


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _cdf(series: Mapping[str, Sequence[float]], path: Path, xlabel: str, ylabel: str,
         mark: float | None = None) -> Path:
    """One step line per policy of the empirical CDF of its values, on a log x axis (`mark`: a dashed line)."""
    fig, ax = plt.subplots(figsize=SIZE)
    for name, values in series.items():
        x = np.sort(np.asarray(values, dtype=float))
        if x.size:
            ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", label=name)
    if mark is not None:
        ax.axvline(mark, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def rho_cdf(metrics: Mapping[str, Metrics], path: Path) -> Path:
    """CDF of per-app rho, one line per policy; the dashed line is rho = 1 (sharing incentive)."""
    return _cdf({n: [a.rho for a in m.apps] for n, m in metrics.items()}, path,
                "finish-time fairness rho = T_sh / T_id (log)", "fraction of apps", mark=1.0)


def jct_cdf(metrics: Mapping[str, Metrics], path: Path) -> Path:
    """CDF of job completion times (hours, log), one line per policy: what users feel (issue #34)."""
    return _cdf({n: [t / 3600.0 for t in m.jcts] for n, m in metrics.items()}, path,
                "job completion time, h (log)", "fraction of jobs")


def binned_utilization(m: Metrics, bins: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Time-weighted mean utilization in equal bins over the run: (bin centres in hours, fraction busy)."""
    t = np.asarray(m.util_times, dtype=float)
    busy = np.asarray(m.util_busy, dtype=float)
    if t.size < 2:
        return t / 3600.0, busy / max(1, m.gpus)
    edges = np.linspace(t[0], t[-1], bins + 1)
    # integral of the step function at each edge, then differences per bin
    cum = np.concatenate([[0.0], np.cumsum(busy[:-1] * np.diff(t))])
    idx = np.clip(np.searchsorted(t, edges, side="right") - 1, 0, t.size - 1)
    at_edges = cum[idx] + busy[idx] * (edges - t[idx])
    width = np.diff(edges)
    mean = np.diff(at_edges) / np.where(width > 0, width, 1.0)
    return (edges[:-1] + width / 2) / 3600.0, mean / m.gpus


def utilization(metrics: Mapping[str, Metrics], path: Path) -> Path:
    """Fraction of GPUs held over time, one line per policy."""
    fig, ax = plt.subplots(figsize=SIZE)
    for name, m in metrics.items():
        x, y = binned_utilization(m, min(MAX_POINTS, 400))
        ax.plot(x, y, label=name, linewidth=0.9)
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("GPUs busy (fraction)")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def sweep(param: str, values: Sequence[float], series: Mapping[str, Sequence[float]], metric: str,
          path: Path) -> Path:  # fmt: skip
    """A metric against a swept parameter, one line per policy."""
    fig, ax = plt.subplots(figsize=SIZE)
    for name, ys in series.items():
        ax.plot(values, ys, marker="o", label=name)
    ax.set_xlabel(param)
    ax.set_ylabel(metric)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return _save(fig, path)
