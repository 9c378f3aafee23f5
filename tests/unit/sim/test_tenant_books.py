"""The simulator keeps each tenant's book (core/tenancy.TenantBook), which paced quotas read (core/quota.py)."""

from __future__ import annotations

import pytest

from themis_slurm.core.arbiter import ArbiterConfig
from themis_slurm.core.topology import Topology
from themis_slurm.policies import make_policy
from themis_slurm.sim.engine import SimConfig, Simulator
from themis_slurm.sim.tenants import make_tenancy, splitting_trace


def test_the_simulator_keeps_each_users_book_whatever_its_apps() -> None:
    """sim/engine.py: a user's book integrates its fraction of the cluster since it became active and adds
    the work of its finished jobs, across its apps coming and going. A's 4 one-GPU jobs (600, 1200, 1800,
    2400 s) in 4 apps, B's the same in one, on 8 GPUs: both always active and equal, so each is owed
    4 GPUs x t, and each finished what it ran (every job runs at once: 8 GPUs, 8 jobs)."""
    seen: list = []
    policy = make_policy("themis", ArbiterConfig())
    schedule = policy.schedule

    def spy(ctx):  # type: ignore[no-untyped-def]
        seen.append(ctx.state)
        return schedule(ctx)

    policy.schedule = spy  # type: ignore[method-assign]
    Simulator(splitting_trace([600.0, 1200.0, 1800.0, 2400.0], 4), Topology.uniform(1, 2, 4), policy,
              SimConfig(tenancy=make_tenancy("user,app"))).run()  # fmt: skip
    a, b = ("user", ("", "A")), ("user", ("", "B"))
    later = [s for s in seen if s.now > 0]
    assert later, "the policy is called after the first jobs end"
    for s in later:
        ended = sum(w for w in (600.0, 1200.0, 1800.0, 2400.0) if w <= s.now)
        for ent in (a, b):
            book = s.tenant_books[ent]
            assert book.entitled == pytest.approx(4.0 * s.now) and book.finished == pytest.approx(ended)
