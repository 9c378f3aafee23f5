"""Each app's finish-time estimates now, T_id and T_sh, from the stored rows and a snapshot (pure).

The database keeps each app's rho after the last round but not the two finish times it was made of, so the
status API (/v1/apps, `themis apps`) rebuilds the round's input with the round's own code (state/round_input.py)
and asks the core's FairnessModel, under the app's allocation as it stands.
"""

from __future__ import annotations

from collections.abc import Iterable

from themis_slurm.core.fairness import FairnessModel, app_throughput
from themis_slurm.slurm.model import Snapshot
from themis_slurm.state.round_input import RoundTerms, round_input
from themis_slurm.state.rows import AppRow, JobRow


def finish_times(
    snap: Snapshot, jobs: Iterable[JobRow], apps: Iterable[AppRow], terms: RoundTerms, now: float
) -> dict[str, tuple[float, float]]:
    """{app_key: (T_id seconds, T_sh seconds)} of each active app with work, at `now`, under its current
    allocation (flat tenancy: the estimates of the paper's 1/N share)."""
    rows = {r.job_id: r for r in jobs}
    active = {a.app_key: a for a in apps if a.active}
    state = round_input(snap, rows, active, terms, now).state
    model = FairnessModel(state.topology, state.cluster_gpus or state.topology.size, terms.idle_throughput)
    holdings = {lease.job_id: lease.gpus for lease in state.leases}
    out = {}
    for app in state.apps:
        jobs_of = {j.id: j for j in app.jobs}
        held = {j: g for j, g in holdings.items() if j in jobs_of}
        x = app_throughput(jobs_of, held, state.topology)
        out[app.id] = (model.t_id(app), model.t_sh(app, now, x, kept=held))
    return out
