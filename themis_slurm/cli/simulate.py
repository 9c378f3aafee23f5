"""``themis simulate``: run policies over a trace or the paper's workload on a virtual cluster, compare them.

Thin: parses and checks options (bad ones exit 2 naming the option and value), then calls
themis_slurm.sim.runner and themis_slurm.sim.report. Without --trace the synthetic paper workload is used.

Defaults are read from the dataclasses that own them, never written here: Themis's knobs from
:class:`~themis_slurm.core.arbiter.ArbiterConfig`, the simulated world's from
:class:`~themis_slurm.sim.engine.SimConfig`, the workload's from :class:`~themis_slurm.sim.runner.WorkloadSpec`.
``--restart-cost`` sets both the cost the simulated world charges (SimConfig) and the cost Themis's bids
assume (ArbiterConfig): one value, so that Themis's model of the world is right.
``--levels`` and ``--shares`` set the tenancy (``SimConfig.tenancy``, read by themis_slurm.sim.tenants): which
levels of the account -> user -> app tree an app's share comes from, and the accounts' and users' shares.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from themis_slurm.core.arbiter import LEFTOVER_ORDERS, SOLVERS, ArbiterConfig
from themis_slurm.core.calibration import CalibrationConfig
from themis_slurm.core.tenancy import Tenancy
from themis_slurm.core.topology import Topology
from themis_slurm.policies import NAMES
from themis_slurm.sim import report
from themis_slurm.sim.engine import InvalidDecision, SimConfig, SimulationStalled
from themis_slurm.sim.estimate_error import EstimateError
from themis_slurm.sim.gpu_mix import mixed_cluster, parse_gpu_mix
from themis_slurm.sim.loaders.sacct import GROUP_BY as SACCT_GROUP_BY
from themis_slurm.sim.metrics import ACTUAL, actual_metrics
from themis_slurm.sim.runner import SweepRun, WorkloadSpec, run_policies
from themis_slurm.sim.tenants import make_tenancy, parse_levels
from themis_slurm.sim.trace import TraceError

SWEEPABLE = ("fairness-knob", "lease", "contention", "sensitive-fraction")
GROUP_BY = {"chronus": ("job", "user", "user+model"), "gavel": ("job", "job_type"), "sacct": SACCT_GROUP_BY}
_ARB, _SIM, _SPEC = ArbiterConfig(), SimConfig(), WorkloadSpec()  # where the defaults below come from


def _bad(option: str, msg: str) -> click.BadParameter:
    return click.BadParameter(msg, param_hint=f"'{option}'")


def _parse_policies(value: str | None) -> list[str]:
    known = NAMES
    if value is None:
        return list(known)
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise _bad("--policies", "give at least one policy name")
    for n in names:
        if n not in known:
            raise _bad("--policies", f"unknown policy {n!r}; known: {', '.join(known)}")
    return names


def _parse_sweep(value: str | None, is_paper: bool) -> tuple[str, list[float]] | None:
    if value is None:
        return None
    name, sep, rest = value.partition("=")
    name = name.strip()
    if not sep or name not in SWEEPABLE:
        raise _bad("--sweep", f"{value!r}: use NAME=v1,v2,... with NAME one of {', '.join(SWEEPABLE)}")
    try:
        values = [float(v) for v in rest.split(",") if v.strip()]
    except ValueError:
        raise _bad("--sweep", f"{value!r}: values must be numbers") from None
    if not values:
        raise _bad("--sweep", f"{value!r}: give at least one value")
    if name == "contention" and not is_paper:
        raise _bad("--sweep", "contention can only be swept for --workload paper")
    return name, values


class _Progress:
    """A one-line progress bar on stderr: `policy [#####.....]  45%`."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.last: tuple[str, int] | None = None

    def __call__(self, label: str, fraction: float) -> None:
        if not self.enabled:
            return
        pct = int(fraction * 100)
        if self.last == (label, pct):
            return
        if self.last is not None and self.last[0] != label:
            click.echo("", err=True)
        self.last = (label, pct)
        bar = "#" * (pct // 5) + "." * (20 - pct // 5)
        click.echo(f"\r{label:>12} [{bar}] {pct:3d}%", err=True, nl=False)

    def close(self) -> None:
        if self.enabled and self.last is not None:
            click.echo("", err=True)
            self.last = None


def _stacked(*decorators: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The decorators as one, applied as if written one above the other in this order: the options of a
    group stay together, and ``--help`` lists them in the order written."""

    def apply(f: Any) -> Any:
        for decorator in reversed(decorators):
            f = decorator(f)
        return f

    return apply


#: What is simulated: a trace and its loader's options, or the paper workload.
_workload_options = _stacked(
    click.option("--trace", "trace_path", type=click.Path(dir_okay=False), help="Trace file (needs --format)."),
    click.option("--format", "fmt", type=click.Choice(["hyperdrive", "chronus", "gavel", "sacct"]),
                 help="Trace format (sacct: a site's own `sacct --json` or `sacct -P` export, see docs/user-guide.md)."),
    click.option("--group-by", help="What makes an app: chronus job|user|user+model, gavel job|job_type, "
                                    "sacct themis|array|user|job."),
    click.option("--time-unit", type=float, help="Seconds per time unit of a chronus trace (default 1)."),
    click.option("--throughputs", type=click.Path(dir_okay=False),
                 help="gavel: Gavel's simulation_throughputs.json, for exact run times per (job type, GPUs); "
                      "without it run times come from flat per-family rates (an approximation, up to 54x off)."),
    click.option("--gpu-type", help="gavel: the GPU type of --throughputs to use (default v100)."),
    click.option("--skip-bad", is_flag=True, help="Skip invalid trace rows (and say how many) instead of failing."),
    click.option("--app-interval", type=float, help="hyperdrive: space app arrivals this many seconds apart."),
    click.option("--workload", type=click.Choice(["paper"]), help="Synthetic workload (the default without --trace)."),
    click.option("--contention", type=float, default=_SPEC.contention, show_default=True,
                 help="Paper workload load multiplier."),
    click.option("--sensitive-fraction", type=click.FloatRange(0, 1), help="Fraction of placement-sensitive apps."),
    click.option("--apps", type=click.IntRange(min=1), help="Apps of the paper workload at contention 1 (default 84)."),
)

#: The simulated cluster's shape.
_cluster_options = _stacked(
    click.option("--racks", type=click.IntRange(min=1), default=2, show_default=True),
    click.option("--nodes-per-rack", type=click.IntRange(min=1), default=8, show_default=True),
    click.option("--gpus-per-node", type=click.IntRange(min=1), default=4, show_default=True),
    click.option("--islands-per-node", type=click.IntRange(min=1), default=1, show_default=True),
    click.option("--gpu-types", help="Several GPU types, each on nodes and racks of its own (--nodes-per-rack, "
                                     "--gpus-per-node; --racks is unused): type:gpus[:speed],... e.g. "
                                     "v100:16,p100:8,k80:8; gavel with --throughputs: each job's measured speed "
                                     "on each type."),
)

#: Which policies run, and Themis's knobs.
_policy_options = _stacked(
    click.option("--policies", help="Comma-separated policy names (default: all registered)."),
    click.option("--lease", type=float, default=_ARB.lease_s, show_default=True, help="Lease length, seconds."),
    click.option("--fairness-knob", type=float, default=_ARB.fairness_knob, show_default=True, help="Themis f in [0, 1)."),
    click.option("--restart-cost", type=float, default=_SIM.restart_cost_s, show_default=True,
                 help="Seconds lost per restart (charged by the simulator; Themis's bids assume the same)."),
    click.option("--solver", type=click.Choice(SOLVERS), default=_ARB.solver, show_default=True,
                 help="Themis winner determination: exact MILP for small rounds (auto), always exact, or fast greedy."),
    click.option("--reserve-wide-gangs/--no-reserve-wide-gangs", default=_ARB.reserve_wide_gangs, show_default=True,
                 help="Themis reserves GPUs for long-waiting wide gangs."),
    click.option("--keep-wide-gangs/--no-keep-wide-gangs", default=_ARB.keep_wide_gangs, show_default=True,
                 help="Themis renews a started wide gang at its lease expiry unless its app is clearly ahead."),
    click.option("--keep-in-place/--no-keep-in-place", default=_ARB.keep_in_place, show_default=True,
                 help="Themis gives a lease holder its GPUs back where a move would change no placement."),
    click.option("--rank-at-share", type=click.FloatRange(min=0), default=_ARB.rank_at_share, show_default=True,
                 help="Themis offers the pool to the apps with the worst rho at this multiple of a fair share "
                      "(0: under what they keep, as the paper)."),
    click.option("--leftover-order", type=click.Choice(LEFTOVER_ORDERS), default=_ARB.leftover_order, show_default=True,
                 help="Themis's leftover: earliest virtual deadline first, or worst rho first (the authors')."),
)

#: What the policies are told: estimate errors and their calibration, the tenancy.
_world_options = _stacked(
    click.option("--estimate-error", default=str(_SIM.estimate_error), show_default=True,
                 help="none | uniform:A:B | lognormal:SIGMA"),
    click.option("--calibrate/--no-calibrate", default=_SIM.calibration.enabled, show_default=True,
                 help="Scale each user's estimates by the median true/estimated work of their finished jobs "
                      "(as themisd does; docs/design.md)."),
    click.option("--calibration-min-jobs", type=click.IntRange(min=1), default=_SIM.calibration.min_jobs,
                 show_default=True, help="Finished jobs a user (and the cluster) needs before calibrating."),
    click.option("--calibration-window", type=click.IntRange(min=1), default=_SIM.calibration.window,
                 show_default=True, help="A user's most recent finished jobs that count."),
    click.option("--calibration-raise-above", type=click.FloatRange(min=1), default=_SIM.calibration.raise_above,
                 show_default=True, help="Raise the estimates of a user whose jobs outrun them by more than this "
                                         "(median), down to this tolerance; inf: never."),
    click.option("--levels", default="app", show_default=True,
                 help="Tenancy: the levels an app's share comes from, top-down, ending with app: app (each app "
                      "1/N, the paper's), user,app (each user with work an equal share, split among its apps) "
                      "or account,user,app. Users and accounts come from the trace (Philly's virtual cluster, "
                      "sacct's User and Account, chronus user)."),
    click.option("--shares", "shares_path", type=click.Path(dir_okay=False),
                 help="CSV account,user,shares: the accounts' shares (rows with an empty user) and the users' "
                      "within them; missing ones have 1. Needs --levels with account or user."),
)

#: The run: its seed, a sweep, and how the simulated jobs report, save and stretch.
_run_options = _stacked(
    click.option("--seed", type=int, default=_ARB.seed, show_default=True,
                 help="Seeds the workload, the estimate errors and Themis's lottery."),
    click.option("--sweep", help="NAME=v1,v2,... with NAME in fairness-knob, lease, contention, sensitive-fraction."),
    click.option("--round-interval", type=float, default=_SIM.round_interval_s, show_default=True,
                 help="Call policies at most every this many seconds (0: at every event)."),
    click.option("--progress-interval", type=float, default=_SIM.progress_interval_s, show_default=True,
                 help="Running jobs report their progress every this many seconds (0: never), as with "
                      "`themis progress` does on Slurm."),
    click.option("--no-checkpoint", type=float, default=_SIM.no_checkpoint, show_default=True,
                 help="Fraction of jobs (drawn with --seed) that never checkpoint: a preemption throws away all "
                      "they did, as --themis-ckpt=no says on Slurm (the others checkpoint at the warning)."),
    click.option("--elastic", is_flag=True, help="Make every job elastic (1..gpus GPUs)."),
    click.option("--node-shaped", is_flag=True, help="Jobs wider than a node ask for whole nodes."),
    click.option("--max-jobs", type=click.IntRange(min=1), help="Only the first N jobs (quick runs)."),
)

#: Where the results go and how they are shown.
_output_options = _stacked(
    click.option("--out", type=click.Path(file_okay=False), help="Write CSV, JSON and PNG plots here."),
    click.option("--json", "as_json", is_flag=True, help="Print the JSON summary instead of a table."),
    click.option("--progress/--no-progress", default=None, help="Progress bar on stderr (default: when a TTY)."),
)


@click.command("simulate")
@_workload_options
@_cluster_options
@_policy_options
@_world_options
@_run_options
@_output_options
def simulate(**o: Any) -> None:
    """Simulate scheduling policies and report finish-time fairness and efficiency."""
    spec, topo, knobs, cfg, names, sweep = _options(o)
    bar = _Progress(o["progress"] if o["progress"] is not None else sys.stderr.isatty())
    try:
        if sweep is None:
            metrics = _run(spec, topo, names, knobs, cfg, bar)
            if o["out"]:
                report.write_run(Path(o["out"]), metrics, _meta(o))
            click.echo(json.dumps(report.summary_dict(metrics), indent=2) if o["as_json"] else report.format_table(metrics))
            return
        param, values = sweep
        runs = []
        for v in values:
            s2, k2 = _apply(param, v, spec, knobs)
            runs.append(SweepRun(v, _run(s2, topo, names, k2, cfg, bar)))
        if o["out"]:
            report.write_sweep(Path(o["out"]), param, runs, _meta(o))
        click.echo(json.dumps(report.sweep_dict(param, runs), indent=2) if o["as_json"] else report.format_sweep(param, runs))
    except (InvalidDecision, SimulationStalled) as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        bar.close()


def _run(spec: WorkloadSpec, topo: Topology, names: list[str], knobs: ArbiterConfig, cfg: SimConfig,
         bar: Callable[[str, float], None]) -> dict:  # fmt: skip
    try:
        trace = spec.load(topo.size)
    except TraceError as exc:
        raise _bad("--trace", str(exc)) from None
    except (ValueError, OSError) as exc:
        raise click.UsageError(f"cannot build the workload: {exc}") from None
    try:
        metrics = run_policies(trace, topo, names, knobs, cfg, bar)
    except ValueError as exc:
        if isinstance(exc, InvalidDecision):
            raise
        raise click.UsageError(str(exc)) from None
    actual = actual_metrics(trace, topo, cfg.default_profile, cfg.tenancy)  # a replayed Slurm history: what really happened
    if actual is not None:
        metrics[ACTUAL] = actual
    return metrics


def _apply(param: str, value: float, spec: WorkloadSpec, knobs: ArbiterConfig) -> tuple[WorkloadSpec, ArbiterConfig]:
    if param == "fairness-knob":
        if not 0 <= value < 1:
            raise _bad("--sweep", f"fairness-knob value {value:g} is not in [0, 1)")
        return spec, replace(knobs, fairness_knob=value)
    if param == "lease":
        if not value > 0:
            raise _bad("--sweep", f"lease value {value:g} is not > 0")
        return spec, replace(knobs, lease_s=value)
    if param == "contention":
        if not value > 0:
            raise _bad("--sweep", f"contention value {value:g} is not > 0")
        return replace(spec, contention=value), knobs
    if not 0 <= value <= 1:
        raise _bad("--sweep", f"sensitive-fraction value {value:g} is not in [0, 1]")
    return replace(spec, sensitive_fraction=value), knobs


def _options(o: dict[str, Any]):
    """The run the options ask for: workload, cluster, Themis's knobs, the simulated world, the policies and
    the sweep (bad options exit 2 naming the option and value, checked in this order)."""
    spec = _workload(o)
    topo = _cluster(o)
    _check_knobs(o)
    try:
        err = EstimateError.parse(o["estimate_error"])
    except ValueError as exc:
        raise _bad("--estimate-error", str(exc)) from None
    calibration = _calibration(o)
    tenancy = _tenancy(o["levels"], o["shares_path"])
    knobs = replace(_ARB, fairness_knob=o["fairness_knob"], lease_s=o["lease"], seed=o["seed"],
                    restart_cost_s=o["restart_cost"], solver=o["solver"],
                    reserve_wide_gangs=o["reserve_wide_gangs"], keep_wide_gangs=o["keep_wide_gangs"],
                    keep_in_place=o["keep_in_place"], rank_at_share=o["rank_at_share"],
                    leftover_order=o["leftover_order"])  # fmt: skip
    cfg = SimConfig(restart_cost_s=o["restart_cost"], estimate_error=err, seed=o["seed"], elastic=o["elastic"],
                    node_shaped=o["node_shaped"], round_interval_s=o["round_interval"],
                    progress_interval_s=o["progress_interval"], calibration=calibration,
                    tenancy=tenancy, no_checkpoint=o["no_checkpoint"])  # fmt: skip
    names = _parse_policies(o["policies"])
    sweep = _parse_sweep(o["sweep"], spec.kind == "paper")
    return spec, topo, knobs, cfg, names, sweep


def _workload(o: dict[str, Any]) -> WorkloadSpec:
    """The paper workload (no --trace), or the trace with its loader's options."""
    if o["trace_path"] is not None and o["workload"] is not None:
        raise click.UsageError("give either --trace or --workload, not both")
    if o["trace_path"] is not None:
        return _trace_workload(o)
    for opt, key in (("--format", "fmt"), ("--group-by", "group_by"), ("--time-unit", "time_unit"),
                     ("--app-interval", "app_interval"), ("--throughputs", "throughputs"),
                     ("--gpu-type", "gpu_type")):  # fmt: skip
        if o[key] is not None:
            raise _bad(opt, f"{o[key]!r} only applies with --trace")
    if o["skip_bad"]:
        raise _bad("--skip-bad", "only applies with --trace")
    if not o["contention"] > 0:
        raise _bad("--contention", f"{o['contention']:g} is not > 0")
    return WorkloadSpec("paper", contention=o["contention"], sensitive_fraction=o["sensitive_fraction"],
                        apps=o["apps"], seed=o["seed"], max_jobs=o["max_jobs"])  # fmt: skip


def _trace_workload(o: dict[str, Any]) -> WorkloadSpec:
    """--trace FILE --format F and the options of F's loader (each only where F has it)."""
    path, fmt = o["trace_path"], o["fmt"]
    if fmt is None:
        raise _bad("--format", "is required with --trace (hyperdrive, chronus, gavel or sacct)")
    if not Path(path).is_file():
        raise _bad("--trace", f"{path!r}: no such file")
    if o["contention"] != _SPEC.contention or o["apps"] is not None:
        raise _bad("--contention" if o["contention"] != _SPEC.contention else "--apps",
                   "only applies with --workload paper")
    opts: dict[str, Any] = {"skip_bad": o["skip_bad"]}
    if o["group_by"] is not None:
        if fmt not in GROUP_BY or o["group_by"] not in GROUP_BY[fmt]:
            allowed = ", ".join(GROUP_BY.get(fmt, ())) or "none for this format"
            raise _bad("--group-by", f"{o['group_by']!r} for --format {fmt}; allowed: {allowed}")
        opts["group_by"] = o["group_by"]
    if o["time_unit"] is not None:
        if fmt != "chronus" or not o["time_unit"] > 0:
            raise _bad("--time-unit", f"{o['time_unit']:g}: must be > 0 and only applies to --format chronus")
        opts["time_unit_s"] = o["time_unit"]
    if o["app_interval"] is not None:
        if fmt != "hyperdrive" or not o["app_interval"] >= 0:
            raise _bad("--app-interval", f"{o['app_interval']:g}: must be >= 0 and only applies to hyperdrive")
        opts["app_interval_s"] = o["app_interval"]
    if o["throughputs"] is not None or o["gpu_type"] is not None:
        opts.update(_gavel_throughputs(o, fmt))
        if o["gpu_types"] is not None:
            opts["type_speeds"] = True  # each job's measured speed on every type (loaders/gavel.py)
    return WorkloadSpec("trace", path=path, fmt=fmt, loader_options=opts,
                        sensitive_fraction=o["sensitive_fraction"], seed=o["seed"], max_jobs=o["max_jobs"])  # fmt: skip


def _gavel_throughputs(o: dict[str, Any], fmt: str) -> dict[str, Any]:
    """The gavel loader's --throughputs file and --gpu-type (the latter needs the former)."""
    if fmt != "gavel":
        opt = "--throughputs" if o["throughputs"] is not None else "--gpu-type"
        raise _bad(opt, f"only applies to --format gavel, not {fmt}")
    if o["throughputs"] is None:
        raise _bad("--gpu-type", "needs --throughputs (the flat rates have no GPU types)")
    if not Path(o["throughputs"]).is_file():
        raise _bad("--throughputs", f"{o['throughputs']!r}: no such file")
    opts = {"throughputs": o["throughputs"]}
    if o["gpu_type"] is not None:
        opts["gpu_type"] = o["gpu_type"]
    return opts


def _cluster(o: dict[str, Any]) -> Topology:
    """The simulated cluster: racks of nodes of GPUs, split into islands (of several types: --gpu-types)."""
    if o["gpu_types"] is not None:
        try:
            mix = parse_gpu_mix(o["gpu_types"])
            return mixed_cluster(mix, o["nodes_per_rack"], o["gpus_per_node"], o["islands_per_node"])
        except ValueError as exc:
            raise _bad("--gpu-types", str(exc)) from None
    try:
        return Topology.uniform(o["racks"], o["nodes_per_rack"], o["gpus_per_node"], o["islands_per_node"])
    except ValueError as exc:
        raise _bad("--islands-per-node", str(exc)) from None


def _check_knobs(o: dict[str, Any]) -> None:
    """Themis's knobs (fairness knob, lease, restart cost) and the simulated world's times in range."""
    if not 0 <= o["fairness_knob"] < 1:
        raise _bad("--fairness-knob", f"{o['fairness_knob']:g} is not in [0, 1)")
    if not o["lease"] > 0:
        raise _bad("--lease", f"{o['lease']:g} is not > 0 seconds")
    if not o["restart_cost"] >= 0:
        raise _bad("--restart-cost", f"{o['restart_cost']:g} is not >= 0 seconds")
    if not o["round_interval"] >= 0:
        raise _bad("--round-interval", f"{o['round_interval']:g} is not >= 0 seconds")
    if not (o["progress_interval"] >= 0 and math.isfinite(o["progress_interval"])):
        raise _bad("--progress-interval", f"{o['progress_interval']:g} is not >= 0 seconds")
    if not 0.0 <= o["no_checkpoint"] <= 1.0:
        raise _bad("--no-checkpoint", f"{o['no_checkpoint']:g} is not a fraction in [0, 1]")


def _calibration(o: dict[str, Any]) -> CalibrationConfig:
    """How the simulated themisd calibrates users' estimates (--calibrate and its window)."""
    if o["calibration_window"] < o["calibration_min_jobs"]:
        raise _bad("--calibration-window", f"{o['calibration_window']} is below --calibration-min-jobs "
                   f"{o['calibration_min_jobs']}")
    return CalibrationConfig(o["calibrate"], o["calibration_min_jobs"], o["calibration_window"],
                             o["calibration_raise_above"])


def _tenancy(levels: str, shares: str | None) -> Tenancy:
    """The SimConfig.tenancy of --levels and --shares (bad ones exit 2 naming the option, line and value)."""
    try:
        lv = parse_levels(levels)
    except ValueError as exc:
        raise _bad("--levels", str(exc)) from None
    if shares is not None:
        if lv == ("app",):
            raise _bad("--shares", "needs --levels with account or user (with the levels app every app has 1/N)")
        if not Path(shares).is_file():
            raise _bad("--shares", f"{shares!r}: no such file")
    try:
        return make_tenancy(lv, shares)
    except TraceError as exc:  # SharesError: file:line, field and value
        raise _bad("--shares", str(exc)) from None
    except (ValueError, OSError) as exc:
        raise _bad("--shares", str(exc)) from None


def _meta(o: dict[str, Any]) -> dict[str, Any]:
    """The options of the run, recorded next to its results (the tenancy only when it is not the paper's
    flat one, so that a flat run's record is what it always was)."""
    flat = o.get("levels") == "app" and o.get("shares_path") is None
    skip = ("as_json", "progress", "out", *(("levels", "shares_path") if flat else ()))
    return {k: v for k, v in o.items() if k not in skip}
