"""Neutral records of Slurm jobs and nodes, independent of which command or API version produced them.

Parsers (`parse` for ``squeue/sinfo --json``, `scontrol` for ``scontrol show ... -o``) fill these; the
adapter turns them into core-model objects. Everything is normalised here so nobody downstream has to
know that 22.05 prints ``"state": "idle"`` and 24.11 ``"state": ["IDLE"]``: states are upper-case,
unset numbers are None, node lists are expanded, times are Unix epoch seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# Base job states (JOB_STATE_BASE in slurm.h) ...
JOB_BASE_STATES = frozenset({
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
    "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY",
})
# ... and flag states Slurm shows instead of / next to them (squeue prints COMPLETING, REQUEUED, ...).
JOB_FLAG_STATES = frozenset({
    "COMPLETING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "RESV_DEL_HOLD",
    "REVOKED", "SIGNALING", "SPECIAL_EXIT", "STAGE_OUT", "STOPPED", "LAUNCH_FAILED", "UPDATE_DB",
    "POWER_UP_NODE", "RECONFIG_FAIL",
})
JOB_ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "REQUEUED",
                               "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED"})
HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin", "job_requeued_in_held_state"})

NODE_BASE_STATES = frozenset({"IDLE", "MIXED", "ALLOCATED", "DOWN", "ERROR", "FUTURE", "UNKNOWN"})
# Any of these makes a node unusable for new work. RESERVED counts too: the node belongs to an advance
# reservation, and jobs Themis places are not in it. COMPLETING is fine (epilog still running).
NODE_UNAVAILABLE_STATES = frozenset({
    "DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "ERROR", "FUTURE", "UNKNOWN", "INVAL",
    "MAINT", "MAINTENANCE", "NOT_RESPONDING", "NO_RESPOND", "POWERED_DOWN", "POWER_DOWN", "POWERING_DOWN",
    "POWERING_UP", "POWER_UP", "REBOOT_REQUESTED", "REBOOT_ISSUED", "REBOOT", "RESERVED", "NOT_READY",
    "INVALID_REG", "BLOCKED",
})


@dataclass(frozen=True)
class SlurmJob:
    """One job (or one array task) as Slurm reports it.

    GPU fields: ``gpus_per_node`` is the per-node request when the job gave one (``--gres=gpu:N``),
    otherwise what it holds per node when uniform, otherwise ``gpus_total // num_nodes`` when that
    divides, else 0. ``gpus_total`` is allocated GPUs for started jobs, requested GPUs otherwise.
    ``gpu_indices[node]`` lists GRES indices held on each allocated node (empty dict while pending).
    Times: epoch seconds or None when unset; ``time_limit_s`` None means unlimited. ``start_time`` is
    None while pending (Slurm leaves the previous run's or an estimated start there) and ``end_time`` is
    None while active (Slurm puts the projected end there).
    """

    job_id: int
    array_job_id: int | None
    array_task_id: int | None
    array_task_spec: str  # pending array remainder such as "3-7%2"; "" otherwise
    name: str
    user_name: str
    user_id: int | None
    partition: str
    state: str  # base state (PENDING, RUNNING, ...), or COMPLETING / REQUEUED while those flags are set
    state_flags: frozenset[str]
    state_reason: str
    priority: int | None
    held: bool
    num_nodes: int
    gpus_per_node: int
    gpus_total: int
    gpu_type: str | None
    node_list: str  # the allocated hostlist as printed ("" while pending)
    nodes: tuple[str, ...]  # node_list expanded
    required_nodes: tuple[str, ...]  # ReqNodeList, expanded
    excluded_nodes: tuple[str, ...]  # ExcNodeList, expanded
    gpu_indices: dict[str, tuple[int, ...]] = field(hash=False)
    time_limit_s: int | None = None
    submit_time: int | None = None
    start_time: int | None = None
    end_time: int | None = None
    comment: str = ""
    admin_comment: str = ""
    restart_cnt: int = 0
    requeue: bool = True
    batch_flag: bool = True
    tres_per_node: str = ""
    eligible_time: int | None = None  # BeginTime while pending (None: unset or 0)
    dependency: str = ""  # remaining dependencies as Slurm prints them: "afterok:12(unfulfilled),..."
    array_max_tasks: int | None = None  # the array's %N throttle (None: no throttle)
    account: str = ""  # the Slurm account it runs under ("": none shown, as without accounting)
    qos: str = ""  # its QOS ("": none shown): which QOS limits it counts towards (slurm/limits.py)
    #: CPUs and MiB of memory it needs on each of its nodes (slurm/resources.per_node_needs; 0: unknown)
    cpus_per_node: int = 0
    mem_per_node: int = 0
    constraint: str = ""  # its --constraint as Slurm prints it ("h100&ib"), "" without one

    @property
    def is_array_task(self) -> bool:
        """True for one task of a job array (array_task_id set)."""
        return self.array_task_id is not None

    @property
    def is_active(self) -> bool:
        """Still holds or wants resources (pending, running, suspended, completing, ...)."""
        return self.state in JOB_ACTIVE_STATES


@dataclass(frozen=True)
class NodeGpus:
    """GPUs of one type configured on a node (from ``gpu:a100:4(S:0-1)``)."""

    type: str | None
    count: int
    sockets: tuple[int, ...] | None


@dataclass(frozen=True)
class SlurmNode:
    """One node. ``states`` holds the base state and every flag (``{"IDLE", "DRAIN"}``), upper-case.

    ``available`` is False when any state in `NODE_UNAVAILABLE_STATES` is present: such a node takes no
    new work even if it has idle GPUs (running jobs on a DRAINING node keep going).
    """

    name: str
    state: str  # base state
    states: frozenset[str]
    available: bool
    gpus: tuple[NodeGpus, ...]
    gpu_indices_used: tuple[int, ...]
    gpus_used: int
    partitions: tuple[str, ...]
    reason: str = ""
    cpus: int | None = None
    cpus_alloc: int | None = None  # CPUs allocated to jobs now (None: not reported)
    memory: int | None = None  # RealMemory, MiB
    memory_alloc: int | None = None  # memory allocated to jobs now, MiB (0 where memory is not consumed)
    features: frozenset[str] = frozenset()  # active features (what --constraint is matched against)

    @property
    def gpu_count(self) -> int:
        """Configured GPUs of all types."""
        return sum(g.count for g in self.gpus)

    @property
    def gpu_type(self) -> str | None:
        """The GPU type when the node has exactly one (the usual case)."""
        types = {g.type for g in self.gpus if g.count}
        return types.pop() if len(types) == 1 else None

    @property
    def gpus_free(self) -> int:
        return max(0, self.gpu_count - self.gpus_used)


# A flag Slurm may print alone (22.05 prints one word) -> the base state it implies.
_FLAG_BASE = {
    "CONFIGURING": "RUNNING", "RESIZING": "RUNNING", "SIGNALING": "RUNNING", "STOPPED": "RUNNING",
    "POWER_UP_NODE": "RUNNING", "REQUEUE_HOLD": "PENDING", "REQUEUE_FED": "PENDING",
    "SPECIAL_EXIT": "PENDING", "RESV_DEL_HOLD": "PENDING", "STAGE_OUT": "COMPLETING",
}


def normalise_job_state(raw: str | list[str] | tuple[str, ...] | None) -> tuple[str, frozenset[str]]:
    """Slurm's job_state in any shape -> (state, flags).

    22.05 gives one word (``"PENDING"``, or a flag alone like ``"COMPLETING"``); v0.0.40+ a list
    (``["RUNNING", "COMPLETING"]``). ``state`` is COMPLETING or REQUEUED when those flags are present
    (the job still holds its nodes), else the base state; a lone flag maps to the base state it implies
    (``REQUEUE_HOLD`` -> PENDING, ``CONFIGURING`` -> RUNNING). Every other word goes to ``flags``.
    """
    words: list[str]
    if raw is None:
        words = []
    elif isinstance(raw, str):
        words = [w for w in raw.replace("+", ",").replace(" ", ",").split(",") if w]
    else:
        words = [str(w) for w in raw]
    words = [w.strip().upper() for w in words if w.strip()]
    if not words:
        return "UNKNOWN", frozenset()
    base = next((w for w in words if w in JOB_BASE_STATES), None)
    implied = next((_FLAG_BASE[w] for w in words if w in _FLAG_BASE), None)
    shown = next((w for w in ("COMPLETING", "REQUEUED") if w in words), None)
    state = shown or base or implied or words[0]
    return state, frozenset(w for w in words if w != state)


# sinfo's short state names (22.05 prints e.g. "mixed", "drained", "alloc"); map them to canonical ones.
_NODE_ALIASES = {"ALLOC": "ALLOCATED", "MIX": "MIXED", "DRAINED": "DRAIN", "DRNG": "DRAINING",
                 "COMP": "COMPLETING", "RESV": "RESERVED", "NPC": "PERFCTRS", "MAINTENANCE": "MAINT",
                 "NO_RESPOND": "NOT_RESPONDING", "POWER_DOWN": "POWER_DOWN", "IDLE": "IDLE"}


def normalise_node_state(raw: str | list[str] | tuple[str, ...] | None,
                         flags: list[str] | tuple[str, ...] = ()) -> tuple[str, frozenset[str]]:
    """Node state in any shape (``"idle"``, ``"IDLE+DRAIN"``, ``"mixed"``, ``["IDLE", "DRAIN"]``, plus
    separate 22.05 ``state_flags``) -> (base state, all states incl. base).

    ``DRAIN`` on a node with allocated work is reported as both ``DRAIN`` and ``DRAINING`` (what sinfo
    calls ``drng``); on an idle node as ``DRAIN`` (sinfo's ``drained``).
    """
    if raw is None:
        words: list[str] = []
    elif isinstance(raw, str):
        words = raw.replace("+", ",").split(",")
    else:
        words = [str(w) for w in raw]
    words += [str(f) for f in flags]
    states: set[str] = set()
    for w in words:
        w = w.strip().rstrip("*~#!%$@^-").upper()
        if w:
            states.add(_NODE_ALIASES.get(w, w))
    base = next((s for s in ("DOWN", "ALLOCATED", "MIXED", "IDLE", "ERROR", "FUTURE", "UNKNOWN")
                 if s in states), None)
    if base is None:
        base = "UNKNOWN"
        states.add(base)
    if "DRAIN" in states and base in ("ALLOCATED", "MIXED"):
        states.add("DRAINING")
    return base, frozenset(states)


def node_available(states: frozenset[str]) -> bool:
    """True when no state in `NODE_UNAVAILABLE_STATES` is present."""
    return not (states & NODE_UNAVAILABLE_STATES)


def job_is_held(state: str, flags: frozenset[str], priority: int | None, reason: str) -> bool:
    """A waiting job that will not start until released: priority 0 or a JobHeld* reason."""
    waiting = state in ("PENDING", "REQUEUED") or "PENDING" in flags
    return waiting and (priority == 0 or reason in HELD_REASONS)


def derive_gpu_counts(*, started: bool, num_nodes: int, per_node: int, per_job: int, alloc: int, req: int,
                      held: Mapping[str, tuple[int, ...]]) -> tuple[int, int]:
    """(gpus_total, gpus_per_node) following the rule in SlurmJob's docstring."""
    held_counts = [len(v) for v in held.values()]
    if started and held_counts and sum(held_counts):
        total = sum(held_counts)
    elif started and alloc:
        total = alloc
    elif per_node:
        total = per_node * num_nodes
    elif per_job:
        total = per_job
    else:
        total = req
    if per_node:
        per = per_node
    elif started and held_counts and len(set(held_counts)) == 1:
        per = held_counts[0]
    elif num_nodes and total % num_nodes == 0:
        per = total // num_nodes
    else:
        per = 0
    return total, per
