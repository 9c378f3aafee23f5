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
    from themis_slurm.cli.gres_conf import gres_conf

    cli.add_command(gres_conf)


_register()


def main() -> None:
    """Console-script entry point."""
    cli()
