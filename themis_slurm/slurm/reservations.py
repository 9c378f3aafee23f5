"""Slurm reservations, as far as they decide where a managed job may start.

Slurm starts a job that is not in a reservation on a reserved node only if the job ends before the
reservation starts: its time limit must not cross the reservation's StartTime (an unlimited job never
fits). A future (INACTIVE) reservation is invisible in the node states that `sinfo` prints, so before
this themisd granted a job a node reserved in an hour, Slurm kept the pinned job pending
(ReqNodeNotAvail), themisd held it again after its release timeout and granted the same node again,
and the node's GPUs idled meanwhile. Active reservations already show as node states (RESERVED, MAINT)
and make their GPUs unavailable (snapshot.py).

Read with ``scontrol show reservation -o`` (Key=Val lines, the same on 22.05 and 25.11), at most every
`READ_EVERY_S` seconds: reservations change rarely and each read is one more RPC. A read that fails is a
warning; the reservations read before stay in use.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from themis_slurm.slurm import hostlist
from themis_slurm.slurm.scontrol import _first, _val, parse_kv_line, parse_time

SCONTROL_RESERVATIONS = ["scontrol", "show", "reservation", "-o"]
#: Seconds between two reads of the reservations.
READ_EVERY_S = 60.0


@dataclass(frozen=True)
class Reservation:
    """One reservation: its nodes and the time it holds them."""

    name: str
    start: float
    end: float
    nodes: frozenset[str]
    state: str  # ACTIVE or INACTIVE

    def blocks(self, now: float, time_limit_s: float | None) -> bool:
        """True when a job started `now` with this time limit (None: unlimited) would run into it."""
        if self.end <= now:
            return False
        limit = math.inf if time_limit_s is None or time_limit_s <= 0 else time_limit_s
        return now + limit > self.start


def parse_reservations(text: str) -> tuple[list[Reservation], list[str]]:
    """The reservations of ``scontrol show reservation -o`` and problems with lines that were skipped."""
    out: list[Reservation] = []
    problems: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("ReservationName="):
            continue  # "No reservations in the system", blank lines
        try:
            d = _first(parse_kv_line(line))
            start, end = parse_time(_val(d, "StartTime")), parse_time(_val(d, "EndTime"))
            if start is None or end is None:
                raise ValueError("no StartTime/EndTime")
            out.append(Reservation(_val(d, "ReservationName"), float(start), float(end),
                                   frozenset(hostlist.expand(_val(d, "Nodes"))), _val(d, "State").upper()))
        except ValueError as exc:
            problems.append(f"reservation line skipped ({exc}): {line[:80]!r}")
    return out, problems


def reserved_for(reservations: Iterable[Reservation], now: float, time_limit_s: float | None,
                 own: str = "") -> tuple[frozenset[str], str]:
    """Nodes a job with this time limit cannot start on now because of a reservation other than its own
    (`own`: the reservation the job asked for), and a short text naming the first such reservation."""
    blocked: set[str] = set()
    why = ""
    for r in sorted(reservations, key=lambda r: (r.start, r.name)):
        if r.name == own or not r.nodes or not r.blocks(now, time_limit_s):
            continue
        if not why:
            at = time.strftime("%H:%M", time.localtime(r.start))
            why = f"reservation {r.name} on {hostlist.fold(sorted(r.nodes))} from {at}"
        blocked |= r.nodes
    return frozenset(blocked), why


class ReservationReader:
    """Reads the reservations at most every `READ_EVERY_S` seconds and keeps the last good answer."""

    def __init__(self, every_s: float = READ_EVERY_S) -> None:
        self.every_s = every_s
        self._at = -math.inf
        self.current: Sequence[Reservation] = ()

    def due(self, now: float) -> bool:
        return now - self._at >= self.every_s

    def update(self, now: float, text: str) -> list[str]:
        """Takes a fresh ``scontrol show reservation -o`` answer; returns its problems."""
        self._at = now
        found, problems = parse_reservations(text)
        self.current = tuple(found)
        return problems

    def failed(self, now: float) -> None:
        self._at = now  # try again after the interval; the last good answer stays
