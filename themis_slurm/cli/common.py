"""Options and error handling shared by the query commands (status, apps, jobs, explain, topology).

Like squeue, ``-h`` means ``--noheader`` here, so these commands take only ``--help`` for help. Exit
status: 0 success, 1 error (message on stderr naming what is wrong and what to do), 2 bad usage (click).
"""

from __future__ import annotations

import functools
import json
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from themis_slurm.cli.client import Client, CliError, load_settings
from themis_slurm.cli.output import TableOptions

F = TypeVar("F", bound=Callable[..., Any])
NO_H_HELP = {"help_option_names": ["--help"]}


def connection_options(f: F) -> F:
    """--config and --url."""
    f = click.option("--url", metavar="URL", default=None,
                     help="themisd's API, e.g. http://ctl:8787 (default: api.listen of the config file).")(f)
    f = click.option("--config", "-c", "config", type=click.Path(path_type=Path), default=None,
                     help="themis.yaml to read the API address and state_dir from "
                          "[default: /etc/themis/themis.yaml, $THEMISD_CONFIG].")(f)
    return f


def table_options(f: F) -> F:
    """-h/--noheader, -o/--format, -P/--parsable, --json."""
    f = click.option("--json", "as_json", is_flag=True, help="Print the API's JSON document.")(f)
    f = click.option("-P", "--parsable", is_flag=True, help="'|'-separated values, no padding.")(f)
    f = click.option("-o", "--format", "fields", metavar="FIELDS", default=None,
                     help="Comma-separated fields (optionally FIELD:WIDTH); the fields are listed below.")(f)
    f = click.option("-h", "--noheader", is_flag=True, help="Do not print the header line.")(f)
    return f


def make_client(config: Path | None, url: str | None) -> Client:
    return Client(load_settings(config, url))


def table_opts(noheader: bool, parsable: bool, fields: str | None) -> TableOptions:
    return TableOptions(noheader=noheader, parsable=parsable, fields=fields)


def print_json(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, sort_keys=False))


def print_notes(doc: dict[str, Any], client: Client | None = None) -> None:
    """Data age, source and privacy notes on stderr, so stdout stays parsable."""
    meta = doc.get("meta") or {}
    for w in meta.get("warnings") or []:
        click.echo(f"themis: note: {w}", err=True)
    viewer = meta.get("viewer") or {}
    if viewer.get("note"):
        extra = f" ({client.auth_note})" if client and client.auth_note and viewer.get("scope") == "aggregates" else ""
        click.echo(f"themis: note: {viewer['note']}{extra}", err=True)
    age = meta.get("data_age_s")
    if meta.get("source") == "database" and age is not None:
        click.echo(f"themis: note: data from the state database, {age:.0f} s old", err=True)


def fails_cleanly(f: F) -> F:
    """Turns CliError into ``themis: error: ...`` and exit 1 (click handles usage errors: exit 2).

    A file or database error that no check foresaw is one such line as well (the file and the cause), never
    a traceback: users run these commands during outages, when such errors happen.
    """

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except CliError as e:
            click.echo(f"themis: error: {e}", err=True)
            sys.exit(1)
        except (OSError, sqlite3.Error) as e:
            click.echo(f"themis: error: {io_error_text(e)}", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def io_error_text(e: OSError | sqlite3.Error) -> str:
    """``FILE: cause`` for an OSError that names its file, else the error's own words."""
    if isinstance(e, OSError) and e.filename:
        return f"{e.filename}: {e.strerror or e}"
    return str(e) or type(e).__name__
