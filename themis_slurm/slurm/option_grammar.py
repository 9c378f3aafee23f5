"""The one definition of the Themis job options a user gives at submit, and the files generated from it.

A user gives the same four options in two ways: ``sbatch --themis-app=bert --themis-est=6h`` (the SPANK
plugin in themis_slurm/site/spank/) or ``sbatch --comment=themis:app=bert,est=6h`` (job_submit.lua, for sites
without the plugin). Three programs check them: the plugin at the client (an early, friendly error),
job_submit.lua in slurmctld (the authority: a user can always run a client without the plugin) and the
documentation that tells users what is accepted. They must agree, so the grammar lives here once and
``python -m themis_slurm.slurm.option_grammar --write`` renders it into

* ``themis_slurm/site/spank/themis_grammar.h``  (the plugin's tables and messages),
* the block between ``GENERATED GRAMMAR`` markers in ``themis_slurm/site/slurm/job_submit.lua``,
* the table between ``GENERATED GRAMMAR`` markers in ``docs/user-guide.md``;

``--check`` (run by the unit tests) fails when any of them is stale. The duration syntax is code in both
C and Lua; the shared case table in tests/unit/slurm/option_cases.py runs against both.

The known models are the placement profiles of the core (``core.placement.PROFILES``): a model the server
accepts is one the arbiter can score, by construction. A site's own classes (themis.yaml ``models:``, read by
themisd) are added at run time, not here: job_submit.lua takes their names from its config file
(``extra_models``), the SPANK plugin from its plugstack.conf line (``models=a,b``); both check them against
the name rule below (:data:`MODEL_NAME_EXPECTED`), and ``themis config check`` says when the three lists
disagree (daemon/site_models.py). The user guide's table of model classes is generated from the profiles too.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from themis_slurm.core.placement import LEVEL_NAMES, PROFILES, SENS_CLASSES

#: Models with a built-in placement profile (the core's profiles minus the sensitivity classes).
MODELS: tuple[str, ...] = tuple(name for name in PROFILES if name not in SENS_CLASSES)
#: The rule for a site's own class names (themis.yaml ``models:``, job_submit.lua's ``extra_models``, the
#: plugin's ``models=``): short, lower case, safe inside ``--comment=themis:`` and the AdminComment record.
MODEL_NAME_MAX_LEN = 32
MODEL_NAME_PUNCT = "-_."            # besides lower-case letters and digits; the first is a letter or digit
MODEL_NAME_EXPECTED = (f"a name of 1 to {MODEL_NAME_MAX_LEN} lower-case letters, digits, '-', '_' or '.' "
                       "starting with a letter or digit")
APP_MAX_LEN = 64
APP_PUNCT = "_.-"                   # besides letters and digits; the first character is a letter or digit
EST_MAX_S = 365 * 86400
#: The words ``ckpt`` takes besides an interval: yes (the job saves its state at Themis's warning, SIGUSR1;
#: the default) and no (it never does: a preemption loses its whole run). An interval is a duration.
CKPT_WORDS: tuple[str, ...] = ("yes", "no")
assert set(SENS_CLASSES) <= set(PROFILES), "every sensitivity class is a core placement profile"


def valid_model_name(name: object) -> bool:
    """Whether `name` may name a site's own class (:data:`MODEL_NAME_EXPECTED`); the C and Lua checks agree."""
    return (isinstance(name, str) and 0 < len(name) <= MODEL_NAME_MAX_LEN and name.isascii()
            and (name[0].islower() or name[0].isdigit())
            and all(c.islower() or c.isdigit() or c in MODEL_NAME_PUNCT for c in name))


@dataclass(frozen=True, slots=True)
class Option:
    """One user option: its key in ``--comment=themis:``, its SPANK option and what it accepts."""

    key: str
    arginfo: str          # sbatch --help's one-word argument name
    usage: str            # sbatch --help's text
    expected: str         # "expected ..." in error messages: what is accepted

    @property
    def flag(self) -> str:
        return f"--themis-{self.key}"

    @property
    def env(self) -> str:
        return f"SBATCH_THEMIS_{self.key.upper()}"


OPTIONS: tuple[Option, ...] = (
    Option("app", "name", "Themis app: groups your jobs into one app for fairness (default: the job, "
           "or the array)",
           f"a name of 1 to {APP_MAX_LEN} letters, digits, '_', '.' or '-' starting with a letter or digit"),
    Option("model", "model", "Themis model class: the placement profile of the job's model, e.g. transformer-dp "
           "(not with --themis-sens)", "one of " + ", ".join(MODELS)),
    Option("sens", "class", "Themis placement sensitivity: high, medium, low or none (not with "
           "--themis-model)", "one of " + ", ".join(SENS_CLASSES)),
    Option("est", "duration", "Themis estimate of the run time on the GPUs requested, e.g. 6h, 90m, "
           "1-12:00:00 (default: the time limit)",
           "a duration above 0 and at most 365 days such as 90m, 6h, 1h30m, 2d, 1-12:00:00"),
    Option("ckpt", "when", "Themis: when the job saves its state: yes (at Themis's warning, the default), "
           "no (never: a preemption loses its whole run) or how often, e.g. 30m",
           "yes, no, or how often it saves: a duration above 0 and at most 365 days such as 30m, 2h"),
)
EXCLUSIVE = ("model", "sens")
#: The spank_job_env entry the plugin hands to slurmctld: the options in the --comment grammar.
SPANK_ENV_NAME = "THEMIS_OPTIONS"

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "themis_slurm" / "site"  # the site files, package data (themis site-files writes them out)
HEADER = SITE / "spank" / "themis_grammar.h"
LUA = SITE / "slurm" / "job_submit.lua"
GUIDE = REPO / "docs" / "user-guide.md"
BEGIN, END = "BEGIN GENERATED GRAMMAR", "END GENERATED GRAMMAR"
MODELS_BEGIN, MODELS_END = "BEGIN GENERATED MODELS", "END GENERATED MODELS"  # the user guide's class table
_NOTE = "generated from themis_slurm/slurm/option_grammar.py (python -m themis_slurm.slurm.option_grammar " \
        "--write): do not edit"


def _c_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _lua_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_c_header() -> str:
    lines = [f"/* themis_grammar.h - {_NOTE}. */", "#ifndef THEMIS_GRAMMAR_H", "#define THEMIS_GRAMMAR_H", "",
             f"#define THEMIS_APP_MAX_LEN {APP_MAX_LEN}", f"#define THEMIS_APP_PUNCT {_c_str(APP_PUNCT)}",
             f"#define THEMIS_EST_MAX_S {EST_MAX_S}L", f"#define THEMIS_SPANK_ENV {_c_str(SPANK_ENV_NAME)}",
             f"#define THEMIS_MODEL_NAME_MAX_LEN {MODEL_NAME_MAX_LEN}",
             f"#define THEMIS_MODEL_NAME_PUNCT {_c_str(MODEL_NAME_PUNCT)}",
             f"#define THEMIS_MODEL_NAME_EXPECTED {_c_str(MODEL_NAME_EXPECTED)}", "",
             "struct themis_option {", "    const char *key;      /* --comment key; the option is --themis-<key> */",
             "    const char *arginfo;", "    const char *usage;", "    const char *expected;", "};", "",
             "static const struct themis_option themis_options[] = {"]
    for o in OPTIONS:
        lines.append(f"    {{{_c_str(o.key)}, {_c_str(o.arginfo)},")
        lines.append(f"     {_c_str(o.usage)},")
        lines.append(f"     {_c_str(o.expected)}}},")
    lines += ["};", f"#define THEMIS_N_OPTIONS {len(OPTIONS)}", "",
              "static const char *const themis_models[] = {" + ", ".join(_c_str(m) for m in MODELS) + ", 0};",
              "static const char *const themis_sens[] = {" + ", ".join(_c_str(s) for s in SENS_CLASSES) + ", 0};",
              "static const char *const themis_ckpt_words[] = {" + ", ".join(_c_str(w) for w in CKPT_WORDS)
              + ", 0};",
              f"#define THEMIS_EXCLUSIVE_A {_c_str(EXCLUSIVE[0])}", f"#define THEMIS_EXCLUSIVE_B {_c_str(EXCLUSIVE[1])}",
              "", "#endif", ""]
    return "\n".join(lines)


def render_lua_block() -> str:
    def lua_list(items: tuple[str, ...]) -> str:
        return "{ " + ", ".join(_lua_str(i) for i in items) + " }"
    lines = [f"-- {BEGIN} ({_NOTE})",
             f"local APP_MAX_LEN = {APP_MAX_LEN}",
             "local APP_PATTERN = \"^[A-Za-z0-9][A-Za-z0-9" + "".join("%" + c for c in APP_PUNCT) + "]*$\"",
             f"local MAX_EST_SECONDS = {EST_MAX_S}",
             f"local SPANK_ENV_NAME = {_lua_str(SPANK_ENV_NAME)}",
             f"local MODEL_NAME_MAX_LEN = {MODEL_NAME_MAX_LEN}",
             "local MODEL_NAME_PATTERN = \"^[a-z0-9][a-z0-9" + "".join("%" + c for c in MODEL_NAME_PUNCT) + "]*$\"",
             f"local MODEL_NAME_EXPECTED = {_lua_str(MODEL_NAME_EXPECTED)}",
             "local KNOWN_KEYS = " + lua_list(tuple(o.key for o in OPTIONS)),
             "local KNOWN_MODELS = " + lua_list(MODELS),
             "local KNOWN_SENS = " + lua_list(SENS_CLASSES),
             "local CKPT_WORDS = " + lua_list(CKPT_WORDS),
             "local EXCLUSIVE = " + lua_list(EXCLUSIVE),
             "local EXPECTED = {"]
    for o in OPTIONS:
        lines.append(f"  {o.key} = {_lua_str(o.expected)},")
    lines += ["}", f"-- {END}"]
    return "\n".join(lines)


def render_markdown() -> str:
    lines = [f"<!-- {BEGIN} ({_NOTE}) -->",
             "| option | in `--comment=themis:` | environment (sbatch) | accepted |",
             "|---|---|---|---|"]
    for o in OPTIONS:
        lines.append(f"| `{o.flag}=<{o.arginfo}>` | `{o.key}=` | `{o.env}` | {o.expected} |")
    lines += ["", f"`{OPTIONS[1].flag}` and `{OPTIONS[2].flag}` are mutually exclusive. Keys are "
              "case-insensitive in `--comment`; model, class, ckpt and duration values are case-insensitive; app "
              f"names are kept as written. Your site may add model classes of its own to `{OPTIONS[1].flag}`: a "
              "name it does not know is refused with the list it accepts.", f"<!-- {END} -->"]
    return "\n".join(lines)


def render_models_markdown() -> str:
    """The user guide's table of the built-in classes (what to pick, the factors, where they come from)."""
    lines = [f"<!-- {MODELS_BEGIN} ({_NOTE}) -->",
             "| class | give it as | pick it for | " + " | ".join(LEVEL_NAMES) + " |",
             "|---|---|---|" + "---:|" * len(LEVEL_NAMES)]
    for name, prof in PROFILES.items():
        flag = "--themis-sens" if name in SENS_CLASSES else "--themis-model"
        lines.append(f"| `{name}` | `{flag}={name}` | {prof.about} | "
                     + " | ".join(f"{f:.2f}" for f in prof.factors) + " |")
    lines += ["", "Where the numbers come from:", ""]
    by_source: dict[str, list[str]] = {}
    for name, prof in PROFILES.items():
        by_source.setdefault(prof.source, []).append(name)
    for source, names in by_source.items():
        lines.append(f"* {', '.join(f'`{n}`' for n in names)}: {source}")
    lines.append(f"<!-- {MODELS_END} -->")
    return "\n".join(lines)


def _replace_block(text: str, block: str, path: Path, begin: str = BEGIN, end: str = END) -> str:
    """``text`` with the lines from the `begin` marker to the `end` marker replaced by ``block``."""
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if begin in line]
    ends = [i for i, line in enumerate(lines) if end in line]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise SystemExit(f"{path}: expected one '{begin}' line followed by one '{end}' line")
    return "\n".join(lines[: starts[0]] + block.split("\n") + lines[ends[0] + 1:])


def targets() -> dict[Path, str]:
    """Each generated file with the content it must have."""
    guide = _replace_block(GUIDE.read_text(), render_markdown(), GUIDE)
    return {
        HEADER: render_c_header(),
        LUA: _replace_block(LUA.read_text(), render_lua_block(), LUA),
        GUIDE: _replace_block(guide, render_models_markdown(), GUIDE, MODELS_BEGIN, MODELS_END),
    }


def stale() -> list[Path]:
    """The generated files that differ from what the grammar renders."""
    return [p for p, want in targets().items() if not p.exists() or p.read_text() != want]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m themis_slurm.slurm.option_grammar",
                                     description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the generated files")
    mode.add_argument("--check", action="store_true", help="exit 1 when a generated file is stale")
    args = parser.parse_args(argv)
    if args.check:
        bad = stale()
        for p in bad:
            print(f"{p.relative_to(REPO)} is stale: run python -m themis_slurm.slurm.option_grammar --write",
                  file=sys.stderr)
        return 1 if bad else 0
    for p, want in targets().items():
        if not p.exists() or p.read_text() != want:
            p.write_text(want)
            print(f"wrote {p.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
