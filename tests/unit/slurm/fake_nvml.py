"""A fake NVML layer (the `themis_slurm.hw.nvml.Nvml` protocol) describing test machines."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FakeGpu:
    name: str
    minor: int
    bus: str
    cpus: list[int]
    # one entry per NVLink: "switch", a peer's bus id, or None for an inactive link
    links: list[str | None] = field(default_factory=list)


class FakeNvml:
    def __init__(self, gpus: list[FakeGpu], max_links: int = 18) -> None:
        self.gpus = gpus
        self.max_links = max_links
        self.closed = False

    def device_count(self) -> int:
        return len(self.gpus)

    def name(self, dev: int) -> str:
        return self.gpus[dev].name

    def minor_number(self, dev: int) -> int:
        return self.gpus[dev].minor

    def pci_bus_id(self, dev: int) -> str:
        return self.gpus[dev].bus

    def cpu_affinity(self, dev: int) -> list[int]:
        return list(self.gpus[dev].cpus)

    def nvlink_active(self, dev: int, link: int) -> bool:
        links = self.gpus[dev].links
        return link < len(links) and links[link] is not None

    def nvlink_remote_is_switch(self, dev: int, link: int) -> bool:
        return self.gpus[dev].links[link] == "switch"

    def nvlink_remote_pci_bus_id(self, dev: int, link: int) -> str:
        return self.gpus[dev].links[link] or ""

    def close(self) -> None:
        self.closed = True


def dgx_a100() -> FakeNvml:
    """8 x A100-SXM4 on NVSwitch (12 links each), 2 sockets x 64 cores with hyperthreads (256 CPUs)."""
    gpus = []
    for i in range(8):
        sock = 0 if i < 4 else 1
        cpus = list(range(64 * sock, 64 * sock + 64)) + list(range(128 + 64 * sock, 128 + 64 * sock + 64))
        gpus.append(FakeGpu("NVIDIA A100-SXM4-80GB", i, f"00000000:{0x07 + 0x10 * i:02X}:00.0", cpus,
                            ["switch"] * 12))
    return FakeNvml(gpus)


def pcie_a6000() -> FakeNvml:
    """4 x RTX A6000 on PCIe; NVML devices 0 and 1 joined by an NVLink bridge (4 links).

    Minor numbers are not in NVML order (device 0 is /dev/nvidia1) to check that records follow
    the device files and Links positions are permuted accordingly.
    """
    b = ["0000:17:00.0", "0000:31:00.0", "0000:B1:00.0", "0000:CA:00.0"]
    return FakeNvml([
        FakeGpu("NVIDIA RTX A6000", 1, b[0], list(range(0, 16)), [b[1]] * 4),
        FakeGpu("NVIDIA RTX A6000", 0, b[1], list(range(0, 16)), [b[0].replace("0000:", "00000000:")] * 4),
        FakeGpu("NVIDIA RTX A6000", 2, b[2], list(range(16, 32))),
        FakeGpu("NVIDIA RTX A6000", 3, b[3], list(range(16, 32)), [None, None]),
    ], max_links=4)
