"""Entry point of `themisd`, the daemon that schedules a Slurm cluster with Themis."""

from __future__ import annotations

import click

from themis_slurm import __version__


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="themisd")
def cli() -> None:
    """Run the Themis arbiter against the local Slurm cluster."""


def main() -> None:
    """Console-script entry point."""
    cli()
