"""The policy registry: every policy by name, and the one way to build one (:func:`make_policy`).

``make_policy(name, config, **options)`` builds a fresh policy (policies keep state between calls, so use one
instance per simulation):

* `config` is Themis's knobs, an :class:`~themis_slurm.core.arbiter.ArbiterConfig` (the one place their
  defaults live). Themis is built from it; no baseline has a Themis knob, so the baselines ignore it. One
  ArbiterConfig (what ``themis simulate`` and the benchmarks set) therefore builds every policy.
* `options` are keyword options named after the policy's constructor (:func:`policy_options`); for Themis
  they are ArbiterConfig fields and override `config`. An option that only *another* policy understands
  (e.g. ``lease_s`` given to Tiresias) is ignored, so one set of options can build every policy; an option
  no policy knows raises ValueError naming the options the policy accepts (typos fail loudly).

``POLICIES[name](config, **options)`` is the same as ``make_policy(name, config, **options)``; its keys are
the registered names, Themis first, then the baselines alphabetically.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from themis_slurm.core.arbiter import ArbiterConfig
from themis_slurm.policies.base import Policy, ThemisPolicy
from themis_slurm.policies.fairshare import FairSharePolicy
from themis_slurm.policies.fifo import FifoPolicy
from themis_slurm.policies.ftf import FtfPolicy
from themis_slurm.policies.gandiva import GandivaPolicy
from themis_slurm.policies.maxmin import MaxMinPolicy
from themis_slurm.policies.optimus import OptimusPolicy
from themis_slurm.policies.slaq import SlaqPolicy
from themis_slurm.policies.slurm import SlurmPolicy
from themis_slurm.policies.srtf import SrtfPolicy
from themis_slurm.policies.tiresias import TiresiasPolicy

_BASELINES: dict[str, type] = {
    "fairshare": FairSharePolicy,
    "fifo": FifoPolicy,
    "ftf": FtfPolicy,
    "gandiva": GandivaPolicy,
    "maxmin": MaxMinPolicy,
    "optimus": OptimusPolicy,
    "slaq": SlaqPolicy,
    "slurm": SlurmPolicy,
    "srtf": SrtfPolicy,
    "tiresias": TiresiasPolicy,
}
#: the registered names: Themis first, then the baselines alphabetically
NAMES: tuple[str, ...] = ("themis", *sorted(_BASELINES))
_THEMIS_OPTIONS = tuple(f.name for f in dataclasses.fields(ArbiterConfig))


def _unknown(name: str) -> str:
    return f"unknown policy {name!r}; known: {', '.join(NAMES)}"


def _key(name: str) -> str:
    key = name.strip().lower()
    if key not in NAMES:
        raise ValueError(_unknown(name))
    return key


def policy_options(name: str) -> tuple[str, ...]:
    """The option names policy `name` accepts (Themis: the ArbiterConfig fields)."""
    key = _key(name)
    if key == "themis":
        return _THEMIS_OPTIONS
    params = inspect.signature(_BASELINES[key].__init__).parameters
    return tuple(p for p in params if p != "self")


def _pick(key: str, options: dict[str, Any]) -> dict[str, Any]:
    mine = set(policy_options(key))
    known = {o for n in NAMES for o in policy_options(n)}
    unknown = sorted(k for k in options if k not in known)
    if unknown:
        raise ValueError(
            f"unknown option(s) for policy {key!r}: {', '.join(unknown)}; "
            f"it accepts: {', '.join(sorted(mine)) or '(none)'}"
        )
    return {k: v for k, v in options.items() if k in mine}


def make_policy(name: str, config: ArbiterConfig | None = None, **options: Any) -> Policy:
    """Build policy `name` (case-insensitive) from Themis's knobs and keyword options (module docstring).

    ValueError for an unknown name (listing the known ones) or an option no policy knows.
    """
    if config is not None and not isinstance(config, ArbiterConfig):
        raise TypeError(f"config must be an ArbiterConfig, got {type(config).__name__}")
    key = _key(name)
    picked = _pick(key, options)
    if key == "themis":
        return ThemisPolicy(dataclasses.replace(config or ArbiterConfig(), **picked))
    return _BASELINES[key](**picked)


def _factory(name: str) -> Callable[..., Policy]:
    def build(config: ArbiterConfig | None = None, **options: Any) -> Policy:
        return make_policy(name, config, **options)

    build.__name__ = f"make_{name}"
    build.__doc__ = f"make_policy({name!r}, config, **options); options: {', '.join(policy_options(name))}."
    return build


#: Policy name -> factory taking (config, **options), in :data:`NAMES` order.
POLICIES: dict[str, Callable[..., Policy]] = {n: _factory(n) for n in NAMES}

__all__ = ["NAMES", "POLICIES", "make_policy", "policy_options"]
