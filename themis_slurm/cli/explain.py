"""``themis explain JOBID``: why a job runs or waits (its app's rho and rank, its last rounds, its lease)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from themis_slurm.cli.client import explain_path
from themis_slurm.cli.common import (
    NO_H_HELP,
    connection_options,
    fails_cleanly,
    make_client,
    print_json,
    print_notes,
)
from themis_slurm.cli.output import Column, TableOptions, cell, clock, duration, nodes_text, render, rho_text


def _app(r: dict[str, Any]) -> dict[str, Any]:
    return r["app"] or {}


ROUND_COLUMNS = (
    Column("round", "ROUND", lambda r: r["round"], True),
    Column("time", "TIME", lambda r: clock(r["time"]), True),
    Column("rho_before", "RHO_BEFORE", lambda r: rho_text(_app(r).get("rho_before")), True),
    Column("rho_after", "RHO_AFTER", lambda r: rho_text(_app(r).get("rho_after")), True),
    Column("rank", "RANK", lambda r: _app(r).get("rank"), True),
    Column("bid", "BID", lambda r: _app(r).get("bid") if r["app"] else None),
    Column("won", "WON", lambda r: _app(r).get("won_gpus"), True),
    Column("kept", "KEPT", lambda r: _app(r).get("kept_gpus"), True),
    Column("leftover", "LEFTOVER", lambda r: _app(r).get("leftover_gpus"), True),
    Column("payment", "PAYMENT", lambda r: None if _app(r).get("hidden_payment") is None
           else f"{_app(r)['hidden_payment']:.3f}", True),
    Column("job_action", "THIS_JOB", lambda r: "; ".join(
        f"{a['action']}" + (f" {nodes_text(a['nodes'])}" if a["nodes"] else "") for a in r["job"]) or None),
)


def _standing(lv: dict[str, Any]) -> str:
    """One level of the job's place in the tree: ``account vision: 75.0% of the cluster, 8 GPU(s), quota 8.00``."""
    name = lv["account"] if lv["level"] == "account" else lv["user"]
    share = "-" if lv["share"] is None else f"{lv['share']:.1%}"
    quota = "" if lv["quota"] is None else f", quota {lv['quota']:.2f}"
    return f"{lv['level']} {name or repr('')}: {share} of the cluster, {lv['gpus_held']} GPU(s) now{quota}"


_SOURCES = {"est=": "--themis-est", "time limit": "its time limit", "default": "estimates.default_s"}


def render_explain(doc: dict[str, Any], opts: TableOptions) -> str:
    job, app, lease, place = doc["job"], doc["app"] or {}, doc["lease"], doc["placement"]
    lines = [
        f"Job {job['job']}  app {job['app']}  user {job['user']}  {cell(job['gpus'])} GPU(s)  "
        f"Slurm {job['state']}  Themis {job['intent']}",
        f"Why:       {doc['summary']}",
    ]
    if app:
        lines.append(f"App:       rho {cell(app.get('rho'))}, rank {cell(app.get('rank'))} of {app.get('ranked', '-')}"
                     f" (1 = furthest behind); {app['jobs_running']} running, {app['jobs_waiting']} waiting, "
                     f"{app['gpus_held']} GPU(s) held, {app['preemptions']} preemption(s)")
    ten = doc.get("tenancy")
    if ten and ten["standing"]:
        lines.append("Tenancy:   " + "; ".join(_standing(lv) for lv in ten["standing"]))
    if lease["end"] is not None:
        lines.append(f"Lease:     {clock(lease['start'])} -> {clock(lease['end'])} "
                     f"({duration(lease['remaining_s'])} left)")
    est = doc.get("estimate")
    if est:
        source = _SOURCES.get(est["source"], est["source"] or "the default")
        text = f"Estimate:  {duration(est['seconds'])} on its GPUs, from {source}"
        if est["calibration_factor"] != 1.0:
            text += (f" ({duration(est['submitted_seconds'])}) x {est['calibration_factor']:.2f}: calibrated by "
                     "the work its user's finished jobs really did against their estimates")
        lines.append(text + (f"; {est['note']}" if est["note"] else ""))
    if job.get("checkpoint"):
        lines.append(_saves(job))
    lines.append(f"Placement: planned {nodes_text(place['planned']) or '-'}; granted "
                 f"{nodes_text(place['granted']) or '-'}; now {nodes_text(place['current']) or '-'}")
    if doc.get("profile"):
        lines.append(_profile(doc["profile"], (job.get("placement") or {}).get("level")))
    if doc["rounds"]:
        lines += ["", "Last rounds of its app (newest first):",
                  render(doc["rounds"], ROUND_COLUMNS, [c.name for c in ROUND_COLUMNS], opts)]
        last = next((r for r in doc["rounds"] if r["app"]), None)
        if last:
            lines.append(f"Round {last['round']} ({last['trigger']}): {last['app']['reason']}")
    if doc["events"]:
        lines += ["", "Recent corrections:"]
        lines += [f"  {clock(e['time'])} {e['kind']}: {e['detail']}" for e in doc["events"]]
    return "\n".join(lines)


def _profile(prof: dict[str, Any], level: str | None) -> str:
    """The model class the job is placed with, its factors, the one its GPUs now give it, and its speed on
    each GPU type the site names."""
    factors = prof["factors"]
    text = (f"Class:     {prof['name']} ({prof['defined_by']}): "
            + ", ".join(f"{lv} {f:.2f}" for lv, f in factors.items()))
    if level in factors:
        text += f"; now placed at {level} level: x{factors[level]:.2f}"
    text += f"; {prof['note']}" if prof["note"] else ""
    speeds = prof.get("type_speeds")
    if speeds:  # themis.yaml gpu_types: what an hour on each type is worth to this class
        text += ("\nTypes:     " + ", ".join(f"{t} x{v:.2f}" for t, v in speeds.items())
                 + " of the reference type's speed (themis.yaml gpu_types; a type not named: x1.00)")
    return text


_SAVES = {"warning": "at Themis's warning", "never": "never (a preemption loses its whole run)"}
_SAVES_SOURCE = {"owner": "its owner's --themis-ckpt", "default": "the default"}
_LEARNED = {"warning": "learned: its progress went on after a requeue",
            "never": "learned: its progress restarted lower after a requeue"}


def _saves(job: dict[str, Any]) -> str:
    """How the job saves its state and what a preemption now would throw away."""
    saves = job["checkpoint"]
    source = job["checkpoint_source"]
    said = _LEARNED.get(saves, "learned") if source == "learned" else _SAVES_SOURCE.get(source, "-")
    text = f"Saves:     {_SAVES.get(saves, saves)}, from {said}"
    if job.get("unsaved_gpu_s"):
        text += f"; a preemption now would lose {job['unsaved_gpu_s'] / 3600:.2f} GPU-h of work"
    return text


@click.command("explain", context_settings=NO_H_HELP)
@click.argument("job_id", metavar="JOBID")
@click.option("-h", "--noheader", is_flag=True, help="No header line on the rounds table.")
@click.option("-P", "--parsable", is_flag=True, help="'|'-separated rounds table.")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON document.")
@connection_options
@fails_cleanly
def explain(job_id: str, noheader: bool, parsable: bool, as_json: bool, config: Path | None,
            url: str | None) -> None:
    """Why job JOBID runs or waits: its app's rho and rank, the rounds it was in, bids, wins, payment, lease."""
    client = make_client(config, url)
    doc = client.get(explain_path(job_id.strip()))
    if as_json:
        print_json(doc)
        return
    click.echo(render_explain(doc, TableOptions(noheader=noheader, parsable=parsable)))
    print_notes(doc, client)
