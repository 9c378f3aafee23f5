"""Do themis.yaml's model classes, job_submit.lua's and the SPANK plugin's lists agree? (warnings, never errors)

A site's own class (themis.yaml ``models:``) is named in three places: themisd places jobs with its factors;
job_submit.lua accepts the name at submit only when its config file lists it (``extra_models``); the SPANK
plugin accepts ``--themis-model=<name>`` at the client only when its plugstack.conf line lists it
(``models=a,b``). Each is read where it runs (themisd cannot change slurmctld's files), so they can drift:

* a class themis.yaml defines that job_submit.lua does not list is refused at submit (users cannot use it);
* a name job_submit.lua accepts that themis.yaml does not define is accepted, then placed as the default
  class (state/jobs.unknown_profile_note says so in the log and in ``themis explain``);
* the plugin's list differs: ``--themis-model`` is refused at the client, or accepted there and refused by
  job_submit.lua.

Only the names themis.yaml adds count: overriding a built-in class's factors needs no change elsewhere.
themisd warns at start and at every reload (daemon/service.py); ``themis config check`` prints the same.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from themis_slurm.core.placement import PROFILES
from themis_slurm.daemon.config import Config

_EXTRA = re.compile(r"(?<![\w.])extra_models\s*=\s*\{(?P<body>[^}]*)\}")
_STRING = re.compile(r"\"([^\"\n]*)\"|'([^'\n]*)'")
_PLUGSTACK_KEY = re.compile(r"(?im)^\s*plugstackconfig\s*=\s*(\S+)")


def lua_code(text: str) -> str:
    """Lua source without its ``--`` comments (a ``--`` inside a string stays); block comments are not used
    in the config file."""
    out: list[str] = []
    quote = ""
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == quote or c == "\n":
                quote = ""
        elif c in "\"'":
            quote = c
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        out.append(c)
        i += 1
    return "".join(out)


def read_extra_models(path: str | Path) -> tuple[str, ...] | None:
    """The names of ``extra_models`` in job_submit.lua's config file; () when the key is not set there, None
    when the file cannot be read."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    m = _EXTRA.search(lua_code(text))
    if m is None:
        return ()
    return tuple(a or b for a, b in _STRING.findall(m.group("body")))


def plugstack_path(slurm_conf: str) -> Path:
    """plugstack.conf as Slurm finds it: slurm.conf's PlugStackConfig, else plugstack.conf beside slurm.conf."""
    conf = Path(slurm_conf or os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf")
    try:
        m = _PLUGSTACK_KEY.search(conf.read_text())
    except OSError:
        m = None
    return Path(m.group(1)) if m else conf.parent / "plugstack.conf"


def read_plugin_models(plugstack: Path) -> tuple[str, ...] | None:
    """The names of the ``models=`` argument on plugstack.conf's spank_themis line; () when the line has none,
    None when the file cannot be read or has no spank_themis line (the plugin is not installed there)."""
    try:
        lines = plugstack.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        words = line.split("#", 1)[0].split()
        if len(words) >= 2 and words[1].endswith("spank_themis.so"):
            for arg in words[2:]:
                if arg.startswith("models="):
                    return tuple(n for n in arg[len("models=") :].split(",") if n)
            return ()
    return None


def _names(names: Sequence[str]) -> str:
    return ", ".join(names)


def disagreements(cfg: Config) -> list[str]:
    """What is wrong between themis.yaml's classes and the lists of job_submit.lua and the plugin, one message
    each, naming the file and what to do; [] when they agree (or a file is not there to read)."""
    site = set(cfg.new_models)
    known = site | set(PROFILES)  # names themisd places with their own factors
    out: list[str] = []
    conf = cfg.slurm.job_submit_conf
    lua = read_extra_models(conf) if conf else None
    if lua is None and site and conf:
        out.append(
            f"cannot read {conf}: make sure its extra_models lists {_names(sorted(site))} "
            "(themis.yaml's own model classes)"
        )
    if lua is not None:
        missing = sorted(site - set(lua))
        if missing:
            out.append(
                f"themis.yaml models {_names(missing)} are not in extra_models of {conf}: job_submit.lua "
                "refuses jobs that name them; add them there"
            )
        unknown = sorted(set(lua) - known)
        if unknown:
            out.append(
                f"extra_models of {conf} lists {_names(unknown)}, which themis.yaml's models section does "
                "not define: jobs naming them are accepted and placed as the default class low; define "
                "them in themis.yaml or remove them there"
            )
    stack = plugstack_path(cfg.slurm.slurm_conf)
    plugin = read_plugin_models(stack)
    if plugin is not None:
        missing = sorted(site - set(plugin))
        if missing:
            out.append(
                f"the SPANK plugin's line in {stack} does not list {_names(missing)} (models=): sbatch "
                f"refuses --themis-model={missing[0]} at the client; add models="
                f"{','.join(sorted(site))} after spank_themis.so"
            )
        unknown = sorted(set(plugin) - known)
        if unknown:
            out.append(
                f"the SPANK plugin's line in {stack} lists {_names(unknown)} (models=), which themis.yaml's "
                "models section does not define: remove them there or define them in themis.yaml"
            )
    return out
