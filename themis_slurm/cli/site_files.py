"""``themis site-files --dest DIR [--force] [--list]``: write out the files a site installs besides the package.

They are package data (themis_slurm/site/, the one copy in the repository), so a site that installs the
wheel from a package index has all of them: themisd's annotated config and environment file, the systemd
units, job_submit.lua and its config, the SPANK plugin's sources with its Makefile and build script, the
slurm.conf/gres.conf/topology.conf examples and the Grafana dashboard. The Debian package writes them with
this command into /usr/share/themis-slurm at build time (debian/rules) and installs them from there.

A file already at the destination is never replaced without asking: identical, it is left alone
("unchanged"); different (an admin's edit, or an older version), it is kept and named ("kept"), and
``--force`` replaces it, saving the admin's copy as FILE.themis-old first. The exit status is 0 either way:
re-running the command after editing a file is normal; the summary line says what was kept.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import click

#: The site files in the installed package (package data; themis_slurm/site/ in a checkout).
SITE = Path(__file__).resolve().parents[1] / "site"

#: Where each file (or folder, ending in "/") goes on a site and what it is; the listing of ``--list`` and
#: docs/admin-guide.md section 1. A test checks that it names every shipped file and nothing else.
WHERE: dict[str, tuple[str, str]] = {
    "themis.yaml": ("/etc/themis/themis.yaml", "themisd's config, every key annotated"),
    "themisd.env": ("/etc/default/themisd", "the unit's environment (THEMISD_OPTS)"),
    "systemd/": ("/etc/systemd/system/ (the .deb: /lib/systemd/system/)", "themisd and its fail-open timer"),
    "slurm/job_submit.lua": ("next to slurm.conf", "holds managed jobs at submit, checks their options"),
    "slurm/themis_job_submit.conf.lua": ("next to slurm.conf", "job_submit.lua's config (mode, partitions)"),
    "slurm/slurm.conf.snippet": ("merge into slurm.conf", "the slurm.conf settings Themis needs"),
    "slurm/gres.conf.example": ("example", "gres.conf with Cores= and Links= (NVLink islands)"),
    "slurm/topology.conf.example": ("example", "racks for topology/tree"),
    "spank/": ("build: spank/themis-spank-build", "the sbatch --themis-* plugin (C) and its Makefile"),
    "grafana-dashboard.json": ("import into Grafana", "dashboard over themisd's Prometheus metrics"),
}

EXECUTABLE = frozenset({"spank/themis-spank-build"})


@dataclass(frozen=True)
class Outcome:
    """What happened to one file: wrote, unchanged, kept (differs, not forced) or replaced (forced)."""

    path: Path
    action: str


def shipped(site: Path = SITE) -> list[str]:
    """Every site file, relative to `site`, sorted; build output and caches are not site files."""
    if not site.is_dir():
        raise click.ClickException(f"the site files are missing from this installation ({site})")
    return sorted(
        p.relative_to(site).as_posix()
        for p in site.rglob("*")
        if p.is_file() and not {"build", "__pycache__"} & set(p.relative_to(site).parts)
    )


def write_one(rel: str, dest: Path, force: bool, site: Path = SITE) -> Outcome:
    """Writes one site file under `dest` unless a different file is there (see the module docstring)."""
    src, dst = site / rel, dest / rel
    data = src.read_bytes()
    mode = 0o755 if rel in EXECUTABLE else 0o644
    if dst.is_file() or dst.is_symlink():
        if dst.is_file() and dst.read_bytes() == data:
            return Outcome(dst, "unchanged")
        if not force:
            return Outcome(dst, "kept")
        shutil.move(dst, dst.with_name(dst.name + ".themis-old"))
        action = "replaced"
    elif dst.exists():
        raise click.ClickException(f"{dst} exists and is not a file: move it away first")
    else:
        action = "wrote"
    dst.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    tmp = dst.with_name(dst.name + ".themis-new")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    tmp.replace(dst)
    return Outcome(dst, action)


@click.command("site-files")
@click.option(
    "--dest",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    metavar="DIR",
    help="Folder to write the files into (created if missing).",
)
@click.option(
    "--force", is_flag=True, help="Replace files that differ (the old one is kept as FILE.themis-old)."
)
@click.option("--list", "list_only", is_flag=True, help="List the files and where each goes; write nothing.")
def site_files(dest: Path | None, force: bool, list_only: bool) -> None:
    """Write the files a site installs (config, units, job_submit.lua, SPANK plugin sources, dashboard).

    An edited file at the destination is kept (and named) unless --force; identical files are left alone.
    """
    names = shipped()
    if list_only:
        for rel in names:
            key = rel if rel in WHERE else rel.split("/")[0] + "/"
            where, what = WHERE.get(key, ("", ""))
            click.echo(f"{rel:<34} {where:<36} {what}")
        return
    if dest is None:
        raise click.UsageError("give --dest DIR (or --list)")
    outcomes = [write_one(rel, dest, force) for rel in names]
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.action] = counts.get(o.action, 0) + 1
        if o.action == "kept":
            click.echo(
                f"kept {o.path}: it differs from this version's (yours is left as it is; --force replaces "
                f"it, saving yours as {o.path.name}.themis-old)",
                err=True,
            )
        elif o.action != "unchanged":
            click.echo(f"{o.action} {o.path}")
    summary = ", ".join(f"{n} {a}" for a, n in sorted(counts.items()))
    click.echo(f"{dest}: {summary}", err=True)
