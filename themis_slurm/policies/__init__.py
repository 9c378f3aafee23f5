"""Scheduling policies behind one interface (:class:`~themis_slurm.policies.base.Policy`), and the registry.

``POLICIES[name](**options)`` builds a fresh policy (policies keep state between calls, so use one
instance per simulation); :func:`make_policy` does the same with a clear error for unknown names.

Options are keyword arguments named after each policy's constructor (see :func:`policy_options`).
Options that some *other* policy understands (e.g. ``lease_s`` or ``fairness_knob``, meant for Themis)
are ignored, so one set of command-line options can build every policy; an option no policy knows
raises ValueError naming the options the policy accepts (typos fail loudly).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from themis_slurm.core.arbiter import ArbiterConfig
from themis_slurm.policies.base import Policy, PolicyContext
from themis_slurm.policies.fifo import FifoPolicy
from themis_slurm.policies.gandiva import GandivaPolicy
from themis_slurm.policies.maxmin import MaxMinPolicy
from themis_slurm.policies.optimus import OptimusPolicy
from themis_slurm.policies.slaq import SlaqPolicy
from themis_slurm.policies.slurm import SlurmPolicy
from themis_slurm.policies.srtf import SrtfPolicy
from themis_slurm.policies.themis import ThemisPolicy
from themis_slurm.policies.tiresias import TiresiasPolicy

_THEMIS_OPTIONS = tuple(f.name for f in dataclasses.fields(ArbiterConfig))

_CLASSES: dict[str, type] = {
    "fifo": FifoPolicy,
    "gandiva": GandivaPolicy,
    "maxmin": MaxMinPolicy,
    "optimus": OptimusPolicy,
    "slaq": SlaqPolicy,
    "slurm": SlurmPolicy,
    "srtf": SrtfPolicy,
    "tiresias": TiresiasPolicy,
}


def policy_options(name: str) -> tuple[str, ...]:
    """The option names policy `name` accepts."""
    if name == "themis":
        return _THEMIS_OPTIONS
    if name not in _CLASSES:
        raise ValueError(_unknown(name))
    params = inspect.signature(_CLASSES[name].__init__).parameters
    return tuple(p for p in params if p != "self")


def _known_anywhere() -> set[str]:
    return {o for n in POLICIES for o in policy_options(n)}


def _pick(name: str, options: dict[str, Any]) -> dict[str, Any]:
    mine = set(policy_options(name))
    unknown = sorted(k for k in options if k not in mine and k not in _known_anywhere())
    if unknown:
        raise ValueError(
            f"unknown option(s) for policy {name!r}: {', '.join(unknown)}; "
            f"it accepts: {', '.join(sorted(mine)) or '(none)'}"
        )
    return {k: v for k, v in options.items() if k in mine}


def _themis(**options: Any) -> ThemisPolicy:
    return ThemisPolicy(ArbiterConfig(**_pick("themis", options)))


def _factory(name: str) -> Callable[..., Policy]:
    cls = _CLASSES[name]

    def build(**options: Any) -> Policy:
        return cls(**_pick(name, options))

    build.__name__ = f"make_{name}"
    build.__doc__ = f"Build a {cls.__name__} from keyword options ({', '.join(policy_options(name))})."
    return build


#: Policy name -> factory taking keyword options. Order: Themis, then the baselines alphabetically.
POLICIES: dict[str, Callable[..., Policy]] = {"themis": _themis, **{n: _factory(n) for n in sorted(_CLASSES)}}


def _unknown(name: str) -> str:
    return f"unknown policy {name!r}; known: {', '.join(['themis', *sorted(_CLASSES)])}"


def make_policy(name: str, **options: Any) -> Policy:
    """Build policy `name` (case-insensitive) with keyword options; ValueError lists the known names."""
    key = name.strip().lower()
    if key not in POLICIES:
        raise ValueError(_unknown(name))
    return POLICIES[key](**options)


__all__ = [
    "POLICIES",
    "FifoPolicy",
    "GandivaPolicy",
    "MaxMinPolicy",
    "OptimusPolicy",
    "Policy",
    "PolicyContext",
    "SlaqPolicy",
    "SlurmPolicy",
    "SrtfPolicy",
    "ThemisPolicy",
    "TiresiasPolicy",
    "make_policy",
    "policy_options",
]
