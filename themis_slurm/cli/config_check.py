"""``themis config check [FILE]``: validate a themis.yaml with themisd's own validator (same messages)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from themis_slurm.daemon import config as config_mod


@click.group("config")
def config() -> None:
    """themisd's configuration file."""


@config.command("check")
@click.argument("file", type=click.Path(path_type=Path), required=False)
def check(file: Path | None) -> None:
    """Validate FILE (default $THEMISD_CONFIG or /etc/themis/themis.yaml): exit 0, or 1 with the problem."""
    path = file or Path(os.environ.get("THEMISD_CONFIG", str(config_mod.DEFAULT_PATH)))
    try:
        cfg = config_mod.load(path)
    except config_mod.ConfigError as e:
        click.echo(f"themis config check: {e}", err=True)
        sys.exit(1)
    click.echo(f"{path}: OK (mode {cfg.mode}, poll {cfg.poll_interval_s:g} s, lease "
               f"{cfg.scheduler.lease_minutes:g} min, partitions {','.join(cfg.slurm.partitions)}, "
               f"state {cfg.db_path}, metrics {cfg.metrics.listen or 'off'})")
