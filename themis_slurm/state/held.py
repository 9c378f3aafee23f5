"""GPUs held for the jobs a round granted that Slurm does not run yet (pure).

The one definition, used by themisd's round (the GPUs are not offered again; `themis_gpus{state=
"starting"}`) and by the status API's GPU states (`themis status`, /v1/topology), so the two cannot
disagree. (Not the core's wide-gang reservation, which is Decision.reserved_gpus.)
"""

from __future__ import annotations

from collections.abc import Iterable

from themis_slurm.slurm.model import Snapshot
from themis_slurm.state.intents import HELD_FOR_GRANTED, MOVING, Intent
from themis_slurm.state.rows import JobRow


def held_for_granted(snap: Snapshot, rows: Iterable[JobRow]) -> dict[str, frozenset[int]]:
    """GPUs held for jobs a round granted (intent granted or starting) that Slurm does not show running yet,
    and for jobs being moved (warned and requeued to start on other GPUs: their destination, `MOVING`).

    Slurm chooses GPU indices inside a node, so what a grant holds is a per-node count: the granted ids
    while they are free, else other free ids of the same node. Released jobs (``starting``) come first
    (Slurm may start them any moment), then grants in the order they were made.
    """
    topo = snap.topology
    live = {m.job_id: m for m in snap.managed}
    avail = set(snap.free)
    out: dict[str, frozenset[int]] = {}
    pending = [r for r in rows if r.job_id in live and (
        (r.intent in HELD_FOR_GRANTED and live[r.job_id].state != "RUNNING")
        or (r.intent in MOVING and r.planned_nodes))]  # fmt: skip
    pending.sort(key=lambda r: (r.intent != Intent.STARTING, r.grant_time or 0.0, r.job_id))
    for r in pending:
        got: set[int] = set()
        for node, count in sorted(r.planned_nodes.items()):
            on_node = topo.node_gpus.get(node, ())
            first = [g for g in on_node if g in r.planned_gpus and g in avail]
            rest = [g for g in on_node if g not in r.planned_gpus and g in avail]
            take = (first + rest)[:count]
            got.update(take)
            avail.difference_update(take)
        out[r.job_id] = frozenset(got)
    return out
