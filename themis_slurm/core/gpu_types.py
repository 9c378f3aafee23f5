"""GPU types and what a job's work is worth on each (issue #37 part 2).

An h100 hour is not an a100 hour. Work stays in ideal GPU-seconds of the *reference* type (speed 1.0); a
job on a GPU of type t does ``speed(job, t)`` of that work per second per GPU, times the placement factor of
the set (core/placement.py). The speed comes from the job (:attr:`Job.speeds`: measured rates, as Gavel's
``simulation_throughputs.json``, or its model class's in themis.yaml), else from the topology's default for
the type (:attr:`Topology.type_speeds`, themis.yaml ``gpu_types: {h100: 1.0, a100: 0.6}``), else 1.0. A gang
is as fast as its slowest GPU (data-parallel steps wait for the slowest worker), so the core places a gang on
one type at a time (:meth:`~themis_slurm.core.agent.Agent.place`), and over several types only when no one type
of the cluster can ever hold it and the job may run on each (an untyped ``--gres=gpu:4 -N4`` on two nodes of
each type, which Slurm starts over any types: :func:`spanning_nodes`), at its slowest type's speed.

On a single-type topology (:attr:`Topology.heterogeneous` False) none of this is applied: every throughput is
exactly what it was before types existed, whatever the speeds say (a common factor on every GPU scales T_id
and T_sh alike). Pure functions of plain data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from themis_slurm.core.topology import Topology
from themis_slurm.core.workload import Job


def job_speed(topo: Topology, job: Job, gpu_type: str) -> float:
    """`job`'s work per GPU-second on `gpu_type`: its own rate, else the type's default, else 1.0."""
    for t, v in job.speeds:
        if t == gpu_type:
            return v
    return topo.type_speeds.get(gpu_type, 1.0)


def gang_speed(topo: Topology, job: Job, gpus: Iterable[int]) -> float:
    """The speed of `job` on the GPU set `gpus`: that of its slowest type (1.0 on a single-type cluster)."""
    return speed_on(topo, job.speeds, gpus)


def speed_on(topo: Topology, speeds: tuple[tuple[str, float], ...], gpus: Iterable[int]) -> float:
    """:func:`gang_speed` of a job whose :attr:`Job.speeds` are `speeds` (themisd's count of work done)."""
    if not topo.heterogeneous:
        return 1.0
    gpu_list = topo.gpus
    out = None
    for t in {gpu_list[g].gpu_type for g in gpus}:
        v = next((v for k, v in speeds if k == t), None)
        v = topo.type_speeds.get(t, 1.0) if v is None else v
        out = v if out is None or v < out else out
    return 1.0 if out is None else out


def job_types(topo: Topology, job: Job) -> tuple[tuple[str, float, tuple[str, ...]], ...]:
    """The types `job` may run on, as (type, speed, its allowed nodes of that type in topology order), fastest
    first; a type it runs at speed 0 on, or where none of its allowed nodes are, is left out. An untyped job
    (no :attr:`Job.allowed_nodes`) may use every type.

    Ties go to the type of the lower default speed (:attr:`Topology.type_speeds`), then topology order: a job
    that runs as fast on an a100 as on an h100 takes the a100 and leaves the h100 to jobs that gain there
    (the type a job gains most on *relative to the others*, which the placement of one job cannot see)."""
    allowed = job.allowed_nodes
    out = []
    for t, nodes in topo.type_nodes.items():
        speed = job_speed(topo, job, t)
        if speed <= 0.0:
            continue
        among = nodes if allowed is None else tuple(n for n in nodes if n in allowed)
        if among:
            out.append((t, speed, among))
    defaults = topo.type_speeds
    out.sort(key=lambda e: (-e[1], defaults.get(e[0], 1.0)))  # stable: then topology order
    return tuple(out)


def spanning_nodes(
    topo: Topology, job: Job, types: tuple[tuple[str, float, tuple[str, ...]], ...]
) -> tuple[str, ...] | None:
    """Where a gang that no one type of the cluster can ever hold goes: the nodes of every type in `types`
    (:func:`job_types`'s answer for `job`), at its slowest type's speed. None when one type could hold it
    whole on an empty cluster (its shape: n nodes of k GPUs, else its GPU count), or when it may run on one
    type only: then it waits for room on one type, however long the other types sit free.

    Slurm starts an untyped request over nodes of any types, and a gang wider than any one type has no
    other way to run. One that fits a type waits for it instead: it would run at the slowest type's pace
    for its whole run, against a wait of about one lease (on the six Gavel traces of
    benchmarks/heterogeneous.py, spanning types whenever no one type had room *now* raised Themis's mean
    max rho from 1.55 to 1.69)."""
    if len(types) < 2:
        return None
    shaped = job.nodes is not None and job.gpus_per_node is not None
    for _t, _s, nodes in types:
        sizes = [len(topo.node_gpus[n]) for n in nodes]
        if shaped:
            if sum(1 for g in sizes if g >= job.gpus_per_node) >= job.nodes:  # type: ignore[operator]
                return None
        elif sum(sizes) >= job.gpus:
            return None
    return tuple(n for _t, _s, nodes in types for n in nodes)


def best_speed(topo: Topology, job: Job) -> float:
    """The fastest speed `job` can have anywhere it may run (1.0 on a single-type cluster; 0 when nowhere)."""
    if not topo.heterogeneous:
        return 1.0
    found = job_types(topo, job)
    return found[0][1] if found else 0.0


#: with_type_speeds's last answers: (id(topology), speeds) -> (topology, the topology with those speeds)
_WITH_SPEEDS: dict[tuple[int, frozenset[tuple[str, float]]], tuple[Topology, Topology]] = {}


def with_type_speeds(topo: Topology, speeds: Mapping[str, float]) -> Topology:
    """`topo` with the types' default speeds `speeds` (themis.yaml ``gpu_types:``): `topo` itself when they are
    already its own, else the same GPUs with those speeds, the same object for the same topology and speeds
    (the round's caches are kept per topology object, so a new one at every cycle would empty them)."""
    if dict(topo.type_speeds) == dict(speeds):
        return topo
    key = (id(topo), frozenset(speeds.items()))
    hit = _WITH_SPEEDS.get(key)
    if hit is not None and hit[0] is topo:
        return hit[1]
    if len(_WITH_SPEEDS) >= 8:
        _WITH_SPEEDS.clear()
    out = Topology(topo.gpus, dict(speeds))
    _WITH_SPEEDS[key] = (topo, out)
    return out


def parse_gpu_types(
    section: object, where: str = "gpu_types"
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """themis.yaml's ``gpu_types:`` section as (type -> default speed, model class -> type -> speed).

    Either ``{h100: 1.0, a100: 0.6}`` (one factor per type) or per class,
    ``{a100: {default: 0.6, transformer-dp: 0.5}}``. Every speed must be a number >= 0; a bad entry raises a
    ValueError naming the field and the value."""
    if section is None:
        return {}, {}
    if not isinstance(section, Mapping):
        raise ValueError(f"{where} must be a mapping of GPU type to speed, got {section!r}")
    defaults: dict[str, float] = {}
    by_class: dict[str, dict[str, float]] = {}
    for gpu_type, value in section.items():
        name = str(gpu_type).lower()
        if isinstance(value, Mapping):
            for cls, v in value.items():
                speed = _speed(v, f"{where}.{name}.{cls}")
                if str(cls).lower() == "default":
                    defaults[name] = speed
                else:
                    by_class.setdefault(str(cls).lower(), {})[name] = speed
        else:
            defaults[name] = _speed(value, f"{where}.{name}")
    return defaults, by_class


def class_speeds(
    by_class: Mapping[str, Mapping[str, float]], model_class: str
) -> tuple[tuple[str, float], ...]:
    """:attr:`Job.speeds` for a job of `model_class` from :func:`parse_gpu_types`'s per-class table (() when the
    class has no entry: the type defaults then apply)."""
    found = by_class.get((model_class or "").lower())
    return tuple(sorted(found.items())) if found else ()


def _speed(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
        raise ValueError(f"{field} must be a number >= 0, got {value!r}")
    return float(value)
