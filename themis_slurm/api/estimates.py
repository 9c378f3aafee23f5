"""T_id and T_sh of each app *now*, recomputed the way themisd's round does (for ``themis apps``).

The database keeps each app's rho after the last round but not its two finish-time estimates, so we
rebuild the round's input from the snapshot and the stored rows with the daemon's own pure planning code
(read-only: nothing is written) and ask the core's FairnessModel. Best effort: any failure gives no
estimates rather than a failed request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any

from themis_slurm.core.fairness import FairnessModel, app_throughput
from themis_slurm.daemon.config import Config
from themis_slurm.daemon.planning import build_round
from themis_slurm.daemon.state import AppRow, JobRow
from themis_slurm.slurm.model import Snapshot

log = logging.getLogger("themis.api")
_APP = tuple(f.name for f in fields(AppRow))
_JOB = tuple(f.name for f in fields(JobRow))


def _job_row(r: Mapping[str, Any]) -> JobRow:
    d = {k: r[k] for k in _JOB if k in r}
    d["planned_nodes"] = dict(r.get("planned_nodes") or {})
    d["planned_gpus"] = frozenset(r.get("planned_gpus") or ())
    return JobRow(**d)


def finish_times(snap: Snapshot, jobs: Iterable[Mapping[str, Any]], apps: Iterable[Mapping[str, Any]],
                 cfg: Config | None = None, now: float | None = None) -> dict[str, tuple[float, float]]:
    """{app_key: (T_id seconds, T_sh seconds)} under each app's current allocation."""
    now = time.time() if now is None else now
    try:
        rows = {r["job_id"]: _job_row(r) for r in jobs}
        app_rows = {a["app_key"]: AppRow(**{k: a[k] for k in _APP}) for a in apps}
        inp = build_round(snap, rows, {k: a for k, a in app_rows.items() if a.active}, cfg or Config(), now)
        state = inp.state
        model = FairnessModel(state.topology, state.cluster_gpus or state.topology.size)
        holdings = {lease.job_id: lease.gpus for lease in state.leases}
        out = {}
        for app in state.apps:
            jobs_of = {j.id: j for j in app.jobs}
            x = app_throughput(jobs_of, {j: g for j, g in holdings.items() if j in jobs_of}, state.topology)
            out[app.id] = (model.t_id(app), model.t_sh(app, now, x))
        return out
    except Exception as e:  # estimates are a convenience: never fail the request for them
        log.debug("finish-time estimates unavailable: %s", e)
        return {}
