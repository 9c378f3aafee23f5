"""The API's JSON documents, built from the state database, the live snapshot and who is asking (pure).

One function per endpoint; the HTTP server and the CLI's direct-database mode both call them, so a reply
is the same whether it came over HTTP or from the file. Every document carries ``meta`` (time, data age,
source, viewer, PrivateData, warnings) so a reader always knows how fresh and how complete it is.

Privacy follows Slurm: with PrivateData=jobs (or usage) in slurm.conf a caller sees only their own jobs
and apps; root, the SlurmUser and Themis operators see everything; a caller without a valid munge
credential sees cluster-wide aggregates only (counts, worst and median rho, GPU totals, rounds).
"""

from __future__ import annotations

import logging
import math
import re
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import unquote

from themis_slurm import reasons, tenant_levels
from themis_slurm.api.auth import Identity
from themis_slurm.api.cluster import GPU_STATES, gpu_states
from themis_slurm.api.slurmconf import SlurmConfInfo
from themis_slurm.core.decision import KeptBy, Outcome
from themis_slurm.core.gpu_types import class_speeds
from themis_slurm.core.placement import LEVEL_NAMES, Profile, get_profile
from themis_slurm.core.tenancy import FLAT, Entity
from themis_slurm.slurm.eligibility import ineligible
from themis_slurm.slurm.model import ManagedJob, Snapshot
from themis_slurm.state.finish import finish_times
from themis_slurm.state.held import held_for_granted
from themis_slurm.state.intents import HELD_FOR_GRANTED, MOVING, Intent
from themis_slurm.state.jobs import effective_ckpt, profile_of, unknown_profile_note, unsaved_work
from themis_slurm.state.reader import StateReader
from themis_slurm.state.round_input import RoundTerms
from themis_slurm.state.rows import AppRow, DecisionRow, JobRow, StoredTenancy

log = logging.getLogger("themis.api")
Doc = dict[str, Any]
EXPLAIN_ROUNDS = 5
NEXT_LEASES = 5


class NotFound(LookupError):
    """404: the message says what was not found and what to try."""


class BadRequest(ValueError):
    """400: the message names the parameter, the value and what is accepted."""


@dataclass(frozen=True)
class Viewer:
    """What a caller may see: scope ``all``, ``own`` (PrivateData) or ``aggregates`` (no credential)."""

    identity: Identity | None
    scope: str
    note: str = ""

    @property
    def user(self) -> str | None:
        return self.identity.user if self.identity else None

    def sees(self, owner: str | None) -> bool:
        return self.scope == "all" or (self.scope == "own" and owner is not None and owner == self.user)

    def as_json(self) -> Doc:
        ident = self.identity
        return {"user": ident.user if ident else None, "uid": ident.uid if ident else None,
                "scope": self.scope, "note": self.note}


def make_viewer(identity: Identity | None, why: str, conf: SlurmConfInfo) -> Viewer:
    """Applies the privacy rules above to a (possibly missing) identity."""
    if identity is None:
        return Viewer(None, "aggregates", f"{why}: showing cluster-wide aggregates only")
    if identity.privileged:
        return Viewer(identity, "all")
    if conf.private_jobs:
        words = ",".join(sorted(conf.private_data))
        return Viewer(identity, "own", f"PrivateData={words}: you see your own jobs and apps")
    return Viewer(identity, "all")


@dataclass
class Context:
    """Everything a view needs for one request."""

    state: StateReader
    snapshot: Snapshot | None
    viewer: Viewer
    conf: SlurmConfInfo
    source: str = "themisd"  # or "database" (the CLI read the file directly)
    now: float = field(default_factory=time.time)
    snapshot_error: str | None = None
    last_cycle: float | None = None
    #: what themisd's configuration says of leases, for each app's T_id and T_sh (state/finish.py); None: the
    #: estimates are null
    round_terms: RoundTerms | None = None
    warnings: list[str] = field(default_factory=list)
    #: Slurm actions themisd failed or put off and retries (job, app, action, since, tries, error); the
    #: daemon's own list, empty when the data come from the database
    pending_actions: Sequence[Doc] = ()
    #: what one request computed once and several parts of its document use (the tenancy tree)
    cache: dict[str, Any] = field(default_factory=dict)

    def meta(self) -> Doc:
        data_time = self.last_cycle or self.state.last_activity()
        if self.snapshot is not None:
            data_time = max(data_time or 0.0, self.snapshot.time)
        warnings = list(self.warnings)
        if self.snapshot_error:
            warnings.append(self.snapshot_error)
        if self.conf.error:
            warnings.append(f"{self.conf.error}: treating the cluster as PrivateData=all")
        return {
            "time": self.now,
            "data_time": data_time,
            "data_age_s": None if data_time is None else max(0.0, self.now - data_time),
            "source": self.source,
            "viewer": self.viewer.as_json(),
            "private_data": sorted(self.conf.private_data),
            "warnings": warnings,
        }


# ----------------------------------------------------------------------------------------- helpers
def owner_of(app_key: str) -> str:
    """Apps are keyed ``user/name`` (the adapter puts the owner in the key so nobody joins another's app)."""
    return app_key.split("/", 1)[0]


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _managed(ctx: Context) -> dict[str, ManagedJob]:
    return {m.job_id: m for m in ctx.snapshot.managed} if ctx.snapshot else {}


def merged_jobs(ctx: Context) -> list[Doc]:
    """Every managed job Themis or Slurm knows: the database intent joined with Slurm's live view."""
    rows = {r.job_id: r for r in ctx.state.jobs()}
    live = _managed(ctx)
    busy = {jid for jid, r in rows.items() if r.intent in HELD_FOR_GRANTED}
    blocked = ineligible(live.values(), busy)
    return [_job_doc(ctx, jid, rows.get(jid), live.get(jid), blocked)
            for jid in sorted(set(rows) | set(live), key=_job_sort_key)]


def _job_doc(ctx: Context, jid: str, r: JobRow | None, m: ManagedJob | None, blocked: Mapping[str, str]) -> Doc:
    """One job of /v1/jobs: its row (None: not recorded yet) joined with Slurm's view (None: gone from it)."""
    app = r.app_key if r else m.app_key  # type: ignore[union-attr]
    running = m is not None and m.state == "RUNNING"
    nodes = dict(m.node_gpus) if running and m and m.node_gpus else dict(r.planned_nodes) if r else {}
    return {
        "job": jid,
        "slurm_id": r.slurm_id if r else m.slurm_id,  # type: ignore[union-attr]
        "app": app,
        "user": m.user if m else owner_of(app),
        "name": m.name if m else "",
        "partition": m.partition if m else "",
        "state": m.state if m else "UNKNOWN",
        "held": m.held if m else None,
        "intent": r.intent if r else "new",
        "gpus": r.gpus if r else m.gpus,  # type: ignore[union-attr]
        "nodes": nodes,
        "lease_start": r.lease_start if r else None,
        "lease_end": _finite(r.lease_expiry) if r else None,
        # the first SubmitTime themisd saw: Slurm moves it to each requeue (state/jobs.submitted)
        "submit_time": r.submit_time if r and r.submit_time is not None else (m.submit_time if m else None),
        "start_time": m.start_time if m else None,
        "restarts": m.restart_cnt if m else None,
        "progress": r.progress if r else (m.progress if m else None),
        "estimate_source": r.est_source if r else "",
        "service_gpu_s": r.service_s if r else 0.0,
        "adopted": bool(r.adopted) if r else False,
        "ineligible": blocked.get(jid) if (r is None or r.intent == Intent.WAITING) else None,
        "placement": _placement(ctx, m) if running and m else None,
        # where Slurm could start it (partition, GPU type, -w, -x): what a waiting job waits for
        "allowed_nodes": sorted(m.allowed_nodes) if m is not None and m.allowed_nodes is not None else None,
        "limits": m.limits if m is not None else "",
        **_checkpoint(ctx, r, m, running),
    }


def _checkpoint(ctx: Context, r: JobRow | None, m: ManagedJob | None, running: bool) -> Doc:
    """How the job saves its state, who says so, and what a preemption now would throw away (GPU-s of work
    since its last save: state/jobs.py, "checkpoints")."""
    if m is None or r is None:
        return {"checkpoint": None, "checkpoint_source": None, "unsaved_gpu_s": None}
    ckpt = effective_ckpt(m, r)
    source = "learned" if r.ckpt_learned == "yes" or r.ckpt_learned and not m.ckpt_given else \
        "owner" if m.ckpt_given else "default"
    saves = "warning" if ckpt is None else "never" if ckpt == math.inf else f"every {ckpt:.0f} s"
    unsaved = unsaved_work(r, ckpt, ctx.now, r.done_service) if running else 0.0
    return {"checkpoint": saves, "checkpoint_source": source, "unsaved_gpu_s": round(unsaved, 1)}


def _placement(ctx: Context, m: ManagedJob) -> Doc | None:
    """Where a running job really is: the GPU indices Slurm gave it (it picks them inside a node) and the
    placement level they make; never the plan."""
    topo = ctx.snapshot.topology if ctx.snapshot else None
    if topo is None or not m.gpu_ids:
        return None
    ids = sorted(g for g in m.gpu_ids if 0 <= g < topo.size)
    by_node: dict[str, list[int]] = {}
    for g in ids:
        by_node.setdefault(topo.gpus[g].node, []).append(topo.gpus[g].index)
    return {"level": topo.level_of(ids).name.lower(), "gpus": by_node}


def _job_sort_key(job_id: str) -> tuple[int, int, str]:
    base, _, task = job_id.partition("_")
    return (int(base) if base.isdigit() else 1 << 62, int(task) if task.isdigit() else -1, job_id)


def _ranked(apps: Iterable[AppRow]) -> dict[str, int]:
    """Rank of every active app with a rho: 1 = the worst rho (furthest behind its fair finish time)."""
    scored = [a for a in apps if a.active and _finite(a.rho) is not None]
    scored.sort(key=lambda a: (-(a.rho or 0.0), a.app_key))
    return {a.app_key: i + 1 for i, a in enumerate(scored)}


def _estimates(ctx: Context, apps: Iterable[AppRow]) -> dict[str, tuple[float, float]]:
    """Each app's (T_id, T_sh) now (state/finish.py); {} without a snapshot or lease terms, and when they
    cannot be made (a convenience: never a failed request for them)."""
    if ctx.snapshot is None or ctx.round_terms is None:
        return {}
    try:
        return finish_times(ctx.snapshot, ctx.state.jobs(), apps, ctx.round_terms, ctx.now)
    except Exception as e:  # estimates are a convenience: never fail the request for them
        log.debug("finish-time estimates unavailable: %s", e)
        return {}


def app_docs(ctx: Context, jobs: list[Doc] | None = None, with_estimates: bool = False,
             finished: bool = False) -> list[Doc]:
    """Apps that are active or have jobs (`finished`: every app ever seen), with counts, rho, rank, T_id/T_sh."""
    jobs = merged_jobs(ctx) if jobs is None else jobs
    rows = ctx.state.apps()
    rank = _ranked(rows)
    preempted = ctx.state.preemptions_by_app()
    by_app: dict[str, list[Doc]] = {}
    for j in jobs:
        by_app.setdefault(j["app"], []).append(j)
    est = _estimates(ctx, rows) if with_estimates else {}
    out = []
    known = {a.app_key: a for a in rows}
    for key in sorted(set(known) | set(by_app)):
        a, js = known.get(key), by_app.get(key, [])
        if a is not None and not a.active and not js and not finished:
            continue
        t_id, t_sh = est.get(key, (None, None))
        out.append({
            "app": key,
            "owner": a.owner if a else owner_of(key),
            "jobs_running": sum(1 for j in js if j["state"] == "RUNNING"),
            "jobs_waiting": sum(1 for j in js if j["state"] == "PENDING"),
            "gpus_held": sum(j["gpus"] for j in js if j["state"] == "RUNNING"),
            "gpus_wanted": sum(j["gpus"] for j in js if j["state"] == "PENDING"),
            "rho": _finite(a.rho) if a else None,
            "rank": rank.get(key),
            "t_id_s": _finite(t_id),
            "t_sh_s": _finite(t_sh),
            "arrival": a.arrival if a else None,
            "service_gpu_s": a.service_s if a else 0.0,
            "preemptions": preempted.get(key, 0),
            "active": bool(a.active) if a else True,
            "account": (a.account or "") if a else "",
        })
    out.sort(key=lambda d: (d["rank"] is None, d["rank"] or 0, d["app"]))
    _with_tenancy(ctx, out)
    return out


# ----------------------------------------------------------------------------------------- tenancy
def tenancy_in_force(ctx: Context) -> StoredTenancy:
    """The tree the rounds use, as themisd stored it (store v9); flat when it stored none, and flat with a
    warning in meta when the stored row cannot be read."""
    if "in_force" not in ctx.cache:
        got = StoredTenancy(FLAT, "", None)
        try:
            got = ctx.state.tenancy() or got
        except ValueError as e:
            ctx.warnings.append(f"{e}: apps are shown without their accounts and users")
        ctx.cache["in_force"] = got
    return ctx.cache["in_force"]


def _tenant_doc(ent: Entity | None) -> Doc | None:
    if not ent:
        return None
    level, key = ent
    return {"level": level, "account": key[0], "user": key[1] if level == "user" else None}


def _round_quotas(rows: Iterable[DecisionRow]) -> dict[Entity, tuple[float | None, int]]:
    """Each tenant's (quota, GPUs held after the round) from a round's app records (store v9 columns)."""
    out: dict[Entity, tuple[float | None, int]] = {}
    for r in rows:
        if r.tenant:
            out[r.tenant] = (r.tenant_quota, r.tenant_gpus or 0)
    return out


def _with_tenancy(ctx: Context, apps: list[Doc]) -> None:
    """Each app doc gains `share` (its fraction of the cluster now, the one its T_id is computed on; None
    for an app without work) and `tenant` (the account or user its quota is kept for; None when flat); the
    request's tenancy Summary is kept in ctx.cache for the `tenancy` part of the document."""
    ten = tenancy_in_force(ctx).tenancy
    quotas: dict[Entity, float | None] = {}
    if not ten.flat:
        quotas = {e: q for e, (q, _) in _round_quotas(ctx.state.round_apps()).items()}
    members = [tenant_levels.Member(a["app"], a["owner"], a["account"], a["active"], a["rho"], a["rank"],
                                    a["gpus_held"], a["jobs_running"], a["jobs_waiting"]) for a in apps]
    summary = tenant_levels.summarise(ten, members, quotas)  # finished apps (all=1) are grouped, without a share
    for a in apps:
        a["share"] = summary.app_share.get(a["app"])
        a["tenant"] = _tenant_doc(summary.app_tenant.get(a["app"]))
    ctx.cache["summary"] = summary


def _level_doc(lv: tenant_levels.Level, visible: set[str]) -> Doc:
    return {"level": lv.level, "account": lv.account, "user": lv.user or None, "shares": lv.shares,
            "share": lv.share, "gpus_held": lv.gpus, "quota": lv.quota, "rho_worst": lv.rho, "rank": lv.rank,
            "jobs_running": lv.running, "jobs_waiting": lv.waiting, "tenant": lv.tenant,
            "apps": [a for a in lv.apps if a in visible]}


def tenancy_doc(ctx: Context, visible: Iterable[Doc]) -> Doc:
    """The `tenancy` part of /v1/cluster and /v1/apps: the levels in force and, in display order, every
    account and user that holds one of the `visible` apps, with its share, GPUs, quota and worst rho (their
    numbers count all its apps; `apps` lists the visible ones)."""
    got = tenancy_in_force(ctx)
    summary: tenant_levels.Summary = ctx.cache.get("summary", tenant_levels.Summary())
    keys = {a["app"] for a in visible}
    return {"levels": list(got.tenancy.levels), "line": got.line, "read_at": got.read_at,
            "tenants": [_level_doc(lv, keys) for lv in summary.levels if keys.intersection(lv.apps)]}


def _rho_aggregates(apps: list[Doc]) -> Doc:
    rhos = [a["rho"] for a in apps if a["rho"] is not None]
    return {"apps": len(apps), "rho_worst": max(rhos, default=None),
            "rho_median": statistics.median(rhos) if rhos else None,
            "jobs_running": sum(a["jobs_running"] for a in apps),
            "jobs_waiting": sum(a["jobs_waiting"] for a in apps)}


def _leases(jobs: list[Doc], now: float) -> list[Doc]:
    out = [{"job": j["job"], "app": j["app"], "user": j["user"], "gpus": j["gpus"], "nodes": j["nodes"],
            "lease_start": j["lease_start"], "lease_end": j["lease_end"],
            "remaining_s": max(0.0, j["lease_end"] - now)}
           for j in jobs if j["lease_end"] is not None and j["intent"] == Intent.RUNNING]
    out.sort(key=lambda d: (d["lease_end"], d["job"]))
    return out


def _gpu_counts(ctx: Context, jobs: list[Doc]) -> tuple[Doc, list[Doc]]:
    """Totals and per-rack counts by state; without a snapshot only what the database knows (leased)."""
    if ctx.snapshot is None:
        leased = sum(j["gpus"] for j in jobs if j["state"] == "RUNNING" or j["intent"] == Intent.RUNNING)
        return {"total": None, "leased": leased, **{s: None for s in GPU_STATES if s != "leased"}}, []
    states = gpu_states(ctx.snapshot, held_for_granted(ctx.snapshot, ctx.state.jobs()))
    total = {"total": len(states), **{s: 0 for s in GPU_STATES}}
    racks: dict[str, Doc] = {}
    for g in states:
        total[g.state] += 1
        r = racks.setdefault(g.rack, {"rack": g.rack, "nodes": set(), "total": 0, **{s: 0 for s in GPU_STATES}})
        r["nodes"].add(g.node)
        r["total"] += 1
        r[g.state] += 1
    for r in racks.values():
        r["nodes"] = len(r["nodes"])
    return total, list(racks.values())


# ----------------------------------------------------------------------------------------- endpoints
def cluster_view(ctx: Context, params: Mapping[str, str]) -> Doc:
    """/v1/cluster: GPUs by state and rack, apps ranked by rho, next lease expiries, rounds, data age."""
    _check_params(params, ())
    jobs = merged_jobs(ctx)
    apps = app_docs(ctx, jobs)
    total, racks = _gpu_counts(ctx, jobs)
    leases = _leases(jobs, ctx.now)
    stats = ctx.state.round_stats()
    v = ctx.viewer
    visible = [a for a in apps if v.sees(a["owner"])]
    return {
        "meta": ctx.meta(),
        "gpus": total,
        "racks": racks,
        "aggregates": {**_rho_aggregates(apps), "leases": len(leases),
                       "next_lease_end": leases[0]["lease_end"] if leases else None},
        "apps": visible,
        "tenancy": tenancy_doc(ctx, visible),
        "next_leases": [x for x in leases if v.sees(x["user"])][:NEXT_LEASES],
        "ineligible": [{"job": j["job"], "app": j["app"], "user": j["user"], "gpus": j["gpus"],
                        "reason": j["ineligible"]} for j in jobs if j["ineligible"] and v.sees(j["user"])],
        "pending_actions": [dict(p) for p in ctx.pending_actions if v.sees(owner_of(str(p["app"])))],
        "rounds": {"total": stats.n, "last_time": stats.last_time, "preemptions": stats.preemptions,
                   "mean_latency_s": stats.mean_latency_s, "max_latency_s": stats.max_latency_s},
    }


def _check_params(params: Mapping[str, str], accepted: tuple[str, ...]) -> None:
    for k in params:
        if k not in accepted:
            raise BadRequest(f"unknown parameter {k!r} (accepted: {', '.join(accepted) or 'none'})")


def apps_view(ctx: Context, params: Mapping[str, str]) -> Doc:
    """/v1/apps[?user=U][&all=1]: visible apps with T_id and T_sh estimates (all=1: finished ones too)."""
    _check_params(params, ("user", "all"))
    if params.get("all", "0") not in ("0", "1"):
        raise BadRequest(f"parameter 'all': {params['all']!r} is not 0 or 1")
    apps = app_docs(ctx, with_estimates=True, finished=params.get("all") == "1")
    visible = [a for a in apps if ctx.viewer.sees(a["owner"]) and params.get("user", a["owner"]) == a["owner"]]
    return {"meta": ctx.meta(), "aggregates": _rho_aggregates(apps), "apps": visible,
            "tenancy": tenancy_doc(ctx, visible)}


def jobs_view(ctx: Context, params: Mapping[str, str]) -> Doc:
    """/v1/jobs[?user=U][&app=A]: managed jobs, squeue-like plus app, intent, GPUs and lease end."""
    _check_params(params, ("user", "app"))
    jobs = merged_jobs(ctx)
    user, app = params.get("user"), params.get("app")
    visible = [j for j in jobs if ctx.viewer.sees(j["user"]) and (user is None or j["user"] == user)
               and (app is None or j["app"] == app or j["app"] == f"{j['user']}/{app}")]
    counts = {"jobs": len(jobs), "running": sum(1 for j in jobs if j["state"] == "RUNNING"),
              "pending": sum(1 for j in jobs if j["state"] == "PENDING")}
    return {"meta": ctx.meta(), "aggregates": counts, "jobs": visible}


def leases_view(ctx: Context, params: Mapping[str, str]) -> Doc:
    """/v1/leases: running leases by expiry (aggregate: how many, the next expiry)."""
    _check_params(params, ())
    leases = _leases(merged_jobs(ctx), ctx.now)
    return {"meta": ctx.meta(),
            "aggregates": {"leases": len(leases), "next_lease_end": leases[0]["lease_end"] if leases else None},
            "leases": [x for x in leases if ctx.viewer.sees(x["user"])]}


def rounds_view(ctx: Context, params: Mapping[str, str]) -> Doc:
    """/v1/rounds[?limit=N]: the last rounds (counts and latency only: aggregates, visible to all)."""
    _check_params(params, ("limit",))
    raw = params.get("limit", "20")
    if not raw.isdigit() or not 1 <= int(raw) <= 1000:
        raise BadRequest(f"parameter 'limit': {raw!r} is not an integer in 1..1000")
    return {"meta": ctx.meta(), "rounds": [asdict(r) for r in ctx.state.rounds(int(raw))]}


def topology_view(ctx: Context, params: Mapping[str, str]) -> Doc:
    """/v1/topology: racks -> nodes -> NVLink islands -> GPUs with their state (jobs only when visible)."""
    _check_params(params, ())
    if ctx.snapshot is None:
        raise Unavailable(ctx.snapshot_error or "no snapshot of the cluster yet: is Slurm reachable?")
    owners = {m.job_id: m.user for m in ctx.snapshot.managed}
    owners.update({j.job_id: owner_of(j.app_key) for j in ctx.state.jobs()})
    racks: dict[str, dict[str, dict[int, list[Doc]]]] = {}
    for g in gpu_states(ctx.snapshot, held_for_granted(ctx.snapshot, ctx.state.jobs())):
        job = g.job if g.job and ctx.viewer.sees(owners.get(g.job)) else None
        gpu = {"id": g.id, "index": g.index, "state": g.state, "job": job}
        racks.setdefault(g.rack, {}).setdefault(g.node, {}).setdefault(g.island, []).append(gpu)
    doc_racks = [{"rack": rack, "nodes": [
        {"node": node, "islands": [{"island": isl, "gpus": gpus} for isl, gpus in islands.items()]}
        for node, islands in nodes.items()]} for rack, nodes in racks.items()]
    return {"meta": ctx.meta(), "racks": doc_racks}


class Unavailable(RuntimeError):
    """503: a source the view needs (Slurm, the database) cannot be read right now."""


# ----------------------------------------------------------------------------------------- explain
def _app_round(d: DecisionRow, knob: float | None) -> Doc:
    """An app's part in a round, from its decision row's typed columns (themis_slurm.reasons words them).

    A row written by an older daemon has only its sentence: it is shown as written, its fields are unknown.
    """
    text = reasons.app_row(d, knob)
    outcome = d.outcome
    won = outcome == Outcome.WON
    return {"rho_before": d.rho_before, "rho_after": d.rho_after,
            "reason": text if text is not None else d.reason or "", "outcome": outcome,
            "offered": None if outcome is None else outcome in (Outcome.LOST, Outcome.WON),
            "bid": None if outcome is None else bool(d.bid), "rank": d.rank,
            "ranked": d.ranked, "won_gpus": d.won_gpus or 0,
            "kept_gpus": d.kept_gpus if won else None, "kept_by": d.kept_by if won else None,
            "leftover_gpus": d.leftover_gpus or 0, "hidden_payment": d.payment, "gpus": d.gpus,
            "reservation": _reservation(d),
            # tenancy levels (store v9; null when flat or written before): its tenant, quota and GPUs after
            "tenant": _tenant_doc(d.tenant), "tenant_quota": d.tenant_quota, "tenant_gpus": d.tenant_gpus}


def _reservation(d: DecisionRow) -> Doc | None:
    note = reasons.note_of(d)
    if note is None:
        return None
    return {"job": note.job_id, "gpus": note.gpus, "held": note.held, "start_in_s": note.start_in_s,
            "started": note.started}


def _explain_rounds(ctx: Context, job_id: str, app: str) -> list[Doc]:
    rounds: dict[int, Doc] = {}
    for x in ctx.state.decisions_of(job_id, app, EXPLAIN_ROUNDS):
        d = x.row
        r = rounds.setdefault(d.round_id, {"round": d.round_id, "time": d.time, "trigger": x.trigger,
                                           "mode": x.mode, "app": None, "job": []})
        if d.action == "app":
            r["app"] = _app_round(d, x.fairness_knob)
        else:
            text = reasons.job_row(d, x.fairness_knob)
            r["job"].append({"action": d.action, "reason": text if text is not None else d.reason,
                             "source": d.source, "cause": d.cause, "gpus": d.gpus, "nodes": d.nodes,
                             "lease_end": d.lease_expiry})
    return [rounds[k] for k in sorted(rounds, reverse=True)]


def _hm(t: float | None) -> str:
    return "-" if t is None else time.strftime("%H:%M:%S", time.localtime(t))


def _nodes_text(nodes: Mapping[str, int] | None) -> str:
    return ",".join(f"{n}:{c}" for n, c in sorted((nodes or {}).items())) or "-"


def _summary(job: Doc, app: Doc | None, rounds: list[Doc], now: float, tenancy: str | None = None,
             room: str | None = None) -> str:
    """One sentence: why the job runs or waits (`tenancy`: which level of the tree held it back; `room`:
    which of its nodes are too busy on CPUs or memory for it now)."""
    intent, rank = job["intent"], (app or {}).get("rank")
    rho = (app or {}).get("rho")
    standing = f"its app {job['app']} has rho {rho:.2f}" if rho is not None else f"its app is {job['app']}"
    if rank is not None:
        standing += f" (rank {rank} of {(app or {}).get('ranked', '?')}, 1 = furthest behind)"
    last_app = next((r for r in rounds if r["app"]), None)
    grant = next((a for r in rounds for a in r["job"] if a["action"] in ("grant", "renewal")), None)
    if intent == Intent.RUNNING:
        text = f"running on {_nodes_text(job['nodes'])}"
        if job["lease_end"] is not None:
            text += f" under a lease until {_hm(job['lease_end'])} ({max(0, job['lease_end'] - now):.0f} s left)"
        if job.get("placement"):
            p = job["placement"]
            gpus = "; ".join(f"{n} GPU {','.join(map(str, idx))}" for n, idx in sorted(p["gpus"].items()))
            text += f"; Slurm gave it {gpus} ({p['level']} level)"
        if job.get("adopted"):
            text += "; started outside Themis (adopted): its GPUs return to the auction when the lease ends"
        elif grant:
            text += f"; {grant['action']} in a round: {grant['reason']}"
        return f"{text}; {standing}"
    if intent in HELD_FOR_GRANTED:
        return (f"granted {job['gpus']} GPU(s) on {_nodes_text(job['nodes'])}: Themis starts it as soon as "
                f"those GPUs are free (a preempted job may still be checkpointing); {standing}")
    if intent in MOVING:
        return (f"preempted: its lease ended and it lost the auction; it got SIGUSR1 to checkpoint and is "
                f"requeued after the grace period; {standing}")
    if intent == "gone":
        return ("no longer active: it finished or was cancelled (its app's history below; `sacct -j "
                f"{job['job']}` for Slurm's record)")
    if intent == "new":
        return "seen in Slurm but not yet recorded by themisd (it is picked up on the next cycle)"
    if job.get("ineligible"):
        return (f"waiting, not eligible for GPUs: {job['ineligible']}. Slurm would not start it if Themis "
                f"released it, so it gets no grant and counts towards nobody's share until that changes; "
                f"{standing}")
    if last_app is None:
        return (f"waiting: no round has considered it yet (a round runs when GPUs are free while jobs wait, "
                f"or a lease expires){f'; {room}' if room else ''}; {standing}")
    reason = last_app["app"]["reason"]
    text = f"waiting: in round {last_app['round']} at {_hm(last_app['time'])} its app {reason}"
    if tenancy:
        text += f"; {tenancy}"
    if job.get("limits"):
        text += (f"; it can only use GPUs on {','.join(job['allowed_nodes'] or []) or 'no node'} "
                 f"({job['limits']}), so it waits for GPUs there")
    if room:
        text += f"; {room}"
    return f"{text}; {standing}"


def _room_doc(ctx: Context, job: Doc) -> Doc | None:
    """For a waiting job that needs CPUs or memory: the nodes it may use that are too busy for it now (what
    Slurm counts free there) and those that have its room; None when it needs neither or every node fits."""
    m = _managed(ctx).get(job["job"])
    if ctx.snapshot is None or m is None or job["intent"] != Intent.WAITING or not (m.cpus_per_node or m.mem_per_node):
        return None
    room = ctx.snapshot.room
    nodes = [n for n in (m.allowed_nodes if m.allowed_nodes is not None else room) if n in room]
    short = {n: room[n] for n in nodes if not room[n].fits(m.cpus_per_node, m.mem_per_node)}
    fits = sorted(set(nodes) - set(short))
    return {"cpus": m.cpus_per_node, "mem_mib": m.mem_per_node,
            "short": {n: {"cpus": r.cpus, "mem_mib": r.mem} for n, r in sorted(short.items())},
            "fits": fits,
            "reason": reasons.room_short(m.cpus_per_node, m.mem_per_node,
                                         {n: (r.cpus, r.mem) for n, r in short.items()}, fits)}


def _past_job(ctx: Context, job_id: str) -> Doc | None:
    """A job that left Slurm and Themis's active set, rebuilt from the audit log (so it can be explained)."""
    app = ctx.state.app_of_past_job(job_id)
    if app is None:
        return None
    return {"job": job_id, "slurm_id": int(job_id.split("_")[0]), "app": app, "user": owner_of(app), "name": "",
            "partition": "", "state": "GONE", "held": None, "intent": "gone", "gpus": None, "nodes": {},
            "lease_start": None, "lease_end": None, "submit_time": None, "start_time": None, "restarts": None,
            "progress": None, "estimate_source": "", "service_gpu_s": None, "adopted": False,
            "checkpoint": None, "checkpoint_source": None, "unsaved_gpu_s": None}


def explain_view(ctx: Context, job_id: str, params: Mapping[str, str]) -> Doc:
    """/v1/jobs/<id>/explain: why a job runs or waits, from its app's standing and its last rounds."""
    _check_params(params, ())
    if not re.fullmatch(r"\d+(_\d+)?", job_id):
        raise BadRequest(f"job id {job_id!r} is not a Slurm job id (123 or 123_4 for an array task)")
    job = next((j for j in merged_jobs(ctx) if j["job"] == job_id), None) or _past_job(ctx, job_id)
    if job is None or not ctx.viewer.sees(job["user"]):
        why = "" if ctx.viewer.scope == "all" else " (or not visible to you)"
        raise NotFound(f"job {job_id} is not managed by Themis{why}: it may have finished, run in an "
                       f"unmanaged partition, or not exist (see: squeue -j {job_id})")
    apps = app_docs(ctx)
    app = next((a for a in apps if a["app"] == job["app"]), None)
    if app is not None:
        app = {**app, "ranked": sum(1 for a in apps if a["rank"] is not None)}
    rounds = _explain_rounds(ctx, job_id, job["app"])
    last_grant = next((a for r in rounds for a in r["job"] if a["action"] == "grant"), None)
    row = ctx.state.job(job_id)
    ten = _tenancy_explain(ctx, job, rounds)
    room = _room_doc(ctx, job)
    return {
        "meta": ctx.meta(),
        "job": job,
        "app": app,
        "summary": _summary(job, app, rounds, ctx.now, ten["reason"] if ten else None,
                            room["reason"] if room else None),
        "tenancy": ten,
        "room": room,
        "rounds": rounds,
        "placement": {"planned": dict(row.planned_nodes) if row else {},
                      "granted": last_grant["nodes"] if last_grant else None,
                      "current": job["nodes"] if job["state"] == "RUNNING" else None},
        "lease": {"start": job["lease_start"], "end": job["lease_end"],
                  "remaining_s": None if job["lease_end"] is None else max(0.0, job["lease_end"] - ctx.now)},
        "events": [{"time": e.time, "kind": e.kind, "detail": e.detail} for e in ctx.state.events_of(job_id)],
        "estimate": _estimate_doc(row),
        "profile": _profile_doc(ctx, _managed(ctx).get(job_id)),
    }


def _profile_doc(ctx: Context, m: ManagedJob | None) -> Doc | None:
    """The model class themisd places the job with: the name it asked for (its trusted record's model or
    sens), the class used and its factors per level, whether built in or the site's (themis.yaml
    ``models:``, from the configuration in ``round_terms``), and why it is the default class when themisd
    does not know the name (state/jobs.py), and its speed on each GPU type themis.yaml ``gpu_types:`` names
    (the class's own, else the type's; fastest first; empty without the section). None for a job not in
    Slurm's view."""
    if m is None:
        return None
    site = ctx.round_terms.profiles if ctx.round_terms is not None else {}
    ref = profile_of(m, site)
    prof = get_profile(ref)
    terms = ctx.round_terms
    speeds = {} if terms is None else {**terms.type_speeds, **dict(class_speeds(terms.class_speeds, prof.name))}
    return {"asked": m.profile or None, "name": prof.name, "factors": dict(zip(LEVEL_NAMES, prof.factors, strict=True)),
            "defined_by": "themis.yaml" if isinstance(ref, Profile) else "built-in", "source": prof.source,
            "note": unknown_profile_note(m, site) if terms is not None else "",
            "type_speeds": dict(sorted(speeds.items(), key=lambda kv: (-kv[1], kv[0])))}


def _tenancy_explain(ctx: Context, job: Doc, rounds: list[Doc]) -> Doc | None:
    """The job's place in the tree (its account and user now) and, for a waiting job, which level held it
    back in its app's last round: a level at its quota (the highest one: an account at its share bounds
    all its users) and other apps of its tenant ranked before its app that got GPUs. None when flat."""
    ten = tenancy_in_force(ctx).tenancy
    if ten.flat:
        return None
    summary: tenant_levels.Summary = ctx.cache.get("summary", tenant_levels.Summary())
    standing = [_level_doc(lv, {job["app"]}) for lv in summary.levels if job["app"] in lv.apps]
    out: Doc = {"levels": list(ten.levels), "standing": standing, "round": None, "at_share": [], "ahead": [],
                "reason": None}
    last = next((r for r in rounds if r["app"]), None)
    if last is None or not last["app"].get("tenant"):
        return out
    out["round"] = last["round"]
    if job["intent"] != Intent.WAITING or job.get("ineligible"):
        return out
    rows = ctx.state.round_apps(last["round"])
    books = _round_quotas(rows)
    mine_row = next(r for r in rows if r.app_key == job["app"])
    ent = mine_row.tenant
    assert ent is not None  # its app's record in that round names its tenant (checked above)
    share = {lv.entity: lv.share for lv in summary.levels}
    at_share: list[reasons.LevelAtShare] = []
    if ent[0] == "user" and "account" in ten.levels:  # the account above: its users' quotas and GPUs together
        mine = [(q, g) for e, (q, g) in books.items() if e[0] == "user" and e[1][0] == ent[1][0] and q is not None]
        acct = ("account", (ent[1][0],))
        quota, gpus = sum(q for q, _ in mine), sum(g for _, g in mine)
        if mine and reasons.at_quota(gpus, quota, job["gpus"] or 1):
            at_share.append(reasons.LevelAtShare("account", ent[1][0], ent[1][0], gpus, quota, share.get(acct)))
    quota, gpus = books.get(ent, (None, 0))
    if quota is not None and reasons.at_quota(gpus, quota, job["gpus"] or 1):
        name = ent[1][0] if ent[0] == "account" else ent[1][1]
        at_share.append(reasons.LevelAtShare(ent[0], name, ent[1][0], gpus, quota, share.get(ent)))
    my_rank = mine_row.rank
    ahead = [reasons.AppAhead(r.app_key, r.rank, _finite(r.rho_before), (r.kept_gpus or 0) + (r.leftover_gpus or 0))
             for r in rows if r.app_key != job["app"] and r.tenant == ent and r.rank is not None
             and (my_rank is None or r.rank < my_rank) and (r.kept_gpus or 0) + (r.leftover_gpus or 0) > 0
             and ctx.viewer.sees(owner_of(r.app_key))]
    ahead.sort(key=lambda a: (a.rank or 0, a.app))
    tenant_name = ent[1][0] if ent[0] == "account" else ent[1][1]
    kept_by_quota = mine_row.kept_by == KeptBy.QUOTA
    out["at_share"] = [{"level": lv.level, "name": lv.name, "account": lv.account, "gpus": lv.gpus,
                        "quota": lv.quota, "share": lv.share} for lv in at_share]
    out["ahead"] = [{"app": a.app, "rank": a.rank, "rho": a.rho, "gpus": a.gpus} for a in ahead]
    out["reason"] = reasons.tenancy_limit(at_share, ahead, kept_by_quota, you=ctx.viewer.user == job["user"],
                                          tenant=(ent[0], tenant_name))
    return out


def _estimate_doc(row: JobRow | None) -> Doc | None:
    """The run-time estimate the arbiter uses for a job (wall seconds on its GPUs), where it came from and
    the calibration factor applied to it (core/calibration.py); None for a job without a row."""
    if row is None or not row.gpus or row.work is None:
        return None
    submitted = row.est_work or row.work  # rows of older daemons have no est_work: uncalibrated
    return {"source": row.est_source or "", "seconds": row.work / row.gpus,
            "submitted_seconds": submitted / row.gpus, "calibration_factor": row.est_factor,
            "note": row.est_note or ""}


# ----------------------------------------------------------------------------------------- routing
View = Callable[[Context, Mapping[str, str]], Doc]
ROUTES = ("/v1/cluster", "/v1/apps", "/v1/jobs", "/v1/leases", "/v1/rounds", "/v1/jobs/<id>/explain",
          "/v1/topology")


def route(path: str) -> View | None:
    """The view serving `path` (its parts are URL-decoded here), or None for an unknown path."""
    parts = [unquote(p) for p in path.strip("/").split("/")]
    if len(parts) == 2 and parts[0] == "v1":
        return {"cluster": cluster_view, "apps": apps_view, "jobs": jobs_view, "leases": leases_view,
                "rounds": rounds_view, "topology": topology_view}.get(parts[1])
    if len(parts) == 4 and parts[:2] == ["v1", "jobs"] and parts[3] == "explain":
        job_id = parts[2]
        return lambda ctx, params: explain_view(ctx, job_id, params)
    return None
