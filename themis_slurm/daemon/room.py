"""CPUs and memory before a grant: a round never pins a job where Slurm lacks the room to start it (pure).

A node's GPUs are only part of what Slurm allocates: a job also needs its CPUs and (where memory is a
consumable resource) its memory on every node of its pin (slurm/resources.py). Before this check, three
``--gres=gpu:1 -c 12`` jobs on an idle cluster of 16-CPU nodes were all pinned to one node (issue 37): one
ran, two waited for a release timeout while three idle nodes could have run them.

The core places GPUs only. Rather than teach every phase of the round about CPUs and memory (and slow the
rounds of jobs that need neither), the daemon checks around the round, the way it checks QOS limits
(`Daemon._within_limits`):

* `base_room`: per node, what Slurm counts free now, minus what the jobs Themis granted or started that
  Slurm does not run yet will take on their planned nodes.
* `narrowed` (before the round): with the running managed jobs whose leases are in play gone, the free GPUs
  of nodes no waiting job fits are taken out of the round, and a waiting job too big for some of the other
  nodes is allowed only on those that could hold it, as ``-x`` would (a job with no such node gets no
  grant this round).
* `check` (after the round, in grant order): each grant takes its needs from the room of its nodes, on top
  of what the round's preemptions free. A grant that does not fit is moved to free GPUs on nodes that have
  the room, at the same placement level or a tighter one (the same throughput, so the round's records
  stay true); where there is no such place, the round runs again with that job cut to the nodes it fits
  (`Daemon._within_room`), and after a few times such grants are dropped (their GPUs wait for the next
  round). Two gangs therefore never share a node they do not fit together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from themis_slurm.core.decision import Decision, Grant
from themis_slurm.core.placement import Pool
from themis_slurm.core.state import ClusterState
from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import Job
from themis_slurm.slurm.model import ManagedJob, Snapshot, room_fits
from themis_slurm.state.intents import TRANSITIONAL
from themis_slurm.state.rows import JobRow


@dataclass
class Room:
    """Free CPUs and memory (MiB) of one node; None: not known or not consumed (never short)."""

    cpus: int | None
    mem: int | None

    def fits(self, cpus: int, mem: int) -> bool:
        return room_fits(self.cpus, self.mem, cpus, mem)

    def add(self, cpus: int, mem: int, sign: int = 1) -> None:
        if self.cpus is not None:
            self.cpus += sign * cpus
        if self.mem is not None:
            self.mem += sign * mem


def needs(mj: ManagedJob | None) -> tuple[int, int]:
    """(CPUs, MiB) the job needs per node; (0, 0) when unknown."""
    return (mj.cpus_per_node, mj.mem_per_node) if mj is not None else (0, 0)


def base_room(snapshot: Snapshot, rows: Mapping[str, JobRow]) -> dict[str, Room]:
    """Per node, Slurm's free CPUs and memory minus the needs of the jobs Themis placed there that Slurm
    does not run there yet (granted or starting, or moved and still leaving their old GPUs)."""
    room = {n: Room(r.cpus, r.mem) for n, r in snapshot.room.items()}
    if not room:
        return room
    jobs = {m.job_id: m for m in snapshot.managed}
    for jid, row in rows.items():
        mj = jobs.get(jid)
        if mj is None or row.intent not in TRANSITIONAL or not row.planned_nodes:
            continue
        if mj.state == "RUNNING" and set(mj.node_gpus) == set(row.planned_nodes):
            continue  # Slurm counts it already
        cpus, mem = needs(mj)
        for node in row.planned_nodes:
            if node in room:
                room[node].add(cpus, mem, -1)
    return room


def _freed(room: dict[str, Room], jobs: Mapping[str, ManagedJob], ids: Iterable[str]) -> None:
    """Gives back to `room` what the running jobs `ids` hold on their nodes (they leave)."""
    for jid in ids:
        mj = jobs.get(jid)
        if mj is None or mj.state != "RUNNING":
            continue
        cpus, mem = needs(mj)
        for node in mj.node_gpus:
            if node in room:
                room[node].add(cpus, mem)


def _copy(room: Mapping[str, Room]) -> dict[str, Room]:
    return {n: Room(r.cpus, r.mem) for n, r in room.items()}


def narrowed(state: ClusterState, snapshot: Snapshot, rows: Mapping[str, JobRow], waiting: Iterable[str],
             in_play: Iterable[str]) -> tuple[ClusterState, dict[str, frozenset[str]]]:
    """The state as the round should see it (module docstring), and the jobs cut -> the nodes left to them.

    With the running jobs `in_play` (leases expired) gone, a node is *full* when no waiting job fits its
    room (smaller than the least CPUs and the least memory any waiting job needs): its free GPUs are taken
    out of the round, so no job is cut for it. A waiting job too big for some of the other nodes is allowed
    only on those that could hold it (full nodes stay in its set: they offer it nothing). Jobs every node
    could hold are left as they are (the same objects: the round of a cluster where everything fits is
    the same round, and unrestricted jobs keep the memoised placement)."""
    base = base_room(snapshot, rows)
    if not base:
        return state, {}
    jobs = {m.job_id: m for m in snapshot.managed}
    best = _copy(base)
    _freed(best, jobs, in_play)
    wait = set(waiting)
    sizes = [needs(jobs.get(j.id)) for a in state.apps for j in a.jobs if j.id in wait]
    if not sizes:
        return state, {}
    least = (min(c for c, _ in sizes), min(m for _, m in sizes))
    full = frozenset(n for n, r in best.items() if n in state.topology.node_gpus and not r.fits(*least))
    free = state.free
    if full:
        gone = frozenset(g for n in full for g in state.topology.node_gpus[n]) & free
        free = free - gone
    every = len(state.topology.node_gpus)
    cut: dict[str, frozenset[str]] = {}
    apps = []
    fitting: dict[tuple[int, int], frozenset[str]] = {}  # per distinct need: jobs share a few sizes
    for app in state.apps:
        new_jobs = []
        for job in app.jobs:
            cpus, mem = needs(jobs.get(job.id))
            if job.id in wait and (cpus or mem):
                ok = fitting.get((cpus, mem))
                if ok is None:
                    ok = fitting[(cpus, mem)] = frozenset(
                        n for n in state.topology.node_gpus if n not in best or n in full or best[n].fits(cpus, mem))
                if len(ok) < every:
                    allowed = ok if job.allowed_nodes is None else job.allowed_nodes & ok
                    if allowed != job.allowed_nodes:
                        cut[job.id] = allowed
                        job = replace(job, allowed_nodes=allowed)
            new_jobs.append(job)
        apps.append(app if all(a is b for a, b in zip(new_jobs, app.jobs, strict=True)) else
                    replace(app, jobs=tuple(new_jobs)))
    if not cut and free is state.free:
        return state, {}
    return replace(state, apps=tuple(apps), free=free, job_index=None), cut


@dataclass(frozen=True)
class Checked:
    """A round's grants after the check: `decision` with the grants that fit (some moved), `moved` (job ->
    (old GPUs, new GPUs)), and `short` (job -> the nodes where it would fit) for those that do not fit."""

    decision: Decision
    moved: Mapping[str, tuple[frozenset[int], frozenset[int]]]
    short: Mapping[str, frozenset[str]]


def _fits_on(room: Mapping[str, Room], nodes: Iterable[str], cpus: int, mem: int) -> bool:
    return all(n not in room or room[n].fits(cpus, mem) for n in nodes)


def _place(job: Job, gpus: int, pool: Pool, within: list[str]) -> frozenset[int] | None:
    """The tightest free placement of `job`'s gang of `gpus` (its shape, on its allowed nodes) among `within`."""
    among = within if job.allowed_nodes is None else [n for n in within if n in job.allowed_nodes]
    shaped = job.gpus_per_node is not None and job.nodes is not None
    found = pool.place_among(gpus, job.gpus_per_node if shaped else None, job.nodes if shaped else None, among)
    return found[0] if found is not None else None


def check(decision: Decision, state: ClusterState, snapshot: Snapshot, rows: Mapping[str, JobRow]) -> Checked:
    """The round's grants against the room of their nodes, in grant order (module docstring)."""
    room = base_room(snapshot, rows)
    if not room or not decision.grants:
        return Checked(decision, {}, {})
    jobs = {m.job_id: m for m in snapshot.managed}
    topo: Topology = state.topology
    _freed(room, jobs, (p.job_id for p in decision.preemptions))
    granted = frozenset().union(*(g.gpus for g in decision.grants))
    pool: Pool | None = None
    index: dict[str, Job] | None = None
    kept: list[Grant] = []
    moved: dict[str, tuple[frozenset[int], frozenset[int]]] = {}
    short: dict[str, frozenset[str]] = {}
    for g in decision.grants:
        cpus, mem = needs(jobs.get(g.job_id))
        if not (cpus or mem) or _fits_on(room, g.nodes, cpus, mem):
            for n in g.nodes:
                if n in room:
                    room[n].add(cpus, mem, -1)
            kept.append(g)
            continue
        ok = [n for n in topo.node_gpus if n not in room or room[n].fits(cpus, mem)]
        if pool is None:
            pool = Pool(topo, state.free - granted - decision.reserved_gpus)
            index = {j.id: j for a in state.apps for j in a.jobs}
        job = index.get(g.job_id) if index is not None else None
        found = _place(job, len(g.gpus), pool, ok) if job is not None and ok else None
        if found is not None and topo.level_of(found) <= topo.level_of(g.gpus):
            pool.take(found)
            nodes = topo.nodes_of(found)
            for n in nodes:
                if n in room:
                    room[n].add(cpus, mem, -1)
            kept.append(replace(g, gpus=found, nodes=nodes, level=topo.level_of(found).label))
            moved[g.job_id] = (g.gpus, found)
            continue
        short[g.job_id] = frozenset(ok)
    if not moved and not short:
        return Checked(decision, {}, {})
    return Checked(replace(decision, grants=tuple(kept)), moved, short)


def cut_to(state: ClusterState, short: Mapping[str, frozenset[str]]) -> ClusterState:
    """The state with each job of `short` allowed only on the nodes given (within its own allowed nodes)."""
    apps = []
    for app in state.apps:
        if not any(j.id in short for j in app.jobs):
            apps.append(app)
            continue
        new = tuple(replace(j, allowed_nodes=short[j.id] if j.allowed_nodes is None else j.allowed_nodes & short[j.id])
                    if j.id in short else j for j in app.jobs)
        apps.append(replace(app, jobs=new))
    return replace(state, apps=tuple(apps), job_index=None)
