"""Running experiments: build policies by name, run each over a workload, collect metrics.

Policies come from ``themis_slurm.policies.POLICIES`` (name -> factory). A factory taking ``**options`` gets
``fairness_knob``, ``lease_s`` and ``seed`` (the registry drops what a policy does not use); any other gets
only the knobs its signature names among ``config`` (an ArbiterConfig), ``fairness_knob``, ``lease_s``, ``seed``. Themis is always available (:class:`ThemisPolicy`), even before
the registry exists.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from themis_slurm.core.arbiter import ArbiterConfig
from themis_slurm.core.topology import Topology
from themis_slurm.policies.base import Policy, ThemisPolicy
from themis_slurm.sim.engine import SimConfig, Simulator
from themis_slurm.sim.loaders import load_trace
from themis_slurm.sim.metrics import Metrics, compute
from themis_slurm.sim.trace import Trace
from themis_slurm.sim.workload_paper import assign_models, paper_workload


def registry() -> dict[str, Callable[..., Policy]]:
    """Policy factories by name; Themis first."""
    try:
        from themis_slurm.policies import POLICIES  # type: ignore[attr-defined]
    except ImportError:  # the baselines are not there yet
        POLICIES = {}
    reg: dict[str, Callable[..., Policy]] = dict(POLICIES)
    return {"themis": reg.pop("themis", ThemisPolicy), **reg}


@dataclass(frozen=True)
class PolicyKnobs:
    """What the CLI can set on any policy (each factory takes the ones it understands)."""

    fairness_knob: float = 0.8
    lease_s: float = 600.0
    seed: int = 0
    restart_cost_s: float = 30.0  # what Themis's bids assume; the simulator charges SimConfig's
    solver: str = "auto"  # Themis's winner determination
    reserve_wide_gangs: bool = False  # Themis's reservations for wide gangs

    def arbiter_config(self) -> ArbiterConfig:
        return ArbiterConfig(fairness_knob=self.fairness_knob, lease_s=self.lease_s, seed=self.seed,
                             restart_cost_s=self.restart_cost_s, solver=self.solver,
                             reserve_wide_gangs=self.reserve_wide_gangs)  # fmt: skip


def make_policy(name: str, knobs: PolicyKnobs) -> Policy:
    """Build the policy `name` (KeyError naming the known ones when unknown)."""
    reg = registry()
    if name not in reg:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(reg)}")
    factory = reg[name]
    if factory is ThemisPolicy:
        return ThemisPolicy(knobs.arbiter_config())
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    named = {"config": knobs.arbiter_config(), "fairness_knob": knobs.fairness_knob, "lease_s": knobs.lease_s,
             "seed": knobs.seed, "restart_cost_s": knobs.restart_cost_s, "solver": knobs.solver,
             "reserve_wide_gangs": knobs.reserve_wide_gangs}  # fmt: skip
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        # the registry's factories take **options and drop those meant for other policies
        kwargs = {k: v for k, v in named.items() if k != "config"}
    else:
        kwargs = {k: v for k, v in named.items() if k in params}
    return factory(**kwargs)


def run_policies(
    trace: Trace,
    topology: Topology,
    names: list[str],
    knobs: PolicyKnobs,
    config: SimConfig,
    on_progress: Callable[[str, float], None] | None = None,
) -> dict[str, Metrics]:
    """Simulate each named policy over the same trace; metrics by policy name, in the given order."""
    out: dict[str, Metrics] = {}
    for name in names:
        policy = make_policy(name, knobs)
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
