"""What a job needs on each of its nodes besides GPUs (CPUs and memory), from the fields Slurm reports.

Slurm starts a pinned job only where every node of the pin has the CPUs and the memory the job asks for
free (issue 37: three ``--gres=gpu:1 -c 12`` jobs pinned to one 16-CPU node, one ran and two starved).
Each parser (squeue/sinfo JSON, ``scontrol -o``, pyslurm) reads the same few numbers and `per_node_needs`
turns them into one pair, so the three agree. Measured on 22.05 and 25.11 (docs/design.md):

* CPUs: Slurm's own ``minimum_cpus_per_node`` (MinCPUsNode: ``-c`` x ``--ntasks-per-node``, ``--mincpus``),
  its ``cpus`` (NumCPUs: all CPUs of the job, ``-n`` x ``-c``; on 25.11 ``--cpus-per-gpu`` included) spread
  over the job's nodes, and ``--cpus-per-gpu`` (``cpus_per_tres``: 22.05 leaves it out of ``cpus``) times
  the GPUs per node; the largest of the three.
* Memory (MiB): ``--mem-per-gpu`` (``memory_per_tres``) x GPUs per node, else ``--mem`` (memory_per_node),
  else ``--mem-per-cpu`` (memory_per_cpu, where Slurm also puts DefMemPerCPU) x the CPUs per node; and at
  least the job's requested memory (``tres_req_str`` mem=) spread over its nodes, which is what pyslurm
  shows for ``--mem-per-gpu`` (it reports the per-GPU figure as memory_per_node). A job without any of
  the memory fields (no DefMemPerCPU, or memory not a consumable resource) needs 0 here: left to Slurm.
"""

from __future__ import annotations

import math
import re

_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([KMGTP]?)B?$", re.IGNORECASE)
_SCALE = {"K": 1 / 1024, "M": 1, "": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


def mebibytes(value: str) -> int | None:
    """``4G``, ``512M``, ``2048`` (MiB, as Slurm prints memory) -> MiB; empty or unknown -> None."""
    v = value.strip()
    if not v or v in ("(null)", "N/A", "None"):
        return None
    m = _SIZE.match(v)
    if m is None:
        raise ValueError(f"memory size {value!r}: expected a number with an optional K, M, G, T suffix")
    return math.ceil(float(m.group(1)) * _SCALE[m.group(2).upper()])


def tres_value(tres: str, key: str) -> str:
    """The value of `key` in a TRES string (``cpu=12,mem=12G,node=1``), "" when absent."""
    for item in tres.split(","):
        k, sep, v = item.partition("=")
        if sep and k.strip() == key:
            return v.strip()
    return ""


def per_gpu(text: str) -> int | None:
    """The per-GPU figure of ``cpus_per_tres`` / ``memory_per_tres`` (``gres:gpu:4`` on 22.05,
    ``gres/gpu:4`` on 25.11; other TRES are ignored); None without a GPU entry."""
    for item in text.split(","):
        item = item.strip()
        for prefix in ("gres:gpu:", "gres/gpu:", "gpu:"):
            if item.startswith(prefix):
                rest = item[len(prefix):]
                count = rest.rsplit(":", 1)[-1]  # a typed entry: gres/gpu:a100:4
                if not count.isdigit():
                    raise ValueError(f"per-GPU request {item!r}: {count!r} is not a whole number")
                return int(count)
    return None


def per_node_needs(*, nodes: int, gpus_per_node: int, gpus_total: int, cpus: int | None,
                   min_cpus_per_node: int | None, cpus_per_gpu: int | None, mem_per_node: int | None,
                   mem_per_cpu: int | None, mem_per_gpu: int | None, req_tres: str) -> tuple[int, int]:
    """(CPUs, MiB of memory) the job needs on each of its nodes (module docstring); 0 where unknown."""
    n = max(1, nodes)
    gpn = gpus_per_node or math.ceil(gpus_total / n)
    req_cpu_text = tres_value(req_tres, "cpu")
    req_cpus = int(req_cpu_text) if req_cpu_text.isdigit() else 0
    cpu_need = max(min_cpus_per_node or 0, math.ceil(max(cpus or 0, req_cpus) / n), (cpus_per_gpu or 0) * gpn)
    if mem_per_gpu:
        mem = mem_per_gpu * gpn
    elif mem_per_node:
        mem = mem_per_node
    elif mem_per_cpu:
        mem = mem_per_cpu * cpu_need
    else:
        return cpu_need, 0
    req_mem = mebibytes(tres_value(req_tres, "mem")) or 0
    return cpu_need, max(mem, math.ceil(req_mem / n))


def memory_text(mib: int) -> str:
    """MiB as a user would write it (``12G``, ``1536M``)."""
    return f"{mib // 1024}G" if mib % 1024 == 0 else f"{mib}M"
