"""Entry point of the `themis` command: a click group; each subcommand lives in its own module.

The subcommands are imported only when one is run (or its help is asked for): `themis status` goes in
`watch` loops and must not pay for the simulator's plotting stack (matplotlib) or anything else it does
not use. `themis --help` lists them from the short help kept here, so it imports none of them; a test
checks that each short help is its command's own.
"""

from __future__ import annotations

import importlib

import click

from themis_slurm import __version__

#: name -> (module, attribute, short help); the order of `themis --help`.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "status": ("themis_slurm.cli.status", "status", "GPUs total/free/leased/unmanaged by rack,..."),
    "apps": ("themis_slurm.cli.query", "apps", "Apps ranked by finish-time fairness rho,..."),
    "jobs": ("themis_slurm.cli.query", "jobs", "Managed jobs, squeue-like, plus app,..."),
    "explain": ("themis_slurm.cli.explain", "explain", "Why job JOBID runs or waits: its app's rho..."),
    "topology": ("themis_slurm.cli.query", "topology", "Racks, nodes, NVLink islands and the GPUs..."),
    "progress": ("themis_slurm.cli.progress", "progress", "Report that this job has done FRACTION..."),
    "config": ("themis_slurm.cli.config_check", "config", "themisd's configuration file."),
    "gres-conf": ("themis_slurm.cli.gres_conf", "gres_conf", "Print gres.conf GPU lines for this node..."),
    "site-files": ("themis_slurm.cli.site_files", "site_files", "Write the files a site installs (config,..."),
    "simulate": ("themis_slurm.cli.simulate", "simulate", "Simulate scheduling policies and report..."),
    "serve-api": ("themis_slurm.cli.serve_api", "serve_api", "Serve themisd's status API (read-only)..."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported when first used (see the module docstring)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = COMMANDS.get(cmd_name)
        if found is None:
            return None
        module, attr, _ = found
        command = getattr(importlib.import_module(module), attr)
        return command if isinstance(command, click.Command) else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, short) for name, (_, _, short) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="themis")
def cli() -> None:
    """Themis finish-time-fair GPU scheduling for Slurm: query, simulate, and tools."""


def main() -> None:
    """Console-script entry point."""
    cli()


if __name__ == "__main__":
    main()
