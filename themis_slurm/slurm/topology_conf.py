"""topology.conf (topology/tree): the switch tree and each node's rack.

Themis keeps a multi-node gang inside one rack when it can; with topology/tree the natural "rack" is the
leaf switch a node hangs off (the ``SwitchName=... Nodes=...`` line naming it). A node that appears on no
switch line is its own rack, with the rack id equal to the node name: Slurm treats such a node as
reachable from nothing else in the tree (jobs spanning it and others need a common switch), so grouping it
with anything would be wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

from themis_slurm.slurm import hostlist
from themis_slurm.slurm.conf_lines import ConfLine, logical_lines
from themis_slurm.slurm.errors import ConfigError

_KEYS = {"switchname": "SwitchName", "nodes": "Nodes", "switches": "Switches", "linkspeed": "LinkSpeed"}


@dataclass(frozen=True)
class Switch:
    """One ``SwitchName=`` line: directly attached nodes and child switches (both expanded)."""

    name: str
    nodes: tuple[str, ...]
    switches: tuple[str, ...]
    link_speed: int | None
    line: int


@dataclass(frozen=True)
class SwitchTree:
    """All switches of a topology.conf, with lookups for parents, leaves and racks."""

    path: str
    switches: tuple[Switch, ...]

    def switch(self, name: str) -> Switch:
        """The switch called ``name`` (KeyError if none)."""
        for s in self.switches:
            if s.name == name:
                return s
        raise KeyError(name)

    def parent_of(self, name: str) -> str | None:
        """The switch listing ``name`` in its Switches=, or None for a root."""
        for s in self.switches:
            if name in s.switches:
                return s.name
        return None

    def roots(self) -> tuple[str, ...]:
        """Switches nobody lists as a child (usually one spine)."""
        return tuple(s.name for s in self.switches if self.parent_of(s.name) is None)

    def path_to_root(self, name: str) -> tuple[str, ...]:
        """``(name, parent, grandparent, ..., root)``."""
        out = [name]
        while (p := self.parent_of(out[-1])) is not None:
            out.append(p)
        return tuple(out)

    def leaf_of(self, node: str) -> str | None:
        """The switch that lists ``node`` in Nodes=, or None if no switch does."""
        for s in self.switches:
            if node in s.nodes:
                return s.name
        return None

    def rack_of(self, node: str) -> str:
        """Rack id of ``node``: its leaf switch name, or the node's own name when it is on no switch."""
        return self.leaf_of(node) or node

    def nodes_under(self, name: str) -> tuple[str, ...]:
        """Every node below switch ``name`` (directly or through child switches), hostlist-sorted."""
        seen: set[str] = set()
        stack = [name]
        while stack:
            s = self.switch(stack.pop())
            seen.update(s.nodes)
            stack.extend(s.switches)
        return tuple(hostlist.expand(hostlist.fold(seen))) if seen else ()

    def racks(self, nodes: tuple[str, ...] | list[str] = ()) -> dict[str, tuple[str, ...]]:
        """Rack id -> its nodes, for all nodes on switches plus the given extra ``nodes`` (own racks)."""
        out: dict[str, list[str]] = {}
        for s in self.switches:
            if s.nodes:
                out.setdefault(s.name, []).extend(s.nodes)
        for n in nodes:
            if self.leaf_of(n) is None:
                out.setdefault(n, []).append(n)
        return {k: tuple(v) for k, v in out.items()}


def parse_topology_conf(text: str, path: str = "topology.conf") -> SwitchTree:
    """Parse topology.conf text into a SwitchTree; ConfigError (file:line/field/value) on bad input.

    Checked: known keys only, every line has SwitchName=, no duplicate switch, children exist, no cycles,
    no switch with two parents, no node under two leaf switches.
    """
    switches: list[Switch] = []
    for cl in logical_lines(text, path):
        switches.append(_switch(cl))
    by_name: dict[str, Switch] = {}
    for s in switches:
        if s.name in by_name:
            raise ConfigError(path, s.line, "SwitchName", s.name, "each switch defined once "
                              f"(first at line {by_name[s.name].line})")
        by_name[s.name] = s
    owner: dict[str, str] = {}
    parent: dict[str, str] = {}
    for s in switches:
        for child in s.switches:
            if child not in by_name:
                raise ConfigError(path, s.line, "Switches", child, "a switch defined by a SwitchName= line")
            if child in parent:
                raise ConfigError(path, s.line, "Switches", child,
                                  f"each switch under one parent (already under {parent[child]})")
            parent[child] = s.name
        for n in s.nodes:
            if n in owner:
                raise ConfigError(path, s.line, "Nodes", n, f"each node on one leaf switch (already on {owner[n]})")
            owner[n] = s.name
    for s in switches:
        seen = {s.name}
        p = parent.get(s.name)
        while p is not None:
            if p in seen:
                raise ConfigError(path, s.line, "SwitchName", s.name, "a tree (this switch is in a cycle)")
            seen.add(p)
            p = parent.get(p)
    return SwitchTree(path, tuple(switches))


def _switch(cl: ConfLine) -> Switch:
    fields: dict[str, str] = {}
    for key, value in cl.pairs:
        canon = _KEYS.get(key.lower())
        if canon is None:
            raise cl.error(key, value, "a topology.conf key: SwitchName, Nodes, Switches, LinkSpeed")
        fields[canon] = value
    if not fields.get("SwitchName"):
        raise cl.error("SwitchName", fields.get("SwitchName", ""), "SwitchName=<name> on every line")
    name = fields["SwitchName"]
    if any(c in name for c in ",[] "):
        raise cl.error("SwitchName", name, "a single switch name")

    def names(field: str) -> tuple[str, ...]:
        if field not in fields:
            return ()
        try:
            got = hostlist.expand(fields[field])
        except ValueError:
            got = []
        if not got:
            raise cl.error(field, fields[field], "a hostlist like node[1-4] or rackA,rackB")
        return tuple(got)

    speed: int | None = None
    if "LinkSpeed" in fields:
        try:
            speed = int(fields["LinkSpeed"])
        except ValueError:
            raise cl.error("LinkSpeed", fields["LinkSpeed"], "a whole number") from None
    return Switch(name, names("Nodes"), names("Switches"), speed, cl.line)
