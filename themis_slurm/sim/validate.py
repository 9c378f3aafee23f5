"""Checking a policy's Decision before the simulator applies it.

A broken policy must fail loudly and must not corrupt the simulation, so every decision is checked as a whole
first (nothing is applied when anything is wrong). The rules, in the order the simulator applies a decision
(preemptions, then renewals, then grants):

* a preemption names a running, preemptible job and exactly the GPUs it holds;
* a renewal names a running job that is not preempted in the same decision, with exactly its GPUs, and a
  lease expiry after now;
* a grant names a job that is waiting (arrived, not finished, not running once this decision's preemptions
  are applied), of the app the job belongs to, once per decision; its GPUs exist, are free or freed by this
  decision's preemptions, and are granted to no other job; a rigid gang gets exactly its GPU count, an
  elastic job 1..gpus; a node-shaped gang gets exactly ``gpus_per_node`` GPUs on each of ``nodes`` nodes;
  its lease expiry is after now (``inf``: no lease).

This is the one decision validator: the simulator calls :func:`check_decision` with its own bookkeeping,
and anyone holding only the :class:`~themis_slurm.core.state.ClusterState` the policy was given (policy
tests, tools) calls :func:`check_decision_for_state`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from themis_slurm.core.decision import Decision
from themis_slurm.core.quick_init import quick_init
from themis_slurm.core.state import ClusterState
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import Job


class InvalidDecision(ValueError):
    """A policy returned a decision that breaks the rules above; the message names the policy and the rule."""


@quick_init
@dataclass(frozen=True, slots=True)
class Holding:
    """What a running job holds, as the validator needs it."""

    app_id: str
    gpus: frozenset[int]
    preemptible: bool


def check_decision(
    policy: str,
    decision: Decision,
    now: float,
    topology: Topology,
    free: frozenset[int] | set[int],
    running: Mapping[str, Holding],
    jobs: Mapping[str, Job],
) -> None:
    """Raise InvalidDecision when `decision` cannot be applied to this state (see the module docstring).

    `jobs` are the jobs present (arrived and unfinished: waiting or running), `running` those holding GPUs.
    """

    def fail(msg: str) -> None:
        raise InvalidDecision(f"policy {policy!r} at t={now:g}: {msg}")

    n_gpus = topology.size
    preempted: set[str] = set()
    freed: set[int] = set()
    for p in decision.preemptions:
        hold = running.get(p.job_id)
        if hold is None:
            fail(f"preempts job {p.job_id}, which is not running")
        elif p.job_id in preempted:
            fail(f"preempts job {p.job_id} twice")
        elif not hold.preemptible:
            fail(f"preempts job {p.job_id}, which is not preemptible")
        elif frozenset(p.gpus) != hold.gpus:
            fail(f"preempts job {p.job_id} on GPUs {sorted(p.gpus)} but it holds {sorted(hold.gpus)}")
        preempted.add(p.job_id)
        freed |= hold.gpus
    renewed: set[str] = set()
    for r in decision.renewals:
        hold = running.get(r.job_id)
        if hold is None or r.job_id in preempted:
            fail(f"renews job {r.job_id}, which is not running (or is preempted in the same decision)")
        elif r.job_id in renewed:
            fail(f"renews job {r.job_id} twice")
        elif frozenset(r.gpus) != hold.gpus:
            fail(f"renews job {r.job_id} on GPUs {sorted(r.gpus)} but it holds {sorted(hold.gpus)}")
        elif not r.lease_expiry > now:
            fail(f"renews job {r.job_id} with a lease expiring at {r.lease_expiry:g}, not after now")
        renewed.add(r.job_id)
    granted_gpus: dict[int, str] = {}
    granted_jobs: set[str] = set()
    for g in decision.grants:
        jid = g.job_id
        job = jobs.get(jid)
        if jid in granted_jobs:
            fail(f"grants job {jid} twice")
        if job is None:
            fail(f"grants job {jid}, which is not waiting (unknown, not arrived yet, or finished)")
        if jid in running and jid not in preempted:
            fail(f"grants job {jid}, which is running (preempt it in the same decision to move it)")
        assert job is not None
        if g.app_id != job.app_id:
            fail(f"grants job {jid} as app {g.app_id!r} but it belongs to app {job.app_id!r}")
        for gid in g.gpus:
            if not 0 <= gid < n_gpus:
                fail(f"grants GPU {gid} to job {jid}: no such GPU (0..{n_gpus - 1})")
            if gid in granted_gpus:
                fail(f"grants GPU {gid} twice: to job {granted_gpus[gid]} and job {jid}")
            if gid not in free and gid not in freed:
                fail(f"grants GPU {gid} to job {jid} but the GPU is not free")
            granted_gpus[gid] = jid
        k = len(g.gpus)
        if job.elastic:
            if not 1 <= k <= job.gpus:
                fail(f"grants elastic job {jid} {k} GPUs; it takes 1..{job.gpus}")
        elif k != job.gpus:
            fail(f"grants gang {jid} {k} GPUs; it needs exactly {job.gpus} (gangs are whole)")
        if job.nodes is not None:
            per_node = topology.nodes_of(g.gpus)
            if len(per_node) != job.nodes or any(c != job.gpus_per_node for c in per_node.values()):
                fail(f"grants job {jid} GPUs on nodes {per_node}; it needs {job.gpus_per_node} GPU(s) "
                     f"on each of {job.nodes} node(s)")  # fmt: skip
        if not g.lease_expiry > now:
            fail(f"grants job {jid} a lease expiring at {g.lease_expiry:g}, not after now")
        granted_jobs.add(jid)


def check_decision_for_state(policy: str, decision: Decision, state: ClusterState) -> None:
    """:func:`check_decision` for a decision made on `state`: every job of the state is present, the leased
    ones are running (preemptible as their Job says)."""
    jobs = {j.id: j for a in state.apps for j in a.jobs}
    running: dict[str, Holding] = {}
    for lease in state.leases:
        job = jobs[lease.job_id]
        running[lease.job_id] = Holding(job.app_id, frozenset(lease.gpus), job.preemptible)
    check_decision(policy, decision, state.now, state.topology, state.free, running, jobs)
