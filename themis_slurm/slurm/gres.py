"""GRES and TRES strings as Slurm prints them, reduced to what the scheduler needs: GPU counts and indices.

Shapes handled (22.05 and newer):

* GRES (node ``gres``/``gres_used``, job ``gres_detail``, scontrol ``Gres=``/``GRES=``):
  ``gpu:a100:4(S:0-1)``, ``gpu:a100:2(IDX:0-1,3)``, ``gpu:0``, ``gpu``, ``gpu:a100:0(IDX:N/A)``,
  ``gpu:a100:4(S:0-1),mps:400`` and ``(null)``.
* TRES-per-X requests (``tres_per_node``, ``TresPerNode=``): ``gres:gpu:2`` (22.05), ``gres/gpu:2``
  (23.02+), ``gres:gpu:a100:2``, ``gpu:4`` (plain GRES spelling).
* TRES accounting strings (``tres_req_str``, ``TRES=``): ``cpu=2,mem=1G,node=1,billing=2,gres/gpu=4``,
  possibly also ``gres/gpu:a100=4`` which repeats the untyped count.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from themis_slurm.slurm.ranges import fold_int_list, parse_int_list

_NULL = frozenset({"", "(null)", "none", "n/a"})
_SUFFIX = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}


@dataclass(frozen=True)
class GresItem:
    """One GRES entry: ``gpu:a100:2(IDX:0-1)`` -> name gpu, type a100, count 2, indices (0, 1).

    ``indices`` comes from ``IDX:`` (which devices a job/node uses), ``sockets`` from ``S:`` (socket
    affinity of configured GRES); each is None when the string does not carry it. ``IDX:N/A`` gives ().
    """

    name: str
    type: str | None
    count: int
    indices: tuple[int, ...] | None = None
    sockets: tuple[int, ...] | None = None

    def render(self) -> str:
        """Back to Slurm's spelling (``gpu:a100:2(IDX:0-1)``)."""
        head = ":".join(x for x in (self.name, self.type, str(self.count)) if x is not None)
        if self.indices is not None:
            return f"{head}(IDX:{fold_int_list(self.indices) or 'N/A'})"
        if self.sockets is not None:
            return f"{head}(S:{fold_int_list(self.sockets)})"
        return head


@dataclass(frozen=True)
class GpuRequest:
    """GPUs named in a TRES string: total count and the type if exactly one type was named."""

    count: int
    type: str | None = None


def gpu_type(requests: Iterable[GpuRequest], held_types: Collection[str]) -> str | None:
    """A job's GPU type: the first of its requests (in the caller's order of trust) that names one, else the
    one type its allocated GPUs have (None when they have several or none)."""
    for r in requests:
        if r.type:
            return r.type
    return next(iter(held_types)) if len(held_types) == 1 else None


def _count(text: str, whole: str) -> int:
    t = text.strip().lower()
    mult = 1
    if t and t[-1] in _SUFFIX:
        mult = _SUFFIX[t[-1]]
        t = t[:-1]
    if not t.isdigit():
        raise ValueError(f"bad count {text!r} in {whole!r}")
    return int(t) * mult


def split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses (``gpu:2(IDX:0,2),mps:1`` -> two items)."""
    items: list[str] = []
    depth = 0
    cur: list[str] = []
    for c in text:
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        if c == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    items.append("".join(cur))
    return [i.strip() for i in items if i.strip()]


def parse_gres_item(text: str) -> GresItem:
    """One GRES entry (see module docstring). ValueError naming the string on junk."""
    s = text.strip()
    head, paren, tail = s.partition("(")
    if not head or head.lower() in _NULL:
        raise ValueError(f"bad GRES {text!r}: no name")
    parts = head.split(":")
    name = parts[0]
    gtype: str | None = None
    count = 1
    if len(parts) == 2:
        if parts[1][:1].isdigit():
            count = _count(parts[1], text)
        else:
            gtype = parts[1]
    elif len(parts) == 3:
        gtype, count = parts[1] or None, _count(parts[2], text)
    elif len(parts) > 3:
        raise ValueError(f"bad GRES {text!r}: expected name[:type][:count]")
    indices = sockets = None
    if paren:
        if not tail.endswith(")"):
            raise ValueError(f"bad GRES {text!r}: unclosed '('")
        for part in tail[:-1].split(")("):
            key, _, val = part.partition(":")
            try:
                nums = () if val.strip().lower() in _NULL else parse_int_list(val)
            except ValueError:
                raise ValueError(f"bad GRES {text!r}: {key}:{val!r} is not an index list") from None
            if key == "IDX":
                indices = nums
            elif key == "S":
                sockets = nums
            else:
                raise ValueError(f"bad GRES {text!r}: unknown qualifier {key!r} (expected IDX or S)")
    return GresItem(name, gtype, count, indices, sockets)


def parse_gres(text: str | None) -> tuple[GresItem, ...]:
    """All GRES entries of a string; ``None``/``(null)``/empty -> ()."""
    if text is None or text.strip().lower() in _NULL:
        return ()
    return tuple(parse_gres_item(i) for i in split_top_level(text))


def gpu_items(text: str | None) -> tuple[GresItem, ...]:
    """Only the ``gpu`` entries of a GRES string."""
    return tuple(i for i in parse_gres(text) if i.name == "gpu")


def gpu_count(text: str | None) -> int:
    """Total GPUs in a GRES string (``gpu:a100:2(S:0),gpu:v100:1`` -> 3)."""
    return sum(i.count for i in gpu_items(text))


def gpu_indices(text: str | None) -> tuple[int, ...]:
    """Union of ``IDX:`` of the gpu entries (sorted); () when none are given."""
    return tuple(sorted({x for i in gpu_items(text) for x in (i.indices or ())}))


def parse_tres(text: str | None) -> dict[str, str]:
    """A ``key=value,...`` TRES accounting string as a dict (``gres/gpu`` -> ``"4"``)."""
    out: dict[str, str] = {}
    if text is None or text.strip().lower() in _NULL:
        return out
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep:
            raise ValueError(f"bad TRES string {text!r}: {item!r} is not key=value")
        out[key] = value
    return out


def tres_gpus(text: str | None) -> GpuRequest:
    """GPUs asked for by any TRES/GRES request spelling (module docstring); no GPUs -> count 0.

    When both ``gres/gpu=N`` and typed ``gres/gpu:t=N`` appear (accounting strings), the untyped total
    is the count and the type is kept if a single one is named.
    """
    if text is None or text.strip().lower() in _NULL:
        return GpuRequest(0)
    untyped: int | None = None
    typed: dict[str, int] = {}
    for item in split_top_level(text):
        body = item
        for prefix in ("gres:", "gres/"):
            if body.startswith(prefix):
                body = body[len(prefix):]
                break
        else:
            if not (body == "gpu" or body.startswith(("gpu:", "gpu="))):
                continue  # cpu=, mem=, node=, billing=, license/... or other tres
        if "=" in body:
            spec, _, cnt = body.partition("=")
            parts = spec.split(":")
            name, gtype = parts[0], (parts[1] if len(parts) > 1 else None)
            n = _count(cnt, text)
        else:
            g = parse_gres_item(body)
            name, gtype, n = g.name, g.type, g.count
        if name != "gpu":
            continue
        if gtype:
            typed[gtype] = typed.get(gtype, 0) + n
        else:
            untyped = (untyped or 0) + n
    total = untyped if untyped is not None else sum(typed.values())
    only = next(iter(typed)) if len(typed) == 1 else None
    return GpuRequest(total, only)
