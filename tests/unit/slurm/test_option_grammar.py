"""The Themis job options: one grammar (themis_slurm.slurm.option_grammar), three checkers that agree.

* the generated files (the plugin's header, job_submit.lua's tables, the user guide's table) are fresh;
* the shared case table (option_cases.py) gives the same verdicts from the SPANK plugin's checks (built
  here into check_options), from job_submit.lua's real hook through --comment=themis: and through the
  plugin's spank_job_env entry, on Lua 5.1 (Debian's 22.05) and 5.3 (the 25.11 build);
* the plugin builds with -Wall -Wextra and no warning against each Slurm's headers found here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from themis_slurm.slurm import option_grammar

from .option_cases import CASES, COMMENT_UNSAFE

REPO = Path(__file__).resolve().parents[3]
SPANK = REPO / "themis_slurm" / "site" / "spank"
LUA_SCRIPT = REPO / "themis_slurm" / "site" / "slurm" / "job_submit.lua"
HARNESS = Path(__file__).with_name("lua_harness.lua")
HEADERS = {"22.05": Path("/usr/include"), "25.11": Path("/opt/slurm-25.11/include")}


def test_generated_files_are_fresh() -> None:
    stale = option_grammar.stale()
    assert stale == [], f"stale: {stale}; run python -m themis_slurm.slurm.option_grammar --write"


def test_models_are_core_profiles() -> None:
    from themis_slurm.core.placement import PROFILES
    assert set(option_grammar.MODELS) | set(option_grammar.SENS_CLASSES) == set(PROFILES)


@pytest.fixture(scope="module")
def check_tool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("cc") is None or shutil.which("make") is None:
        pytest.skip("no C compiler or make (apt-get install gcc make)")
    build = tmp_path_factory.mktemp("spank")
    res = subprocess.run(["make", "-s", "-C", str(SPANK), f"BUILD={build}", f"{build}/check_options"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "warning" not in res.stderr, res.stderr
    return build / "check_options"


def _record_value(record: str, key: str) -> str:
    fields = dict(part.split("=", 1) for part in record.split(";")[1:])
    return fields[key]


@pytest.mark.parametrize(("key", "value", "verdict"), CASES, ids=[f"{k}={v!r}" for k, v, _ in CASES])
def test_plugin_check(check_tool: Path, key: str, value: str, verdict: str | int | None) -> None:
    res = subprocess.run([str(check_tool), key, value], capture_output=True, text=True, timeout=10, check=False)
    out = res.stdout.strip()
    if verdict is None:
        assert res.returncode == 1, out
        # the message names the option, the value (shortened past 40 characters) and what is accepted
        assert out.startswith(f"themis: invalid option --themis-{key}=")
        shown = "".join("?" if ord(c) < 0x20 else c for c in value.strip())
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        assert shown in out
        assert "expected " + option_grammar.OPTIONS[[o.key for o in option_grammar.OPTIONS].index(key)].expected in out
    else:
        assert res.returncode == 0, out
        assert out == (f"ok {verdict}" if key == "est" else "ok")


def _run_lua(lua: str, lines: list[str], script: Path = LUA_SCRIPT, env: dict[str, str] | None = None) -> list[str]:
    exe = shutil.which(lua)
    if exe is None:
        pytest.skip(f"{lua} not installed (apt-get install {lua}; tests/run.sh does it)")
    res = subprocess.run([exe, str(HARNESS), str(script)], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, timeout=60, check=False,
                         env=None if env is None else {**os.environ, **env})
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert len(out) == len(lines), res.stdout + res.stderr
    return out


@pytest.mark.parametrize("lua", ["lua5.1", "lua5.3"])
@pytest.mark.parametrize("source", ["comment", "spank"])
def test_job_submit_lua_agrees(lua: str, source: str) -> None:
    cases = [c for c in CASES if source == "spank" or not any(ch in c[1] for ch in COMMENT_UNSAFE)]
    lines = [f"themis:{k}={v}" if source == "comment" else f"\1\tTHEMIS_OPTIONS={k}={v}" for k, v, _ in cases]
    wrong = []
    for (key, value, verdict), got in zip(cases, _run_lua(lua, lines), strict=True):
        if verdict is None:
            if not got.startswith("err themis: ") or "expected" not in got and "has no value" not in got:
                wrong.append((key, value, got))
            name = f"--themis-{key}" if source == "spank" else key
            if got.startswith("err themis: invalid option") and f"{name}=" not in got:
                wrong.append((key, value, got))
        elif not got.startswith("ok ") or _record_value(got[3:], key) != str(verdict):
            wrong.append((key, value, got))
    assert wrong == []


@pytest.mark.parametrize("lua", ["lua5.1", "lua5.3"])
def test_job_submit_lua_rules(lua: str) -> None:
    """Both ways at once is refused; the plugin's entry may come prefixed SPANK_; sent twice is refused."""
    lines = [
        "themis:app=a\t" "THEMIS_OPTIONS=app=b",                  # both: refused
        "themis:\tTHEMIS_OPTIONS=app=b,est=1h",                    # an empty themis: comment does not count
        "my own notes\tTHEMIS_OPTIONS=app=b",                      # free text does not count
        "\1\tSPANK_THEMIS_OPTIONS=app=c,sens=low",
        "\1\tTHEMIS_OPTIONS=app=d\tTHEMIS_OPTIONS=app=e",        # twice: refused
        "\1\tTHEMIS_OPTIONS=model=vgg16,sens=high",              # exclusive
        "\1\tTHEMIS_OPTIONS=app=x,colour=red",                    # unknown key (a client without the plugin)
        "\1\tTHEMIS_OPTIONS=",                                    # nothing given: defaults
        "\1\tOTHER_PLUGIN=1",                                     # not ours: no options
    ]
    out = _run_lua(lua, lines)
    assert out[0].startswith("err ") and "both as --themis-* and in --comment" in out[0]
    assert out[1] == "ok themis:v1;app=b;model=;sens=;est=3600"
    assert out[2] == "ok themis:v1;app=b;model=;sens=;est="
    assert out[3] == "ok themis:v1;app=c;model=;sens=low;est="
    assert out[4].startswith("err ") and "sent twice" in out[4]
    assert out[5].startswith("err ") and "--themis-model and --themis-sens are mutually exclusive" in out[5]
    assert out[6].startswith("err ") and "unknown option 'colour'" in out[6]
    assert out[7] == out[8] == "ok themis:v1;app=;model=;sens=;est="


@pytest.mark.parametrize("lua", ["lua5.1", "lua5.3"])
@pytest.mark.parametrize(("beat_age", "after", "held"), [
    (5, 600, True),       # themisd alive
    (700, 600, False),    # gone for longer than the limit: fail-open, not held
    (None, 600, False),   # no heartbeat at all
    (None, 0, True),      # fail-open off: held whatever the heartbeat
    (10_000, 0, True),
])
def test_job_submit_lua_fails_open_when_themisd_is_gone(lua: str, tmp_path: Path, beat_age: float | None,
                                                        after: int, held: bool) -> None:
    # issue 38 item 6: a dead themisd must not stall the managed partition forever
    shutil.copy(LUA_SCRIPT, tmp_path / "job_submit.lua")
    beat = tmp_path / "heartbeat"
    conf = (LUA_SCRIPT.parent / "themis_job_submit.conf.lua").read_text()
    conf = re.sub(r'heartbeat_file = "[^"]*"', f'heartbeat_file = "{beat}"', conf)
    conf = re.sub(r"fail_open_after_s = \d+", f"fail_open_after_s = {after}", conf)
    (tmp_path / "themis_job_submit.conf.lua").write_text(conf)
    if beat_age is not None:
        beat.write_text(f"{time.time() - beat_age:.3f} 4242 ctld1\n")
    out = _run_lua(lua, ["\1"], script=tmp_path / "job_submit.lua", env={"HARNESS_SHOW_HOLD": "1"})
    assert out == ["ok themis:v1;app=;model=;sens=;est=" + (" [held]" if held else " [not held]")]


@pytest.mark.parametrize("lua", ["lua5.1", "lua5.3"])
def test_job_submit_lua_records_the_owners_hold_and_node_list(lua: str) -> None:
    # issue 37: `sbatch --hold` was hidden by Themis's own hold (themisd started the job 8 s later), and
    # Themis's pin replaced the owner's -w list; both are recorded at submit now
    out = _run_lua(lua, ["\1\t@hold", "themis:app=s\t@hold", "\1\t@nodes=node[3-4]", "\1\t@nodes=bad;x=y"],
                   env={"HARNESS_SHOW_COMMENT": "1"})
    assert out == ["ok themis:v1;app=;model=;sens=;est= comment=themis:hold=user",
                   "ok themis:v1;app=s;model=;sens=;est= comment=themis:app=s,hold=user",
                   "ok themis:v1;app=;model=;sens=;est=;nodes=node[3-4] comment=nil",
                   "ok themis:v1;app=;model=;sens=;est= comment=nil"]


@pytest.mark.parametrize("lua", ["lua5.1", "lua5.3"])
def test_job_submit_lua_records_an_arrays_throttle(lua: str) -> None:
    # issue 38 item 3: slurmctld applies an owner's ArrayTaskThrottle raise before slurm_job_modify refuses
    # it, so the throttle at submit goes into the trusted record, where themisd reads it
    out = _run_lua(lua, ["\1\t@array=0-99%8", "\1\t@array=0-3", "\1\t@array=1,3,5%0", "\1\t@array=0-9 % 2"])
    assert out == ["ok themis:v1;app=;model=;sens=;est=;throttle=8", "ok themis:v1;app=;model=;sens=;est=",
                   "ok themis:v1;app=;model=;sens=;est=", "ok themis:v1;app=;model=;sens=;est=;throttle=2"]


@pytest.mark.parametrize("version", sorted(HEADERS))
def test_plugin_builds_without_warnings(version: str, tmp_path: Path) -> None:
    inc = HEADERS[version]
    if not (inc / "slurm" / "spank.h").exists():
        pytest.skip(f"no Slurm {version} headers in {inc} (22.05: apt-get install libslurm-dev; 25.11: "
                    "slurm_conf/cluster.sh up --slurm 25.11 unpacks the tree)")
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (apt-get install gcc)")
    res = subprocess.run(["make", "-C", str(SPANK), f"SLURM_INCLUDE={inc}", f"BUILD={tmp_path}"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "warning" not in res.stderr.lower(), res.stderr
    so = tmp_path / "spank_themis.so"
    syms = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True, check=True).stdout
    for sym in ("plugin_name", "plugin_type", "plugin_version", "slurm_spank_init", "slurm_spank_init_post_opt"):
        assert f" {sym}\n" in syms, sym


@pytest.mark.parametrize("lua", ["lua5.1", "lua5.3"])
def test_job_submit_lua_without_fail_open_settings_never_fails_open(lua: str, tmp_path: Path) -> None:
    # a config from before fail-open (no heartbeat keys) keeps holding, heartbeat or not: a site that
    # upgrades job_submit.lua first must not find its jobs unheld
    shutil.copy(LUA_SCRIPT, tmp_path / "job_submit.lua")
    conf = (LUA_SCRIPT.parent / "themis_job_submit.conf.lua").read_text()
    conf = re.sub(r"\n\s*(heartbeat_file|fail_open_after_s) = [^\n]*", "", conf)
    assert "fail_open_after_s =" not in conf and "heartbeat_file =" not in conf
    (tmp_path / "themis_job_submit.conf.lua").write_text(conf)
    out = _run_lua(lua, ["\1"], script=tmp_path / "job_submit.lua", env={"HARNESS_SHOW_HOLD": "1"})
    assert out == ["ok themis:v1;app=;model=;sens=;est= [held]"]


# ------------------------------------------------------------------ a site's own model classes (issue #36 item 3)
SITE_NAMES = ("llama-70b", "mixtral_8x7b", "v2.1")
#: names with the verdict of the name rule (MODEL_NAME_EXPECTED); ',' cannot travel in the plugin's list
NAME_CASES = [("a", True), ("llama-70b", True), ("x_y.z", True), ("9b", True), ("a" * 32, True),
              ("a" * 33, False), ("A", False), ("llamA", False), ("-a", False), (".a", False), ("_a", False),
              ("a b", False), ("caf\u00e9", False), ("a/b", False), ("a=b", False), ("a;b", False)]


def _site_lua(tmp_path: Path, extra: str) -> Path:
    """job_submit.lua in tmp_path with the shipped config plus `extra_models = <extra>`."""
    shutil.copy(LUA_SCRIPT, tmp_path / "job_submit.lua")
    conf = (LUA_SCRIPT.parent / "themis_job_submit.conf.lua").read_text()
    assert "extra_models = {}," in conf  # the shipped default: none
    (tmp_path / "themis_job_submit.conf.lua").write_text(conf.replace("extra_models = {},", f"extra_models = {extra},"))
    return tmp_path / "job_submit.lua"


def _lua_errors(lua: str, script: Path) -> str:
    """What job_submit.lua logs as errors when slurmctld loads it with its config (the harness's stderr)."""
    exe = shutil.which(lua)
    if exe is None:
        pytest.skip(f"{lua} not installed (apt-get install {lua}; tests/run.sh does it)")
    res = subprocess.run([exe, str(HARNESS), str(script)], input="", capture_output=True, text=True, timeout=60,
                         env={**os.environ, "HARNESS_LOG_ERRORS": "1"}, check=False)
    assert res.returncode == 0, res.stderr
    return res.stderr


@pytest.mark.parametrize("lua", ["lua5.1", "lua5.3"])
def test_job_submit_lua_accepts_the_sites_classes(lua: str, tmp_path: Path) -> None:
    script = _site_lua(tmp_path, "{ " + ", ".join(f'"{n}"' for n in SITE_NAMES) + ', "moe" }')
    assert _lua_errors(lua, script) == ""
    out = _run_lua(lua, ["themis:model=Llama-70B", "\1\tTHEMIS_OPTIONS=model=v2.1", "themis:model=moe",
                         "themis:model=gpt9", "\1\tTHEMIS_OPTIONS=model=gpt9", "themis:sens=llama-70b"], script=script)
    assert out[:3] == ["ok themis:v1;app=;model=llama-70b;sens=;est=", "ok themis:v1;app=;model=v2.1;sens=;est=",
                       "ok themis:v1;app=;model=moe;sens=;est="]
    accepted = "one of " + ", ".join(option_grammar.MODELS + SITE_NAMES)  # a built-in name is listed once
    assert out[3] == f"err themis: invalid option model=gpt9 in --comment: expected {accepted}"
    assert out[4] == f"err themis: invalid option --themis-model=gpt9: expected {accepted}"
    assert out[5].startswith("err themis: invalid option sens=llama-70b in --comment: expected one of high")
    # without the list (the shipped config): the site's names are refused, the built-in ones listed
    plain = _run_lua(lua, ["themis:model=llama-70b"])
    assert plain == [f"err themis: invalid option model=llama-70b in --comment: expected "
                     f"{option_grammar.OPTIONS[1].expected}"]


@pytest.mark.parametrize("lua", ["lua5.1", "lua5.3"])
@pytest.mark.parametrize(("extra", "why"), [
    ('"llama-70b"', "not a list of names"),
    ('{ "Llama" }', f"Llama is not {option_grammar.MODEL_NAME_EXPECTED}"),
    ('{ "ok", 7 }', f"7 is not {option_grammar.MODEL_NAME_EXPECTED}"),
    ('{ "high" }', "high is a sensitivity class (--themis-sens), not a model"),
])  # fmt: skip
def test_job_submit_lua_refuses_a_bad_list_and_keeps_none(lua: str, tmp_path: Path, extra: str, why: str) -> None:
    script = _site_lua(tmp_path, extra)
    assert _lua_errors(lua, script) == (f"themis: themis_job_submit.conf.lua: bad value for 'extra_models' ({why}), "
                                        "using the default (none)\n")
    assert _run_lua(lua, ["themis:model=ok", "themis:model=moe"], script=script) == [
        f"err themis: invalid option model=ok in --comment: expected {option_grammar.OPTIONS[1].expected}",
        "ok themis:v1;app=;model=moe;sens=;est="]


def test_plugin_accepts_the_sites_classes(check_tool: Path) -> None:
    def check(*args: str) -> tuple[int, str]:
        res = subprocess.run([str(check_tool), *args], capture_output=True, text=True, timeout=10, check=False)
        return res.returncode, res.stdout.strip()

    models = "--models=" + ",".join((*SITE_NAMES, "moe", "llama-70b"))
    assert check(models, "model", "Llama-70B") == (0, "ok")
    assert check(models, "model", "moe") == (0, "ok")
    assert check("model", "llama-70b")[0] == 1  # without the plugstack.conf argument: built-in names only
    accepted = "one of " + ", ".join(option_grammar.MODELS + SITE_NAMES)  # repeated names listed once
    assert check(models, "model", "gpt9") == (1, f"themis: invalid option --themis-model=gpt9: expected {accepted}")
    assert check("--models=", "model", "moe") == (0, "ok")  # an empty list: none of the site's
    assert check("--models=high", "model", "x") == (
        2, "themis: plugstack.conf: models=high: 'high' is a sensitivity class (--themis-sens), not a model")
    assert check("--models=a,,b", "model", "x") == (
        2, f"themis: plugstack.conf: models=a,,b: '' is not {option_grammar.MODEL_NAME_EXPECTED}")
    many = ",".join(f"m{i}" for i in range(33))
    assert check(f"--models={many}", "model", "m0") == (
        2, f"themis: plugstack.conf: models={many}: more than 32 classes")


@pytest.mark.parametrize("lua", ["lua5.1", "lua5.3"])
def test_the_three_name_rules_agree(check_tool: Path, lua: str, tmp_path: Path) -> None:
    """themis.yaml's check (Python), the plugin's (C) and job_submit.lua's give the same verdict on every name."""
    wrong = []
    for name, verdict in NAME_CASES:
        c = subprocess.run([str(check_tool), f"--models={name}", "model", "x"], capture_output=True, text=True,
                           timeout=10, check=False).returncode != 2
        esc = name.replace("\\", "\\\\").replace('"', '\\"')
        lua_ok = _lua_errors(lua, _site_lua(tmp_path, f'{{ "{esc}" }}')) == ""
        got = (option_grammar.valid_model_name(name), c, lua_ok)
        if got != (verdict,) * 3:
            wrong.append((name, got))
    assert wrong == []
