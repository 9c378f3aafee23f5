"""Hand-built states for policy tests, a checker for the Decision invariants, and a tiny stepper.

The stepper applies a Decision and advances time with linear progress (throughput = GPUs x placement
factor), just enough to watch a policy over a few calls without the simulator.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from themis_slurm import reasons
from themis_slurm.core.decision import Decision
from themis_slurm.core.fairness import job_throughput
from themis_slurm.core.state import ClusterState
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import App, Job, Lease
from themis_slurm.policies import PolicyContext
from themis_slurm.sim.validate import InvalidDecision, check_decision_for_state


def job(jid: str, app: str, gpus: int = 1, work: float = 3600.0, **kw) -> Job:
    kw.setdefault("profile", "none")
    return Job(id=jid, app_id=app, gpus=gpus, work=work * gpus, **kw)


def app(aid: str, jobs: Sequence[Job], owner: str | None = None, arrival: float = 0.0) -> App:
    return App(aid, owner or aid, arrival, tuple(jobs))


def state(
    topo: Topology,
    apps: Sequence[App],
    running: Mapping[str, Iterable[int]] | None = None,
    now: float = 0.0,
    starts: Mapping[str, float] | None = None,
    expiry: float = math.inf,
) -> ClusterState:
    leases = tuple(
        Lease(jid, frozenset(g), (starts or {}).get(jid, 0.0), expiry) for jid, g in (running or {}).items()
    )
    used = frozenset().union(*(lease.gpus for lease in leases)) if leases else frozenset()
    return ClusterState(topo, now, frozenset(range(topo.size)) - used, leases, tuple(apps))


def ctx(s: ClusterState) -> PolicyContext:
    return PolicyContext(s)


def check(s: ClusterState, d: Decision) -> None:
    """The invariants every policy must keep: the simulator's decision validator (sim/validate.py), plus
    what the simulator does not need but `explain` and the daemon do (nodes and migrations spelled out, an
    AppRecord that explains itself for every app)."""
    name = d.solver or "policy"
    try:
        check_decision_for_state(name, d, s)
    except InvalidDecision as exc:
        raise AssertionError(str(exc)) from None
    leases = {lease.job_id for lease in s.leases}
    pre = {p.job_id for p in d.preemptions}
    for g in d.grants:
        if g.job_id in leases:
            assert g.job_id in pre and g.migrated, f"grant to running job {g.job_id}"
        assert dict(g.nodes) == s.topology.nodes_of(g.gpus)
    assert set(d.apps) == {a.id for a in s.apps}, "every app needs an AppRecord"
    # a baseline explains each app in a note; Themis's records are typed and worded at the edges
    assert all(rec.note or reasons.app_record(rec) for rec in d.apps.values())


def step(s: ClusterState, d: Decision, dt: float) -> ClusterState:
    """Apply `d`, then run for `dt` seconds: progress, service, completions (drop finished jobs)."""
    check(s, d)
    topo = s.topology
    leases = {lease.job_id: lease for lease in s.leases}
    for p in d.preemptions:
        del leases[p.job_id]
    for r in d.renewals:
        leases[r.job_id] = replace(leases[r.job_id], expiry=r.lease_expiry)
    for g in d.grants:
        leases[g.job_id] = Lease(g.job_id, g.gpus, s.now, g.lease_expiry)
    now = s.now + dt
    apps = []
    for a in s.apps:
        jobs = []
        for j in a.jobs:
            if j.id in leases:
                lease = leases[j.id]
                j = replace(
                    j,
                    done=j.done + dt * job_throughput(j, lease.gpus, topo),
                    service=j.service + dt * len(lease.gpus),
                )
                if j.done >= j.work - 1e-9:
                    del leases[j.id]
                    continue
            jobs.append(j)
        if jobs:
            apps.append(replace(a, jobs=tuple(jobs)))
    used = frozenset().union(*(lease.gpus for lease in leases.values())) if leases else frozenset()
    return ClusterState(topo, now, frozenset(range(topo.size)) - used, tuple(leases.values()), tuple(apps))


def running_jobs(s: ClusterState) -> set[str]:
    return {lease.job_id for lease in s.leases}


def granted(d: Decision) -> set[str]:
    return {g.job_id for g in d.grants}


def preempted(d: Decision) -> set[str]:
    return {p.job_id for p in d.preemptions}
