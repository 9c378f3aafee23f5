"""Placement sensitivity and gang placement.

Throughput model (Themis, NSDI 2020; the authors' simulator model_stats/themis/*.json, see
docs/design.md): a job running on a GPU set G progresses at ``|G| * factor(level(G))`` ideal GPU-seconds per
second, where level is the widest boundary G crosses. Same machine is 1.0 in the authors' data; they do not
distinguish NVLink islands inside a machine, so the model profiles use 1.0 at NODE level too. The named
sensitivity classes (our own, for jobs that give no model) add a small cross-island penalty for `high`.

:class:`Pool` is the free-GPU index used inside one round: it finds the tightest placement for a gang
(island, then node, then rack, then anywhere), best-fit at each level so that large holes stay whole for
large gangs. Bucketed by free count, so a placement costs O(island/node size), not O(cluster).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from themis_slurm.core.topology import Level, Topology


@dataclass(frozen=True, slots=True)
class Profile:
    """Slow-down factors per placement level: (island, node, rack, cluster), each in (0, 1]."""

    name: str
    factors: tuple[float, float, float, float]
    source: str = ""

    def __post_init__(self) -> None:
        if len(self.factors) != 4 or not all(0.0 < f <= 1.0 for f in self.factors):
            raise ValueError(f"profile {self.name!r}: factors must be 4 numbers in (0, 1], got {self.factors}")
        if any(a < b for a, b in zip(self.factors, self.factors[1:], strict=False)):
            raise ValueError(f"profile {self.name!r}: factors must not grow with distance: {self.factors}")

    def factor(self, level: Level) -> float:
        return self.factors[int(level)]

    @property
    def sensitive(self) -> bool:
        """Placement-sensitive means crossing machines costs more than 5%."""
        return self.factors[Level.RACK] < 0.95


_PAPER = "Themis NSDI 2020, authors' simulator model_stats/themis/*.json (themis-facts.md)"
_OURS = "themis-slurm sensitivity class (our assumption, docs/design.md)"

#: Per-model profiles and sensitivity classes. Model factors are (same machine, same machine,
#: cross-machine, cross-rack) from the authors' data; class factors are our own round numbers.
PROFILES: Mapping[str, Profile] = {
    p.name: p
    for p in (
        Profile("vgg11", (1.0, 1.0, 0.75, 0.56), _PAPER),
        Profile("vgg16", (1.0, 1.0, 0.72, 0.52), _PAPER),
        Profile("vgg19", (1.0, 1.0, 0.70, 0.50), _PAPER),
        Profile("alexnet", (1.0, 1.0, 0.80, 0.64), _PAPER),
        Profile("resnet50", (1.0, 1.0, 0.98, 0.96), _PAPER),
        Profile("resnet101", (1.0, 1.0, 0.98, 0.96), _PAPER),
        Profile("resnet152", (1.0, 1.0, 0.98, 0.96), _PAPER),
        Profile("inception3", (1.0, 1.0, 0.98, 0.96), _PAPER),
        Profile("inception4", (1.0, 1.0, 0.98, 0.96), _PAPER),
        Profile("googlenet", (1.0, 1.0, 0.98, 0.96), _PAPER),
        Profile("high", (1.0, 0.95, 0.70, 0.50), _OURS),
        Profile("medium", (1.0, 1.0, 0.80, 0.64), _OURS),
        Profile("low", (1.0, 1.0, 0.98, 0.96), _OURS),
        Profile("none", (1.0, 1.0, 1.0, 1.0), _OURS),
    )
}

#: Per-iteration times from the same source, for workloads that count iterations.
ITERATION_TIME_S: Mapping[str, float] = {
    "vgg11": 1.2, "vgg16": 1.2, "vgg19": 1.2, "alexnet": 0.5,
    "resnet50": 0.33, "resnet101": 0.33, "resnet152": 0.33,
    "inception3": 0.33, "inception4": 0.33, "googlenet": 0.33,
}  # fmt: skip

DEFAULT_PROFILE = "low"


def get_profile(name: str | None) -> Profile:
    """Profile by model or class name; None gives the default class. Unknown names raise with the list."""
    if name is None:
        return PROFILES[DEFAULT_PROFILE]
    try:
        return PROFILES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown placement profile {name!r}; known: {', '.join(PROFILES)}") from None


def throughput(n_gpus: int, level: Level, profile: Profile) -> float:
    """Ideal GPU-seconds of work done per second by a job on `n_gpus` GPUs spanning `level`."""
    return n_gpus * profile.factor(level) if n_gpus > 0 else 0.0


def _any(bucket: set):
    """A deterministic member of a bucket in O(1): sets of ints iterate in an order fixed by their history."""
    return next(iter(bucket))


class Pool:
    """The GPUs still free in a round, indexed for fast tightest/best-fit gang placement.

    Mutable on purpose: a round takes and returns GPUs thousands of times. It is private to one round
    (created from an immutable set, never shared), so the arbiter stays a pure function.
    """

    def __init__(self, topology: Topology, free: Iterable[int]) -> None:
        self.topo = topology
        self._isl_free: list[set[int]] = [set() for _ in topology.island_gpus]
        self._node_free: dict[str, int] = dict.fromkeys(topology.node_gpus, 0)
        self._rack_free: dict[str, int] = dict.fromkeys(topology.rack_nodes, 0)
        # buckets: free count -> set of islands / nodes with exactly that many free
        self._isl_bucket: dict[int, set[int]] = {}
        # nodes are bucketed by their position (ints iterate deterministically; str hashes are salted)
        self._node_pos: dict[str, int] = {n: i for i, n in enumerate(topology.node_gpus)}
        self._node_names: tuple[str, ...] = tuple(topology.node_gpus)
        self._node_bucket: dict[int, set[int]] = {}
        self.size = 0
        for isl in range(len(topology.island_gpus)):
            self._isl_bucket.setdefault(0, set()).add(isl)
        self._node_bucket[0] = set(range(len(self._node_names)))
        for gid in free:
            self._add(gid)

    # ----------------------------------------------------------------- bookkeeping
    def _move(self, bucket: dict, key, old: int, new: int) -> None:
        s = bucket[old]
        s.discard(key)
        if not s:
            del bucket[old]
        bucket.setdefault(new, set()).add(key)

    def _add(self, gid: int) -> None:
        g = self.topo.gpus[gid]
        isl = self._isl_free[g.island]
        if gid in isl:
            raise ValueError(f"GPU {gid} ({g.node} index {g.index}) is already free")
        self._move(self._isl_bucket, g.island, len(isl), len(isl) + 1)
        isl.add(gid)
        n = self._node_free[g.node]
        self._move(self._node_bucket, self._node_pos[g.node], n, n + 1)
        self._node_free[g.node] = n + 1
        self._rack_free[g.rack] += 1
        self.size += 1

    def _remove(self, gid: int) -> None:
        g = self.topo.gpus[gid]
        isl = self._isl_free[g.island]
        if gid not in isl:
            raise ValueError(f"GPU {gid} ({g.node} index {g.index}) is not free")
        self._move(self._isl_bucket, g.island, len(isl), len(isl) - 1)
        isl.discard(gid)
        n = self._node_free[g.node]
        self._move(self._node_bucket, self._node_pos[g.node], n, n - 1)
        self._node_free[g.node] = n - 1
        self._rack_free[g.rack] -= 1
        self.size -= 1

    def take(self, gpus: Iterable[int]) -> None:
        """Mark GPUs used (all must be free; on error nothing is taken)."""
        gpus = list(gpus)
        missing = [g for g in gpus if g not in self]
        if missing or len(set(gpus)) != len(gpus):
            raise ValueError(f"cannot take GPUs {sorted(gpus)}: not free or repeated: {sorted(missing)}")
        for gid in gpus:
            self._remove(gid)

    def give(self, gpus: Iterable[int]) -> None:
        """Return GPUs to the pool."""
        for gid in gpus:
            self._add(gid)

    def __contains__(self, gid: int) -> bool:
        return gid in self._isl_free[self.topo.gpus[gid].island]

    def free_ids(self) -> frozenset[int]:
        return frozenset(g for s in self._isl_free for g in s)

    def node_free(self, node: str) -> int:
        return self._node_free[node]

    def copy(self) -> Pool:
        """An independent pool with the same free GPUs (copies the indexes; no re-indexing)."""
        new = Pool.__new__(Pool)
        new.topo = self.topo
        new._isl_free = [set(s) for s in self._isl_free]
        new._node_free = dict(self._node_free)
        new._rack_free = dict(self._rack_free)
        new._isl_bucket = {k: set(v) for k, v in self._isl_bucket.items()}
        new._node_pos = self._node_pos
        new._node_names = self._node_names
        new._node_bucket = {k: set(v) for k, v in self._node_bucket.items()}
        new.size = self.size
        return new

    # ----------------------------------------------------------------- placement
    def _from_island(self, isl: int, k: int) -> list[int]:
        return sorted(self._isl_free[isl])[:k]

    def _from_node(self, node: str, k: int) -> list[int]:
        """k GPUs of one node, fullest islands first (fewest islands spanned)."""
        out: list[int] = []
        isls = sorted(self.topo.node_islands[node], key=lambda i: (-len(self._isl_free[i]), i))
        # An island that alone holds k is best-fit chosen first.
        fit = [i for i in isls if len(self._isl_free[i]) >= k]
        if fit:
            best = min(fit, key=lambda i: (len(self._isl_free[i]), i))
            return self._from_island(best, k)
        for i in isls:
            need = k - len(out)
            if need <= 0:
                break
            out.extend(self._from_island(i, need))
        return out

    def _from_nodes(self, nodes: list[str], k: int) -> list[int]:
        """k GPUs over the given nodes, fullest nodes first (fewest nodes spanned)."""
        out: list[int] = []
        for node in sorted(nodes, key=lambda n: (-self._node_free[n], n)):
            need = k - len(out)
            if need <= 0:
                break
            out.extend(self._from_node(node, min(need, self._node_free[node])))
        return out

    def find(
        self,
        gpus: int,
        gpus_per_node: int | None = None,
        nodes: int | None = None,
        within: Iterable[str] | None = None,
    ) -> frozenset[int] | None:
        """The tightest free placement for a gang (see :meth:`place`), or None."""
        found = self.place(gpus, gpus_per_node, nodes, within)
        return found[0] if found is not None else None

    def place(
        self,
        gpus: int,
        gpus_per_node: int | None = None,
        nodes: int | None = None,
        within: Iterable[str] | None = None,
    ) -> tuple[frozenset[int], Level] | None:
        """The tightest free placement for a gang, or None when it does not fit. Takes nothing.

        `gpus_per_node`/`nodes` express a Slurm-style shape (``-N nodes --gres=gpu:gpus_per_node``):
        exactly that many GPUs on each of exactly that many distinct nodes. `within` restricts the search
        to some nodes (used to offer placement alternatives and to renew a holder in place).
        """
        if gpus <= 0 or gpus > self.size:
            return None
        if (gpus_per_node is not None and nodes is not None) or within is not None:
            if gpus_per_node is not None and nodes is not None:
                got = self._find_shaped(gpus_per_node, nodes, within)
            else:
                got = self._find_within(gpus, list(within or ()))
            return (got, self.topo.level_of(got)) if got is not None else None
        # 1. one island, best fit
        max_isl = max(self._isl_bucket)
        for c in range(gpus, max_isl + 1):
            b = self._isl_bucket.get(c)
            if b:
                return frozenset(self._from_island(_any(b), gpus)), Level.ISLAND
        # 2. one node, best fit (no island holds it, so it spans islands)
        max_node = max(self._node_bucket)
        for c in range(gpus, max_node + 1):
            b = self._node_bucket.get(c)
            if b:
                return frozenset(self._from_node(self._node_names[_any(b)], gpus)), Level.NODE
        # 3. one rack, best fit by rack free count (no node holds it)
        racks = [r for r, f in self._rack_free.items() if f >= gpus]
        if racks:
            rack = min(racks, key=lambda r: (self._rack_free[r], r))
            return frozenset(self._from_nodes(list(self.topo.rack_nodes[rack]), gpus)), Level.RACK
        # 4. across racks, fullest racks first
        out: list[int] = []
        for rack in sorted(self._rack_free, key=lambda r: (-self._rack_free[r], r)):
            need = gpus - len(out)
            if need <= 0:
                break
            if self._rack_free[rack]:
                out.extend(self._from_nodes(list(self.topo.rack_nodes[rack]), min(need, self._rack_free[rack])))
        return frozenset(out), Level.CLUSTER

    def _find_within(self, gpus: int, nodes: list[str]) -> frozenset[int] | None:
        nodes = [n for n in nodes if self._node_free.get(n, 0) > 0]
        if sum(self._node_free[n] for n in nodes) < gpus:
            return None
        # tightest: one node (best fit), else one rack among the given nodes, else all of them
        fit = [n for n in nodes if self._node_free[n] >= gpus]
        if fit:
            return frozenset(self._from_node(min(fit, key=lambda n: (self._node_free[n], n)), gpus))
        by_rack: dict[str, list[str]] = {}
        for n in nodes:
            by_rack.setdefault(self.topo.node_rack[n], []).append(n)
        racks = [r for r, ns in by_rack.items() if sum(self._node_free[n] for n in ns) >= gpus]
        if racks:
            rack = min(racks, key=lambda r: (sum(self._node_free[n] for n in by_rack[r]), r))
            return frozenset(self._from_nodes(by_rack[rack], gpus))
        return frozenset(self._from_nodes(nodes, gpus))

    def _find_shaped(
        self, per_node: int, n_nodes: int, within: Iterable[str] | None
    ) -> frozenset[int] | None:
        cand = list(within) if within is not None else list(self.topo.node_gpus)
        ok = [n for n in cand if self._node_free.get(n, 0) >= per_node]
        if len(ok) < n_nodes:
            return None
        by_rack: dict[str, list[str]] = {}
        for n in ok:
            by_rack.setdefault(self.topo.node_rack[n], []).append(n)
        # best fit: the rack with the fewest eligible nodes that still holds the whole gang
        racks = [r for r, ns in by_rack.items() if len(ns) >= n_nodes]
        if racks:
            # best fit per node inside the rack: nodes with the least spare capacity first
            rack_nodes = by_rack[min(racks, key=lambda r: (len(by_rack[r]), r))]
            chosen = sorted(rack_nodes, key=lambda n: (self._node_free[n], n))[:n_nodes]
        else:  # across racks: the racks with the most eligible nodes first, fewest racks spanned
            order = sorted(by_rack, key=lambda r: (-len(by_rack[r]), r))
            chosen = [n for r in order for n in by_rack[r]][:n_nodes]
        out: list[int] = []
        for n in chosen:
            out.extend(self._from_node(n, per_node))
        return frozenset(out)
