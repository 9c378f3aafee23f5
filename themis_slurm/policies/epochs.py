"""Time slices on a global clock, for the time-slicing baselines (Gandiva, SLAQ): leases end together at
multiples of one quantum, so at a boundary the head of the queue can claim a whole node."""

from __future__ import annotations

import math

from themis_slurm.policies.scratchpad import BaselineScratchpad


class EpochClock:
    """Quanta on a global clock: boundaries at multiples of `length` seconds.

    Time-slicing policies align leases to these boundaries so that all slices end together: at a boundary
    the head of the queue can claim a whole node instead of waiting for staggered leases forever.
    """

    EPS = 1e-3  # seconds: how close to a boundary counts as on it

    def __init__(self, length: float) -> None:
        if not length > 0:
            raise ValueError(f"quantum must be > 0 seconds, got {length}")
        self.length = float(length)

    def after(self, now: float) -> float:
        """The first boundary strictly after `now`."""
        return (math.floor((now + self.EPS) / self.length) + 1) * self.length

    def on_boundary(self, now: float) -> bool:
        return abs(now - round(now / self.length) * self.length) <= self.EPS

    def rotatable(self, pad: BaselineScratchpad) -> list[str]:
        """Running preemptible jobs whose slice is over: lease expired, or started before this boundary.
        Longest-running first."""
        at_b = self.on_boundary(pad.now)
        out = [
            jid
            for jid, lease in pad.running.items()
            if pad.jobs[jid].preemptible
            and (lease.expiry <= pad.now + self.EPS or (at_b and lease.start < pad.now - self.EPS))
        ]
        return sorted(out, key=lambda jid: (pad.running[jid].start, jid))
