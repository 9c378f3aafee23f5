"""``themis serve-api``: run the read-only status API on its own, next to a themisd that does not serve it.

themisd starts the API itself (see themis_slurm.api.start_api_server); this command exists for a daemon
built without it, to serve the API as a separate, less privileged account (it only needs to read the state
database and run squeue/sinfo), and for the demo. It runs in the foreground until SIGTERM/Ctrl-C.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from pathlib import Path

import click

from themis_slurm.api import start_api_server
from themis_slurm.cli.client import CliError, load_settings


@click.command("serve-api")
@click.option("--config", "-c", "config", type=click.Path(path_type=Path), default=None,
              help="themis.yaml (state_dir, slurm.slurm_conf, slurm.partitions, api.listen).")
@click.option("--listen", default=None, metavar="HOST:PORT", help="Address to serve on [default: api.listen].")
@click.option("--operator", "operators", multiple=True, metavar="USER",
              help="A user who sees every job and app (root and the SlurmUser always do). Repeatable.")
def serve_api(config: Path | None, listen: str | None, operators: tuple[str, ...]) -> None:
    """Serve themisd's status API (read-only) from its state database."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        s = load_settings(config, None)
    except CliError as e:
        click.echo(f"themis serve-api: error: {e}", err=True)
        sys.exit(1)
    address = listen or s.url.removeprefix("http://")
    try:
        server = start_api_server(s.db_path, address, s.slurm_conf, partitions=s.partitions, operators=operators,
                                  round_terms=s.round_terms)
    except (OSError, ValueError) as e:
        click.echo(f"themis serve-api: error: cannot listen on {address}: {e}", err=True)
        sys.exit(1)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    click.echo(f"serving {server.url}/v1/cluster from {s.db_path} (read-only); Ctrl-C to stop", err=True)
    with contextlib.suppress(KeyboardInterrupt):
        done.wait()
    server.stop()
