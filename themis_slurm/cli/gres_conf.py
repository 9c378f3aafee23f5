"""``themis gres-conf``: write (or check) this node's gres.conf GPU lines from what NVML sees.

Run on a GPU node. Without ``--check`` it prints one gres.conf line per GPU (Type, File, Cores, Links;
NVSwitch fabrics get a full Links mesh, which Slurm's own AutoDetect=nvml reports as no links). With
``--check FILE`` it compares FILE's lines for this node with the hardware.

Exit codes: 0 output written / file matches, 1 file differs from hardware, 2 NVML unavailable (no
pynvml, no driver) or FILE unreadable/invalid.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from themis_slurm.hw.nvml import Nvml, NvmlUnavailable, PynvmlBackend, linux_core_map, probe_gpus
from themis_slurm.slurm.errors import ConfigError
from themis_slurm.slurm.gres_conf import GpuRecord, parse_gres_conf, render_gpu_line, render_gres_conf
from themis_slurm.slurm.ranges import fold_int_list

PROG = "themis gres-conf"


def _fail(msg: str, code: int) -> None:
    click.echo(f"{PROG}: error: {msg}", err=True)
    sys.exit(code)


def compare_gpus(configured: Sequence[GpuRecord], hardware: Sequence[GpuRecord], where: str) -> list[str]:
    """Human-readable differences between gres.conf records and probed ones (empty when equal).

    Type compares case-insensitively and Cores as sets; everything else exactly, including a missing
    Links= on an NVLink machine (the NVSwitch case this tool exists for).
    """
    diffs: list[str] = []
    if len(configured) != len(hardware):
        diffs.append(f"{where}: {len(configured)} GPUs configured, hardware has {len(hardware)}")
    for conf, hw in zip(configured, hardware, strict=False):
        tag = f"{where}: gpu {conf.index}"
        if (conf.type or "").lower() != (hw.type or "").lower():
            diffs.append(f"{tag}: Type={conf.type or '(none)'}, hardware has {hw.type}")
        if conf.file != hw.file:
            diffs.append(f"{tag}: File={conf.file or '(none)'}, hardware has {hw.file}")
        if set(conf.cores) != set(hw.cores):
            diffs.append(f"{tag}: Cores={fold_int_list(conf.cores) or '(none)'}, "
                         f"hardware has {fold_int_list(hw.cores) or '(none)'}")
        if conf.links != hw.links:
            have = ",".join(map(str, conf.links)) or "(none)"
            want = ",".join(map(str, hw.links)) or "(none)"
            diffs.append(f"{tag}: Links={have}, hardware has {want}")
    for hw in hardware[len(configured):]:
        diffs.append(f"{where}: missing line: {render_gpu_line(hw)}")
    return diffs


def _default_nvml() -> Nvml:
    return PynvmlBackend()


@click.command("gres-conf")
@click.option("--node", "node", metavar="NAME", help="Slurm node name to write (default: short hostname).")
@click.option("--check", "check_file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Compare FILE's lines for this node with the hardware; exit 1 if they differ.")
@click.pass_context
def gres_conf(ctx: click.Context, node: str | None, check_file: Path | None) -> None:
    """Print gres.conf GPU lines for this node from NVML, or --check an existing gres.conf."""
    obj: dict[str, Any] = ctx.obj if isinstance(ctx.obj, dict) else {}
    factory: Callable[[], Nvml] = obj.get("nvml_factory", _default_nvml)
    core_of_cpu: Callable[[int], int | None] | None = obj.get("core_of_cpu")
    if core_of_cpu is None and "nvml_factory" not in obj:
        cmap = linux_core_map()
        core_of_cpu = cmap.get if cmap else None
    name = node or socket.gethostname().split(".")[0]

    configured: tuple[GpuRecord, ...] = ()
    if check_file is not None:
        try:
            text = check_file.read_text()
        except OSError as exc:
            _fail(f"cannot read {check_file}: {exc.strerror or exc}", 2)
        try:
            configured = parse_gres_conf(text, str(check_file)).gpus_on(name)
        except ConfigError as exc:
            _fail(str(exc), 2)

    try:
        nvml = factory()
        try:
            hardware = probe_gpus(nvml, name, _safe(core_of_cpu))
        finally:
            close = getattr(nvml, "close", None)
            if callable(close):
                close()
    except NvmlUnavailable as exc:
        _fail(f"cannot query GPUs: {exc}", 2)

    if check_file is None:
        header = f"gres.conf lines for {name} from NVML by themis gres-conf ({len(hardware)} GPUs)"
        click.echo(render_gres_conf(hardware, header), nl=False)
        return
    diffs = compare_gpus(configured, hardware, f"{check_file} node {name}")
    if diffs:
        for d in diffs:
            click.echo(d)
        click.echo(f"{PROG}: {check_file}: {len(diffs)} difference(s) from the hardware of {name}", err=True)
        sys.exit(1)
    click.echo(f"{check_file}: {name}: {len(hardware)} GPUs match the hardware")


def _safe(core_of_cpu: Callable[[int], int | None] | None) -> Callable[[int], int] | None:
    """A CPU->core map that falls back to the CPU id for CPUs the map does not know."""
    if core_of_cpu is None:
        return None

    def get(cpu: int) -> int:
        core = core_of_cpu(cpu)
        return cpu if core is None else core

    return get
