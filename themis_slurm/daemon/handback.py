"""Handing the cluster back to Slurm's own scheduler (maintenance, removal, or a failed trial).

Three steps, in this order so that no job is left behind:

1. stop holding new jobs: set ``mode = "off"`` in job_submit.lua's config file (slurm.job_submit_conf),
   then touch job_submit.lua so that slurmctld reloads at once (otherwise within its reload_seconds);
2. release every pending managed job with its pin cleared (``release_unpinned``): Slurm schedules them;
3. forget Themis's intents (the jobs table); apps' history and the audit log stay.

Running jobs keep running. themisd itself must be stopped first (it would hold the jobs again): the
command refuses to run while the daemon holds the state directory's lock. If the Lua config cannot be
written (read-only path, not configured), the admin is told to set the mode by hand; releasing still
happens. The mode is rewritten in place (no temporary file), so themisd needs write access to that one
file only (systemd ReadWritePaths).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from themis_slurm.daemon.config import Config
from themis_slurm.slurm.model import SlurmBackend
from themis_slurm.state.store import Store

log = logging.getLogger("themisd")

_MODE_LINE = re.compile(r'^(?P<head>\s*mode\s*=\s*)(?P<q>["\'])(?P<mode>[A-Za-z]*)(?P=q)', re.MULTILINE)


def read_job_submit_mode(path: str | Path) -> str | None:
    """The `mode` job_submit.lua runs in, from its config file; None when unreadable or not set there."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    m = _MODE_LINE.search(_strip_comments(text))
    return m.group("mode") if m else None


def _strip_comments(text: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def write_job_submit_mode(path: str | Path, mode: str) -> str:
    """Sets `mode = "<mode>"` in the Lua config (in place) and touches job_submit.lua; returns the old mode.

    Raises OSError/ValueError with a message for the admin when the file cannot be changed.
    """
    if mode not in ("enforce", "observe", "off"):
        raise ValueError(f"job_submit mode must be enforce, observe or off, not {mode!r}")
    p = Path(path)
    text = p.read_text()
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        code = line.split("--", 1)[0]
        m = _MODE_LINE.match(code)
        if m:
            old = m.group("mode")
            lines[i] = f'{m.group("head")}"{mode}"' + line[m.end():]
            with open(p, "r+") as f:  # in place: needs write access to the file, not to /etc/slurm
                f.write("".join(lines))
                f.truncate()
                f.flush()
                os.fsync(f.fileno())
            script = p.parent / "job_submit.lua"
            try:
                os.utime(script)  # slurmctld reloads the script (and so its config) when the mtime changes
            except OSError as e:
                log.warning("could not touch %s (%s): slurmctld applies mode %s within reload_seconds",
                            script, e.strerror, mode)
            return old
    raise ValueError(f"{p}: no `mode = \"...\"` line to change: add  mode = \"{mode}\",  to the returned table")


@dataclass
class HandbackReport:
    released: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    mode_before: str | None = None
    notes: list[str] = field(default_factory=list)


def handback(backend: SlurmBackend, cfg: Config, store: Store | None = None) -> HandbackReport:
    """Stops holding, releases every pending managed job unpinned, forgets intents (module docstring)."""
    rep = HandbackReport()
    conf = cfg.slurm.job_submit_conf
    if conf:
        try:
            rep.mode_before = write_job_submit_mode(conf, "off")
            rep.notes.append(f"{conf}: mode {rep.mode_before} -> off (new jobs are no longer held)")
        except (OSError, ValueError) as e:
            rep.notes.append(f"could not set mode off in {conf}: {e}; set  mode = \"off\"  there by hand")
    else:
        rep.notes.append("slurm.job_submit_conf is not set: set  mode = \"off\"  in themis_job_submit.conf.lua "
                         "by hand, or new jobs will still be held")
    snap = backend.snapshot()
    for mj in snap.managed:
        if mj.state != "PENDING":
            continue
        try:
            backend.release_unpinned(mj)
            rep.released.append(mj.job_id)
            log.info("handback app=%s job=%s: released unpinned", mj.app_key, mj.job_id)
        except Exception as e:
            rep.errors.append(f"job {mj.job_id}: {e}")
            log.error("handback app=%s job=%s: release failed: %s", mj.app_key, mj.job_id, e)
    if store is not None:
        with store.tx():
            for jid, row in store.jobs().items():
                store.delete_job(jid)
                store.add_event(snap.time, "handback", "handed back to Slurm", jid, row.app_key)
    rep.notes.append("jobs submitted before slurmctld reloads job_submit.lua may still be held: run handback "
                     "again after reload_seconds")
    return rep
