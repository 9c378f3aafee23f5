"""Themis (Mahajan et al., NSDI 2020): the core arbiter behind the Policy interface.

Defined in :mod:`themis_slurm.policies.base` (next to the interface it is the reference implementation of)
and re-exported here so every policy has a module of its own name. No simplification: the simulator runs
exactly the :func:`~themis_slurm.core.arbiter.run_round` the daemon runs.
"""

from themis_slurm.policies.base import ThemisPolicy

__all__ = ["ThemisPolicy"]
