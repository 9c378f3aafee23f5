"""A simulated cluster of several GPU types (issue #37 part 2): ``themis simulate --gpu-types v100:16,p100:8,k80:8``.

Each type gets nodes of its own (``<type>-node1``, ...) in racks of its own (``<type>-rack1``, ...), as a site
buys a generation at a time: a gang never has to span two types to stay inside a rack. A type may carry a
default speed (``a100:16:0.6``: work per GPU-second relative to 1.0), used for jobs that name no speed of
their own (core/gpu_types.py); Gavel traces loaded with the throughputs file bring each job's measured ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from themis_slurm.core.topology import Topology


@dataclass(frozen=True, slots=True)
class GpuMix:
    """One type of the mix: its name, GPUs and default speed (None: 1.0 unless the job says otherwise)."""

    gpu_type: str
    gpus: int
    speed: float | None = None


def parse_gpu_mix(text: str) -> tuple[GpuMix, ...]:
    """``type:gpus[:speed],...`` -> the mix, in the order given. A bad entry raises a ValueError naming it."""
    out: list[GpuMix] = []
    for part in (p.strip() for p in text.split(",")):
        fields = part.split(":")
        if not part or len(fields) not in (2, 3) or not fields[0]:
            raise ValueError(f"{part!r} is not type:gpus or type:gpus:speed")
        name = fields[0].lower()
        if any(m.gpu_type == name for m in out):
            raise ValueError(f"type {name!r} is given twice")
        try:
            gpus = int(fields[1])
        except ValueError:
            raise ValueError(f"{part!r}: gpus {fields[1]!r} is not a whole number") from None
        if gpus < 1:
            raise ValueError(f"{part!r}: gpus must be >= 1, got {gpus}")
        speed = None
        if len(fields) == 3:
            try:
                speed = float(fields[2])
            except ValueError:
                raise ValueError(f"{part!r}: speed {fields[2]!r} is not a number") from None
            if not 0 < speed < float("inf"):
                raise ValueError(f"{part!r}: speed must be > 0, got {speed:g}")
        out.append(GpuMix(name, gpus, speed))
    return tuple(out)


def mixed_cluster(
    mix: tuple[GpuMix, ...], nodes_per_rack: int, gpus_per_node: int, islands_per_node: int = 1
) -> Topology:
    """The cluster of `mix`: per type, gpus / gpus_per_node nodes, nodes_per_rack to a rack."""
    if gpus_per_node % islands_per_node:
        raise ValueError(
            f"gpus_per_node={gpus_per_node} is not divisible by islands_per_node={islands_per_node}"
        )
    per_island = gpus_per_node // islands_per_node
    spec: dict[str, dict[str, list[list[int]]]] = {}
    types: dict[str, str] = {}
    for m in mix:
        if m.gpus % gpus_per_node:
            raise ValueError(
                f"{m.gpu_type}: {m.gpus} GPUs is not a whole number of {gpus_per_node}-GPU nodes"
            )
        for i in range(m.gpus // gpus_per_node):
            rack = spec.setdefault(f"{m.gpu_type}-rack{i // nodes_per_rack + 1}", {})
            node = f"{m.gpu_type}-node{i + 1}"
            rack[node] = [list(range(k * per_island, (k + 1) * per_island)) for k in range(islands_per_node)]
            types[node] = m.gpu_type
    speeds = {m.gpu_type: m.speed for m in mix if m.speed is not None}
    return Topology.from_spec(spec, types, speeds)
