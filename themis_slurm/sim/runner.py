"""Running experiments: build policies by name, run each over a workload, collect metrics.

Policies are built by the registry (:func:`themis_slurm.policies.make_policy`), the one way to build a
policy: Themis from an :class:`~themis_slurm.core.arbiter.ArbiterConfig` (its knobs and their defaults
live there and nowhere else), the baselines from their own defaults (none of them has a Themis knob).
The simulated world's knobs, including the restart cost it charges, are a
:class:`~themis_slurm.sim.engine.SimConfig`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from themis_slurm.core.arbiter import ArbiterConfig
from themis_slurm.core.topology import Topology
from themis_slurm.policies import make_policy
from themis_slurm.sim.engine import SimConfig, Simulator
from themis_slurm.sim.loaders import load_trace
from themis_slurm.sim.metrics import Metrics, compute
from themis_slurm.sim.trace import Trace
from themis_slurm.sim.workload_paper import assign_models, paper_workload


def run_policies(
    trace: Trace,
    topology: Topology,
    names: list[str],
    themis: ArbiterConfig,
    config: SimConfig,
    on_progress: Callable[[str, float], None] | None = None,
) -> dict[str, Metrics]:
    """Simulate each named policy over the same trace; metrics by policy name, in the given order.

    `themis` is Themis's knobs (the baselines ignore it), `config` the simulated world's.
    """
    out: dict[str, Metrics] = {}
    for name in names:
        policy = make_policy(name, themis)
        report = (lambda f, n=name: on_progress(n, f)) if on_progress else None
        result = Simulator(trace, topology, policy, config, progress=report).run()
        out[name] = compute(result)
    return out


@dataclass(frozen=True)
class SweepRun:
    """One point of a sweep: the parameter value and each policy's metrics there."""

    value: float
    metrics: Mapping[str, Metrics]


@dataclass(frozen=True)
class WorkloadSpec:
    """Where jobs come from: the synthetic paper workload, or a trace file with loader options.

    For a trace, ``sensitive_fraction`` (when set) reassigns every app a random model with that fraction of
    placement-sensitive ones, and a hyperdrive trace (which names no models) always gets random models, as
    the Themis authors did. ``contention`` applies to the paper workload only.
    """

    kind: str = "paper"  # "paper" or "trace"
    path: str | None = None
    fmt: str | None = None
    loader_options: Mapping[str, Any] = field(default_factory=dict)
    contention: float = 1.0
    sensitive_fraction: float | None = None
    apps: int | None = None
    seed: int = 0
    max_jobs: int | None = None

    def load(self, cluster_gpus: int) -> Trace:
        if self.kind == "paper":
            kwargs: dict[str, Any] = {}
            if self.apps is not None:
                kwargs["n_apps"] = self.apps
            trace = paper_workload(self.seed, self.contention, self.sensitive_fraction,
                                   cluster_gpus=cluster_gpus, **kwargs)  # fmt: skip
        else:
            assert self.path is not None and self.fmt is not None
            trace = load_trace(self.path, self.fmt, **dict(self.loader_options)).shifted()
            if self.fmt == "hyperdrive" or self.sensitive_fraction is not None:
                trace = assign_models(trace, self.seed, self.sensitive_fraction)
        if self.max_jobs is not None:
            trace = trace.head_jobs(self.max_jobs)
        return trace
