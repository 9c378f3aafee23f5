"""Probe a node's NVIDIA GPUs through NVML and describe them as gres.conf GPU records.

Why not just ``AutoDetect=nvml``: on NVSwitch systems (DGX/HGX) every NVLink ends at a switch, so Slurm's
autodetect reports 0 links between GPUs and the node looks like eight unconnected GPUs. We detect links
whose remote end is a switch and report a full mesh among the GPUs on the switch fabric, each pair
weighted by the smaller of the two GPUs' switch-link counts (the bandwidth a pair can actually use).
Direct GPU-GPU links (NVLink bridges) are counted per peer, as Slurm does.

All NVML access goes through the small `Nvml` protocol so tests can drive `probe_gpus` with a fake
device description; `PynvmlBackend` is the real one and imports pynvml lazily (optional extra ``nvml``).
GPU order is by device minor number (= the ``/dev/nvidiaN`` file order of the generated lines), which is
the order Slurm gives the GRES indices, and Links= positions are permuted to match.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from themis_slurm.slurm.gres_conf import GpuRecord

_VENDOR_WORDS = {"nvidia", "tesla", "geforce", "quadro", "grid"}


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here: pynvml not installed, no driver, or NVML init failed."""


class Nvml(Protocol):
    """The handful of NVML queries the probe needs, by NVML device index.

    Link methods are only called for links that exist; ``nvlink_active`` returns False for link
    numbers the device does not have (NVML answers NotSupported/InvalidArgument there).
    """

    max_links: int

    def device_count(self) -> int: ...
    def name(self, dev: int) -> str: ...
    def minor_number(self, dev: int) -> int: ...
    def pci_bus_id(self, dev: int) -> str: ...
    def cpu_affinity(self, dev: int) -> list[int]:
        """Logical CPU ids the device is close to (decoded from NVML's 64-bit words)."""
        ...
    def nvlink_active(self, dev: int, link: int) -> bool: ...
    def nvlink_remote_is_switch(self, dev: int, link: int) -> bool: ...
    def nvlink_remote_pci_bus_id(self, dev: int, link: int) -> str: ...


@dataclass(frozen=True)
class ProbedGpu:
    """Raw facts about one device before they become a gres.conf record."""

    nvml_index: int
    minor: int
    name: str
    pci_bus_id: str
    cpus: tuple[int, ...]
    peer_links: Mapping[int, int]  # NVML index of peer -> direct NVLinks
    switch_links: int


def short_type(name: str) -> str:
    """``NVIDIA A100-SXM4-80GB`` -> ``a100``; ``NVIDIA H100 80GB HBM3`` -> ``h100``;
    ``NVIDIA GeForce RTX 3090`` -> ``rtx3090``; ``NVIDIA RTX A6000`` -> ``a6000``."""
    tokens = [t for t in re.split(r"\s+", name.strip().lower()) if t and t not in _VENDOR_WORDS]
    if not tokens:
        return "gpu"
    first = tokens[0]
    if first == "rtx" and len(tokens) > 1:
        first = "rtx" + tokens[1] if tokens[1][:1].isdigit() else tokens[1]
    first = first.split("-")[0]
    return re.sub(r"[^a-z0-9_.]", "", first) or "gpu"


def normalise_bus_id(bus_id: str | bytes) -> str:
    """``00000000:07:00.0`` and ``0000:07:00.0`` -> ``0000:07:00.0`` (NVML mixes both widths)."""
    s = bus_id.decode() if isinstance(bus_id, bytes) else bus_id
    s = s.strip().lower().rstrip("\x00")
    m = re.match(r"^([0-9a-f]+):([0-9a-f]+):([0-9a-f]+)\.([0-9a-f]+)$", s)
    if not m:
        return s
    dom, bus, dev, fn = (int(x, 16) for x in m.groups())
    return f"{dom:04x}:{bus:02x}:{dev:02x}.{fn:x}"


def affinity_words_to_cpus(words: list[int]) -> list[int]:
    """NVML's cpuSet (array of 64-bit words, bit j of word w = CPU 64*w + j) -> CPU ids."""
    return [64 * w + j for w, word in enumerate(words) for j in range(64) if word >> j & 1]


def linux_core_map(sysfs: Path = Path("/sys/devices/system/cpu")) -> dict[int, int]:
    """Logical CPU id -> Slurm core index, from sysfs topology.

    Slurm's Cores= counts physical cores socket by socket (hyperthread siblings share a core), so a
    CPU affinity list must be folded onto cores: sort the distinct (package, core_id) pairs and number
    them. Returns {} when sysfs is not readable (the caller then uses CPU ids as they are).
    """
    pairs: dict[int, tuple[int, int]] = {}
    for d in sysfs.glob("cpu[0-9]*"):
        try:
            cpu = int(d.name[3:])
            pkg = int((d / "topology" / "physical_package_id").read_text())
            core = int((d / "topology" / "core_id").read_text())
        except (OSError, ValueError):
            continue
        pairs[cpu] = (pkg, core)
    order = {p: i for i, p in enumerate(sorted(set(pairs.values())))}
    return {cpu: order[p] for cpu, p in pairs.items()}


def probe_devices(nvml: Nvml) -> list[ProbedGpu]:
    """Ask NVML about every device and its NVLinks."""
    count = nvml.device_count()
    bus = {normalise_bus_id(nvml.pci_bus_id(i)): i for i in range(count)}
    out: list[ProbedGpu] = []
    for i in range(count):
        peers: dict[int, int] = {}
        switch = 0
        for link in range(nvml.max_links):
            if not nvml.nvlink_active(i, link):
                continue
            if nvml.nvlink_remote_is_switch(i, link):
                switch += 1
                continue
            peer = bus.get(normalise_bus_id(nvml.nvlink_remote_pci_bus_id(i, link)))
            if peer is not None and peer != i:
                peers[peer] = peers.get(peer, 0) + 1
        out.append(ProbedGpu(i, nvml.minor_number(i), nvml.name(i), normalise_bus_id(nvml.pci_bus_id(i)),
                             tuple(nvml.cpu_affinity(i)), peers, switch))
    return out


def probe_gpus(nvml: Nvml, node: str, core_of_cpu: Callable[[int], int] | None = None) -> tuple[GpuRecord, ...]:
    """The node's GPUs as gres.conf records (index = position by minor number; see module docstring).

    ``core_of_cpu`` maps logical CPU ids to Slurm core indices (see `linux_core_map`); identity if None.
    """
    devs = sorted(probe_devices(nvml), key=lambda d: d.minor)
    pos = {d.nvml_index: k for k, d in enumerate(devs)}
    any_nvlink = any(d.peer_links or d.switch_links for d in devs)  # Links= only on NVLink machines
    records: list[GpuRecord] = []
    for k, d in enumerate(devs):
        links = [0] * len(devs)
        for peer, n in d.peer_links.items():
            links[pos[peer]] += n
        if d.switch_links:
            for other in devs:
                if other is not d and other.switch_links:
                    links[pos[other.nvml_index]] += min(d.switch_links, other.switch_links)
        links[k] = -1
        cores = sorted({core_of_cpu(c) if core_of_cpu else c for c in d.cpus})
        records.append(GpuRecord(node, k, short_type(d.name), f"/dev/nvidia{d.minor}", tuple(cores),
                                 tuple(links) if any_nvlink else ()))
    return tuple(records)


class PynvmlBackend:
    """`Nvml` over the real pynvml module. Use as a context manager (nvmlInit / nvmlShutdown).

    Raises NvmlUnavailable when pynvml is missing or NVML will not initialise (no driver, no GPU
    library): the gres-conf tool turns that into exit code 2.
    """

    def __init__(self) -> None:
        try:
            import pynvml  # noqa: PLC0415 - optional dependency, imported only on GPU nodes
        except ImportError as exc:
            raise NvmlUnavailable(f"pynvml is not installed ({exc}); pip install 'themis-slurm[nvml]'") from None
        self._p: Any = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML init failed: {exc} (no NVIDIA driver on this host?)") from None
        self.max_links = int(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18))
        self._handles: dict[int, Any] = {}
        self._cpus = 0

    def __enter__(self) -> PynvmlBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(self._p.NVMLError):
            self._p.nvmlShutdown()

    def _must(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call an NVML query the probe cannot do without; failures become NvmlUnavailable."""
        try:
            return fn(*args)
        except self._p.NVMLError as exc:
            raise NvmlUnavailable(f"NVML {what} failed: {exc}") from None

    def _h(self, dev: int) -> Any:
        if dev not in self._handles:
            self._handles[dev] = self._must(f"handle of device {dev}", self._p.nvmlDeviceGetHandleByIndex, dev)
        return self._handles[dev]

    def device_count(self) -> int:
        return int(self._must("device count", self._p.nvmlDeviceGetCount))

    def name(self, dev: int) -> str:
        n = self._must(f"name of device {dev}", self._p.nvmlDeviceGetName, self._h(dev))
        return n.decode() if isinstance(n, bytes) else str(n)

    def minor_number(self, dev: int) -> int:
        return int(self._must(f"minor number of device {dev}", self._p.nvmlDeviceGetMinorNumber, self._h(dev)))

    def pci_bus_id(self, dev: int) -> str:
        return _bus_id(self._must(f"PCI info of device {dev}", self._p.nvmlDeviceGetPciInfo, self._h(dev)))

    def cpu_affinity(self, dev: int) -> list[int]:
        words = ((os.cpu_count() or 64) + 63) // 64
        try:
            got = self._p.nvmlDeviceGetCpuAffinity(self._h(dev), words)
        except self._p.NVMLError:
            return []
        return affinity_words_to_cpus([int(w) for w in got])

    def nvlink_active(self, dev: int, link: int) -> bool:
        try:
            return self._p.nvmlDeviceGetNvLinkState(self._h(dev), link) == self._p.NVML_FEATURE_ENABLED
        except self._p.NVMLError:
            return False  # link number beyond this device's links, or NVLink not supported at all

    def nvlink_remote_is_switch(self, dev: int, link: int) -> bool:
        try:
            kind = self._p.nvmlDeviceGetNvLinkRemoteDeviceType(self._h(dev), link)
        except (self._p.NVMLError, AttributeError):
            return False
        return int(kind) == int(getattr(self._p, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2))

    def nvlink_remote_pci_bus_id(self, dev: int, link: int) -> str:
        try:
            return _bus_id(self._p.nvmlDeviceGetNvLinkRemotePciInfo(self._h(dev), link))
        except self._p.NVMLError:
            return ""


def _bus_id(pci: Any) -> str:
    raw = getattr(pci, "busId", b"") or getattr(pci, "busIdLegacy", b"")
    return normalise_bus_id(raw)
