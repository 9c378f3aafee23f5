"""An in-memory Slurm for the daemon's unit tests: implements SlurmBackend on simulated time.

It behaves like the parts of slurmctld the daemon relies on: held jobs never start; a released job starts
as soon as its pinned nodes (or, unpinned, any nodes) have room, with GPU indices of Slurm's choosing
(lowest free, or highest with ``pick="high"`` to check that the daemon does not assume its own choice);
requeuehold puts a job back held with the same id and restart count + 1; a job's work survives a requeue
only up to its last checkpoint (taken when it receives the warning). Tests drive time with
:meth:`advance`, and can break things: :attr:`fail` makes an action raise, :meth:`node_down`,
:meth:`cancel`, :meth:`user_requeue`, :meth:`admin_release`, unmanaged jobs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from themis_slurm.core.topology import Topology
from themis_slurm.slurm.actions import check_still_requeueable
from themis_slurm.slurm.limits import Limits, LimitView, count_usage
from themis_slurm.slurm.model import ManagedJob, NodeRoom, Snapshot


class SlurmError(RuntimeError):
    """What a failing Slurm command raises in the fake."""


@dataclass
class FakeJob:
    job_id: str
    user: str
    app: str
    gpus: int
    work_s: float  # true run time needed on its GPUs
    gpus_per_node: int | None = None
    nodes: int | None = None
    est_s: float | None = None
    time_limit_s: float | None = None
    requeue_ok: bool = True
    profile: str | None = None
    submit_time: float = 0.0
    state: str = "PENDING"
    held: bool = True
    start_time: float | None = None
    node_gpus: dict[str, int] = field(default_factory=dict)
    gpu_ids: frozenset[int] = frozenset()
    required_nodes: tuple[str, ...] = ()
    progress: float | None = None
    progress_error: str | None = None
    restart_cnt: int = 0
    done_s: float = 0.0
    ckpt_s: float = 0.0  # the work its last save kept (a requeue resumes from here)
    #: when it saves, the truth: None at the warning (SIGUSR1), math.inf never, else every so many seconds;
    #: `declared`: its owner said so (--themis-ckpt), and the snapshot shows it
    saves: float | None = None
    declared: bool = False
    says: float | None | str = "truth"  # what its owner declared, when not the truth (a false claim)
    run_done0: float = 0.0
    warnings: int = 0
    managed: bool = True
    blocked: str | None = None  # what the job's own record says keeps Slurm from starting it (BeginTime, ...)
    limit_reason: str | None = None  # a limit only seen after release (AssocGrpGRES): released, it stays pending
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_max_tasks: int | None = None
    allowed_nodes: frozenset[str] | None = None  # where Slurm would start it (its type, -w, -x): else refused
    account: str = ""  # the Slurm account it runs under (-A)
    qos: str = "normal"  # its QOS (with `account`: the limits of FakeSlurm.limits it counts towards)
    cpus_per_node: int = 0  # CPUs and MiB of memory it takes on each of its nodes (FakeSlurm.node_cpus/mem)
    mem_per_node: int = 0

    @property
    def slurm_id(self) -> int:
        return int(self.job_id.split("_")[0])


class FakeSlurm:
    """SlurmBackend on a Topology, with a simulated clock."""

    def __init__(self, topology: Topology, now: float = 1_000_000.0, pick: str = "low",
                 auto_schedule: bool = True) -> None:
        self.topo = topology
        self.now = now
        self.pick = pick
        self.auto_schedule = auto_schedule
        self.jobs: dict[str, FakeJob] = {}
        self.down: set[str] = set()
        self.calls: list[tuple[str, str]] = []
        self.completed: list[str] = []
        self.ended: dict[str, str] = {}  # job id -> terminal state, listed in snapshots (as MinJobAge keeps them)
        self.ended_times: dict[str, tuple[float | None, float | None]] = {}  # job id -> (StartTime, EndTime)
        self.snapshots = 0
        self.fail: dict[str, Exception] = {}  # action -> raised BEFORE acting
        self.fail_after: dict[str, BaseException] = {}  # action -> raised AFTER acting (crash after the RPC)
        self.starts_seen: dict[str, int] = {}
        self._next = 100
        self._pins: dict[str, dict[str, int]] = {}  # job -> per-node GPU counts of its pin
        self.gpu_history: list[dict[int, str]] = []
        #: QOS/association limits Slurm enforces (slurm/limits.py): a released job over one stays pending
        #: with the limit's reason, and snapshots carry them as the CLI backend reads them
        self.limits: Limits | None = None
        #: CPUs and MiB of memory per node (empty: not modelled): a job starts only where they are free, and
        #: snapshots carry what is free as the CLI backend reads it (Snapshot.room)
        self.node_cpus: dict[str, int] = {}
        self.node_mem: dict[str, int] = {}

    # -------------------------------------------------------------------------------- test controls
    def submit(self, user: str, app: str, gpus: int, work_s: float, **kw: object) -> str:
        self._next += 1
        jid = str(self._next)
        self.jobs[jid] = FakeJob(jid, user, app, gpus, work_s, submit_time=self.now, **kw)  # type: ignore[arg-type]
        return jid

    def add_unmanaged(self, node: str, gpus: int) -> str:
        jid = self.submit("carol", "cpu", gpus, 1e12, managed=False, held=False)
        j = self.jobs[jid]
        free = self._free_on(node)
        if len(free) < gpus:
            raise ValueError("no room for the unmanaged job")
        self._run(j, {node: gpus})
        return jid

    def advance(self, dt: float) -> None:
        """Time passes: running jobs progress and may complete; released jobs may start."""
        self.now += dt
        for j in list(self.jobs.values()):
            if j.state == "RUNNING":
                j.done_s += dt
                if j.saves is not None and j.saves != math.inf and j.start_time is not None:
                    j.ckpt_s = j.run_done0 + math.floor((self.now - j.start_time) / j.saves) * j.saves
                if j.done_s >= j.work_s:
                    del self.jobs[j.job_id]
                    self.completed.append(j.job_id)
                    self.ended[j.job_id] = "COMPLETED"
                    self.ended_times[j.job_id] = (j.start_time, self.now - (j.done_s - j.work_s))
        if self.auto_schedule:
            self.schedule()

    def cancel(self, job_id: str, state: str = "CANCELLED") -> None:
        """The job ends without completing (scancel; `state` FAILED, TIMEOUT, ... for other endings)."""
        j = self.jobs.pop(job_id, None)
        if j is not None:
            self.ended[job_id] = state
            self.ended_times[job_id] = (j.start_time, self.now if j.start_time is not None else None)

    def forget(self) -> None:
        """slurmctld purges finished jobs (MinJobAge passed): later snapshots no longer list them."""
        self.ended.clear()
        self.ended_times.clear()

    def user_requeue(self, job_id: str) -> None:
        """`scontrol requeue` by the owner: pending, NOT held."""
        j = self.jobs[job_id]
        self._stop(j)
        j.held = False

    def admin_release(self, job_id: str) -> None:
        self.jobs[job_id].held = False
        if self.auto_schedule:
            self.schedule()

    def node_down(self, node: str) -> None:
        """Node fails: its jobs are requeued by Slurm (pending, not held); its GPUs become unavailable."""
        self.down.add(node)
        for j in list(self.jobs.values()):
            if j.state == "RUNNING" and node in j.node_gpus:
                self._stop(j)
                j.held = False

    def node_up(self, node: str) -> None:
        self.down.discard(node)

    # -------------------------------------------------------------------------------- Slurm's scheduler
    def _free_on(self, node: str) -> list[int]:
        used = {g for j in self.jobs.values() if j.state == "RUNNING" for g in j.gpu_ids}
        ids = [g for g in self.topo.node_gpus.get(node, ()) if g not in used]
        return ids if self.pick == "low" else list(reversed(ids))

    def _room(self, node: str) -> tuple[int | None, int | None]:
        """Free CPUs and memory of `node` (None where not modelled)."""
        running = [j for j in self.jobs.values() if j.state == "RUNNING" and node in j.node_gpus]
        cpus = self.node_cpus.get(node)
        mem = self.node_mem.get(node)
        return (None if cpus is None else cpus - sum(j.cpus_per_node for j in running),
                None if mem is None else mem - sum(j.mem_per_node for j in running))

    def _fits(self, j: FakeJob, node: str) -> bool:
        cpus, mem = self._room(node)
        return (cpus is None or j.cpus_per_node <= cpus) and (mem is None or j.mem_per_node <= mem)

    def _run(self, j: FakeJob, node_gpus: Mapping[str, int]) -> None:
        ids: set[int] = set()
        for node, n in node_gpus.items():
            ids.update(self._free_on(node)[:n])
        j.state, j.start_time, j.node_gpus, j.gpu_ids = "RUNNING", self.now, dict(node_gpus), frozenset(ids)
        j.run_done0 = j.done_s
        self.starts_seen[j.job_id] = self.starts_seen.get(j.job_id, 0) + 1
        self._check_no_double()

    def _stop(self, j: FakeJob) -> None:
        j.state, j.start_time, j.node_gpus, j.gpu_ids = "PENDING", None, {}, frozenset()
        j.done_s = j.ckpt_s
        j.restart_cnt += 1
        j.submit_time = self.now  # as Slurm does: a requeue resets SubmitTime to its own moment

    def _check_no_double(self) -> None:
        owner: dict[int, str] = {}
        for j in self.jobs.values():
            if j.state == "RUNNING":
                for g in j.gpu_ids:
                    assert g not in owner, f"GPU {g} held by {owner[g]} and {j.job_id}"
                    owner[g] = j.job_id
        self.gpu_history.append(owner)

    def schedule(self) -> None:
        """Starts every released pending job that fits (pinned: on its nodes; unpinned: first fit)."""
        for j in sorted(self.jobs.values(), key=lambda x: x.slurm_id):
            if j.state != "PENDING" or j.held or j.blocked or j.limit_reason:
                continue
            view = self._limit_view()
            if view is not None and view.blocked(j.user, j.account, "gpu", j.qos, j.gpus) is not None:
                continue  # QOS/association limit (Slurm's reason: QOSMaxGRESPerUser, AssocGrpGRES, ...)
            if j.array_max_tasks and sum(1 for o in self.jobs.values() if o.array_job_id == j.array_job_id
                                         and o.state == "RUNNING") >= j.array_max_tasks:
                continue  # JobArrayTaskLimit
            if j.required_nodes:
                per = self._pinned_counts(j)
                if per and all(node not in self.down and len(self._free_on(node)) >= n and self._fits(j, node)
                               for node, n in per.items()):
                    self._run(j, per)
                continue
            plan = self._first_fit(j)
            if plan:
                self._run(j, plan)

    def _pinned_counts(self, j: FakeJob) -> dict[str, int]:
        nodes = list(j.required_nodes)
        if j.gpus_per_node:
            return dict.fromkeys(nodes, j.gpus_per_node)
        return self._pins.get(j.job_id, {})

    def _first_fit(self, j: FakeJob) -> dict[str, int]:
        left, plan = j.gpus, {}
        per_node = j.gpus_per_node or j.gpus
        for node in self.topo.nodes:
            if node in self.down or not self._fits(j, node):
                continue
            n = min(len(self._free_on(node)), per_node, left)
            if j.gpus_per_node and n < j.gpus_per_node:
                continue
            if n:
                plan[node], left = n, left - n
            if not left:
                return plan
        return {}

    # -------------------------------------------------------------------------------- SlurmBackend
    def _enter(self, action: str, job: ManagedJob) -> FakeJob:
        self.calls.append((action, job.job_id))
        if action in self.fail:
            raise self.fail[action]
        j = self.jobs.get(job.job_id)
        if j is None:
            raise SlurmError(f"{action}: Invalid job id specified ({job.job_id})")
        return j

    def _leave(self, action: str) -> None:
        if action in self.fail_after:
            raise self.fail_after.pop(action)

    def snapshot(self) -> Snapshot:
        self.snapshots += 1
        if "snapshot" in self.fail:
            raise self.fail["snapshot"]
        running = [j for j in self.jobs.values() if j.state == "RUNNING"]
        used_m = frozenset(g for j in running if j.managed for g in j.gpu_ids)
        used_u = frozenset(g for j in running if not j.managed for g in j.gpu_ids)
        down = frozenset(g for n in self.down for g in self.topo.node_gpus.get(n, ()))
        free = frozenset(range(self.topo.size)) - used_m - used_u - down
        view = self._limit_view()
        managed = tuple(self._managed(j, view) for j in sorted(self.jobs.values(), key=lambda x: x.slurm_id)
                        if j.managed)
        return Snapshot(time=self.now, topology=self.topo, free=free, unmanaged=used_u,
                        unavailable=down - used_m - used_u, managed=managed, slurm_calls=2,
                        managed_used=used_m, finished=dict(self.ended),
                        finished_times=dict(self.ended_times), limits=view,
                        room={n: NodeRoom(*self._room(n)) for n in self.topo.node_gpus
                              if n in self.node_cpus or n in self.node_mem})  # fmt: skip

    def _limit_view(self) -> LimitView | None:
        if self.limits is None or not self.limits.enforced:
            return None
        return LimitView(self.limits, count_usage(self.limits, (
            (j.state, j.user, j.account, "gpu", j.qos, j.gpus) for j in self.jobs.values())))

    def _managed(self, j: FakeJob, view: LimitView | None = None) -> ManagedJob:
        blocked = j.blocked if j.state == "PENDING" else None
        if blocked is None and j.state == "PENDING" and view is not None:
            blocked = view.blocked(j.user, j.account, "gpu", j.qos, j.gpus)
        return ManagedJob(
            job_id=j.job_id, slurm_id=j.slurm_id, app_key=f"{j.user}/{j.app}", user=j.user, state=j.state,
            held=j.held, gpus=j.gpus, gpus_per_node=j.gpus_per_node, nodes=j.nodes,
            node_gpus=dict(j.node_gpus), gpu_ids=j.gpu_ids, est_s=j.est_s, time_limit_s=j.time_limit_s,
            profile=j.profile, progress=j.progress, progress_error=j.progress_error, requeue_ok=j.requeue_ok,
            restart_cnt=j.restart_cnt, submit_time=j.submit_time, start_time=j.start_time,
            required_nodes=j.required_nodes, priority=0 if j.held else 1,
            reason="JobHeldUser" if j.held else (j.limit_reason or ""), blocked=blocked,
            array_job_id=j.array_job_id, array_task_id=j.array_task_id, array_max_tasks=j.array_max_tasks,
            allowed_nodes=j.allowed_nodes, limits="test limits" if j.allowed_nodes is not None else "",
            account=j.account, qos=j.qos, partition="gpu", cpus_per_node=j.cpus_per_node,
            mem_per_node=j.mem_per_node, ckpt_s=(j.saves if j.says == "truth" else j.says) if j.declared else None,  # type: ignore[arg-type]
            ckpt_given=j.declared,
        )  # fmt: skip

    def start(self, job: ManagedJob, node_gpus: Mapping[str, int]) -> None:
        j = self._enter("start", job)
        if j.state != "PENDING":
            raise SlurmError(f"start: job {j.job_id} is {j.state}")
        if j.allowed_nodes is not None and not set(node_gpus) <= j.allowed_nodes:
            raise SlurmError(f"start: job {j.job_id} pinned to {sorted(node_gpus)}: ReqNodeNotAvail (BadConstraints)")
        self._pins[j.job_id] = dict(node_gpus)
        j.required_nodes = tuple(sorted(node_gpus))
        j.held = False
        if self.auto_schedule:
            self.schedule()
        self._leave("start")

    def warn(self, job: ManagedJob) -> None:
        j = self._enter("warn", job)
        if j.state == "RUNNING":
            j.warnings += 1
            if j.saves is None:
                j.ckpt_s = j.done_s  # the job checkpoints on SIGUSR1
        self._leave("warn")

    def requeue(self, job: ManagedJob) -> None:
        if job.job_id not in self.jobs and job.job_id in self.ended:  # as the adapter's live state check
            self.calls.append(("requeue", job.job_id))
            check_still_requeueable(job, self.ended[job.job_id])
        j = self._enter("requeue", job)
        if j.state == "RUNNING":
            self._stop(j)
        j.held = True
        j.required_nodes = ()
        self._leave("requeue")

    def hold(self, job: ManagedJob) -> None:
        j = self._enter("hold", job)
        if j.state == "PENDING":
            j.held = True
            j.required_nodes = ()
        self._leave("hold")

    def release_unpinned(self, job: ManagedJob) -> None:
        j = self._enter("release_unpinned", job)
        if j.state == "PENDING":
            j.required_nodes = ()
            j.held = False
        self._leave("release_unpinned")

    # -------------------------------------------------------------------------------- assertions
    def mutations(self) -> list[tuple[str, str]]:
        return list(self.calls)
