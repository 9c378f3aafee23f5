"""Placement sensitivity and gang placement.

Throughput model (Themis, NSDI 2020; the authors' simulator model_stats/themis/*.json, see
docs/design.md): a job running on a GPU set G progresses at ``|G| * factor(level(G))`` ideal GPU-seconds per
second, where level is the widest boundary G crosses. Same machine is 1.0 in the authors' data; they do not
distinguish NVLink islands inside a machine, so the model profiles use 1.0 at NODE level too. The named
sensitivity classes (our own, for jobs that give no model) add a small cross-island penalty for `high`. The
modern model classes (transformer-dp, transformer-tp, moe, finetune) say where their numbers come from in
their `source`. A site defines or overrides classes in themis.yaml; those reach the core as Profile objects
on the jobs that name them (:func:`site_profile`): the built-in table is never changed.

:class:`Pool` is the free-GPU index used inside one round: it finds the tightest placement for a gang
(island, then node, then rack, then anywhere), best-fit at each level so that large holes stay whole for
large gangs. Bucketed by free count, so a placement costs O(island/node size), not O(cluster).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from types import MappingProxyType

from themis_slurm.core.topology import Level, Topology

#: The placement levels in the order of :attr:`Profile.factors` (themis.yaml's ``models:`` names them so).
LEVEL_NAMES: tuple[str, str, str, str] = ("island", "node", "rack", "cluster")


@dataclass(frozen=True, slots=True)
class Profile:
    """Slow-down factors per placement level: (island, node, rack, cluster), each in (0, 1], never growing with
    distance. `source` says where the numbers come from (a measurement, cited, or an estimate and why);
    `about` which jobs the class describes (the user guide's table is generated from both)."""

    name: str
    factors: tuple[float, float, float, float]
    source: str = ""
    about: str = ""

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


_PAPER = "measured: Themis NSDI 2020, the authors' simulator model_stats/themis/*.json (themis-facts.md)"
_OURS = "themis-slurm sensitivity class (our round numbers, docs/design.md)"
# Gavel (Narayanan et al., OSDI 2020), scheduler/simulation_throughputs.json (a copy in
# /work/shared/traces/gavel, MIT licence): steps/s of its PyTorch data-parallel Transformer (batch 16..256)
# on 2, 4 and 8 V100s spread over servers ("v100_unconsolidated") against the same job on one server ("v100").
# tests/unit/core/test_model_classes.py recomputes the median from that file.
_GAVEL_DP = ("measured: Gavel (Narayanan et al., OSDI 2020) scheduler/simulation_throughputs.json, data-parallel "
             "Transformer on 2-8 V100s over several servers vs one: median 0.54 of 15 runs (0.28-0.77); "
             "cross-rack 0.54^2, as in the Themis authors' data, where cross-rack is cross-machine squared "
             "within 0.01 for every model")
_TP = ("estimate: tensor parallelism all-reduces activations twice per layer forward and twice backward "
       "(Megatron-LM, Shoeybi et al. 2019, sec. 3), on the critical path, and is meant for one NVLink server "
       "(Narayanan et al. SC21, sec. 3.3, takeaway 1): below transformer-dp at every level, and slowed by PCIe "
       "between NVLink islands")
_MOE = ("estimate: expert parallelism sends every token to its experts and back, an all-to-all per MoE layer "
        "forward and backward; across servers it is bound by the network (on Ethernet, a Tutel user's step took "
        "about n times as long on n nodes as on one, microsoft/tutel#187): between transformer-dp and "
        "transformer-tp")
_LORA = ("estimate: LoRA trains ~10,000x fewer parameters than full fine-tuning of GPT-3 175B (Hu et al., ICLR "
         "2022), so the gradient all-reduce is small and the job compute-bound: the ResNet-like factors")

#: The built-in profiles: the authors' models (factors (same machine, same machine, cross-machine, cross-rack)
#: from their data), our sensitivity classes (round numbers) and modern model classes, each with its source.
#: Read-only: a site's own classes (themis.yaml ``models:``) reach the core as :class:`Profile` objects on its
#: jobs (:func:`site_profile`), never by changing this table.
PROFILES: Mapping[str, Profile] = MappingProxyType({
    p.name: p
    for p in (
        Profile("vgg11", (1.0, 1.0, 0.75, 0.56), _PAPER, "VGG-11 (CNN)"),
        Profile("vgg16", (1.0, 1.0, 0.72, 0.52), _PAPER, "VGG-16 (CNN)"),
        Profile("vgg19", (1.0, 1.0, 0.70, 0.50), _PAPER, "VGG-19 (CNN)"),
        Profile("alexnet", (1.0, 1.0, 0.80, 0.64), _PAPER, "AlexNet (CNN)"),
        Profile("resnet50", (1.0, 1.0, 0.98, 0.96), _PAPER, "ResNet-50 (CNN)"),
        Profile("resnet101", (1.0, 1.0, 0.98, 0.96), _PAPER, "ResNet-101 (CNN)"),
        Profile("resnet152", (1.0, 1.0, 0.98, 0.96), _PAPER, "ResNet-152 (CNN)"),
        Profile("inception3", (1.0, 1.0, 0.98, 0.96), _PAPER, "Inception-v3 (CNN)"),
        Profile("inception4", (1.0, 1.0, 0.98, 0.96), _PAPER, "Inception-v4 (CNN)"),
        Profile("googlenet", (1.0, 1.0, 0.98, 0.96), _PAPER, "GoogLeNet (CNN)"),
        Profile("transformer-dp", (1.0, 1.0, 0.54, 0.29), _GAVEL_DP,
                "a dense transformer (BERT, GPT, ViT, Llama ...) trained data-parallel (DDP, FSDP, ZeRO)"),
        Profile("transformer-tp", (1.0, 0.5, 0.25, 0.15), _TP,
                "a transformer split by tensor (Megatron-style) parallelism, alone or with pipeline/data "
                "parallelism: every layer communicates"),
        Profile("moe", (1.0, 0.7, 0.4, 0.25), _MOE,
                "a mixture-of-experts model with expert parallelism (Mixtral-, DeepSeek-MoE-like): all-to-all "
                "every MoE layer"),
        Profile("finetune", (1.0, 1.0, 0.98, 0.96), _LORA,
                "LoRA/adapter fine-tuning, or full fine-tuning of a small model (a few GPUs, small gradients)"),
        Profile("high", (1.0, 0.95, 0.70, 0.50), _OURS, "anything that exchanges a lot between GPUs (VGG-like)"),
        Profile("medium", (1.0, 1.0, 0.80, 0.64), _OURS, "moderate communication (AlexNet-like)"),
        Profile("low", (1.0, 1.0, 0.98, 0.96), _OURS, "little communication (ResNet-like): the default"),
        Profile("none", (1.0, 1.0, 1.0, 1.0), _OURS, "no communication between GPUs: any GPUs will do"),
    )
})

#: The placement sensitivity classes (``--themis-sens``); the other built-in names are models (``--themis-model``).
SENS_CLASSES: tuple[str, ...] = ("high", "medium", "low", "none")
DEFAULT_PROFILE = "low"
#: A job's :attr:`~themis_slurm.core.workload.Job.profile`: a built-in profile's name, or a site's Profile.
ProfileRef = str | Profile


_UNPLACED = object()  # Pool.best's memo miss (None is a memoised "does not fit")


def get_profile(name: ProfileRef | None) -> Profile:
    """Profile by built-in name (case-insensitive), or the Profile itself (a site's class, carried by its job);
    None gives the default class. Unknown names raise with the list."""
    if name.__class__ is Profile:
        return name  # type: ignore[return-value]
    found = PROFILES.get(name)  # type: ignore[arg-type]  # names are usually lower case already
    if found is not None:
        return found
    if name is None:
        return PROFILES[DEFAULT_PROFILE]
    try:
        return PROFILES[name.lower()]  # type: ignore[union-attr]
    except KeyError:
        raise ValueError(f"unknown placement profile {name!r}; known: {', '.join(PROFILES)}") from None


def site_profile(name: str | None, site: Mapping[str, Profile]) -> ProfileRef | None:
    """What a job naming `name` gets as its Job.profile under a site's own classes (themis.yaml ``models:``):
    the site's Profile where the site defines or overrides the name, the built-in name where only the core
    knows it, None where neither does (the caller falls back to the default class and says so).

    Built-in names the site leaves alone stay names, so without a ``models:`` section every Job is exactly what
    it was before sites could define classes (the same kinds, the same decisions)."""
    key = (name or "").lower()
    found = site.get(key)
    if found is not None:
        return found
    return key if key in PROFILES else None


def allowed_nodes_on(topology: Topology, allowed: frozenset[str] | None) -> tuple[str, ...] | None:
    """The nodes of `topology` a job restricted to `allowed` (:attr:`Job.allowed_nodes`) may be placed on,
    in topology order; None when that restricts nothing (no set, or a set holding every node).

    Topology order, not the set's: a set of names iterates in an order that changes from process to
    process (string hashes are salted), and the searches break some ties by the order of the nodes they
    are given, so a round would not be a pure function of its state. None for a set of every node: such a
    job is placed exactly as one without a set (the plain, memoised best fit), so a caller that lists
    every node for an unconstrained job neither slows the round nor changes it. Names the topology does
    not know (nodes without GPUs) are ignored; none left is the empty tuple: nowhere.
    """
    if allowed is None:
        return None
    every = topology.node_gpus
    if len(allowed) >= len(every) and allowed.issuperset(every):
        return None
    return tuple(filter(allowed.__contains__, every))


def throughput(n_gpus: int, level: Level, profile: Profile) -> float:
    """Ideal GPU-seconds of work done per second by a job on `n_gpus` GPUs spanning `level`."""
    return n_gpus * profile.factor(level) if n_gpus > 0 else 0.0


class Pool:
    """The GPUs still free in a round, indexed for fast tightest/best-fit gang placement.

    Mutable on purpose: a round takes and returns GPUs thousands of times. It is private to one round
    (created from an immutable set, never shared), so the arbiter stays a pure function.

    Indexes: the free GPUs (one set, for subset tests at C speed), per island the free GPUs, per node and
    rack the free count, and buckets (free count -> islands / nodes with exactly that many free) for
    best fit. Which member of a bucket a placement picks depends on the bucket set's history, so every
    take and give updates the buckets one GPU at a time, always in the same order. Plain placements
    (no shape, no `within`) are memoised until the pool next changes: many apps place the same gang size
    against the same pool.
    """

    def __init__(self, topology: Topology, free: Iterable[int]) -> None:
        self.topo = topology
        self._meta = topology.gpu_meta
        self._free: set[int] = set()
        self._isl_free: list[set[int]] = [set() for _ in topology.island_gpus]
        self._node_free: dict[str, int] = dict.fromkeys(topology.node_gpus, 0)
        self._rack_free: dict[str, int] = dict.fromkeys(topology.rack_nodes, 0)
        # buckets: free count -> set of islands / nodes with exactly that many free
        self._isl_bucket: dict[int, set[int]] = {}
        # nodes are bucketed by their position (ints iterate deterministically; str hashes are salted)
        self._node_names: tuple[str, ...] = tuple(topology.node_gpus)
        self._node_bucket: dict[int, set[int]] = {}
        self._memo: dict[int, tuple[frozenset[int], Level] | None] = {}
        self.size = 0
        if topology.island_gpus:
            self._isl_bucket[0] = set(range(len(topology.island_gpus)))
        self._node_bucket[0] = set(range(len(self._node_names)))
        self.give(free)

    # ----------------------------------------------------------------- bookkeeping
    def take(self, gpus: Iterable[int]) -> None:
        """Mark GPUs used (all must be free; on error nothing is taken)."""
        if not isinstance(gpus, (frozenset, set)):
            gpus = list(gpus)
            if len(set(gpus)) != len(gpus):
                self._refuse(gpus)
        if not self._free.issuperset(gpus):
            self._refuse(gpus)
        self.take_free(gpus)

    def take_free(self, gpus: Iterable[int]) -> None:
        """:meth:`take` for GPUs the caller has just checked are free and distinct (:meth:`has`)."""
        if self._memo:
            self._memo.clear()
        meta, free, isl_free, nf, rf = self._meta, self._free, self._isl_free, self._node_free, self._rack_free
        ib, nb = self._isl_bucket, self._node_bucket
        for gid in gpus:
            isl, pos, node, rack = meta[gid]
            s = isl_free[isl]
            c = len(s)
            b = ib[c]
            b.discard(isl)
            if not b:
                del ib[c]
            b = ib.get(c - 1)
            if b is None:
                ib[c - 1] = {isl}
            else:
                b.add(isl)
            s.discard(gid)
            c = nf[node]
            b = nb[c]
            b.discard(pos)
            if not b:
                del nb[c]
            b = nb.get(c - 1)
            if b is None:
                nb[c - 1] = {pos}
            else:
                b.add(pos)
            nf[node] = c - 1
            rf[rack] -= 1
            free.discard(gid)
        self.size = len(free)

    def _refuse(self, gpus: Iterable[int]) -> None:
        gpus = list(gpus)
        missing = [g for g in gpus if g not in self]
        raise ValueError(f"cannot take GPUs {sorted(gpus)}: not free or repeated: {sorted(missing)}")

    def give(self, gpus: Iterable[int]) -> None:
        """Return GPUs to the pool."""
        if self._memo:
            self._memo.clear()
        meta, free, isl_free, nf, rf = self._meta, self._free, self._isl_free, self._node_free, self._rack_free
        ib, nb = self._isl_bucket, self._node_bucket
        try:
            for gid in gpus:
                isl, pos, node, rack = meta[gid]
                s = isl_free[isl]
                if gid in s:
                    raise ValueError(f"GPU {gid} ({node} index {self.topo.gpus[gid].index}) is already free")
                c = len(s)
                b = ib[c]
                b.discard(isl)
                if not b:
                    del ib[c]
                b = ib.get(c + 1)
                if b is None:
                    ib[c + 1] = {isl}
                else:
                    b.add(isl)
                s.add(gid)
                c = nf[node]
                b = nb[c]
                b.discard(pos)
                if not b:
                    del nb[c]
                b = nb.get(c + 1)
                if b is None:
                    nb[c + 1] = {pos}
                else:
                    b.add(pos)
                nf[node] = c + 1
                rf[rack] += 1
                free.add(gid)
        finally:
            self.size = len(free)

    def __contains__(self, gid: int) -> bool:
        return gid in self._free

    def has(self, gpus: Iterable[int]) -> bool:
        """Whether every GPU of `gpus` is free."""
        return self._free.issuperset(gpus)

    @property
    def free_view(self) -> AbstractSet[int]:
        """The free GPUs, live: the pool's own set, which :meth:`take` and :meth:`give` update in place.
        For hot loops, where ``view >= gpus`` is :meth:`has` without a call (the greedy fill tests every
        kept offer so). Read only: changing it would put it out of step with the other indexes."""
        return self._free

    def free_ids(self) -> frozenset[int]:
        return frozenset(g for s in self._isl_free for g in s)

    def node_free(self, node: str) -> int:
        return self._node_free[node]

    def copy(self) -> Pool:
        """An independent pool with the same free GPUs (copies the indexes; no re-indexing)."""
        new = Pool.__new__(Pool)
        new.topo = self.topo
        new._meta = self._meta
        new._free = set(self._free)
        new._isl_free = [set(s) for s in self._isl_free]
        new._node_free = dict(self._node_free)
        new._rack_free = dict(self._rack_free)
        new._isl_bucket = {k: set(v) for k, v in self._isl_bucket.items()}
        new._node_names = self._node_names
        new._node_bucket = {k: set(v) for k, v in self._node_bucket.items()}
        new._memo = {}  # not shared: a copied bucket set may iterate in another order
        new.size = self.size
        return new

    # ----------------------------------------------------------------- placement
    def _from_node(self, node: str, k: int) -> list[int]:
        """k GPUs of one node, fullest islands first (fewest islands spanned)."""
        isl_free = self._isl_free
        isls = self.topo.node_islands[node]  # ascending island ids
        if self._node_free[node] == k:  # all of the node's free GPUs, however its islands hold them
            return [g for i in isls for g in isl_free[i]]
        # An island that alone holds k is best-fit chosen first (fewest free, then lowest id).
        best, best_c = -1, 0
        for i in isls:
            c = len(isl_free[i])
            if c >= k and (best < 0 or c < best_c):
                best, best_c = i, c
        if best >= 0:
            return sorted(isl_free[best])[:k]
        out: list[int] = []
        for i in sorted(isls, key=lambda i: (-len(isl_free[i]), i)):
            need = k - len(out)
            if need <= 0:
                break
            out.extend(sorted(isl_free[i])[:need])
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
        return self.best(gpus)

    def place_among(
        self,
        gpus: int,
        gpus_per_node: int | None,
        nodes: int | None,
        among: Sequence[str],
    ) -> tuple[frozenset[int], Level] | None:
        """:meth:`place` on the GPUs of the nodes `among` only: the search for a job Slurm can start on those
        nodes only (:attr:`Job.allowed_nodes`, see :func:`allowed_nodes_on`). Takes nothing.

        The same as ``place(..., within=among)`` except that an unshaped gang one island of `among` holds
        gets the best-fit such island first, as :meth:`best` does over the whole pool. `within` picks the
        best-fit node, whose free GPUs may be split over islands while another node's island holds the
        gang whole; a placement-sensitive job would then run slower only because it is constrained.
        """
        if (gpus_per_node is None or nodes is None) and 0 < gpus <= self.size:
            isl_free, node_islands = self._isl_free, self.topo.node_islands
            best, best_c = -1, 0
            for node in among:
                for i in node_islands.get(node, ()):
                    c = len(isl_free[i])
                    if c >= gpus and (best < 0 or c < best_c):  # fewest free, then first in `among` order
                        best, best_c = i, c
                if best_c == gpus:
                    break  # an exact fit: no later island can beat it (ties go to the first)
            if best >= 0:
                return frozenset(sorted(isl_free[best])[:gpus]), Level.ISLAND
        return self.place(gpus, gpus_per_node, nodes, among)

    def best(self, gpus: int) -> tuple[frozenset[int], Level] | None:
        """:meth:`place` for a gang of `gpus` GPUs with no shape and no `within` (memoised per pool state)."""
        if gpus <= 0 or gpus > self.size:
            return None
        memo = self._memo
        found = memo.get(gpus, _UNPLACED)  # a miss is the common case in a fill (every take clears the memo)
        if found is _UNPLACED:
            found = memo[gpus] = self._place_plain(gpus)
        return found

    def _place_plain(self, gpus: int) -> tuple[frozenset[int], Level]:
        """Tightest placement of an unshaped gang of `gpus` <= size GPUs (steps 1 to 4 of best fit)."""
        # 1. one island, best fit. A bucket's member is next(iter(bucket)): O(1) and deterministic, as sets
        #    of ints iterate in an order fixed by their history

        ib = self._isl_bucket
        for c in range(gpus, max(ib) + 1):
            b = ib.get(c)
            if b:
                return frozenset(sorted(self._isl_free[next(iter(b))])[:gpus]), Level.ISLAND
        # 2. one node, best fit (no island holds it, so it spans islands)
        nb = self._node_bucket
        for c in range(gpus, max(nb) + 1):
            b = nb.get(c)
            if b:
                return frozenset(self._from_node(self._node_names[next(iter(b))], gpus)), Level.NODE
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
