"""The cluster's shape: racks (topology.conf leaf switches) -> nodes -> islands (NVLink/socket) -> GPUs.

Built from plain data so that both the Slurm adapter (gres.conf + topology.conf) and the simulator (a
generated shape) construct the same thing. GPUs get dense integer ids so the auction can work on sets of
ints; each keeps the node name and the index Slurm uses on that node.

The placement level of a GPU set is the widest boundary it crosses; Themis's placement model slows a
placement-sensitive job by a factor that depends only on that level (themis-facts.md, model_stats).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum


class Level(IntEnum):
    """How far apart a set of GPUs is. Lower is tighter (and never slower)."""

    ISLAND = 0  # GPUs joined by NVLink (or one socket's PCIe switch)
    NODE = 1  # same machine, different islands
    RACK = 2  # same leaf switch, different machines
    CLUSTER = 3  # across racks

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = tuple(level.name.lower() for level in Level)


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU. `id` is dense and cluster-wide; `index` is the per-node index Slurm reports (IDX:)."""

    id: int
    node: str
    index: int
    island: int  # cluster-wide island id
    rack: str
    #: its GPU type (gres.conf Type=, e.g. "a100"); "" on a cluster that does not tell types apart
    gpu_type: str = ""


@dataclass(frozen=True)
class Topology:
    """Immutable cluster shape with lookup tables.

    Construct with :meth:`from_spec` (explicit racks/nodes/islands) or :meth:`uniform` (a regular shape).
    """

    gpus: tuple[Gpu, ...]
    #: speed of each GPU type for a job that names none of its own (:attr:`Job.speeds`), in work per GPU-second
    #: relative to the reference type (1.0); a type missing here runs at 1.0 (themis.yaml ``gpu_types:``)
    type_speeds: Mapping[str, float] = field(default_factory=dict, compare=False)
    # Derived lookups, filled in __post_init__.
    node_gpus: Mapping[str, tuple[int, ...]] = field(init=False, repr=False, compare=False)
    island_gpus: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)
    island_node: tuple[str, ...] = field(init=False, repr=False, compare=False)
    node_islands: Mapping[str, tuple[int, ...]] = field(init=False, repr=False, compare=False)
    rack_nodes: Mapping[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)
    node_rack: Mapping[str, str] = field(init=False, repr=False, compare=False)
    by_node_index: Mapping[tuple[str, int], int] = field(init=False, repr=False, compare=False)
    #: per GPU id: (island, node position in `node_gpus`, node name, rack), the pool's lookups in one tuple
    gpu_meta: tuple[tuple[int, int, str, str], ...] = field(init=False, repr=False, compare=False)
    #: GPU type -> its nodes in topology order (one entry, "" or the single type, on a single-type cluster)
    type_nodes: Mapping[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)
    #: GPU type -> how many GPUs of that type
    type_gpus: Mapping[str, int] = field(init=False, repr=False, compare=False)
    #: node -> its GPU type
    node_type: Mapping[str, str] = field(init=False, repr=False, compare=False)
    #: more than one GPU type: speeds then count in every throughput (core/gpu_types.py); False keeps every
    #: single-type cluster's numbers exactly what they were before types existed
    heterogeneous: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for i, g in enumerate(self.gpus):
            if g.id != i:
                raise ValueError(f"GPU ids must be dense and ordered: position {i} holds id {g.id}")
        for t, v in self.type_speeds.items():
            if not (isinstance(v, int | float) and v >= 0 and v < float("inf")):
                raise ValueError(f"type_speeds[{t!r}] must be a number >= 0, got {v!r}")
        node_type: dict[str, str] = {}
        type_nodes: dict[str, list[str]] = {}
        type_gpus: dict[str, int] = {}
        for g in self.gpus:
            seen = node_type.get(g.node)
            if seen is None:
                node_type[g.node] = g.gpu_type
                type_nodes.setdefault(g.gpu_type, []).append(g.node)
            elif seen != g.gpu_type:
                raise ValueError(f"node {g.node} has GPUs of two types: {seen} and {g.gpu_type}")
            type_gpus[g.gpu_type] = type_gpus.get(g.gpu_type, 0) + 1
        node_gpus: dict[str, list[int]] = {}
        node_rack: dict[str, str] = {}
        rack_nodes: dict[str, list[str]] = {}
        islands: dict[int, list[int]] = {}
        island_node: dict[int, str] = {}
        by_node_index: dict[tuple[str, int], int] = {}
        for g in self.gpus:
            node_gpus.setdefault(g.node, []).append(g.id)
            if node_rack.setdefault(g.node, g.rack) != g.rack:
                raise ValueError(f"node {g.node} is in two racks: {node_rack[g.node]} and {g.rack}")
            if g.node not in rack_nodes.setdefault(g.rack, []):
                rack_nodes[g.rack].append(g.node)
            islands.setdefault(g.island, []).append(g.id)
            if island_node.setdefault(g.island, g.node) != g.node:
                raise ValueError(f"island {g.island} spans nodes {island_node[g.island]} and {g.node}")
            if (g.node, g.index) in by_node_index:
                raise ValueError(f"node {g.node} has GPU index {g.index} twice")
            by_node_index[(g.node, g.index)] = g.id
        if sorted(islands) != list(range(len(islands))):
            raise ValueError("island ids must be dense, starting at 0")
        node_islands: dict[str, list[int]] = {}
        for isl in sorted(islands):
            node_islands.setdefault(island_node[isl], []).append(isl)
        set_ = object.__setattr__
        set_(self, "node_gpus", {n: tuple(v) for n, v in node_gpus.items()})
        set_(self, "island_gpus", tuple(tuple(islands[i]) for i in range(len(islands))))
        set_(self, "island_node", tuple(island_node[i] for i in range(len(islands))))
        set_(self, "node_islands", {n: tuple(v) for n, v in node_islands.items()})
        set_(self, "rack_nodes", {r: tuple(v) for r, v in rack_nodes.items()})
        set_(self, "node_rack", node_rack)
        set_(self, "by_node_index", by_node_index)
        set_(self, "_max_island", max((len(v) for v in islands.values()), default=0))
        set_(self, "_max_node", max((len(v) for v in node_gpus.values()), default=0))
        set_(self, "_max_rack_gpus", max((sum(len(node_gpus[n]) for n in ns) for ns in rack_nodes.values()), default=0))
        set_(self, "_max_rack_nodes", max((len(v) for v in rack_nodes.values()), default=0))
        # per GPU, for the pool's hot paths: (island, node position, node name, rack)
        node_pos = {n: i for i, n in enumerate(node_gpus)}
        set_(self, "gpu_meta", tuple((g.island, node_pos[g.node], g.node, g.rack) for g in self.gpus))
        set_(self, "node_type", node_type)
        set_(self, "type_nodes", {t: tuple(v) for t, v in type_nodes.items()})
        set_(self, "type_gpus", type_gpus)
        set_(self, "heterogeneous", len(type_gpus) > 1)

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_spec(
        cls,
        racks: Mapping[str, Mapping[str, Sequence[Sequence[int]]]],
        types: Mapping[str, str] | None = None,
        type_speeds: Mapping[str, float] | None = None,
    ) -> Topology:
        """Build from ``{rack: {node: [[gpu indices of island 0], [island 1], ...]}}``.

        This is the shape the Slurm adapter derives from topology.conf (racks) and gres.conf Links
        (islands). Nodes with no GPUs may be left out: Themis never offers them. `types` gives each node's
        GPU type (gres.conf Type=; a node missing there is ""), `type_speeds` each type's default speed.
        """
        gpus: list[Gpu] = []
        island = 0
        for rack, nodes in racks.items():
            for node, node_islands in nodes.items():
                kind = types.get(node, "") if types else ""
                for members in node_islands:
                    if not members:
                        continue
                    for idx in members:
                        gpus.append(Gpu(len(gpus), node, int(idx), island, rack, kind))
                    island += 1
        return cls(tuple(gpus), dict(type_speeds or {}))

    @classmethod
    def uniform(
        cls,
        racks: int,
        nodes_per_rack: int,
        gpus_per_node: int,
        islands_per_node: int = 1,
        node_prefix: str = "node",
    ) -> Topology:
        """A regular cluster: ``racks x nodes_per_rack`` nodes, each with GPUs split into equal islands."""
        if min(racks, nodes_per_rack, gpus_per_node, islands_per_node) < 1:
            raise ValueError("racks, nodes_per_rack, gpus_per_node and islands_per_node must be >= 1")
        if gpus_per_node % islands_per_node:
            raise ValueError(
                f"gpus_per_node={gpus_per_node} is not divisible by islands_per_node={islands_per_node}"
            )
        per_island = gpus_per_node // islands_per_node
        spec: dict[str, dict[str, list[list[int]]]] = {}
        n = 0
        for r in range(racks):
            rack = spec.setdefault(f"rack{r + 1}", {})
            for _ in range(nodes_per_rack):
                n += 1
                rack[f"{node_prefix}{n}"] = [
                    list(range(i * per_island, (i + 1) * per_island)) for i in range(islands_per_node)
                ]
        return cls.from_spec(spec)

    # ----------------------------------------------------------------- queries
    @property
    def size(self) -> int:
        return len(self.gpus)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(self.node_gpus)

    @property
    def racks(self) -> tuple[str, ...]:
        return tuple(self.rack_nodes)

    def gpu_id(self, node: str, index: int) -> int:
        """Dense id of GPU `index` on `node` (KeyError naming both when unknown)."""
        try:
            return self.by_node_index[(node, index)]
        except KeyError:
            raise KeyError(f"no GPU index {index} on node {node!r}") from None

    def level_of(self, gpu_ids: Iterable[int]) -> Level:
        """The widest boundary a GPU set crosses (a single GPU or the empty set is ISLAND)."""
        meta = self.gpu_meta
        it = iter(gpu_ids)
        first = next(it, None)
        if first is None:
            return Level.ISLAND
        isl0, _, node0, rack0 = meta[first]
        level = Level.ISLAND
        for gid in it:  # compared with the first GPU: one pass, out at the first rack boundary
            isl, _, node, rack = meta[gid]
            if rack != rack0:
                return Level.CLUSTER
            if node != node0:
                level = Level.RACK
            elif isl != isl0 and level is Level.ISLAND:
                level = Level.NODE
        return level

    def nodes_of(self, gpu_ids: Iterable[int]) -> dict[str, int]:
        """GPU count per node for a set, ordered by node name: what Slurm is asked to pin."""
        out: dict[str, int] = {}
        meta = self.gpu_meta
        for gid in gpu_ids:
            node = meta[gid][2]
            out[node] = out.get(node, 0) + 1
        return dict(sorted(out.items())) if len(out) > 1 else out

    def best_level(self, gpus: int, gpus_per_node: int | None = None, nodes: int | None = None) -> Level:
        """The tightest level at which a gang of this shape can ever be placed on this cluster.

        Used for T_id: an app's private share is assumed to be placed as well as the hardware allows.
        """
        if nodes is not None and nodes > 1:
            return Level.RACK if nodes <= self._max_rack_nodes else Level.CLUSTER
        if gpus <= self._max_island:
            return Level.ISLAND
        if gpus <= self._max_node:
            return Level.NODE
        return Level.RACK if gpus <= self._max_rack_gpus else Level.CLUSTER
