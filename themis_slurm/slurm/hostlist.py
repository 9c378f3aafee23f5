"""Slurm hostlist expressions (``node[1-4,7]``, ``gpu[01-02]-ib``) via ClusterShell's NodeSet.

Slurm prints node sets folded; the scheduler works on node names. ClusterShell implements the same
bracket syntax as Slurm (zero padding, several ranges, several bracket groups), so we wrap it rather than
re-implement it, and turn its exceptions into a ValueError that names the offending string.
"""

from __future__ import annotations

from collections.abc import Iterable

from ClusterShell.NodeSet import NodeSet, NodeSetException

# Values Slurm prints for "no nodes".
_EMPTY = frozenset({"", "(null)", "None", "N/A", "(none)"})


def expand(hostlist: str) -> list[str]:
    """Expand a Slurm hostlist into node names, in Slurm's order (sorted, de-duplicated).

    ``expand("node[1-2],gpu7") == ["gpu7", "node1", "node2"]``. Empty-ish values Slurm prints for "none"
    (``""``, ``(null)``, ``None``, ``N/A``) give ``[]``.
    """
    text = hostlist.strip()
    if text in _EMPTY:
        return []
    if any(c.isspace() for c in text):
        raise ValueError(f"bad hostlist {hostlist!r}: whitespace is not allowed in a Slurm hostlist")
    try:
        return list(NodeSet(text))
    except (NodeSetException, ValueError, IndexError) as exc:
        raise ValueError(f"bad hostlist {hostlist!r}: {exc}") from None


def fold(nodes: Iterable[str]) -> str:
    """Fold node names into the shortest Slurm hostlist: ``fold(["n1", "n2", "n4"]) == "n[1-2,4]"``."""
    names = [n.strip() for n in nodes]
    bad = [n for n in names if not n or any(c in n for c in " ,[]")]
    if bad:
        raise ValueError(f"bad node name {bad[0]!r}: names may not be empty or contain ' ,[]'")
    if not names:
        return ""
    try:
        return str(NodeSet.fromlist(names))
    except (NodeSetException, ValueError, IndexError) as exc:
        raise ValueError(f"cannot fold {names!r}: {exc}") from None
