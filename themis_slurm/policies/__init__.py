"""Scheduling policies behind one interface (:class:`~themis_slurm.policies.base.Policy`), and the registry.

The registry (:mod:`themis_slurm.policies.registry`) is the one way to build a policy by name:
``make_policy(name, config, **options)``, with `config` Themis's :class:`~themis_slurm.core.arbiter.ArbiterConfig`
and `options` named after each policy's constructor (see :func:`policy_options`). The simulator's runner,
``themis simulate`` and the benchmarks all build their policies through it.
"""

from __future__ import annotations

from themis_slurm.policies.base import Policy, PolicyContext, ThemisPolicy
from themis_slurm.policies.fairshare import FairSharePolicy
from themis_slurm.policies.fifo import FifoPolicy
from themis_slurm.policies.ftf import FtfPolicy
from themis_slurm.policies.gandiva import GandivaPolicy
from themis_slurm.policies.maxmin import MaxMinPolicy
from themis_slurm.policies.optimus import OptimusPolicy
from themis_slurm.policies.registry import NAMES, POLICIES, make_policy, policy_options
from themis_slurm.policies.slaq import SlaqPolicy
from themis_slurm.policies.slurm import SlurmPolicy
from themis_slurm.policies.srtf import SrtfPolicy
from themis_slurm.policies.tiresias import TiresiasPolicy

__all__ = [
    "NAMES",
    "POLICIES",
    "FairSharePolicy",
    "FifoPolicy",
    "FtfPolicy",
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
