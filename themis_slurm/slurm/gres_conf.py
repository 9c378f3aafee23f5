"""gres.conf: per-node GPU records, NVLink islands, and rendering lines back.

Themis packs an app's GPUs onto one *island* (GPUs joined by NVLink) when it can, so the scheduler needs
to know, per node, which GPU index is which device and how devices are linked. Slurm numbers a node's
GPUs in the order its gres.conf lines (after expanding ``File=`` ranges) list them, which is also the order
``IDX:`` in ``gres_detail`` refers to, so records keep that order and carry it as ``index``.

Only ``Name=gpu`` lines become GPU records; other GRES (mps, shard, ...) are checked for syntax and
skipped. Lines without ``NodeName=`` apply to whichever node reads the file (that is how slurmd reads
it), so `GresConf.gpus_on` merges them into every node's list in file order.

Island rule (documented choice): islands are the connected components of the graph whose edges are
``Links`` values > 0 (in either direction). GPUs that have no NVLink to any other GPU on the node all
form ONE island per node (the "PCIe island"), not one per socket: Cores= is frequently the whole machine
or absent, and Slurm itself does not split on it unless jobs ask for --gres-flags=enforce-binding, so
socket splitting would mostly invent structure. ``islands(node, split_pcie_by_cores=True)`` is available
for sites whose Cores= lines are accurate; it groups unlinked GPUs by their identical Cores= set.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from themis_slurm.slurm import hostlist
from themis_slurm.slurm.conf_lines import ConfLine, logical_lines
from themis_slurm.slurm.ranges import fold_int_list, parse_int_list

_KNOWN_KEYS = {
    "nodename": "NodeName",
    "name": "Name",
    "type": "Type",
    "file": "File",
    "count": "Count",
    "cores": "Cores",
    "cpus": "Cores",  # deprecated alias Slurm still accepts
    "links": "Links",
    "autodetect": "AutoDetect",
    "flags": "Flags",
    "multiplefiles": "MultipleFiles",
}
_AUTODETECT = {"nvml", "off", "rsmi", "oneapi", "nrt", "nvidia"}
ALL_NODES = "*"
"""`GresLine.nodes` value for lines without NodeName= (they apply to every node reading the file)."""


@dataclass(frozen=True)
class GresLine:
    """One parsed ``Name=gpu`` line, with File ranges and NodeName hostlists expanded.

    ``files`` is empty when the line gives only ``Count=``; then ``count`` GPUs without device files.
    ``links`` is ``()`` when the line has no ``Links=``.
    """

    path: str
    line: int
    nodes: tuple[str, ...]  # (ALL_NODES,) when the line has no NodeName=
    type: str | None
    files: tuple[str, ...]
    count: int
    cores: tuple[int, ...]
    links: tuple[int, ...]


@dataclass(frozen=True)
class GpuRecord:
    """One GPU of one node, as gres.conf describes it.

    ``index`` is Slurm's GRES index on that node (what ``IDX:`` and CUDA_VISIBLE_DEVICES count);
    ``links[k]`` is the number of NVLinks to the GPU with index k (-1 for itself), ``()`` if unknown.
    """

    node: str
    index: int
    type: str | None
    file: str | None
    cores: tuple[int, ...]
    links: tuple[int, ...]


@dataclass(frozen=True)
class GresConf:
    """A parsed gres.conf: GPU lines plus AutoDetect settings (global and per node)."""

    path: str
    lines: tuple[GresLine, ...]
    autodetect: str | None  # global AutoDetect= (a line with no NodeName=), lower-cased
    node_autodetect: tuple[tuple[str, str], ...]  # (node, mode) from NodeName=... AutoDetect=... lines

    def nodes(self) -> tuple[str, ...]:
        """Nodes named explicitly on ``Name=gpu`` lines, sorted like a hostlist."""
        names = {n for ln in self.lines for n in ln.nodes if n != ALL_NODES}
        return tuple(hostlist.expand(hostlist.fold(names))) if names else ()

    def autodetect_for(self, node: str) -> str | None:
        """AutoDetect mode in force on ``node`` (a per-node setting wins over the global one)."""
        for name, mode in self.node_autodetect:
            if name == node:
                return mode
        return self.autodetect

    def gpus_on(self, node: str) -> tuple[GpuRecord, ...]:
        """The node's GPUs in Slurm index order (lines naming it plus lines without NodeName=)."""
        records: list[GpuRecord] = []
        for ln in self.lines:
            if node not in ln.nodes and ALL_NODES not in ln.nodes:
                continue
            files: Sequence[str | None] = ln.files if ln.files else [None] * ln.count
            for f in files:
                records.append(GpuRecord(node, len(records), ln.type, f, ln.cores, ln.links))
        return tuple(records)

    def gpus(self) -> tuple[GpuRecord, ...]:
        """All GPU records of all explicitly named nodes."""
        return tuple(r for n in self.nodes() for r in self.gpus_on(n))

    def islands(self, node: str, split_pcie_by_cores: bool = False) -> tuple[frozenset[int], ...]:
        """NVLink islands of ``node`` as sets of GPU indices (see module docstring for the rule)."""
        return islands(self.gpus_on(node), split_pcie_by_cores)


def islands(gpus: Sequence[GpuRecord], split_pcie_by_cores: bool = False) -> tuple[frozenset[int], ...]:
    """Connected components of ``gpus`` under Links > 0; GPUs without any link grouped per node.

    Returned sorted by smallest index. A Links list shorter than the GPU count just has fewer edges.
    """
    idx = [g.index for g in gpus]
    parent = {i: i for i in idx}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    linked: set[int] = set()
    for g in gpus:
        for k, n in enumerate(g.links):
            if k != g.index and n > 0 and k in parent:
                linked.update((g.index, k))
                parent[find(g.index)] = find(k)
    groups: dict[object, set[int]] = {}
    for g in gpus:
        if g.index in linked:
            key: object = ("nvlink", find(g.index))
        else:
            key = ("pcie", g.cores if split_pcie_by_cores else ())
        groups.setdefault(key, set()).add(g.index)
    return tuple(sorted((frozenset(s) for s in groups.values()), key=min))


def parse_gres_conf(text: str, path: str = "gres.conf") -> GresConf:
    """Parse gres.conf text. Raises ConfigError (file:line, field, value, expectation) on bad input."""
    lines: list[GresLine] = []
    autodetect: str | None = None
    node_auto: list[tuple[str, str]] = []
    for cl in logical_lines(text, path):
        fields = _fields(cl)
        if "AutoDetect" in fields:
            mode = fields["AutoDetect"].lower()
            if mode not in _AUTODETECT:
                raise cl.error("AutoDetect", fields["AutoDetect"], "one of " + ", ".join(sorted(_AUTODETECT)))
            if "NodeName" in fields:
                node_auto.extend((n, mode) for n in _nodes(cl, fields["NodeName"]))
            else:
                autodetect = mode
        if "Name" not in fields:
            if set(fields) - {"AutoDetect", "NodeName"}:
                raise cl.error("Name", "", "Name=<gres name> (e.g. Name=gpu) on every GRES line")
            continue
        if fields["Name"].lower() != "gpu":
            continue
        lines.append(_gpu_line(cl, fields))
    return GresConf(path, tuple(lines), autodetect, tuple(node_auto))


def _fields(cl: ConfLine) -> dict[str, str]:
    fields: dict[str, str] = {}
    for key, value in cl.pairs:
        canon = _KNOWN_KEYS.get(key.lower())
        if canon is None:
            raise cl.error(key, value, "a gres.conf key: " + ", ".join(sorted(set(_KNOWN_KEYS.values()))))
        if canon in fields:
            raise cl.error(key, value, f"{canon}= at most once per line")
        fields[canon] = value
    return fields


def _nodes(cl: ConfLine, value: str) -> tuple[str, ...]:
    try:
        names = hostlist.expand(value)
    except ValueError:
        names = []
    if not names:
        raise cl.error("NodeName", value, "a node hostlist like node[1-4]")
    return tuple(names)


def _gpu_line(cl: ConfLine, f: dict[str, str]) -> GresLine:
    nodes = _nodes(cl, f["NodeName"]) if "NodeName" in f else (ALL_NODES,)
    files: tuple[str, ...] = ()
    if "File" in f:
        try:
            files = tuple(hostlist.expand(f["File"]))
        except ValueError:
            files = ()
        if not files or not all(x.startswith("/") for x in files):
            raise cl.error("File", f["File"], "an absolute device path or range like /dev/nvidia[0-3]")
    count = len(files)
    if "Count" in f:
        try:
            count = int(f["Count"])
        except ValueError:
            count = -1
        if count < 0:
            raise cl.error("Count", f["Count"], "a whole number of GPUs")
        if files and count != len(files):
            raise cl.error("Count", f["Count"], f"{len(files)} to match the {len(files)} File= devices")
    elif not files:
        count = 1  # Slurm's default Count for a line with neither File nor Count
    cores: tuple[int, ...] = ()
    if "Cores" in f:
        try:
            cores = parse_int_list(f["Cores"])
        except ValueError:
            raise cl.error("Cores", f["Cores"], "a core id list like 0-15,32-47") from None
    links: tuple[int, ...] = ()
    if "Links" in f:
        try:
            links = tuple(int(x) for x in f["Links"].split(","))
        except ValueError:
            links = ()
        if not links or any(n < -1 for n in links):
            raise cl.error("Links", f["Links"], "comma-separated link counts (-1 self, 0 none), e.g. -1,2,0,0")
        if count != 1:
            raise cl.error("Links", f["Links"], "a single File= device on a line with Links=")
        if links.count(-1) > 1:
            raise cl.error("Links", f["Links"], "at most one -1 (the device itself)")
    gtype = f.get("Type") or None
    return GresLine(cl.path, cl.line, nodes, gtype, files, count, cores, links)


def check_links(conf: GresConf, node: str) -> list[str]:
    """Consistency problems of the node's Links= (-1 not at own index, wrong length, asymmetric).

    Slurm accepts such files silently; we report them so `themis gres-conf --check` can warn.
    """
    gpus = conf.gpus_on(node)
    problems: list[str] = []
    for g in gpus:
        if not g.links:
            continue
        if len(g.links) != len(gpus):
            problems.append(f"{node} gpu {g.index}: Links has {len(g.links)} entries for {len(gpus)} GPUs")
        if g.index < len(g.links) and g.links[g.index] != -1:
            problems.append(f"{node} gpu {g.index}: Links position {g.index} should be -1 (itself)")
    linked = [g for g in gpus if g.links]
    for a in linked:
        for b in linked:
            if a.index < b.index < len(a.links) and a.index < len(b.links):
                there, back = a.links[b.index], b.links[a.index]
                if there != back:
                    problems.append(f"{node} gpus {a.index}<->{b.index}: Links {there} one way, {back} the other")
    return problems


def render_gpu_line(gpu: GpuRecord) -> str:
    """One gres.conf line for one GPU: ``NodeName=g01 Name=gpu Type=a100 File=/dev/nvidia0 Cores=0-31 ...``."""
    parts = [f"NodeName={gpu.node}", "Name=gpu"]
    if gpu.type:
        parts.append(f"Type={gpu.type}")
    if gpu.file:
        parts.append(f"File={gpu.file}")
    else:
        parts.append("Count=1")
    if gpu.cores:
        parts.append(f"Cores={fold_int_list(gpu.cores)}")
    if gpu.links:
        parts.append("Links=" + ",".join(str(n) for n in gpu.links))
    return " ".join(parts)


def render_gres_conf(gpus: Iterable[GpuRecord], header: str | None = None) -> str:
    """gres.conf text, one File per line (required when Links= is given), optional ``#`` header lines."""
    out = [f"# {h}".rstrip() for h in header.splitlines()] if header else []
    out.extend(render_gpu_line(g) for g in gpus)
    return "\n".join(out) + "\n"
