"""themisd's configuration: a YAML file (default /etc/themis/themis.yaml) read into frozen dataclasses.

Admins edit this file by hand and reload it with SIGHUP, so validation is strict and talkative: every
error names the file, the key (dotted path), the value and what is accepted, unknown keys are rejected by
name (a typo must not silently fall back to a default), and the whole file is checked before anything is
used, so a bad reload keeps the previous configuration in force. themis_slurm/site/themis.yaml is the annotated
example; docs/admin-guide.md has the reference.

This module is the one loader of themis.yaml: themisd uses :func:`load`, the `themis` CLI and the
standalone API :func:`load_for_client` (the same checks and defaults, minus unknown keys). The YAML is
read by :func:`safe_load`, PyYAML's safe loader with two
fixes: a key given twice in one mapping is an error naming both lines (YAML 1.1 would silently keep the
last), and ``1e9``, ``1e-3``, ``5E2``, ``1.5e3`` are numbers (YAML 1.1 reads them as strings). Every
interval and duration has a lower bound (:data:`BOUNDS`, documented in themis_slurm/site/themis.yaml): a value that
parses but makes no sense (``poll_interval_s: 1e-6``) is refused, not run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from themis_slurm.core.arbiter import LEFTOVER_ORDERS, SOLVERS, ArbiterConfig
from themis_slurm.core.calibration import CalibrationConfig
from themis_slurm.core.gpu_types import parse_gpu_types
from themis_slurm.core.placement import LEVEL_NAMES, PROFILES, Profile
from themis_slurm.slurm.option_grammar import MODEL_NAME_EXPECTED, valid_model_name

if TYPE_CHECKING:  # the CLI loads this module to read a config file; it needs no round input
    from themis_slurm.state.round_input import RoundTerms

DEFAULT_PATH = Path("/etc/themis/themis.yaml")
MODES = ("enforce", "observe")
LOG_LEVELS = ("debug", "info", "warning", "error")
BACKENDS = ("auto", "cli", "pyslurm")  # slurm.backend: see themis_slurm/slurm/backends.py
TENANCY_LEVELS = ("account", "user", "app")  # tenancy.levels: a sub-sequence ending with app (core/tenancy.py)
TENANCY_SHARES = ("auto", "slurm", "equal")  # tenancy.shares


class ConfigError(ValueError):
    """A configuration problem; the message is ready to show an admin (``file: key: value ...: accepted``)."""


# ------------------------------------------------------------------------------------------ YAML
class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping gives the same key twice; str() is one line: the key and both line numbers."""

    def __init__(self, key: Any, first_line: int, line: int, mark: Any = None) -> None:
        super().__init__(None, None, f"duplicate key {key!r}", mark)
        self.key, self.first_line, self.line = key, first_line, line

    def __str__(self) -> str:
        return (f"duplicate key {self.key!r} at line {self.line} (first given at line {self.first_line}): "
                "remove one of them")


# YAML 1.2 floats that YAML 1.1 (PyYAML) reads as strings: an exponent without a dot or without a sign
# (1e9, 5E2, 1e-3, 1.5e3, .5e3). Forms the stock resolvers already read keep their meaning (they come first).
_FLOAT_WITH_EXPONENT = re.compile(r"""^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$""")


class ThemisLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader plus duplicate-key errors and exponent floats (a subclass: global yaml state untouched)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue  # merge keys (<<) may be overridden on purpose; complex keys are left to PyYAML
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue
                line = key_node.start_mark.line + 1
                if first is not None:
                    raise DuplicateKeyError(key, first, line, key_node.start_mark)
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


ThemisLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_WITH_EXPONENT, list("-+0123456789."))


def safe_load(text: str) -> Any:
    """Decodes a YAML document with :class:`ThemisLoader` (raises yaml.YAMLError, DuplicateKeyError included)."""
    return yaml.load(text, Loader=ThemisLoader)  # a SafeLoader subclass: no arbitrary objects


_CORE = ArbiterConfig()  # the core's defaults: the one place the mechanism's knobs are defined
_CALIBRATION = CalibrationConfig()


@dataclass(frozen=True)
class SchedulerConfig:
    """Themis's knobs: lease length, preemption timing, and every knob of the core's ArbiterConfig.

    The arbiter's knobs default to :class:`~themis_slurm.core.arbiter.ArbiterConfig`'s own values (never
    repeated here); the shipped themis_slurm/site/themis.yaml sets ``restart_cost_s: 60`` for a Slurm site (a
    requeue through the controller costs more than the core's 30 s).
    """

    lease_minutes: float = _CORE.lease_s / 60.0
    grace_s: float = 60.0
    min_runtime_s: float = 120.0
    fairness_knob: float = _CORE.fairness_knob
    solver: str = _CORE.solver
    release_timeout_s: float = 60.0
    exact_max_bidders: int = _CORE.exact_max_bidders
    exact_max_gpus: int = _CORE.exact_max_gpus
    idle_throughput: float = _CORE.idle_throughput
    hidden_payments: bool = _CORE.hidden_payments
    seed: int = _CORE.seed
    restart_cost_s: float = _CORE.restart_cost_s
    reserve_wide_gangs: bool = _CORE.reserve_wide_gangs
    keep_wide_gangs: bool = _CORE.keep_wide_gangs
    wide_gang_release_rho: float = _CORE.wide_gang_release_rho
    unsaved_keep_leases: float = _CORE.unsaved_keep_leases
    unsaved_release_rho: float = _CORE.unsaved_release_rho
    keep_in_place: bool = _CORE.keep_in_place
    order_slack: float = _CORE.order_slack
    rank_at_share: float = _CORE.rank_at_share
    leftover_order: str = _CORE.leftover_order

    @property
    def lease_s(self) -> float:
        return self.lease_minutes * 60.0

    def arbiter(self) -> ArbiterConfig:
        """The core's config for a round: the one place themis.yaml's scheduler section meets the core."""
        return ArbiterConfig(fairness_knob=self.fairness_knob, lease_s=self.lease_s, solver=self.solver,
                             exact_max_bidders=self.exact_max_bidders, exact_max_gpus=self.exact_max_gpus,
                             idle_throughput=self.idle_throughput, hidden_payments=self.hidden_payments,
                             seed=self.seed, restart_cost_s=self.restart_cost_s,
                             reserve_wide_gangs=self.reserve_wide_gangs, keep_wide_gangs=self.keep_wide_gangs,
                             wide_gang_release_rho=self.wide_gang_release_rho,
                             unsaved_keep_leases=self.unsaved_keep_leases,
                             unsaved_release_rho=self.unsaved_release_rho,
                             keep_in_place=self.keep_in_place, order_slack=self.order_slack,
                             rank_at_share=self.rank_at_share,
                             leftover_order=self.leftover_order)  # fmt: skip


@dataclass(frozen=True)
class EstimatesConfig:
    """Where a job's work estimate comes from when it gives none, the bounds every estimate is held to, and
    calibration (core/calibration.py: each user's estimates scaled by how much their finished jobs
    overshot; the knobs default to the core's CalibrationConfig, never repeated here)."""

    default_s: float = 3600.0
    min_s: float = 60.0
    max_s: float = 30 * 86400.0
    calibrate: bool = _CALIBRATION.enabled
    calibration_min_jobs: int = _CALIBRATION.min_jobs
    calibration_window: int = _CALIBRATION.window
    calibration_raise_above: float = _CALIBRATION.raise_above
    calibration_running: bool = _CALIBRATION.running
    calibration_prior: float | None = _CALIBRATION.prior
    calibration_prior_users: int = _CALIBRATION.prior_users
    calibration_peer_floor: bool = _CALIBRATION.peer_floor
    calibration_peer_tolerance: float = _CALIBRATION.peer_tolerance

    def calibration(self) -> CalibrationConfig:
        """The core's calibration knobs: the one place themis.yaml's estimates section meets them."""
        return CalibrationConfig(self.calibrate, self.calibration_min_jobs, self.calibration_window,
                                 self.calibration_raise_above, self.calibration_running, self.calibration_prior,
                                 self.calibration_prior_users, self.calibration_peer_floor,
                                 self.calibration_peer_tolerance)


@dataclass(frozen=True)
class SlurmConfig:
    """How themisd reaches Slurm and the job_submit.lua side of the installation."""

    partitions: tuple[str, ...] = ("gpu",)
    slurm_conf: str = ""  # "" = $SLURM_CONF, else /etc/slurm/slurm.conf (gres.conf, topology.conf beside it)
    job_submit_conf: str = "/etc/slurm/themis_job_submit.conf.lua"
    command_timeout_s: float = 30.0
    #: timeout of each command of an action (pin, release, signal, requeue, hold); what timed out is retried
    action_timeout_s: float = 10.0
    #: actions decided from one read of the queue are taken only this long after the read; the rest wait
    #: for the next cycle's fresh read (a slow controller never gets actions made from a stale view)
    act_within_s: float = 15.0
    backend: str = "auto"  # auto | cli | pyslurm (see docs/admin-guide.md: Slurm backend)


@dataclass(frozen=True)
class FailOpenConfig:
    """When themisd is gone, its held jobs go back to Slurm (daemon/failopen.py): where its heartbeat is
    written and how old it may get. The same two values go into themis_job_submit.conf.lua."""

    heartbeat_file: str = "/run/themis/heartbeat"  # "" = write none (fail-open then acts at once: off it)
    after_s: float = 600.0  # 0 = never fail open


@dataclass(frozen=True)
class MetricsConfig:
    """Where Prometheus scrapes ``/metrics`` ("" turns the endpoint off)."""

    listen: str = "127.0.0.1:9798"

    @property
    def address(self) -> tuple[str, int] | None:
        if not self.listen:
            return None
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]") or "0.0.0.0", int(port)


@dataclass(frozen=True)
class ApiConfig:
    """The read-only status API (themis_slurm.api) that themisd serves for `themis status/explain`."""

    # the defaults are the API server's own (api/server.py; tests/unit/daemon/test_config.py checks that they
    # agree: the daemon imports the API only where it starts it, daemon/service.py)
    listen: str = "127.0.0.1:8787"
    operators: tuple[str, ...] = ()
    # the server's limits (docs/admin-guide.md, "Status API limits")
    workers: int = 16
    backlog: int = 256
    request_timeout_s: float = 5.0
    write_timeout_s: float = 30.0
    max_connections: int = 512


@dataclass(frozen=True)
class TenancyConfig:
    """Which levels of Slurm's account tree an app's share comes from, and where the shares come from
    (daemon/tenancy.py applies it; docs/admin-guide.md, "Tenancy").

    `levels` is ``"auto"`` or a tuple out of account, user, app ending with app; the default ``auto``
    is account -> user -> app on a cluster with accounting and user -> app without, so that splitting work
    into more apps buys a user nothing; ``("app",)`` is the paper's flat 1/N. `shares` ``auto`` is ``slurm``
    (sshare's RawShares) on a cluster with accounting, ``equal`` without. The tree is read again every
    `refresh_s` seconds and at every SIGHUP.
    """

    levels: str | tuple[str, ...] = "auto"
    shares: str = "auto"
    refresh_s: float = 300.0


def _names(v: Any) -> tuple[str, ...]:
    if v is None:
        return ()
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(x, str | int) and not isinstance(x, bool) for x in v):
        raise _Bad("a list of user names or uids")
    return tuple(str(x) for x in v)


@dataclass(frozen=True)
class Config:
    """The whole file. `source` is where it was read from (for messages), not a setting."""

    mode: str = "enforce"
    poll_interval_s: float = 5.0
    state_dir: str = "/var/lib/themis"
    log_level: str = "info"
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    estimates: EstimatesConfig = field(default_factory=EstimatesConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    failopen: FailOpenConfig = field(default_factory=FailOpenConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    tenancy: TenancyConfig = field(default_factory=TenancyConfig)
    #: the site's own model classes (``models:``): name -> Profile, new names and overrides of built-in ones
    models: Mapping[str, Profile] = field(default_factory=dict)
    #: ``gpu_types:``, each GPU type's speed (type -> speed) and per model class (class -> type -> speed), what a
    #: job of that class does per GPU-second there against the reference type (core/gpu_types.py)
    type_speeds: Mapping[str, float] = field(default_factory=dict)
    class_speeds: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    source: str = "<defaults>"

    @property
    def db_path(self) -> Path:
        return Path(self.state_dir) / "themis.db"

    @property
    def round_terms(self) -> RoundTerms:
        """What the round's input and the status API's finish-time estimates read of this config."""
        from themis_slurm.state.round_input import RoundTerms

        s = self.scheduler
        return RoundTerms(self.mode == "enforce", s.lease_s, s.min_runtime_s, s.idle_throughput, self.models,
                          self.type_speeds, self.class_speeds)  # fmt: skip

    @property
    def new_models(self) -> tuple[str, ...]:
        """The site's class names the built-in grammar does not know: job_submit.lua (``extra_models``) and the
        SPANK plugin (``models=``) must list these; overrides of built-in names need nothing there."""
        return tuple(sorted(n for n in self.models if n not in PROFILES))

    def restart_only_changes(self, new: Config) -> list[str]:
        """Keys whose change a SIGHUP cannot apply (they are bound at start): reported, not applied."""
        out = []
        if new.state_dir != self.state_dir:
            out.append("state_dir")
        if new.metrics.listen != self.metrics.listen:
            out.append("metrics.listen")
        if new.api != self.api:
            out.append("api")
        for key in ("partitions", "slurm_conf", "command_timeout_s", "action_timeout_s", "backend"):
            if getattr(new.slurm, key) != getattr(self.slurm, key):
                out.append(f"slurm.{key}")
        return out


# ------------------------------------------------------------------------------------------ value checks
Check = Callable[[Any], Any]  # returns the converted value or raises _Bad(expected)


class _Bad(Exception):
    """`expected` completes "value V is not ..."; `phrase`, when given, replaces "is not <expected>"."""

    def __init__(self, expected: str, phrase: str = "") -> None:
        super().__init__(expected)
        self.expected = expected
        self.phrase = phrase or f"is not {expected}"


def _number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise _Bad("a number")
    return float(v)


def positive(v: Any) -> float:
    try:
        x = _number(v)
    except _Bad:
        raise _Bad("a positive number") from None
    if x <= 0:
        raise _Bad("a positive number")
    return x


def number_at_least(minimum: float) -> Check:
    """A finite number >= `minimum` (the message names the bound)."""
    expected = f"a number >= {minimum:g}"

    def check(v: Any) -> float:
        try:
            x = _number(v)
        except _Bad:
            raise _Bad(expected) from None
        if x < minimum:
            raise _Bad(expected)
        return x

    return check


non_negative = number_at_least(0.0)


@dataclass(frozen=True)
class Bound:
    """The smallest sane value of an interval or duration, its unit and why (shown in the error)."""

    minimum: float
    unit: str
    why: str


#: Lower bounds of every interval/duration (dotted key -> Bound). 0 stays allowed where 0 means "off".
BOUNDS: dict[str, Bound] = {
    "poll_interval_s": Bound(0.1, "s", "every cycle reads the whole queue from slurmctld"),
    "scheduler.lease_minutes": Bound(0.1, "min", "a lease shorter than 6 s cannot be observed running"),
    "scheduler.grace_s": Bound(0.0, "s", "0 = requeue at the next cycle after the warning"),
    "scheduler.min_runtime_s": Bound(0.0, "s", "0 = a job may be preempted at its first lease expiry"),
    "scheduler.release_timeout_s": Bound(5.0, "s", "Slurm needs a scheduling pass to start a released job"),
    "scheduler.restart_cost_s": Bound(0.0, "s", "0 = preemption is free in the bids"),
    "estimates.default_s": Bound(1.0, "s", "estimates are in seconds"),
    "estimates.min_s": Bound(1.0, "s", "estimates are in seconds"),
    "estimates.max_s": Bound(1.0, "s", "estimates are in seconds"),
    "slurm.command_timeout_s": Bound(1.0, "s", "a Slurm command on a busy controller takes longer"),
    "slurm.action_timeout_s": Bound(1.0, "s", "a Slurm command on a busy controller takes longer"),
    "slurm.act_within_s": Bound(1.0, "s", "an action takes up to a second on a busy controller"),
    "failopen.after_s": Bound(0.0, "s", "0 = never fail open"),
    "api.request_timeout_s": Bound(0.1, "s", "a client needs time to send its request"),
    "api.write_timeout_s": Bound(0.1, "s", "a response needs time to be sent"),
    "tenancy.refresh_s": Bound(10.0, "s", "every refresh asks slurmctld for the whole association tree"),
}


def at_least(key: str, check: Check) -> Check:
    """`check`, then the lower bound of `key` from :data:`BOUNDS`."""
    bound = BOUNDS[key]

    def inner(v: Any) -> float:
        x = check(v)
        if x < bound.minimum:
            raise _Bad(f"a number >= {bound.minimum:g}",
                       f"is below the lower bound {bound.minimum:g} {bound.unit} ({bound.why})")
        return x

    return inner


def boolean(v: Any) -> bool:
    if not isinstance(v, bool):  # YAML true/false; "yes" strings and 0/1 are refused, not guessed
        raise _Bad("true or false")
    return v


def _within(text: str, test: Callable[[float], bool]) -> Callable[[Any], float]:
    """A check of a number in an interval: `test` decides, `text` ("a number in [0, 1)") is the error."""

    def check(v: Any) -> float:
        try:
            x = _number(v)
        except _Bad:
            raise _Bad(text) from None
        if not test(x):
            raise _Bad(text)
        return x

    return check


knob = _within("a number in [0, 1)", lambda x: 0 <= x < 1)
fraction = _within("a number in (0, 1]", lambda x: 0 < x <= 1)
unit_interval = _within("a number in [0, 1]", lambda x: 0 <= x <= 1)


def integer(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _Bad("an integer")
    return v


def count(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise _Bad("an integer >= 0")
    return v


def at_least_one(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise _Bad("an integer >= 1")
    return v


def prior_factor(v: Any) -> float | None:
    """estimates.calibration_prior: null (learned from the cluster's users) or a factor in [0.01, 100]."""
    if v is None:
        return None
    try:
        x = _number(v)
    except _Bad:
        raise _Bad("null (learned) or a number in [0.01, 100]") from None
    if not 0.01 <= x <= 100:
        raise _Bad("null (learned) or a number in [0.01, 100]")
    return x


def one_of(choices: tuple[str, ...]) -> Check:
    def check(v: Any) -> str:
        if not isinstance(v, str) or v.lower() not in choices:
            raise _Bad("one of " + ", ".join(choices))
        return v.lower()

    return check


def path(v: Any) -> str:
    if not isinstance(v, str) or not v.startswith("/"):
        raise _Bad("an absolute path")
    return v


def optional_path(v: Any) -> str:
    if v is None or v == "":
        return ""
    return path(v)


def tenancy_levels(v: Any) -> str | tuple[str, ...]:
    """tenancy.levels: ``auto``, or a list out of account, user, app, in that order, ending with app."""
    expected = "auto, or a list out of account, user, app in that order ending with app (e.g. [user, app])"
    if isinstance(v, str) and v.lower() == "auto":
        return "auto"
    if not isinstance(v, list) or not v or not all(isinstance(x, str) for x in v):
        raise _Bad(expected)
    levels = tuple(x.lower() for x in v)
    if levels[-1] != "app" or list(levels) != [lv for lv in TENANCY_LEVELS if lv in levels]:
        raise _Bad(expected)
    return levels


def partitions(v: Any) -> tuple[str, ...]:
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not v or not all(isinstance(p, str) and p and "," not in p for p in v):
        raise _Bad("a non-empty list of partition names")
    return tuple(v)


def listen(v: Any) -> str:
    if v is None or v == "":
        return ""
    if not isinstance(v, str):
        raise _Bad('HOST:PORT (e.g. "127.0.0.1:9798"), or "" to disable')
    _, sep, port = v.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise _Bad('HOST:PORT (e.g. "127.0.0.1:9798"), or "" to disable')
    return v


# key -> check, per section; the order is the order of the reference in docs/admin-guide.md.
_TOP: dict[str, Check] = {
    "mode": one_of(MODES),
    "poll_interval_s": at_least("poll_interval_s", positive),
    "state_dir": path,
    "log_level": one_of(LOG_LEVELS),
}
_SECTIONS: dict[str, tuple[type, dict[str, Check]]] = {
    "scheduler": (SchedulerConfig, {
        "lease_minutes": at_least("scheduler.lease_minutes", positive),
        "grace_s": at_least("scheduler.grace_s", non_negative),
        "min_runtime_s": at_least("scheduler.min_runtime_s", non_negative),
        "fairness_knob": knob,
        "solver": one_of(SOLVERS),
        "release_timeout_s": at_least("scheduler.release_timeout_s", positive),
        "restart_cost_s": at_least("scheduler.restart_cost_s", non_negative),
        "reserve_wide_gangs": boolean,
        "keep_wide_gangs": boolean,
        "wide_gang_release_rho": non_negative,
        "unsaved_keep_leases": non_negative,
        "unsaved_release_rho": non_negative,
        "keep_in_place": boolean,
        "order_slack": unit_interval,
        "rank_at_share": non_negative,
        "leftover_order": one_of(LEFTOVER_ORDERS),
        "exact_max_bidders": count,
        "exact_max_gpus": count,
        "idle_throughput": fraction,
        "hidden_payments": boolean,
        "seed": integer,
    }),
    "estimates": (EstimatesConfig, {"default_s": at_least("estimates.default_s", positive),
                                    "min_s": at_least("estimates.min_s", positive),
                                    "max_s": at_least("estimates.max_s", positive),
                                    "calibrate": boolean,
                                    "calibration_min_jobs": at_least_one,
                                    "calibration_window": at_least_one,
                                    "calibration_raise_above": number_at_least(1.0),
                                    "calibration_running": boolean,
                                    "calibration_prior": prior_factor,
                                    "calibration_prior_users": at_least_one,
                                    "calibration_peer_floor": boolean,
                                    "calibration_peer_tolerance": number_at_least(1.0)}),
    "slurm": (SlurmConfig, {
        "partitions": partitions,
        "slurm_conf": optional_path,
        "job_submit_conf": optional_path,
        "command_timeout_s": at_least("slurm.command_timeout_s", positive),
        "action_timeout_s": at_least("slurm.action_timeout_s", positive),
        "act_within_s": at_least("slurm.act_within_s", positive),
        "backend": one_of(BACKENDS),
    }),
    "failopen": (FailOpenConfig, {"heartbeat_file": optional_path,
                                  "after_s": at_least("failopen.after_s", non_negative)}),
    "metrics": (MetricsConfig, {"listen": listen}),
    "api": (ApiConfig, {"listen": listen, "operators": _names, "workers": at_least_one, "backlog": at_least_one,
                        "request_timeout_s": at_least("api.request_timeout_s", positive),
                        "write_timeout_s": at_least("api.write_timeout_s", positive),
                        "max_connections": at_least_one}),
    "tenancy": (TenancyConfig, {"levels": tenancy_levels, "shares": one_of(TENANCY_SHARES),
                                "refresh_s": at_least("tenancy.refresh_s", positive)}),
}  # fmt: skip


# ------------------------------------------------------------------------------------------ models
NOTE_MAX_LEN = 200
_MODEL_KEYS = ("factors", "note")
_FACTORS_EXPECTED = ("a mapping of " + ", ".join(LEVEL_NAMES) + " to numbers in (0, 1] (or a list of four, in "
                     "that order)")


def _models(value: Any, source: str) -> dict[str, Profile]:
    """themis.yaml ``models:``: class name -> ``{factors: {island: .., node: .., rack: .., cluster: ..}, note: ..}``.

    A name that is built in (core.placement.PROFILES) overrides its factors; any other is a new model class,
    which users give as ``--themis-model=<name>`` once job_submit.lua and the plugin list it too
    (docs/admin-guide.md, "Model classes"). Factors are the throughput per GPU at each placement level
    against the tightest: in (0, 1], never growing with distance (a wider placement is never faster)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{source}: models: value {_shown(value)} is not a mapping of class names to "
                          "{factors: ..., note: ...}")
    out: dict[str, Profile] = {}
    for name, entry in value.items():
        key = f"models.{name}"
        if not valid_model_name(name):
            raise ConfigError(f"{source}: {key}: the name {_shown(name)} is not {MODEL_NAME_EXPECTED}")
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{source}: {key}: value {_shown(entry)} is not a mapping with factors (and "
                              "an optional note)")
        for sub in entry:
            if sub not in _MODEL_KEYS:
                raise ConfigError(f"{source}: {key}.{sub}: unknown key (accepted: {', '.join(_MODEL_KEYS)})")
        if "factors" not in entry:
            raise ConfigError(f"{source}: {key}: factors missing: give {_FACTORS_EXPECTED}")
        factors = _factors(entry["factors"], source, f"{key}.factors")
        note = entry.get("note", "")
        if note is None:
            note = ""
        if not isinstance(note, str) or len(note) > NOTE_MAX_LEN:
            raise ConfigError(f"{source}: {key}.note: value {_shown(note)} is not a text of at most "
                              f"{NOTE_MAX_LEN} characters")
        what = "overrides the built-in class" if name in PROFILES else "defines a class"
        out[name] = Profile(name, factors, f"site: {source} {key} ({what})", note)
    return out


def _factors(value: Any, source: str, key: str) -> tuple[float, float, float, float]:
    """The four factors of one class, by level name or as a list; every error names the level."""
    if isinstance(value, list):
        if len(value) != len(LEVEL_NAMES):
            raise ConfigError(f"{source}: {key}: value {_shown(value)} is not {_FACTORS_EXPECTED}")
        given = dict(zip(LEVEL_NAMES, value, strict=True))
    elif isinstance(value, Mapping):
        for level in value:
            if level not in LEVEL_NAMES:
                raise ConfigError(f"{source}: {key}.{level}: unknown level (accepted: {', '.join(LEVEL_NAMES)})")
        missing = [lv for lv in LEVEL_NAMES if lv not in value]
        if missing:
            raise ConfigError(f"{source}: {key}: {', '.join(missing)} missing: give {_FACTORS_EXPECTED}")
        given = dict(value)
    else:
        raise ConfigError(f"{source}: {key}: value {_shown(value)} is not {_FACTORS_EXPECTED}")
    factors = tuple(_checked(source, f"{key}.{lv}", given[lv], fraction) for lv in LEVEL_NAMES)
    for i in range(1, len(LEVEL_NAMES)):
        if factors[i] > factors[i - 1]:
            raise ConfigError(f"{source}: {key}.{LEVEL_NAMES[i]}: value {factors[i]:g} is above "
                              f"{LEVEL_NAMES[i - 1]} ({factors[i - 1]:g}): a wider placement is never faster, so "
                              "the factors must not grow from island to cluster")
    return factors  # type: ignore[return-value]


def _shown(v: Any) -> str:
    text = repr(v) if isinstance(v, str) else str(v)
    return text if len(text) <= 60 else text[:57] + "..."


def parse(data: Any, source: str = "themis.yaml") -> Config:
    """Validates a decoded YAML document; raises ConfigError naming the first bad key."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: the file must be a mapping of keys to values, not {type(data).__name__}")
    top: dict[str, Any] = {}
    sections: dict[str, Any] = {}
    known = [*_TOP, *_SECTIONS, "models", "gpu_types"]
    models: dict[str, Profile] = {}
    speeds: dict[str, Any] = {}
    for key, value in data.items():
        if key == "models":
            models = _models(value, source)
        elif key == "gpu_types":
            try:
                speeds["type_speeds"], speeds["class_speeds"] = parse_gpu_types(value)
            except ValueError as exc:
                raise ConfigError(f"{source}: {exc}") from None
        elif key in _TOP:
            top[key] = _checked(source, str(key), value, _TOP[key])
        elif key in _SECTIONS:
            cls, checks = _SECTIONS[key]
            if value is None:
                value = {}
            if not isinstance(value, Mapping):
                raise ConfigError(f"{source}: {key}: value {_shown(value)} is not a mapping "
                                  f"(accepted keys: {', '.join(checks)})")
            fields: dict[str, Any] = {}
            for sub, v in value.items():
                if sub not in checks:
                    raise ConfigError(f"{source}: {key}.{sub}: unknown key (accepted: {', '.join(checks)})")
                fields[str(sub)] = _checked(source, f"{key}.{sub}", v, checks[sub])
            sections[key] = cls(**fields)
        else:
            raise ConfigError(f"{source}: {key}: unknown key (accepted: {', '.join(known)})")
    cfg = Config(**top, **sections, models=models, **speeds, source=source)
    if cfg.scheduler.lease_s < cfg.poll_interval_s:
        raise ConfigError(f"{source}: scheduler.lease_minutes: value {cfg.scheduler.lease_minutes:g} "
                          f"({cfg.scheduler.lease_s:g} s) is shorter than poll_interval_s "
                          f"({cfg.poll_interval_s:g} s): a lease must last at least one cycle")
    est = cfg.estimates
    if est.min_s > est.max_s:
        raise ConfigError(f"{source}: estimates.min_s: value {est.min_s:g} is above estimates.max_s "
                          f"({est.max_s:g}): min_s must be <= max_s")
    if est.calibration_window < est.calibration_min_jobs:
        raise ConfigError(f"{source}: estimates.calibration_window: value {est.calibration_window} is below "
                          f"estimates.calibration_min_jobs ({est.calibration_min_jobs}): the window must hold "
                          "at least the jobs a factor needs")
    if not est.min_s <= est.default_s <= est.max_s:
        raise ConfigError(f"{source}: estimates.default_s: value {est.default_s:g} is outside "
                          f"[estimates.min_s, estimates.max_s] = [{est.min_s:g}, {est.max_s:g}]")
    return cfg


def _checked(source: str, key: str, value: Any, check: Check) -> Any:
    try:
        return check(value)
    except _Bad as bad:
        raise ConfigError(f"{source}: {key}: value {_shown(value)} {bad.phrase}") from None


def _read(p: Path) -> Any:
    """The decoded YAML of `p`; every failure (missing, unreadable, bad YAML) is a ConfigError."""
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e.strerror or e}") from None
    try:
        return safe_load(text)
    except DuplicateKeyError as e:
        raise ConfigError(f"{p}: {e}") from None
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        raise ConfigError(f"{p}: not valid YAML{at}: {getattr(e, 'problem', None) or e}") from None


def load(file: str | Path = DEFAULT_PATH) -> Config:
    """Reads and validates `file`; every failure (missing, unreadable, bad YAML, bad value) is a ConfigError."""
    p = Path(file)
    return parse(_read(p), source=str(p))


def load_for_client(file: str | Path = DEFAULT_PATH) -> tuple[Config, tuple[str, ...]]:
    """The config as a client of themisd reads it (the `themis` CLI, ``themis serve-api``): :func:`load`,
    except that keys this version does not know are left out (and named in the returned notes), so a
    client keeps working against a newer daemon's file. Same YAML, same checks, same defaults."""
    p = Path(file)
    data = _read(p)
    notes: list[str] = []
    if isinstance(data, Mapping):
        kept: dict[Any, Any] = {}
        for key, value in data.items():
            if key in _TOP or key in ("models", "gpu_types"):  # names of the site's choosing, no fixed keys
                kept[key] = value
            elif key in _SECTIONS and isinstance(value, Mapping):
                checks = _SECTIONS[key][1]
                kept[key] = {k: v for k, v in value.items() if k in checks}
                notes += [f"{p}: {key}.{k}: unknown key ignored" for k in value if k not in checks]
            elif key in _SECTIONS:
                kept[key] = value
            else:
                notes.append(f"{p}: {key}: unknown key ignored")
        data = kept
    return parse(data, source=str(p)), tuple(notes)
