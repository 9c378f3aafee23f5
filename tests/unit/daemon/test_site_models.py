"""A site's own model classes (issue #36 item 3): themis.yaml ``models:`` validated strictly, carried to the
core on the jobs that name them, an unknown name placed as the default class and said so, and the warnings
when themis.yaml, job_submit.lua's ``extra_models`` and the SPANK plugin's ``models=`` disagree."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from themis_slurm.cli.main import cli
from themis_slurm.core.placement import PROFILES, Profile
from themis_slurm.daemon.config import ConfigError, load_for_client, parse
from themis_slurm.daemon.loop import Daemon
from themis_slurm.daemon.site_models import (
    disagreements,
    lua_code,
    plugstack_path,
    read_extra_models,
    read_plugin_models,
)
from themis_slurm.state.jobs import core_job, profile_of, unknown_profile_note

from .conftest import daemon_config, run
from .fake_slurm import FakeSlurm

SITE = {
    "llama-70b": {"factors": {"island": 1.0, "node": 0.9, "rack": 0.5, "cluster": 0.3}, "note": "measured"},
    "vgg16": {"factors": [1, 1, 0.9, 0.85]},
}


def test_models_become_profiles_and_new_names_are_listed() -> None:
    cfg = parse({"models": SITE}, "themis.yaml")
    llama, vgg = cfg.models["llama-70b"], cfg.models["vgg16"]
    assert (llama.factors, llama.about) == ((1.0, 0.9, 0.5, 0.3), "measured")
    assert llama.source == "site: themis.yaml models.llama-70b (defines a class)"
    assert vgg.factors == (1.0, 1.0, 0.9, 0.85) and "overrides the built-in class" in vgg.source
    assert cfg.new_models == ("llama-70b",)  # only new names need job_submit.lua and the plugin
    assert cfg.round_terms.profiles == cfg.models
    assert parse({"models": None}).models == {} == parse({}).models
    assert PROFILES["vgg16"].factors == (1.0, 1.0, 0.72, 0.52)  # the built-in table is untouched


@pytest.mark.parametrize(("models", "message"), [
    ([1, 2], "models: value [1, 2] is not a mapping of class names"),
    ({"Llama": {"factors": [1, 1, 1, 1]}}, "models.Llama: the name 'Llama' is not a name of 1 to 32 lower-case"),
    ({"a b": {"factors": [1, 1, 1, 1]}}, "models.a b: the name 'a b' is not a name of 1 to 32"),
    ({"x" * 33: {"factors": [1, 1, 1, 1]}}, f"models.{'x' * 33}: the name '{'x' * 33}' is not"),
    ({"-x": {"factors": [1, 1, 1, 1]}}, "models.-x: the name '-x' is not"),
    ({7: {"factors": [1, 1, 1, 1]}}, "models.7: the name 7 is not"),
    ({"m": 0.5}, "models.m: value 0.5 is not a mapping with factors (and an optional note)"),
    ({"m": {"factor": [1, 1, 1, 1]}}, "models.m.factor: unknown key (accepted: factors, note)"),
    ({"m": {"note": "x"}}, "models.m: factors missing: give a mapping of island, node, rack, cluster"),
    ({"m": {"factors": [1, 1, 1]}}, "models.m.factors: value [1, 1, 1] is not a mapping of island, node"),
    ({"m": {"factors": "fast"}}, "models.m.factors: value 'fast' is not a mapping of island"),
    ({"m": {"factors": {"island": 1, "node": 1, "rack": 1}}}, "models.m.factors: cluster missing"),
    ({"m": {"factors": {"island": 1, "node": 1, "rack": 1, "cluster": 1, "switch": 1}}},
     "models.m.factors.switch: unknown level (accepted: island, node, rack, cluster)"),
    ({"m": {"factors": [1, 1, 1.2, 1]}}, "models.m.factors.rack: value 1.2 is not a number in (0, 1]"),
    ({"m": {"factors": [1, 1, 0, 0]}}, "models.m.factors.rack: value 0 is not a number in (0, 1]"),
    ({"m": {"factors": [1, "x", 1, 1]}}, "models.m.factors.node: value 'x' is not a number in (0, 1]"),
    ({"m": {"factors": [1, True, 1, 1]}}, "models.m.factors.node: value True is not a number in (0, 1]"),
    ({"m": {"factors": [1, 0.5, 0.8, 0.3]}},
     "models.m.factors.rack: value 0.8 is above node (0.5): a wider placement is never faster"),
    ({"m": {"factors": [1, 1, 1, 1], "note": 5}}, "models.m.note: value 5 is not a text of at most 200"),
    ({"m": {"factors": [1, 1, 1, 1], "note": "n" * 201}}, "models.m.note: value 'nnnn"),
])  # fmt: skip
def test_errors_name_the_key_and_the_value(models: object, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse({"models": models}, "themis.yaml")
    assert f"themis.yaml: {message}" in str(e.value)


def test_the_client_keeps_the_models(tmp_path: Path) -> None:
    f = tmp_path / "themis.yaml"
    f.write_text("models:\n  llama-70b: {factors: [1, 0.9, 0.5, 0.3]}\nfuture_key: 1\n")
    cfg, notes = load_for_client(f)
    assert cfg.models["llama-70b"].factors == (1.0, 0.9, 0.5, 0.3) and notes == (
        f"{f}: future_key: unknown key ignored",
    )


def mj(slurm: FakeSlurm, profile: str | None):
    jid = slurm.submit("alice", "a", 2, 100.0, profile=profile)
    return next(m for m in slurm.snapshot().managed if m.job_id == jid)


def test_jobs_carry_the_sites_class_and_unknown_names_fall_back_saying_so(slurm: FakeSlurm) -> None:
    site = parse({"models": SITE}).models
    assert profile_of(mj(slurm, "Llama-70B"), site) is site["llama-70b"]
    assert profile_of(mj(slurm, "vgg16"), site) is site["vgg16"]
    assert profile_of(mj(slurm, "vgg16")) == "vgg16" and profile_of(mj(slurm, "moe"), site) == "moe"
    gone = mj(slurm, "llama-70b")
    assert profile_of(gone) == "low"  # themisd without the class: the default
    assert unknown_profile_note(gone) == (
        "model 'llama-70b' is unknown to themisd (neither built in nor in "
        "themis.yaml models): placed as the default class low"
    )
    assert unknown_profile_note(gone, site) == "" == unknown_profile_note(mj(slurm, None), site)
    low = Profile("low", (1.0, 1.0, 0.5, 0.5))
    assert profile_of(gone, {"low": low}) is low  # the default is the site's when it overrides it
    job = core_job(mj(slurm, "llama-70b"), 200.0, 0.0, True, 0.0, 0.0, site=site)
    assert job.profile is site["llama-70b"]


def _one_job_across_both_nodes(
    make_daemon: Callable[..., Daemon], slurm: FakeSlurm, tmp_path: Path, model: str
) -> tuple[float, str]:
    """An 8-GPU job on the 2 x 4-GPU fixture (one rack) runs across both nodes; (done/service, its events)."""
    cfg = replace(daemon_config(tmp_path / "state"), models=parse({"models": SITE}).models)
    d = make_daemon(cfg)
    jid = slurm.submit("alice", "big", 8, 3000.0, est_s=600.0, profile=model)
    run(d, slurm, 60.0)
    row = d.store.job(jid)
    assert row is not None and row.service_s > 0, "the job ran"
    events = d.store.query("SELECT detail FROM events WHERE job_id = ?", (jid,))
    return row.done_service / row.service_s, " | ".join(e["detail"] for e in events)


def test_themisd_counts_work_with_the_sites_factors(
    make_daemon: Callable[..., Daemon], slurm: FakeSlurm, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ratio, events = _one_job_across_both_nodes(make_daemon, slurm, tmp_path, "llama-70b")
    assert ratio == pytest.approx(0.5)  # rack level: themis.yaml's factor, not the default class's 0.98
    assert "unknown to themisd" not in events


def test_an_unknown_model_runs_as_the_default_class_and_is_logged(
    make_daemon: Callable[..., Daemon], slurm: FakeSlurm, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="themisd")
    ratio, events = _one_job_across_both_nodes(make_daemon, slurm, tmp_path, "mixtral")
    assert ratio == pytest.approx(PROFILES["low"].factors[2])
    assert "model 'mixtral' is unknown to themisd" in events  # `themis explain` shows its events
    assert any("model 'mixtral' is unknown to themisd" in r.getMessage() for r in caplog.records)


LUA_CONF = """return {
  mode = "enforce",
  -- extra_models = { "commented-out" },
  extra_models = { "llama-70b", 'moe', -- a built-in name is harmless
                   "a--b" },  -- a dash pair inside a string is not a comment
}
"""


def test_reads_job_submit_luas_list_and_the_plugins(tmp_path: Path) -> None:
    lua = tmp_path / "themis_job_submit.conf.lua"
    lua.write_text(LUA_CONF)
    assert read_extra_models(lua) == ("llama-70b", "moe", "a--b")
    lua.write_text('return { mode = "enforce" }  -- extra_models = { "x" }\n')
    assert read_extra_models(lua) == ()
    assert read_extra_models(tmp_path / "missing.lua") is None
    assert lua_code("a = '--x' -- y\nb = 1") == "a = '--x' \nb = 1"
    stack = tmp_path / "plugstack.conf"
    stack.write_text(
        "optional /usr/lib/other.so\nrequired /usr/lib/spank_themis.so models=llama-70b,x1  # ours\n"
    )
    assert read_plugin_models(stack) == ("llama-70b", "x1")
    stack.write_text("required /usr/lib/spank_themis.so\n")
    assert read_plugin_models(stack) == ()
    stack.write_text("# required /usr/lib/spank_themis.so models=a\n")
    assert read_plugin_models(stack) is None
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    assert plugstack_path(str(conf)) == tmp_path / "plugstack.conf"
    conf.write_text(f"PlugStackConfig={tmp_path / 'etc' / 'stack.conf'}\n")
    assert plugstack_path(str(conf)) == tmp_path / "etc" / "stack.conf"


def _site(tmp_path: Path, lua_models: str, plugin_models: str | None) -> Path:
    """A themis.yaml defining llama-70b and overriding vgg16, with job_submit.lua's and the plugin's lists."""
    (tmp_path / "themis_job_submit.conf.lua").write_text(f"return {{ extra_models = {{ {lua_models} }} }}\n")
    (tmp_path / "slurm.conf").write_text("ClusterName=x\n")
    line = "required /usr/lib/spank_themis.so" + (f" models={plugin_models}" if plugin_models else "")
    (tmp_path / "plugstack.conf").write_text(line + "\n")
    cfg = tmp_path / "themis.yaml"
    cfg.write_text(
        f"state_dir: {tmp_path}\nslurm:\n  slurm_conf: {tmp_path / 'slurm.conf'}\n"
        f"  job_submit_conf: {tmp_path / 'themis_job_submit.conf.lua'}\n"
        "models:\n  llama-70b: {factors: [1, 0.9, 0.5, 0.3]}\n  vgg16: {factors: [1, 1, 0.9, 0.8]}\n"
    )
    return cfg


def test_config_check_warns_when_the_lists_disagree(tmp_path: Path) -> None:
    path = _site(tmp_path, '"llama-70b", "moe"', "llama-70b")
    cfg = parse(
        {
            "models": SITE,
            "slurm": {
                "slurm_conf": str(tmp_path / "slurm.conf"),
                "job_submit_conf": str(tmp_path / "themis_job_submit.conf.lua"),
            },
        }
    )
    assert disagreements(cfg) == []  # overrides (vgg16) and built-in names (moe) need nothing
    res = CliRunner().invoke(cli, ["config", "check", str(path)])
    assert (
        res.exit_code == 0 and "model classes llama-70b,vgg16" in res.output and "warning" not in res.output
    )

    path = _site(tmp_path, '"mixtral"', None)
    res = CliRunner().invoke(cli, ["config", "check", str(path)])
    assert res.exit_code == 0, res.output  # warnings, not errors
    lua = tmp_path / "themis_job_submit.conf.lua"
    stack = tmp_path / "plugstack.conf"
    assert (
        f"warning: model classes: themis.yaml models llama-70b are not in extra_models of {lua}: "
        "job_submit.lua refuses jobs that name them; add them there"
    ) in res.output
    assert (
        f"extra_models of {lua} lists mixtral, which themis.yaml's models section does not define: jobs "
        "naming them are accepted and placed as the default class low"
    ) in res.output
    assert (
        f"the SPANK plugin's line in {stack} does not list llama-70b (models=): sbatch refuses "
        "--themis-model=llama-70b at the client; add models=llama-70b after spank_themis.so"
    ) in res.output

    path = _site(tmp_path, '"llama-70b"', "llama-70b,old-one")
    res = CliRunner().invoke(cli, ["config", "check", str(path)])
    assert (
        f"the SPANK plugin's line in {stack} lists old-one (models=), which themis.yaml's models section "
        "does not define"
    ) in res.output
    assert "extra_models of" not in res.output


def test_themisd_warns_at_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from themis_slurm.daemon.config import load
    from themis_slurm.daemon.service import check_site_models

    caplog.set_level("WARNING", logger="themisd")
    check_site_models(load(_site(tmp_path, "", "llama-70b")))
    assert [r.getMessage().split(" of ")[0] for r in caplog.records] == [
        "model classes: themis.yaml models llama-70b are not in extra_models"
    ]


def test_explain_shows_the_class_its_factors_and_why(slurm: FakeSlurm) -> None:
    from types import SimpleNamespace

    from themis_slurm.api.views import _profile_doc
    from themis_slurm.cli.explain import _profile
    from themis_slurm.state.round_input import RoundTerms

    site = parse({"models": SITE}).models
    ctx = SimpleNamespace(round_terms=RoundTerms(True, 60.0, 0.0, 0.0, site))
    doc = _profile_doc(ctx, mj(slurm, "llama-70b"))  # type: ignore[arg-type]
    assert doc == {
        "asked": "llama-70b",
        "name": "llama-70b",
        "defined_by": "themis.yaml",
        "note": "",
        "factors": {"island": 1.0, "node": 0.9, "rack": 0.5, "cluster": 0.3},
        "source": "site: themis.yaml models.llama-70b (defines a class)",
        "type_speeds": {},
    }
    assert _profile(doc, "rack") == (
        "Class:     llama-70b (themis.yaml): island 1.00, node 0.90, rack 0.50, "
        "cluster 0.30; now placed at rack level: x0.50"
    )
    doc = _profile_doc(ctx, mj(slurm, "mixtral"))  # type: ignore[arg-type]
    assert (doc["asked"], doc["name"], doc["defined_by"]) == ("mixtral", "low", "built-in")
    assert _profile(doc, None).endswith(
        "cluster 0.96; model 'mixtral' is unknown to themisd (neither built in nor "
        "in themis.yaml models): placed as the default class low"
    )
    assert _profile_doc(ctx, None) is None  # type: ignore[arg-type]
    typed = SimpleNamespace(round_terms=RoundTerms(True, 60.0, 0.0, 0.0, site, {"a100": 0.6, "h100": 1.0},
                                                   {"llama-70b": {"a100": 0.5}}))  # fmt: skip
    doc = _profile_doc(typed, mj(slurm, "llama-70b"))  # type: ignore[arg-type]
    assert doc["type_speeds"] == {"h100": 1.0, "a100": 0.5}  # the class's own speed wins; fastest first
    assert _profile(doc, None).splitlines()[-1] == (
        "Types:     h100 x1.00, a100 x0.50 of the reference type's speed (themis.yaml gpu_types; a type not "
        "named: x1.00)"
    )
