"""Rounds run with Python's cyclic garbage collector paused.

A round allocates tens of thousands of short-lived containers (agents' valuation rows, heap entries,
placements, the Decision's records). Nearly all of them are freed by reference counting the moment the
round drops them, yet each 700 allocations CPython 3.11 starts a generation-0 collection, every tenth of
those a generation-1 one, and now and then a full collection that walks every live object: the whole
cluster state, and in the simulator the whole trace. Measured on benchmarks/round_latency.py's cold round at
10,000 jobs / 8,192 GPUs: 174 generation-0, 16 generation-1 and one full collection, 94 ms of a 359 ms
round. With the collector paused the round's garbage is still freed at once (reference counting does not
depend on the collector); what is left for the collector (reference cycles, if any) waits for its next
pass after the round, which then sees only the few young objects that survived.

Used by the callers of a policy, never by the pure core: themisd's cycle (daemon/loop.py) and the
simulator, for a whole run (sim/engine.py: its own objects die by reference counting too, and a full
collection runs every so many calls). Nested use is harmless, and a caller that has switched the
collector off itself keeps it off.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic collector off; switch it back on only if it was on."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
