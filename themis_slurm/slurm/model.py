"""What the Slurm adapter hands to the daemon, and the interface the daemon drives it through.

The daemon never sees Slurm commands or JSON: it gets one immutable `Snapshot` per cycle and calls the
five `SlurmBackend` actions. Keeping this seam narrow is what lets a second backend (pyslurm, once a
Slurm with a matching pyslurm is reachable) slot in without touching the scheduler, and lets the
daemon's tests use an in-memory fake.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from themis_slurm.core.topology import Topology

if TYPE_CHECKING:
    from themis_slurm.slurm.limits import LimitView


@dataclass(frozen=True, slots=True)
class ManagedJob:
    """One job (or one array task) that Themis schedules, in the daemon's terms."""

    job_id: str  # Slurm id as users see it: "123" or "123_4" for array tasks
    slurm_id: int  # the numeric JobId to pass to scontrol/scancel
    app_key: str  # "user/name": tagged "alice/sweep42", array "alice/array-120", standalone "alice/job-123"
    user: str
    state: str  # normalised Slurm state (PENDING, RUNNING, COMPLETING, ...)
    held: bool
    gpus: int  # total GPUs of the gang
    gpus_per_node: int | None
    nodes: int | None  # node count when the job fixed it (-N), else None
    node_gpus: Mapping[str, int]  # running: GPUs held per node
    gpu_ids: frozenset[int]  # running: dense core GPU ids (Topology ids) it holds; empty if unknown
    est_s: float | None  # work estimate from the trusted record (est=), else None
    time_limit_s: float | None
    profile: str | None  # model or sensitivity class from the record
    progress: float | None  # from the Comment `themis:progress=F` (0..1), None if absent
    progress_error: str | None  # message when the Comment's progress is malformed
    requeue_ok: bool  # batch job with requeue allowed
    restart_cnt: int
    submit_time: float
    start_time: float | None
    required_nodes: tuple[str, ...]
    priority: int | None
    partition: str = ""
    name: str = ""
    array_job_id: int | None = None
    array_task_id: int | None = None
    reason: str = ""  # Slurm's state_reason (JobHeldUser, Resources, AssocGrpGRES, ...)
    blocked: str | None = None  # why Slurm would not start it if Themis released it now (None: it would)
    array_max_tasks: int | None = None  # the array's %N throttle, None without one
    #: the managed nodes Slurm could start it on (partition, GPU type, the owner's -w and -x lists, features,
    #: nodes big enough for its CPUs and memory per node); None:
    #: any managed node. `limits` says what narrowed it, for `themis explain`
    allowed_nodes: frozenset[str] | None = None
    limits: str = ""
    user_nodes: tuple[str, ...] = ()  # the owner's -w list from the record: a pin is chosen inside it
    #: the Slurm account the job runs under (-A, else the user's default account; "" without accounting):
    #: its app's place in the account -> user -> app tree (core/tenancy.py)
    account: str = ""
    qos: str = ""  # its QOS: with `account`, the QOS and association limits it counts towards
    #: Slurm requeued it and it is still leaving its nodes (COMPLETING): pending again in a moment, not held
    #: unless whoever requeued it held it (snapshot.requeued_while_completing)
    requeued: bool = False
    #: CPUs and MiB of memory it needs on each node it runs on (slurm/resources.py; 0: none known)
    cpus_per_node: int = 0
    mem_per_node: int = 0
    #: when it saves its state, from the record (``--themis-ckpt``; slurm/options.Record.ckpt_s): None at
    #: Themis's warning, ``math.inf`` never, else every so many seconds; `ckpt_given`: the owner said so
    ckpt_s: float | None = None
    ckpt_given: bool = False


@dataclass(frozen=True, slots=True)
class NodeRoom:
    """What a node has free for new jobs now, as Slurm counts it: CPUs, and MiB of memory where memory is a
    consumable resource (None where it is not: SelectTypeParameters without MEMORY, or not reported)."""

    cpus: int | None
    mem: int | None

    def fits(self, cpus: int, mem: int) -> bool:
        """True when a job needing `cpus` CPUs and `mem` MiB on this node could start here now."""
        return room_fits(self.cpus, self.mem, cpus, mem)


def room_fits(free_cpus: int | None, free_mem: int | None, cpus: int, mem: int) -> bool:
    """Whether `cpus` CPUs and `mem` MiB fit what a node has free (None: not counted, never short)."""
    return (free_cpus is None or cpus <= free_cpus) and (free_mem is None or mem <= free_mem)


@dataclass(frozen=True)
class Snapshot:
    """The cluster as seen at one instant, restricted to what Themis manages."""

    time: float  # wall clock when read
    topology: Topology  # managed GPUs only (nodes of the managed partitions)
    free: frozenset[int]  # idle GPUs on schedulable nodes, not used by anyone
    unmanaged: frozenset[int]  # GPUs used by jobs Themis does not manage
    unavailable: frozenset[int]  # GPUs on drained/down/reserved/maint nodes (not in use)
    managed: tuple[ManagedJob, ...]  # active managed jobs (pending/running/completing), arrays per task
    slurm_calls: int  # Slurm commands run to build it
    warnings: tuple[str, ...] = ()  # malformed records/comments and other non-fatal oddities
    latency_s: float = 0.0  # wall time spent in Slurm commands for this snapshot
    managed_used: frozenset[int] = field(default_factory=frozenset)  # GPUs held by managed jobs
    #: managed jobs Slurm still lists in a terminal state (job id -> base state: COMPLETED, CANCELLED,
    #: FAILED, TIMEOUT, ...), for as long as slurmctld keeps them (MinJobAge): how a job that left ended
    finished: Mapping[str, str] = field(default_factory=dict)
    #: the same jobs' last run as Slurm timed it: job id -> (StartTime, EndTime), None where unset. A job's
    #: service is taken from these, not from when themisd happened to look (a cycle may have been late)
    finished_times: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)
    #: QOS and association limits with their use as Slurm counts it (slurm/limits.py); None: not read
    limits: LimitView | None = None
    #: managed node -> its free CPUs and memory (Slurm's totals minus what its jobs hold): what a grant
    #: must fit in besides GPUs (daemon/room.py). Empty: not known (nothing is checked)
    room: Mapping[str, NodeRoom] = field(default_factory=dict)


@dataclass(frozen=True)
class AdapterConfig:
    """How the adapter finds and reads the cluster.

    ``slurm_conf`` None means ``$SLURM_CONF`` or Slurm's default ``/etc/slurm/slurm.conf``; gres.conf and
    topology.conf are read from the same folder, as slurmctld does. ``managed_partitions`` must match
    job_submit.lua's ``managed_partitions``.
    """

    managed_partitions: tuple[str, ...] = ("gpu",)
    slurm_conf: str | None = None
    timeout_s: float = 30.0  # per Slurm command that reads
    #: per command of an action (start, warn, requeue, hold): short, so that one slow or stuck call (a
    #: controller that answers "try again later") delays the cycle's other actions by this much at most
    action_timeout_s: float = 10.0
    split_pcie_by_cores: bool = False  # see gres_conf: group unlinked GPUs by Cores= into islands


class SlurmBackend(Protocol):
    """Reads the cluster and applies decisions. Every action is idempotent and safe to retry."""

    def snapshot(self) -> Snapshot: ...

    def start(self, job: ManagedJob, node_gpus: Mapping[str, int]) -> None:
        """Pin (ReqNodeList + NumNodes), StartTime=now if requeued, then release."""
        ...

    def warn(self, job: ManagedJob) -> None:
        """Checkpoint warning: SIGUSR1 to the batch shell (``scancel --batch --signal=USR1``)."""
        ...

    def requeue(self, job: ManagedJob) -> None:
        """``scontrol requeuehold``, then clear the pin."""
        ...

    def hold(self, job: ManagedJob) -> None:
        """(Re)hold a pending job and clear its pin."""
        ...

    def release_unpinned(self, job: ManagedJob) -> None:
        """Hand the job back to Slurm: clear the pin, release."""
        ...
