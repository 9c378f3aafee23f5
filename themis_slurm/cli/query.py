"""``themis apps``, ``themis jobs``, ``themis topology``: tables over the status API (squeue style)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from themis_slurm.cli.common import (
    NO_H_HELP,
    connection_options,
    fails_cleanly,
    make_client,
    print_json,
    print_notes,
    table_options,
    table_opts,
)
from themis_slurm.cli.output import (
    Column,
    TableOptions,
    clock,
    duration,
    nodes_text,
    render,
    rho_text,
    short_state,
)


def _shares(x: float | None) -> int | float | None:
    """Raw shares as Slurm prints them (integers), a fraction only where there is one."""
    return int(x) if x is not None and x == int(x) else x


APP_COLUMNS = (
    Column("rank", "RANK", lambda a: a["rank"], True, "1 = worst rho (furthest behind its fair finish time)"),
    Column("app", "APP", lambda a: a["app"]),
    Column("owner", "OWNER", lambda a: a["owner"]),
    Column("running", "RUN", lambda a: a["jobs_running"], True),
    Column("waiting", "WAIT", lambda a: a["jobs_waiting"], True),
    Column("gpus", "GPUS", lambda a: a["gpus_held"], True, "GPUs held now"),
    Column("wanted", "WANT", lambda a: a["gpus_wanted"], True, "GPUs its waiting jobs ask for"),
    Column("rho", "RHO", lambda a: rho_text(a["rho"]), True, "rho after the last round"),
    Column("t_id", "T_ID", lambda a: duration(a["t_id_s"]), True, "finish time on a private 1/N share"),
    Column("t_sh", "T_SH", lambda a: duration(a["t_sh_s"]), True, "estimated finish time as things are"),
    Column("preemptions", "PREEMPT", lambda a: a["preemptions"], True),
    Column("service", "GPU_HOURS", lambda a: None if a["service_gpu_s"] is None else f"{a['service_gpu_s'] / 3600:.2f}",
           True),
    Column("arrival", "ARRIVAL", lambda a: clock(a["arrival"]), True),
    # tenancy levels (issue 33): in the tree each account and user is a row above its apps
    Column("tenant", "TENANT/APP", lambda a: a.get("tree", a["app"]),
           help="accounts, users and their apps, indented (the levels of tenancy.levels)"),
    Column("level", "LEVEL", lambda a: a.get("level", "app"), help="account, user or app"),
    Column("account", "ACCOUNT", lambda a: a["account"]),
    Column("user", "USER", lambda a: a.get("user", a.get("owner"))),
    Column("share", "SHARE", lambda a: None if a["share"] is None else f"{a['share']:.1%}", True,
           "fraction of the cluster owed now (an app: the share its T_id is computed on)"),
    Column("shares", "RAW_SHARES", lambda a: _shares(a.get("shares")), True, "the account's or user's shares in Slurm"),
    Column("quota", "QUOTA", lambda a: a.get("quota"), True,
           "GPUs the last round let the account or user hold (its share of the GPUs in play, paced)"),
)
APP_DEFAULT = ("rank", "app", "owner", "running", "waiting", "gpus", "rho", "t_id", "t_sh")
#: the default with tenancy levels: the tree, each level's share, GPUs now, quota and worst rho
TREE_DEFAULT = ("tenant", "share", "gpus", "quota", "rho", "rank", "running", "waiting", "t_id", "t_sh")


def _level_row(lv: dict[str, Any], depth: int) -> dict[str, Any]:
    name = lv["account"] if lv["level"] == "account" else lv["user"]
    return {"tree": "  " * depth + (name or "''"), "level": lv["level"], "app": None, "owner": lv["user"],
            "user": lv["user"], "account": lv["account"], "share": lv["share"], "shares": lv["shares"],
            "quota": lv["quota"], "rho": lv["rho_worst"], "rank": None, "jobs_running": lv["jobs_running"],
            "jobs_waiting": lv["jobs_waiting"], "gpus_held": lv["gpus_held"], "gpus_wanted": None, "t_id_s": None,
            "t_sh_s": None, "preemptions": None, "service_gpu_s": None, "arrival": None}


def tree_rows(doc: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The apps of `doc` (/v1/apps or /v1/cluster) under their accounts and users, sshare-like: each level a
    row, its apps indented below it in rank order; None when the tenancy is flat (the plain apps table)."""
    ten = doc.get("tenancy") or {}
    levels = ten.get("levels") or ["app"]
    if levels == ["app"]:
        return None
    apps = {a["app"]: a for a in doc["apps"]}
    depth = {lv: i for i, lv in enumerate(levels)}
    rows: list[dict[str, Any]] = []
    placed: set[str] = set()
    for lv in ten.get("tenants", []):
        rows.append(_level_row(lv, depth.get(lv["level"], 0)))
        if lv["tenant"]:
            for key in lv["apps"]:
                if key in apps and key not in placed:
                    placed.add(key)
                    rows.append({**apps[key], "tree": "  " * depth["app"] + key, "level": "app"})
    rows += [{**a, "tree": a["app"], "level": "app"} for a in doc["apps"] if a["app"] not in placed]
    return rows


def app_columns(doc: dict[str, Any]) -> tuple[Column, ...]:
    """APP_COLUMNS with the tree column headed by the levels in force (ACCOUNT/USER/APP)."""
    levels: Sequence[str] = (doc.get("tenancy") or {}).get("levels") or ["app"]
    header = "/".join(levels).upper() if list(levels) != ["app"] else "TENANT/APP"
    return tuple(replace(c, header=header) if c.name == "tenant" else c for c in APP_COLUMNS)


def app_table(doc: dict[str, Any], flat_default: Sequence[str], tree_default: Sequence[str], opts: TableOptions,
              flat: bool = False) -> str:
    """The apps of `doc`: grouped under accounts and users with tenancy levels (unless `flat`), else one row
    per app exactly as without tenancy."""
    rows = None if flat else tree_rows(doc)
    if rows is None:
        return render(doc["apps"], app_columns(doc), flat_default, opts)
    return render(rows, app_columns(doc), tree_default, opts)

JOB_COLUMNS = (
    Column("job", "JOBID", lambda j: j["job"], True),
    Column("partition", "PARTITION", lambda j: j["partition"]),
    Column("name", "NAME", lambda j: j["name"]),
    Column("user", "USER", lambda j: j["user"]),
    Column("app", "APP", lambda j: j["app"]),
    Column("st", "ST", lambda j: short_state(j["state"])),
    Column("state", "STATE", lambda j: j["state"]),
    Column("intent", "THEMIS", lambda j: j["intent"], help="Themis's intent (waiting, running, warned, ...)"),
    Column("gpus", "GPUS", lambda j: j["gpus"], True),
    Column("nodes", "NODES", lambda j: nodes_text(j["nodes"]), help="GPUs per node (running or planned)"),
    Column("lease_end", "LEASE_END", lambda j: clock(j["lease_end"]), True),
    Column("restarts", "RESTARTS", lambda j: j["restarts"], True),
    Column("progress", "PROGRESS", lambda j: None if j["progress"] is None else f"{j['progress']:.0%}", True),
    Column("submit", "SUBMIT", lambda j: clock(j["submit_time"]), True),
    Column("ckpt", "CKPT", lambda j: j.get("checkpoint"),
           help="when it saves its state: warning (at Themis's warning), never, every N s (--themis-ckpt)"),
    Column("unsaved", "UNSAVED_GPU_H", lambda j: None if j.get("unsaved_gpu_s") is None
           else f"{j['unsaved_gpu_s'] / 3600:.2f}", True, help="work a preemption now would throw away"),
)
JOB_DEFAULT = ("job", "partition", "name", "user", "app", "st", "intent", "gpus", "nodes", "lease_end")


def _fields_epilog(columns: tuple[Column, ...], default: tuple[str, ...]) -> str:
    names = ", ".join(c.name for c in columns)
    return f"\b\nFields for -o: {names}\nDefault: {','.join(default)}"


@click.command("apps", context_settings=NO_H_HELP, epilog=_fields_epilog(APP_COLUMNS, APP_DEFAULT)
               + f"\n\b\nWith tenancy levels (accounts, users) the default is {','.join(TREE_DEFAULT)}:\n"
                 "each account and user a row above its apps (--flat: one row per app).")
@click.option("-u", "--user", default=None, help="Only this user's apps.")
@click.option("--all", "-A", "show_all", is_flag=True, help="Also apps whose jobs have all finished (history).")
@click.option("--flat", is_flag=True, help="One row per app, without the account and user rows.")
@table_options
@connection_options
@fails_cleanly
def apps(user: str | None, show_all: bool, flat: bool, noheader: bool, fields: str | None, parsable: bool,
         as_json: bool, config: Path | None, url: str | None) -> None:
    """Apps ranked by finish-time fairness rho, with T_id and T_sh estimates; with tenancy levels, grouped
    under their accounts and users with each one's share, GPUs, quota and worst rho."""
    client = make_client(config, url)
    doc = client.get("/v1/apps", {"user": user, "all": "1" if show_all else None})
    if as_json:
        print_json(doc)
        return
    click.echo(app_table(doc, APP_DEFAULT, TREE_DEFAULT, table_opts(noheader, parsable, fields), flat))
    print_notes(doc, client)


@click.command("jobs", context_settings=NO_H_HELP, epilog=_fields_epilog(JOB_COLUMNS, JOB_DEFAULT))
@click.option("-u", "--user", default=None, help="Only this user's jobs.")
@click.option("-a", "--app", default=None, help="Only this app's jobs (user/name, or name for your own).")
@table_options
@connection_options
@fails_cleanly
def jobs(user: str | None, app: str | None, noheader: bool, fields: str | None, parsable: bool, as_json: bool,
         config: Path | None, url: str | None) -> None:
    """Managed jobs, squeue-like, plus app, Themis intent, GPUs and lease end."""
    client = make_client(config, url)
    doc = client.get("/v1/jobs", {"user": user, "app": app})
    if as_json:
        print_json(doc)
        return
    click.echo(render(doc["jobs"], JOB_COLUMNS, JOB_DEFAULT, table_opts(noheader, parsable, fields)))
    print_notes(doc, client)


GPU_MARK = {"free": ".", "starting": "s", "unmanaged": "u", "unavailable": "x"}


def _island_text(isl: dict[str, Any]) -> str:
    marks = []
    for g in isl["gpus"]:
        if g["state"] == "leased":
            marks.append(f"{g['index']}:{g['job'] or 'L'}")
        else:
            marks.append(f"{g['index']}:{GPU_MARK.get(g['state'], '?')}")
    return "[" + " ".join(marks) + "]"


def topology_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for rack in doc["racks"]:
        for node in rack["nodes"]:
            gpus = [g for isl in node["islands"] for g in isl["gpus"]]
            rows.append({"rack": rack["rack"], "node": node["node"], "gpus": len(gpus),
                         "free": sum(g["state"] == "free" for g in gpus),
                         "leased": sum(g["state"] == "leased" for g in gpus),
                         "islands": len(node["islands"]),
                         "map": " ".join(_island_text(i) for i in node["islands"])})
    return rows


TOPO_COLUMNS = (
    Column("rack", "RACK", lambda r: r["rack"]),
    Column("node", "NODE", lambda r: r["node"]),
    Column("gpus", "GPUS", lambda r: r["gpus"], True),
    Column("free", "FREE", lambda r: r["free"], True),
    Column("leased", "LEASED", lambda r: r["leased"], True),
    Column("islands", "ISLANDS", lambda r: r["islands"], True, "NVLink islands"),
    Column("map", "GPUS_BY_ISLAND", lambda r: r["map"], help="[index:job] per island"),
)
TOPO_DEFAULT = tuple(c.name for c in TOPO_COLUMNS)


@click.command("topology", context_settings=NO_H_HELP, epilog=_fields_epilog(TOPO_COLUMNS, TOPO_DEFAULT)
               + "\n\b\nMap: index:JOBID leased, . free, s starting (granted, not running yet), u unmanaged, "
                 "x unavailable, L leased by a job you may not see.")
@table_options
@connection_options
@fails_cleanly
def topology(noheader: bool, fields: str | None, parsable: bool, as_json: bool, config: Path | None,
             url: str | None) -> None:
    """Racks, nodes, NVLink islands and the GPUs in use, as themisd sees them."""
    client = make_client(config, url)
    doc = client.get("/v1/topology")
    if as_json:
        print_json(doc)
        return
    click.echo(render(topology_rows(doc), TOPO_COLUMNS, TOPO_DEFAULT, table_opts(noheader, parsable, fields)))
    print_notes(doc, client)
