"""Entry point of `themisd`, the daemon that schedules a Slurm cluster with Themis.

    themisd [run] [--config FILE] [--fresh-state]
                                           run the daemon (systemd: Type=notify); --fresh-state starts on
                                           empty state when the database is damaged or missing (moved aside)
    themisd --check-config [FILE]          validate a config file: exit 0, or 1 with the message
    themisd handback [--config FILE]       hand the cluster back to Slurm (stop themisd first)

Thin by design: parse arguments, build the backend, call daemon.service / daemon.handback.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from themis_slurm import __version__
from themis_slurm.daemon import config as config_mod
from themis_slurm.daemon.config import DEFAULT_PATH, Config, ConfigError
from themis_slurm.slurm.model import SlurmBackend
from themis_slurm.state.errors import FRESH_FLAG, StateError

log = logging.getLogger("themisd")


def make_backend(cfg: Config) -> SlurmBackend:
    """The Slurm backend `slurm.backend` asks for (auto: pyslurm when it matches the running Slurm, else
    the command-line tools); the choice and its reason are logged. A forced pyslurm that cannot be used
    exits with one line naming why."""
    from themis_slurm.slurm import backends  # imported late: --check-config needs no Slurm
    from themis_slurm.slurm.model import AdapterConfig

    adapter = AdapterConfig(managed_partitions=cfg.slurm.partitions, slurm_conf=cfg.slurm.slurm_conf or None,
                            timeout_s=cfg.slurm.command_timeout_s,
                            action_timeout_s=cfg.slurm.action_timeout_s)
    try:
        backend, why = backends.make_backend(cfg.slurm.backend, adapter)
    except backends.BackendUnavailable as e:
        click.echo(f"themisd: slurm.backend: {e}", err=True)
        sys.exit(1)
    log.info("slurm backend %s", why)
    return backend


def _load_or_exit(path: Path) -> Config:
    try:
        return config_mod.load(path)
    except ConfigError as e:
        click.echo(f"themisd: {e}", err=True)
        sys.exit(1)


def _check(path: Path) -> None:
    cfg = _load_or_exit(path)
    ten = cfg.tenancy
    levels = ten.levels if isinstance(ten.levels, str) else " -> ".join(ten.levels)
    click.echo(f"{path}: OK (mode {cfg.mode}, lease {cfg.scheduler.lease_minutes:g} min, "
               f"partitions {','.join(cfg.slurm.partitions)}, tenancy {levels} with {ten.shares} shares, "
               f"state {cfg.db_path})")
    sys.exit(0)


config_option = click.option("--config", "-c", "config_path", type=click.Path(path_type=Path),
                             default=DEFAULT_PATH, show_default=True, help="themis.yaml to use")


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="themisd")
@config_option
@click.option("--check-config", "check_path", is_flag=False, flag_value="", default=None, metavar="[FILE]",
              help="Validate FILE (default: --config) and exit 0 (valid) or 1 (with the message).")
@click.option("--handback", "handback_flag", is_flag=True, help="Same as `themisd handback`.")
@click.pass_context
def cli(ctx: click.Context, config_path: Path, check_path: str | None, handback_flag: bool) -> None:
    """Run the Themis arbiter against the local Slurm cluster."""
    if check_path is not None:
        _check(Path(check_path) if check_path else config_path)
    if handback_flag:
        ctx.invoke(handback_cmd, config_path=config_path)
        return
    if ctx.invoked_subcommand is None:
        ctx.invoke(run_cmd, config_path=config_path, fresh_state=False)


@cli.command("run")
@config_option
@click.option(FRESH_FLAG, "fresh_state", is_flag=True,
              help="If the state database is damaged, or missing/empty although a previous run left state, "
                   "move it aside (<name>.damaged-<timestamp>) and start with empty state: the apps' history "
                   "and the audit log are lost. Ignored (with a warning) when the database is intact.")
@click.option("--standby", is_flag=True,
              help="When another themisd holds the state directory's lock, wait and take over when it is gone "
                   "(a backup controller's themisd, on a state_dir both hosts share) instead of exiting.")
def run_cmd(config_path: Path, fresh_state: bool, standby: bool = False) -> None:
    """Run the daemon in the foreground (what systemd starts)."""
    from themis_slurm.daemon.service import AlreadyRunning, Service, install_signals, setup_logging

    cfg = _load_or_exit(config_path)
    setup_logging(cfg.log_level)
    service = Service(cfg, config_path, make_backend(cfg), fresh_state=fresh_state, standby=standby)
    install_signals(service)
    try:
        sys.exit(service.run())
    except (AlreadyRunning, StateError) as e:
        click.echo(f"themisd: {e}", err=True)
        sys.exit(1)


@cli.command("check-config")
@click.argument("file", type=click.Path(path_type=Path), default=DEFAULT_PATH)
def check_config_cmd(file: Path) -> None:
    """Validate a config file (exit 0 or 1 with the message)."""
    _check(file)


@cli.command("handback")
@config_option
def handback_cmd(config_path: Path) -> None:
    """Hand the cluster back to Slurm: job_submit mode off, release every held managed job unpinned."""
    from themis_slurm.daemon.handback import handback
    from themis_slurm.daemon.service import AlreadyRunning, setup_logging, state_lock
    from themis_slurm.state.opening import open_store

    cfg = _load_or_exit(config_path)
    setup_logging(cfg.log_level)
    try:
        with state_lock(cfg.state_dir):
            try:
                store = open_store(cfg.db_path)
            except StateError as e:  # handing back must work even then: Slurm needs no Themis state
                click.echo(f"themisd handback: warning: {e}; handing back without it (job intents not "
                           "cleared)", err=True)
                store = None
            try:
                rep = handback(make_backend(cfg), cfg, store)
            finally:
                if store is not None:
                    store.close()
    except (AlreadyRunning, StateError) as e:  # StateError: the state directory or its lock cannot be made
        click.echo(f"themisd handback: {e}", err=True)
        sys.exit(1)
    for note in rep.notes:
        click.echo(note)
    click.echo(f"released {len(rep.released)} job(s); {len(rep.errors)} error(s)")
    for err in rep.errors:
        click.echo(f"error: {err}", err=True)
    sys.exit(1 if rep.errors else 0)


@cli.command("failopen")
@config_option
def failopen_cmd(config_path: Path) -> None:
    """Fail-open watchdog (themisd-failopen.timer): if themisd's heartbeat is older than failopen.after_s,
    release every held managed job to Slurm; else do nothing. Safe to run at any time."""
    import time

    from themis_slurm.daemon.failopen import fail_open
    from themis_slurm.daemon.service import setup_logging

    cfg = _load_or_exit(config_path)
    setup_logging(cfg.log_level)
    try:
        rep = fail_open(make_backend(cfg), cfg, time.time())
    except Exception as e:  # Slurm not answering: nothing could be released; the timer tries again
        click.echo(f"themisd failopen: {e}", err=True)
        sys.exit(1)
    (log.warning if rep.acting else log.info)("%s", rep.summary())
    for err in rep.errors:
        click.echo(f"error: {err}", err=True)
    sys.exit(1 if rep.errors else 0)


def main() -> None:
    """Console-script entry point."""
    cli()


if __name__ == "__main__":
    main()
