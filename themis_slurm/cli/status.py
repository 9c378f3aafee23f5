"""``themis status [--watch [SECONDS]]``: the cluster at a glance (GPUs by rack, apps by rho, next leases)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from themis_slurm.api.wire import GPU_STATES
from themis_slurm.cli.client import Client, CliError
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
from themis_slurm.cli.output import Column, TableOptions, clock, duration, nodes_text, render
from themis_slurm.cli.query import app_table

RACK_COLUMNS = (
    Column("rack", "RACK", lambda r: r["rack"]),
    Column("nodes", "NODES", lambda r: r["nodes"], True),
    Column("total", "GPUS", lambda r: r["total"], True),
    *(Column(s, s.upper(), lambda r, s=s: r[s], True) for s in GPU_STATES),
)
LEASE_COLUMNS = (
    Column("lease_end", "LEASE_END", lambda x: clock(x["lease_end"]), True),
    Column("left", "LEFT", lambda x: duration(x["remaining_s"]), True),
    Column("job", "JOBID", lambda x: x["job"], True),
    Column("app", "APP", lambda x: x["app"]),
    Column("gpus", "GPUS", lambda x: x["gpus"], True),
    Column("nodes", "NODES", lambda x: nodes_text(x["nodes"])),
)
INELIGIBLE_COLUMNS = (
    Column("job", "NOT_ELIGIBLE", lambda x: x["job"], True),
    Column("app", "APP", lambda x: x["app"]),
    Column("gpus", "GPUS", lambda x: x["gpus"], True),
    Column("reason", "REASON (Slurm would not start it if released)", lambda x: x["reason"]),
)
PENDING_COLUMNS = (
    Column("job", "RETRYING", lambda x: x["job"], True),
    Column("app", "APP", lambda x: x["app"]),
    Column("action", "ACTION", lambda x: x["action"]),
    Column("tries", "TRIES", lambda x: x["tries"], True),
    Column("since", "SINCE", lambda x: clock(x["since"]), True),
    Column("error", "WHY (Slurm's answer; themisd tries again every cycle)", lambda x: x["error"]),
)
STATUS_APP_DEFAULT = ("rank", "app", "owner", "running", "waiting", "gpus", "rho", "preemptions")
STATUS_TREE_DEFAULT = ("tenant", "share", "gpus", "quota", "rho", "rank", "running", "waiting", "preemptions")


def _age(meta: dict[str, Any]) -> str:
    age = meta.get("data_age_s")
    return "no data yet" if age is None else f"data {age:.0f} s old"


def headline(doc: dict[str, Any]) -> str:
    meta, g = doc["meta"], doc["gpus"]
    if g.get("total") is None:
        gpus = f"{g['leased']} GPUs leased (Slurm not readable: totals unknown)"
    else:
        gpus = f"{g['total']} GPUs: " + ", ".join(f"{g[s]} {s}" for s in GPU_STATES)
    return f"Themis  {gpus}  [{_age(meta)}, {meta['source']}, {clock(meta['time'])}]"


def footer(doc: dict[str, Any]) -> str:
    a, r = doc["aggregates"], doc["rounds"]
    worst = "-" if a["rho_worst"] is None else f"{a['rho_worst']:.2f}"
    median = "-" if a["rho_median"] is None else f"{a['rho_median']:.2f}"
    latency = "" if r["mean_latency_s"] is None else f", mean {r['mean_latency_s'] * 1000:.0f} ms"
    return (f"{a['apps']} app(s) (worst rho {worst}, median {median}), {a['jobs_running']} job(s) running, "
            f"{a['jobs_waiting']} waiting; {r['total']} round(s) (last {clock(r['last_time']) or '-'}{latency}), "
            f"{r['preemptions']} preemption(s)")


def render_status(doc: dict[str, Any], opts: TableOptions, flat: bool = False) -> str:
    """The whole screen; -P/-h apply to each table, -o to the apps table (grouped under accounts and users
    with tenancy levels, unless `flat`)."""
    plain = TableOptions(noheader=opts.noheader, parsable=opts.parsable)
    parts = [] if opts.parsable else [headline(doc)]
    if doc["racks"]:
        parts.append(render(doc["racks"], RACK_COLUMNS, [c.name for c in RACK_COLUMNS], plain))
    parts.append(app_table(doc, STATUS_APP_DEFAULT, STATUS_TREE_DEFAULT, opts, flat))
    if doc["next_leases"] or not opts.parsable:
        parts.append(render(doc["next_leases"], LEASE_COLUMNS, [c.name for c in LEASE_COLUMNS], plain))
    if doc.get("ineligible"):
        parts.append(render(doc["ineligible"], INELIGIBLE_COLUMNS, [c.name for c in INELIGIBLE_COLUMNS], plain))
    if doc.get("pending_actions"):
        parts.append(render(doc["pending_actions"], PENDING_COLUMNS, [c.name for c in PENDING_COLUMNS], plain))
    if not opts.parsable:
        ten = doc.get("tenancy") or {}
        line = f"\ntenancy: {ten['line']}" if ten.get("line") and ten.get("levels") != ["app"] else ""
        parts.append(footer(doc) + line)
    return "\n\n".join(parts)


def _watch(client: Client, opts: TableOptions, every: float, flat: bool) -> None:
    clear = sys.stdout.isatty()
    try:
        while True:
            try:
                doc = client.get("/v1/cluster")
                text = render_status(doc, opts, flat)
                notes = [*doc["meta"].get("warnings", []), doc["meta"]["viewer"].get("note") or ""]
                text += "".join(f"\nnote: {n}" for n in notes if n)
            except CliError as e:
                text = f"themis: error: {e}\n(retrying every {every:g} s; Ctrl-C to stop)"
            if clear:
                click.echo("\x1b[H\x1b[2J", nl=False)
            click.echo(text + ("" if clear else "\n"))
            time.sleep(every)
    except KeyboardInterrupt:
        return


def _seconds(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        v = float(value)
    except ValueError:
        v = -1
    if not 0.2 <= v <= 3600:
        raise click.BadParameter(f"{value!r} is not a number of seconds in [0.2, 3600]")
    return v


@click.command("status", context_settings=NO_H_HELP)
@click.option("--watch", "-w", "watch", is_flag=False, flag_value="2", default=None, metavar="[SECONDS]",
              callback=_seconds, help="Refresh in place every SECONDS (default 2) until Ctrl-C.")
@click.option("--flat", is_flag=True, help="Apps one row each, without their account and user rows.")
@table_options
@connection_options
@fails_cleanly
def status(watch: float | None, flat: bool, noheader: bool, fields: str | None, parsable: bool, as_json: bool,
           config: Path | None, url: str | None) -> None:
    """GPUs total/free/leased/unmanaged by rack, apps ranked by rho, next lease expiries.

    -o chooses the columns of the apps table (fields as in `themis apps --help`). With tenancy levels the
    apps are grouped under their accounts and users, each with its share, GPUs now, quota and worst rho.
    """
    client = make_client(config, url)
    opts = table_opts(noheader, parsable, fields)
    if watch is not None:
        if as_json:
            raise click.UsageError("--watch and --json do not go together")
        _watch(client, opts, watch, flat)
        return
    doc = client.get("/v1/cluster")
    if as_json:
        print_json(doc)
        return
    click.echo(render_status(doc, opts, flat))
    print_notes(doc, client)
