"""GPUs held for granted jobs: one function for themisd's round and metrics and for the API's GPU states."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from themis_slurm.api.cluster import gpu_states
from themis_slurm.state.held import held_for_granted
from themis_slurm.state.reader import StateReader, connect_ro
from themis_slurm.state.rows import JobRow
from themis_slurm.state.store import Store

from . import world


def test_api_rows_and_daemon_rows_hold_the_same_gpus(tmp_path: Path) -> None:
    snap = world.snapshot()
    free = sorted(snap.free)
    node = snap.topology.gpus[free[0]].node
    on_node = [g for g in free if snap.topology.gpus[g].node == node]
    pending = next(m for m in snap.managed if m.state == "PENDING")
    # planned on a GPU that is no longer free: the grant holds another free GPU of the same node
    busy = next(g for g in snap.topology.node_gpus[node] if g not in snap.free)
    row = JobRow(
        pending.job_id,
        pending.slurm_id,
        pending.app_key,
        "granted",
        1,
        60.0,
        world.NOW,
        planned_nodes={node: 1},
        planned_gpus=frozenset({busy}),
        grant_time=world.NOW - 1,
    )
    daemon_view = held_for_granted(snap, [row])
    assert daemon_view == {pending.job_id: frozenset(on_node[:1])}
    store = Store(tmp_path / "themis.db")
    with store.tx():
        store.put_job(row)
    store.close()
    with StateReader(connect_ro(tmp_path / "themis.db")) as state:
        api_rows = state.jobs()  # what the API reads: the same typed rows, through the read-only view
    assert api_rows == [row]
    assert held_for_granted(snap, api_rows) == daemon_view
    states = {g.id: g.state for g in gpu_states(snap, held_for_granted(snap, api_rows))}
    assert states[on_node[0]] == "starting"
    # a running job holds nothing extra; a waiting one is not a grant
    assert held_for_granted(snap, [replace(row, intent="waiting")]) == {}
