"""Entry point of the `themis` command: a click group; each subcommand lives in its own module."""

from __future__ import annotations

import click

from themis_slurm import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="themis")
def cli() -> None:
    """Themis finish-time-fair GPU scheduling for Slurm: query, simulate, and tools."""


def main() -> None:
    """Console-script entry point."""
    cli()
