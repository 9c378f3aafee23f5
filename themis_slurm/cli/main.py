"""Entry point of the `themis` command: a click group; each subcommand lives in its own module."""

from __future__ import annotations

import click

from themis_slurm import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="themis")
def cli() -> None:
    """Themis finish-time-fair GPU scheduling for Slurm: query, simulate, and tools."""


def _register() -> None:
    """Subcommands live in their own modules; importing them here keeps `themis --help` complete."""
    from themis_slurm.cli.config_check import config
    from themis_slurm.cli.explain import explain
    from themis_slurm.cli.gres_conf import gres_conf
    from themis_slurm.cli.progress import progress
    from themis_slurm.cli.query import apps, jobs, topology
    from themis_slurm.cli.serve_api import serve_api
    from themis_slurm.cli.simulate import simulate
    from themis_slurm.cli.status import status

    for command in (status, apps, jobs, explain, topology, progress, config, gres_conf, simulate, serve_api):
        cli.add_command(command)


_register()


def main() -> None:
    """Console-script entry point."""
    cli()


if __name__ == "__main__":
    main()
