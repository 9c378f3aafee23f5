"""`PyslurmBackend`: the `SlurmBackend` protocol over pyslurm 25.11 (libslurm calls instead of processes).

Reading. One snapshot = ``pyslurm.Jobs.load()`` + ``pyslurm.Nodes.load()`` (both with SHOW_ALL|SHOW_DETAIL),
mapped into the same `SlurmJob` / `SlurmNode` records the JSON parsers produce (`job_from_pyslurm`,
`node_from_pyslurm`), then the same pure `build_snapshot`; the topology and the gres.conf/topology.conf
cache are a `SnapshotReader`'s (`SnapshotReader.topology`), so both backends see the same GPU ids.

What pyslurm 25.11.2 gives, and what it does not (read from its job.pyx, node.pyx, tres.pyx, cstr.pyx):

* Per-node GPU indices of a job: ``Job.get_resource_layout_per_node()[node]["gres"]``, pyslurm's parse of
  Slurm's ``gres_detail`` (``{"gpu:a100": {"count": 2, "indexes": "0-1"}}``), the same data as squeue's
  ``gres_detail``. No CLI call is needed for it.
* Per-node *used* GPU indices of a node (``gres_used``): not exposed (`Node` has ``allocated_tres``, a
  count, and only when AccountingStorageTRES tracks gres/gpu). They are rebuilt from the jobs' layouts of
  the same load (what slurmctld's ``gres_used`` is made of); a running job whose layout is missing counts
  its GPUs as used-but-unknown on its nodes, so `build_snapshot` makes them unavailable, never free.
* ``tres_per_node``: ``Job.tres_per_node`` parses only ``name=count`` strings and returns None for Slurm's
  ``gres/gpu:2``; the (deprecated, still present) ``Job.gres_per_node`` dict is turned back into
  ``gres/gpu:2``. ``tres_per_job`` (``--gpus=N``) has no such twin: see fallback 4.
* Array task 0: pyslurm reads ``array_task_id`` 0 as unset; a task record (no ``array_tasks_waiting``)
  of an array is task 0 then. ``array_tasks_waiting`` drops the ``%N`` throttle, which is put back from
  ``array_tasks_parallel`` (Slurm's ``array_max_tasks``).
* Dependencies come only as pyslurm's dict, rebuilt into Slurm's ``type:job(status)`` items. pyslurm
  drops ``singleton(unfulfilled)`` (it compares the item with ``"singleton"``): a non-empty dependency
  whose dict lists nothing is kept as one unfulfilled dependency, so the job still counts as blocked.
* ``state_reason`` is Slurm's ``state_desc`` when set, else the reason name (squeue JSON keeps them
  apart); held is decided by priority 0 as well, so a Themis hold is recognised either way.
* Node GRES sockets (``(S:0-1)``) are not in ``configured_gres``: `NodeGpus.sockets` is None.

Acting. Through pyslurm where it can: ``Job.release()`` (priority INFINITE, as ``scontrol release``),
``Job.hold()`` (priority 0, an admin hold like ``scontrol hold``), ``Job.requeue(hold=True)``
(``requeuehold``), ``Job.send_signal("SIGUSR1", steps="batch")`` (``scancel --batch``), and
``Job.modify(JobSubmitDescription(begin_time="now"))`` (``StartTime=now``). The checks and refusals are
`actions.py`'s (`check_preemptible`, `check_warnable`, `pin_args`, `is_already_pending`). Fallbacks to the
CLI `Runner`, each because pyslurm 25.11 cannot do it:

1. The pin (``scontrol update JobId=X ReqNodeList=... NumNodes=N``): `JobSubmitDescription` sets
   min/max nodes only for submissions (``_create_job_submit_desc`` skips ``nodes`` when ``is_update``),
   so NumNodes cannot be updated; node list and count stay one update, as in `Actions`.
2. Clearing the pin (``ReqNodeList=``): pyslurm's string setter (``cstr.fmalloc``) leaves an empty value
   NULL, which slurmctld reads as "unchanged".
3. Every action on an array task: pyslurm's `Job` methods take the numeric JobId only
   (``slurm_update_job``, ``slurm_kill_job``, ``slurm_requeue``; no ``job_id_str``), and the numeric id of
   an array's own record acts on every task of the array. `Actions` addresses ``123_4`` instead.
4. The per-job GPU request (``tres_per_job``) of a managed job that has not started and shows no GPUs
   otherwise: pyslurm returns None for ``gres/gpu:4`` (see above), and ``tres_req_str`` names gres/gpu only
   when AccountingStorageTRES tracks it (not on the test clusters). One ``squeue --all --json`` when such
   a job is first seen; the answer is kept per job id while the job exists.

``warn`` loads the job (``Job.load``, which also loads its steps) and signals only if it is still RUNNING:
what ``scancel --state=RUNNING`` does, without scancel's 95 s retry loop (an RPC error surfaces at once). pyslurm calls
have no per-call timeout of ours: libslurm's MessageTimeout bounds them. Every pyslurm call is counted in
the runner's `CallStats` (``pyslurm Jobs.load``, ``pyslurm release``, ...), and a ``pyslurm.RPCError``
becomes a `PyslurmCallError` (a `SlurmCommandError`) naming the action, the job and Slurm's message.

``import pyslurm`` reads slurm.conf and ends the process when there is none, so it happens only in the
constructor, after ``SLURM_CONF`` is set from `AdapterConfig.slurm_conf`; see `backends.make_backend`.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from themis_slurm.slurm import hostlist
from themis_slurm.slurm.actions import (
    Actions,
    check_preemptible,
    check_still_pending,
    check_still_requeueable,
    check_warnable,
    is_already_pending,
    own_record,
)
from themis_slurm.slurm.errors import SlurmOutputError
from themis_slurm.slurm.gres import gpu_items, tres_gpus
from themis_slurm.slurm.job_builder import JobFields, build_job
from themis_slurm.slurm.model import AdapterConfig, ManagedJob, Snapshot
from themis_slurm.slurm.openapi import flag, number, text, time_epoch, words
from themis_slurm.slurm.parse import feature_set, load_json
from themis_slurm.slurm.records import (
    NodeGpus,
    SlurmJob,
    SlurmNode,
    node_available,
    normalise_job_state,
    normalise_node_state,
)
from themis_slurm.slurm.runner import Runner, SlurmCommandError, SubprocessRunner
from themis_slurm.slurm.snapshot import SQUEUE, SnapshotReader, build_snapshot, is_managed

SOURCE = "pyslurm"
# Dependency types pyslurm's dependency_str_to_dict keeps, in Slurm's order.
_DEP_TYPES = ("after", "afterany", "afterburstbuffer", "aftercorr", "afternotok", "afterok")
_DEP_UNSHOWN = "a dependency pyslurm cannot show(unfulfilled)"


class PyslurmCallError(SlurmCommandError):
    """A pyslurm call failed (``pyslurm.RPCError``): which call, which job, Slurm's errno and message.

    A `SlurmCommandError` so callers handle both backends alike; ``stderr`` holds Slurm's message.
    """

    def __init__(self, action: str, job_id: str | None, errno: int | None, message: str) -> None:
        super().__init__(("pyslurm", action, *((job_id,) if job_id else ())), errno, message)
        self.action = action
        self.job_id = job_id
        self.errno = errno
        what = f"pyslurm {action}" + (f" of job {job_id}" if job_id else "")
        code = f" (Slurm error {errno})" if errno is not None else ""
        RuntimeError.__init__(self, f"{what} failed{code}: {self.stderr or '(no message)'}")


# ------------------------------------------------------------------------------------- reading records
def _count_of(value: Any) -> Any:
    return value.get("count") if isinstance(value, Mapping) else value


def gres_request_text(gres: Mapping[str, Any] | None) -> str:
    """pyslurm's ``Job.gres_per_node`` (``{"gres/gpu:a100": 2}``) back as Slurm prints it: ``gres/gpu:a100:2``."""
    parts = []
    for key, value in (gres or {}).items():
        name = str(key).removeprefix("gres/").removeprefix("gres:")
        parts.append(f"gres/{name}:{_count_of(value)}")
    return ",".join(parts)


def tres_text(tres: Any) -> str:
    """The GRES part of a pyslurm ``TrackableResources`` (``.gres``: name -> GPU/resource with ``.count``)
    as a TRES string (``gres/gpu=4,gres/gpu:a100=4``) for `gres.tres_gpus`; None -> ``""``."""
    gres = getattr(tres, "gres", None) or {}
    return ",".join(f"gres/{name}={getattr(g, 'count', g)}" for name, g in gres.items())


def request_text(tres: Any) -> str:
    """The CPUs and memory of a pyslurm ``TrackableResources`` (``.cpu`` / ``.mem``, each with ``.count``;
    memory in MiB) as the TRES string squeue prints (``cpu=12,mem=12288M``); None -> ``""``."""
    parts = []
    for key, attr, unit in (("cpu", "cpu", ""), ("mem", "mem", "M")):
        count = number(getattr(getattr(tres, attr, None), "count", None))
        if count is not None:
            parts.append(f"{key}={count}{unit}")
    return ",".join(parts)


def _layout_gres_text(gres: Mapping[str, Any]) -> str:
    """One node's ``gres`` of a resource layout (``{"gpu:a100": {"count": 2, "indexes": "0-1"}}``) as
    Slurm's ``gres_detail`` string (``gpu:a100:2(IDX:0-1)``)."""
    parts = []
    for key, value in gres.items():
        if isinstance(value, Mapping):
            idx = value.get("indexes")
            if isinstance(idx, list | tuple):
                idx = ",".join(str(i) for i in idx)
            parts.append(f"{key}:{value.get('count')}(IDX:{text(idx) or 'N/A'})")
        else:
            parts.append(f"{key}:{value}")
    return ",".join(parts)


def job_gres_detail(job: Any) -> dict[str, str]:
    """Node -> ``gres_detail`` string of a started job, from ``get_resource_layout_per_node``; {} when the
    job has no layout or no GRES on any node (what an empty squeue ``gres_detail`` means)."""
    layout = job.get_resource_layout_per_node() or {}
    detail = {str(n): _layout_gres_text((info or {}).get("gres") or {}) for n, info in layout.items()}
    return detail if any(detail.values()) else {}


def _dependency_text(deps: Mapping[str, Any] | None) -> str:
    """pyslurm's dependency dict back as Slurm's string (``afterok:12(unfulfilled),...``)."""
    if not deps:
        return ""
    items = [f"{kind}:{j}" for kind in _DEP_TYPES for j in deps.get(kind) or ()]
    if deps.get("singleton"):
        items.append("singleton")
    if not items:  # something pyslurm could not parse (singleton(unfulfilled)): still a dependency
        items.append(_DEP_UNSHOWN)
    return ("?" if deps.get("satisfy") == "any" else ",").join(items)


def job_from_pyslurm(job: Any, tres_per_job: str = "") -> SlurmJob:
    """One ``pyslurm.Job`` as a SlurmJob, normalised like `parse.job_from_json` (job_builder.build_job).

    ``tres_per_job`` is the per-job request as Slurm prints it (``gres/gpu:4``), which pyslurm cannot
    show; the backend fills it from squeue when it matters (module docstring, fallback 4).
    """
    job_id = number(job.id)
    if job_id is None:
        raise SlurmOutputError(SOURCE, "job ?", "no job id")
    try:
        fields = _job_fields(job, job_id, tres_per_job)
    except (ValueError, TypeError, AttributeError) as exc:
        raise SlurmOutputError(SOURCE, f"job {job_id}", str(exc)) from None
    return build_job(fields, SOURCE)


def _job_fields(job: Any, job_id: int, tres_per_job: str) -> JobFields:
    """pyslurm's attributes of a job, in Slurm's spellings where pyslurm changed them (module docstring)."""
    array_task = number(job.array_task_id)
    waiting = text(job.array_tasks_waiting)
    max_tasks = number(job.array_tasks_parallel) or None
    if number(job.array_id) and array_task is None and not waiting:
        array_task = 0  # pyslurm reads task id 0 as unset; a pending remainder would list waiting tasks
    time_limit_min = number(job.time_limit)
    return JobFields(  # pyslurm 25.11 shows neither --cpus-per-gpu nor --mem-per-gpu: `cpus` and the request cover them
        job_id=job_id, state=text(job.state) or None, reason=text(job.state_reason), priority=number(job.priority),
        name=text(job.name), user_name=text(job.user_name), user_id=number(job.user_id),
        partition=text(job.partition), account=text(job.account), qos=text(job.qos),
        node_list=text(job.allocated_nodes), num_nodes=number(job.num_nodes), required_nodes=text(job.required_nodes),
        excluded_nodes=text(job.excluded_nodes), gres_detail=job_gres_detail(job),
        tres_per_node=gres_request_text(getattr(job, "gres_per_node", None)), tres_per_job=tres_per_job,
        tres_req=tres_text(job.requested_tres), tres_alloc=tres_text(job.allocated_tres),
        needs_tres=request_text(job.requested_tres), cpus=number(getattr(job, "cpus", None)),
        min_cpus_per_node=number(getattr(job, "min_cpus_per_node", None)),
        cpus_per_gpu=number(getattr(job, "cpus_per_gpu", None)),
        mem_per_node=number(getattr(job, "memory_per_node", None)),
        mem_per_cpu=number(getattr(job, "memory_per_cpu", None)),
        mem_per_gpu=number(getattr(job, "memory_per_gpu", None)), array_job_id=number(job.array_id),
        array_task_id=array_task, array_task_spec=f"{waiting}%{max_tasks}" if waiting and max_tasks else waiting,
        array_max_tasks=max_tasks, time_limit_s=None if time_limit_min is None else time_limit_min * 60,
        submit_time=time_epoch(job.submit_time), start_time=time_epoch(job.start_time),
        end_time=time_epoch(job.end_time), eligible_time=time_epoch(job.eligible_time), comment=text(job.comment),
        admin_comment=text(job.admin_comment), restart_cnt=number(job.requeue_count),
        requeue=flag(job.is_requeueable, default=True), batch_flag=flag(job.is_batch_job, default=True),
        dependency=_dependency_text(job.dependencies), constraint=text(getattr(job, "constraints", None)),
    )


def gpus_in_use(jobs: Iterable[SlurmJob], unreadable_nodes: Iterable[str] = ()) -> tuple[
        dict[str, set[int]], dict[str, int]]:
    """What slurmctld's per-node ``gres_used`` is made of: (node -> GPU indices held by started jobs,
    node -> GPUs held whose indices are unknown). A node of a job record that could not be read gets
    a huge unknown count, so none of its GPUs is taken for free."""
    used: dict[str, set[int]] = {}
    unknown: dict[str, int] = {n: 1 << 30 for n in unreadable_nodes}
    for j in jobs:
        if not j.is_active or j.state == "PENDING" or not j.nodes:
            continue
        if j.gpu_indices:
            for n, idx in j.gpu_indices.items():
                used.setdefault(n, set()).update(idx)
        elif j.gpus_total:
            per = j.gpus_per_node or -(-j.gpus_total // len(j.nodes))
            for n in j.nodes:
                unknown[n] = unknown.get(n, 0) + per
    return used, unknown


def node_from_pyslurm(node: Any, used: Iterable[int] = (), unknown: int = 0) -> SlurmNode:
    """One ``pyslurm.Node`` as a SlurmNode, normalised like `parse.node_from_json`.

    ``used`` / ``unknown`` come from `gpus_in_use` (pyslurm has no per-node ``gres_used``): the GPUs in
    use are at least those and at least what ``allocated_tres`` counts.
    """
    name = text(node.name)
    if not name:
        raise SlurmOutputError(SOURCE, "node ?", "no name")
    where = f"node {name}"
    base, states = normalise_node_state(text(node.state) or None)
    configured = getattr(node, "configured_gres", None) or {}
    try:
        gpus = tuple(NodeGpus(i.type, i.count, i.sockets)
                     for i in gpu_items(",".join(f"{k}:{_count_of(v)}" for k, v in configured.items())))
        alloc = getattr(node, "allocated_tres", None) or {}
        counted = tres_gpus(",".join(f"{k}={v}" for k, v in alloc.items())).count
    except ValueError as exc:
        raise SlurmOutputError(SOURCE, where, str(exc)) from None
    idx = tuple(sorted(set(used)))
    # At least what allocated_tres counts and what the jobs hold; never more than the node has.
    in_use = max(counted, len(idx) + unknown)
    cap = max(sum(g.count for g in gpus), counted, len(idx))
    return SlurmNode(
        name=name,
        state=base,
        states=states,
        available=node_available(states),
        gpus=gpus,
        gpu_indices_used=idx,
        gpus_used=min(in_use, cap),
        partitions=tuple(words(node.partitions)),
        reason=text(node.reason),
        cpus=number(node.total_cpus),
        cpus_alloc=number(getattr(node, "allocated_cpus", None)),
        memory=number(getattr(node, "real_memory", None)),
        memory_alloc=number(getattr(node, "allocated_memory", None)),
        features=feature_set(getattr(node, "active_features", None)),
    )


# ----------------------------------------------------------------------------------------- backend
class PyslurmBackend:
    """Reads with two pyslurm loads per cycle and acts through pyslurm, with the CLI fallbacks above.

    Arguments as `CliBackend`'s; ``module`` is the pyslurm module (tests pass a fake), imported here when
    None. ``runner`` runs the fallbacks and keeps the call stats of both kinds of calls.
    """

    kind = "pyslurm"

    def __init__(self, runner: Runner | None = None, config: AdapterConfig | None = None,
                 clock: Callable[[], float] = time.time, module: Any = None,
                 perf: Callable[[], float] = time.perf_counter) -> None:
        self.config = config or AdapterConfig()
        if module is None:
            if self.config.slurm_conf:  # libslurm reads it at import (slurm_init), and only then
                os.environ["SLURM_CONF"] = self.config.slurm_conf
            module = importlib.import_module("pyslurm")
        self.ps = module
        self.runner = runner or SubprocessRunner(self.config.slurm_conf, self.config.timeout_s)
        self.reader = SnapshotReader(self.runner, self.config, clock)  # topology + config-file cache
        self.cli = Actions(self.runner, self.config.action_timeout_s)
        self.clock = clock
        self._perf = perf
        self._per_job: dict[int, str] = {}  # job id -> tres_per_job from squeue (fallback 4)
        self._errors: tuple[type[BaseException], ...] = tuple(
            e for e in (getattr(module, "RPCError", None), getattr(module, "PyslurmError", None))
            if isinstance(e, type) and issubclass(e, BaseException))

    @property
    def version(self) -> str:
        return str(getattr(self.ps, "__version__", "?"))

    def _call(self, action: str, job_id: str | None, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        t0 = self._perf()
        failed = True
        try:
            out = fn(*args, **kwargs)
            failed = False
            return out
        except self._errors as exc:
            errno = getattr(exc, "errno", None)
            msg = getattr(exc, "msg", None) or str(exc)
            raise PyslurmCallError(action, job_id, errno if isinstance(errno, int) else None, msg) from exc
        finally:
            self.runner.stats.add(f"pyslurm {action}", self._perf() - t0, failed)

    # ------------------------------------------------------------------------------------ snapshot
    def read(self) -> tuple[list[SlurmJob], list[SlurmNode], list[str]]:
        """Jobs and nodes as records: one ``Jobs.load`` + one ``Nodes.load`` (+ fallback 4 if needed)."""
        raw_jobs = list(self._call("Jobs.load", None, self.ps.Jobs.load).values())
        raw_nodes = list(self._call("Nodes.load", None, self.ps.Nodes.load).values())
        warnings: list[str] = []
        mapped: list[tuple[Any, SlurmJob]] = []
        unreadable: list[str] = []
        for pj in raw_jobs:
            try:
                mapped.append((pj, job_from_pyslurm(pj)))
            except (SlurmOutputError, ValueError, TypeError, AttributeError) as exc:
                warnings.append(f"skipped a job record: {exc}")
                with contextlib.suppress(ValueError):  # its nodes: none of their GPUs is free
                    unreadable.extend(hostlist.expand(text(getattr(pj, "allocated_nodes", ""))))
        jobs = self._with_per_job_requests(mapped, warnings)
        used, unknown = gpus_in_use(jobs, unreadable)
        nodes: list[SlurmNode] = []
        for pn in raw_nodes:
            try:
                name = text(pn.name)
                nodes.append(node_from_pyslurm(pn, used.get(name, ()), unknown.get(name, 0)))
            except (SlurmOutputError, ValueError, TypeError, AttributeError) as exc:
                warnings.append(f"skipped a node record: {exc}")  # its GPUs become unavailable
        return jobs, nodes, warnings

    def _needs_per_job(self, job: SlurmJob) -> bool:
        started = bool(job.nodes) and job.state != "PENDING"
        return (job.is_active and not started and job.gpus_total == 0
                and is_managed(job, self.config.managed_partitions))

    def _with_per_job_requests(self, mapped: Sequence[tuple[Any, SlurmJob]], warnings: list[str]) -> list[SlurmJob]:
        """Fallback 4: the ``tres_per_job`` of managed jobs that show no GPUs, from one squeue call."""
        present = {j.job_id for _, j in mapped}
        self._per_job = {k: v for k, v in self._per_job.items() if k in present}
        need = [j.job_id for _, j in mapped if self._needs_per_job(j)]
        missing = [i for i in need if i not in self._per_job]
        if missing:
            doc = load_json(self.runner.run(SQUEUE, self.config.timeout_s), "squeue --json")
            found = {number(item.get("job_id")): text(item.get("tres_per_job"))
                     for item in doc.get("jobs") or [] if isinstance(item, Mapping)}
            for i in missing:
                self._per_job[i] = found.get(i, "")
        out: list[SlurmJob] = []
        for pj, j in mapped:
            extra = self._per_job.get(j.job_id, "") if self._needs_per_job(j) else ""
            if extra:
                try:
                    j = job_from_pyslurm(pj, tres_per_job=extra)
                except (SlurmOutputError, ValueError) as exc:
                    warnings.append(f"job {j.job_id}: tres_per_job {extra!r}: {exc}")
            out.append(j)
        return out

    def snapshot(self) -> Snapshot:
        stats = self.runner.stats
        calls0 = stats.total_calls
        secs0 = sum(stats.seconds.values())
        now = self.clock()
        jobs, nodes, warnings = self.read()
        reservations = self.reader.reservations(now, warnings)  # the CLI backend's read: one parser for both
        limits = self.reader.limits(now, warnings)  # QOS/association limits: the CLI backend's read too
        topo, topo_warnings = self.reader.topology(nodes)
        return build_snapshot(jobs, nodes, topo, self.config, now,
                              slurm_calls=stats.total_calls - calls0,
                              latency_s=sum(stats.seconds.values()) - secs0,
                              warnings=[*topo_warnings, *warnings], reservations=reservations, limits=limits,
                              memory_consumed=self.reader.memory_consumed)

    # ------------------------------------------------------------------------------------- actions
    @staticmethod
    def _by_cli(job: ManagedJob) -> bool:
        """Fallback 3: array tasks (and anything whose user-visible id is not its numeric JobId)."""
        return job.array_task_id is not None or job.job_id != str(job.slurm_id)

    def _job(self, job: ManagedJob) -> Any:
        return self.ps.Job(job.slurm_id)

    def _release(self, job: ManagedJob) -> None:
        pj = self._job(job)
        self._call("release", job.job_id, pj.release)

    def _hold(self, job: ManagedJob) -> None:
        pj = self._job(job)
        self._call("hold", job.job_id, pj.hold)

    def start(self, job: ManagedJob, node_gpus: Mapping[str, int]) -> None:
        """Pin (CLI, fallback 1), ``StartTime=now`` if requeued, release: pin before release."""
        if self._by_cli(job):
            self.cli.start(job, node_gpus)
            return
        self.cli.pin(job, node_gpus)  # pin_args refuses a bad placement before any call
        if job.restart_cnt > 0:
            self.cli.settle_after_requeue(job)  # a launch in the requeue's second would fail the job
            pj = self._job(job)
            self._call("modify begin_time", job.job_id, pj.modify, self.ps.JobSubmitDescription(begin_time="now"))
        self._release(job)

    def warn(self, job: ManagedJob) -> None:
        """SIGUSR1 to the batch step, only while the job is RUNNING (``scancel --state=RUNNING``)."""
        check_warnable(job)
        if self._by_cli(job) and not own_record(job):  # a split-off task's own JobId is that task alone
            self.cli.warn(job)
            return
        current = self._call("Job.load", job.job_id, self.ps.Job.load, job.slurm_id)
        if self._state(current) != "RUNNING":
            return  # stopped running since the snapshot: no batch shell to warn
        self._call("send_signal", job.job_id, current.send_signal, "SIGUSR1", steps="batch")

    def requeue(self, job: ManagedJob) -> None:
        """``requeue(hold=True)``, or hold if it is already pending; then clear the pin (fallback 2)."""
        check_preemptible(job)
        if self._by_cli(job):
            self.cli.requeue(job)
            return
        pj = self._job(job)
        check_still_requeueable(job, self._state(self._call("Job.load", job.job_id, self.ps.Job.load, job.slurm_id)))
        try:
            self._call("requeuehold", job.job_id, pj.requeue, hold=True)
        except PyslurmCallError as exc:
            if not is_already_pending(exc.stderr):
                raise
            self._hold(job)  # requeued before, or never ran: just hold it
        self.cli.clear_pin(job)

    @staticmethod
    def _state(pj: Any) -> str:
        state, _ = normalise_job_state(text(pj.state) or None)
        return state

    def hold(self, job: ManagedJob) -> None:
        """Hold a job Slurm still shows pending (as `Actions.hold`), then clear the pin (fallback 2)."""
        if self._by_cli(job):
            self.cli.hold(job)
            return
        check_still_pending(job, self._state(self._call("Job.load", job.job_id, self.ps.Job.load, job.slurm_id)))
        self._hold(job)
        self.cli.clear_pin(job)

    def release_unpinned(self, job: ManagedJob) -> None:
        """Clear the pin (fallback 2), then release."""
        if self._by_cli(job):
            self.cli.release_unpinned(job)
            return
        self.cli.clear_pin(job)
        self._release(job)
