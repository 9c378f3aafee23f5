"""``themis config check [FILE]``: validate a themis.yaml with themisd's own validator (same messages)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from themis_slurm.daemon import config as config_mod
from themis_slurm.daemon.site_models import disagreements


@click.group("config")
def config() -> None:
    """themisd's configuration file."""


@config.command("check")
@click.argument("file", type=click.Path(path_type=Path), required=False)
def check(file: Path | None) -> None:
    """Validate FILE (default $THEMISD_CONFIG or /etc/themis/themis.yaml): exit 0, or 1 with the problem.
    Warns (exit 0) when its model classes and the lists of job_submit.lua and the SPANK plugin differ."""
    path = file or Path(os.environ.get("THEMISD_CONFIG", str(config_mod.DEFAULT_PATH)))
    try:
        cfg = config_mod.load(path)
    except config_mod.ConfigError as e:
        click.echo(f"themis config check: {e}", err=True)
        sys.exit(1)
    models = f", model classes {','.join(sorted(cfg.models))}" if cfg.models else ""
    click.echo(f"{path}: OK (mode {cfg.mode}, poll {cfg.poll_interval_s:g} s, lease "
               f"{cfg.scheduler.lease_minutes:g} min, partitions {','.join(cfg.slurm.partitions)}, "
               f"state {cfg.db_path}, metrics {cfg.metrics.listen or 'off'}{models})")
    # what themisd also warns of at start: its classes against job_submit.lua's and the plugin's lists
    for problem in disagreements(cfg):
        click.echo(f"themis config check: warning: model classes: {problem}", err=True)
