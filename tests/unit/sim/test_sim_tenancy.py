"""Issue #33 in the simulator: the shares file, the loaders' accounts, each app's contention under nested
shares (hand-computed), the metrics' T_id and per-tenant GPU time, identity with the levels app, the CLI."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from themis_slurm.cli.main import cli
from themis_slurm.core.arbiter import ArbiterConfig
from themis_slurm.core.tenancy import Tenancy
from themis_slurm.core.topology import Topology
from themis_slurm.policies import make_policy
from themis_slurm.policies.base import PolicyContext
from themis_slurm.sim.engine import SimConfig, Simulator
from themis_slurm.sim.loaders import load_trace
from themis_slurm.sim.loaders.sacct import load_sacct
from themis_slurm.sim.metrics import (
    AppMetrics,
    Span,
    actual_metrics,
    compute,
    contested_gpu_time,
    spans_of,
    tenant_metrics,
)
from themis_slurm.sim.report import format_table, summary_dict, write_run
from themis_slurm.sim.tenants import SharesError, load_shares, make_tenancy, parse_levels, splitting_trace
from themis_slurm.sim.trace import Trace, TraceJob

from .sim_policies import FifoFirstFit

TESTS = Path(__file__).resolve().parents[2]
SACCT = TESTS / "fixtures" / "sacct"
PHILLY_MIX1 = TESTS.parent.parent / "shared" / "traces" / "philly_mix1.csv"
TOPO8 = Topology.uniform(1, 2, 4)


def write(tmp_path: Path, text: str, name: str = "shares.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ------------------------------------------------------------------------------------------ shares file
def test_shares_file_gives_accounts_and_users(tmp_path: Path) -> None:
    p = write(tmp_path, "account,user,shares\nvision,,3\nnlp,,1\nvision,alice,2\n,bob,0.5\n")
    assert load_shares(p) == ({"vision": 3.0, "nlp": 1.0}, {("vision", "alice"): 2.0, ("", "bob"): 0.5})
    t = make_tenancy("account,user,app", p)
    assert t.levels == ("account", "user", "app") and t.account_shares == {"vision": 3.0, "nlp": 1.0}
    assert t.shares_of(("account", ("vision",))) == 3.0 and t.shares_of(("account", ("other",))) == 1.0


def test_shares_columns_may_come_in_any_order(tmp_path: Path) -> None:
    p = write(tmp_path, "shares,user,account\n4,,a\n1,u,a\n")
    assert load_shares(p) == ({"a": 4.0}, {("a", "u"): 1.0})


@pytest.mark.parametrize(("text", "message"), [
    ("account,shares\na,1\n", r"shares\.csv:1: field header: missing column\(s\) user"),
    ("account,user,shares,x\n", r"shares\.csv:1: field header: value 'x' is not a known column"),
    ("account,user,shares\na,,-1\n", r"shares\.csv:2: field shares: value '-1' is not a number >= 0"),
    ("account,user,shares\na,,lots\n", r"shares\.csv:2: field shares: value 'lots' is not a number >= 0"),
    ("account,user,shares\na,,inf\n", r"shares\.csv:2: field shares: value 'inf' is not a number >= 0"),
    ("account,user,shares\n,,2\n", r"shares\.csv:2: field account: value '' is not set \(or a user\)"),
    ("account,user,shares\na,,1\nb,,1\na,,2\n",
     r"shares\.csv:4: field account: value 'a' is not given once \(account 'a' already on line 2\)"),
    ("account,user,shares\na,u,1\na,u,2\n",
     r"shares\.csv:3: field user: value 'u' is not given once \(user 'u' of account 'a' already on line 2\)"),
    ("account,user,shares\na,1\n", r"shares\.csv:2: field columns: value '2' is not 3 columns"),
    ("", r"shares\.csv: the file is empty"),
])  # fmt: skip
def test_bad_shares_name_the_line_field_and_value(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SharesError, match=message):
        load_shares(write(tmp_path, text))


@pytest.mark.parametrize(("levels", "message"), [
    ("team,app", "unknown level 'team'"),
    ("app,user", "give some of account, user"),
    ("user", "give some of account, user"),
    ("user,user,app", "named twice"),
    ("", "give some of account, user"),
])  # fmt: skip
def test_bad_levels(levels: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_levels(levels)


def test_shares_with_the_levels_app_is_an_error(tmp_path: Path) -> None:
    p = write(tmp_path, "account,user,shares\na,,1\n")
    with pytest.raises(ValueError, match="needs the account or user level"):
        make_tenancy("app", p)
    assert make_tenancy("app") == Tenancy() and make_tenancy(("user", "app")).levels == ("user", "app")


# --------------------------------------------------------------------------------------- loaders' accounts
CHRONUS_HEAD = "job_id,user,num_gpu,submit_time,model_name,duration"


def test_chronus_accounts_are_the_philly_virtual_clusters(tmp_path: Path) -> None:
    p = write(tmp_path, f"{CHRONUS_HEAD}\n1,vc_a,1,0,vgg16,10\n2,vc_b,2,5,resnet50,20\n", "t.csv")
    trace = load_trace(p, "chronus")
    assert [(j.user, j.account) for j in trace.jobs] == [("vc_a", "vc_a"), ("vc_b", "vc_b")]
    assert any("accounts from the user column" in n for n in trace.notes)


@pytest.mark.parametrize("column", ["account", "vc"])
def test_chronus_account_column(tmp_path: Path, column: str) -> None:
    p = write(
        tmp_path, f"{CHRONUS_HEAD},{column}\n1,alice,1,0,vgg16,10,vision\n2,bob,1,0,vgg16,10,\n", "t.csv"
    )
    trace = load_trace(p, "chronus")
    assert [(j.user, j.account) for j in trace.jobs] == [("alice", "vision"), ("bob", "")]


def test_chronus_without_user_or_account(tmp_path: Path) -> None:
    p = write(tmp_path, "job_id,num_gpu,submit_time,duration\n1,1,0,10\n", "t.csv")
    trace = load_trace(p, "chronus", group_by="job")
    assert trace.jobs[0].account == "" and any("every job has account ''" in n for n in trace.notes)
    both = write(tmp_path, f"{CHRONUS_HEAD},account,vc\n1,u,1,0,vgg16,10,a,b\n", "both.csv")
    with pytest.raises(
        ValueError, match=r"both\.csv:1: field header: value 'vc' is not a second account column"
    ):
        load_trace(both, "chronus")


@pytest.mark.parametrize("version", ["2205", "2511"])
def test_sacct_json_gives_the_slurm_account(version: str) -> None:
    trace = load_sacct(SACCT / f"sacct_{version}.json")
    assert {j.account for j in trace.jobs} == {"themis-test"}  # cluster.sh's one account


@pytest.mark.parametrize("version", ["2205", "2511"])
def test_sacct_pipe_reads_the_account_column(tmp_path: Path, version: str) -> None:
    """The -P fixtures were captured without Account: add the column (each job's account from the JSON
    capture of the same jobs, one differing) and the two forms agree again; without it the account is ""."""
    lines = (SACCT / f"sacct_{version}.txt").read_text().splitlines()
    assert load_sacct(SACCT / f"sacct_{version}.txt").jobs[0].account == ""
    header = lines[0].split("|")
    at = header.index("User") + 1
    rows = [header[:at] + ["Account"] + header[at:]]
    for i, line in enumerate(lines[1:]):
        cells = line.split("|")
        account = "other" if i == 0 else "themis-test"
        rows.append(cells[:at] + [account] + cells[at:])
    p = write(tmp_path, "\n".join("|".join(r) for r in rows) + "\n", "with_account.txt")
    pipe = {j.job_id: j for j in load_sacct(p).jobs}
    first = lines[1].split("|")[0]
    assert pipe[first].account == "other"
    json_jobs = {j.job_id: j for j in load_sacct(SACCT / f"sacct_{version}.json").jobs}
    assert {k: replace(j, line=None) for k, j in pipe.items() if k != first} == {
        k: replace(j, line=None) for k, j in json_jobs.items() if k != first}  # fmt: skip


@pytest.mark.skipif(
    not PHILLY_MIX1.is_file(),
    reason=f"real trace not present at {PHILLY_MIX1} (../shared/traces is optional)",
)
def test_philly_mix1_accounts() -> None:
    trace = load_trace(PHILLY_MIX1, "chronus", skip_bad=True)
    assert len({j.account for j in trace}) == 11 and all(j.account == j.user for j in trace)


# --------------------------------------------------------------------- contention under nested shares
class Recording(FifoFirstFit):
    """FIFO first fit that remembers, at each call, every app's (contention, account) and the tenancy."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[float, dict[str, tuple[float, str]]] = {}
        self.tenancies: set[tuple[str, ...]] = set()

    def schedule(self, ctx: PolicyContext) -> object:
        st = ctx.state
        self.seen[st.now] = {a.id: (a.contention, a.account) for a in st.apps}
        self.tenancies.add(st.tenancy.levels)
        return super().schedule(ctx)


def tiny_trace() -> Trace:
    """Three apps that never wait on 8 GPUs (so each is present from its arrival to its last job's end):
    p and q of user u1 in account X, r of user u3 in account Y. p: 1 GPU over [0, 100] and 1 GPU over
    [80, 90]; q: 1 GPU over [0, 50]; r: 4 GPUs over [20, 120]."""
    return Trace((
        TraceJob("p1", "p", "u1", 0.0, 1, 100.0, account="X"),
        TraceJob("q1", "q", "u1", 0.0, 1, 50.0, account="X"),
        TraceJob("r1", "r", "u3", 20.0, 4, 100.0, account="Y"),
        TraceJob("p2", "p", "u1", 80.0, 1, 10.0, account="X"),
    ), "tiny")  # fmt: skip


NESTED = Tenancy(("account", "user", "app"), {"X": 3.0, "Y": 1.0})


def run_tiny(tenancy: Tenancy) -> tuple[Recording, object]:
    rec = Recording()
    res = Simulator(tiny_trace(), TOPO8, rec, SimConfig(tenancy=tenancy, calibration=replace(
        SimConfig().calibration, enabled=False))).run()  # fmt: skip
    return rec, res


def test_contention_is_the_time_average_of_the_nested_effective_n() -> None:
    """By hand, account X 3 shares, Y 1. [0, 20): only X/u1 with p, q: 1/2 each, N = 2. [20, 50): X 3/4
    (p, q 3/8 each: N = 8/3), Y 1/4 (r: N = 4). [50, 100): p 3/4 (N = 4/3), r N = 4. [100, 120): r alone, 1."""
    rec, res = run_tiny(NESTED)
    assert rec.tenancies == {("account", "user", "app")}
    assert rec.seen[0.0] == {"p": (2.0, "X"), "q": (2.0, "X")}
    at20 = rec.seen[20.0]
    assert at20["p"][0] == pytest.approx(2.0) and at20["r"] == (pytest.approx(4.0), "Y")
    at80 = rec.seen[80.0]  # p2 arrives: p (20 x 2 + 30 x 8/3 + 30 x 4/3) / 80; r (30 x 4 + 30 x 4) / 60
    assert at80["p"][0] == pytest.approx((40 + 80 + 40) / 80) and at80["r"][0] == pytest.approx(4.0)
    got = {a.app_id: a.contention for a in res.apps}
    assert got == pytest.approx(
        {"p": (40 + 80 + 50 * 4 / 3) / 100, "q": (40 + 80) / 50, "r": (120 + 200 + 20) / 100}
    )
    assert {a.app_id: a.account for a in res.apps} == {"p": "X", "q": "X", "r": "Y"}


def test_the_levels_app_count_the_apps_as_always() -> None:
    """Flat: [0, 20) 2 apps, [20, 50) 3, [50, 100) 2, [100, 120) 1."""
    rec, res = run_tiny(Tenancy())
    assert rec.seen[20.0]["r"][0] == 3.0 and rec.seen[20.0]["p"][0] == 2.0
    got = {a.app_id: a.contention for a in res.apps}
    assert got == pytest.approx({"p": (40 + 90 + 100) / 100, "q": (40 + 90) / 50, "r": (90 + 100 + 20) / 100})


def test_metrics_t_id_uses_the_nested_share() -> None:
    """r's 4-GPU job (400 GPU-s) on its nested share 8 / 3.4 GPUs: T_id 170 s, rho 100 / 170; flat share
    8 / 2.1: T_id 105 s."""
    r_nested = next(a for a in compute(run_tiny(NESTED)[1]).apps if a.app_id == "r")
    assert r_nested.t_id == pytest.approx(400 / (8 / 3.4)) and r_nested.rho == pytest.approx(100 / 170)
    r_flat = next(a for a in compute(run_tiny(Tenancy())[1]).apps if a.app_id == "r")
    assert r_flat.t_id == pytest.approx(400 / (8 / 2.1))


def test_a_replayed_history_has_the_same_contention_as_the_simulator() -> None:
    """The tiny trace as a Slurm history in which every job ran at once (what the simulator did): the
    after-the-fact metrics and the simulator agree app by app, nested and flat."""
    history = Trace(tuple(replace(j, actual_start_s=j.arrival_s, actual_end_s=j.arrival_s + j.duration_s)
                          for j in tiny_trace()), "history")  # fmt: skip
    for tenancy in (NESTED, Tenancy()):
        actual = actual_metrics(history, TOPO8, tenancy=tenancy)
        assert actual is not None and actual.levels == tenancy.levels
        simulated = {a.app_id: a.contention for a in run_tiny(tenancy)[1].apps}
        assert {a.app_id: a.contention for a in actual.apps} == pytest.approx(simulated)


def test_zero_shares_account_gets_a_tiny_share() -> None:
    rec, _ = run_tiny(Tenancy(("account", "user", "app"), {"X": 1.0, "Y": 0.0}))
    assert rec.seen[20.0]["r"][0] > 1e5 and rec.seen[20.0]["p"][0] == pytest.approx(2.0, rel=1e-5)


# ------------------------------------------------------------------------------------------ identity
def test_one_app_per_user_is_the_flat_run() -> None:
    """Every app its own user (the paper workload's case) and no app without present jobs before its end:
    user,app gives each app 1/N as app alone does, so the clocks agree to rounding, at every call and at
    the end (a policy blind to tenancy, so that both runs make the same decisions)."""
    jobs = [TraceJob(f"{a}{i}", a, a, 300.0 * n, 2, 600.0 + 450 * i + 100 * n)
            for n, a in enumerate("abcdef") for i in range(3)]  # fmt: skip
    recs, runs = [], []
    for t in (Tenancy(), make_tenancy("user,app")):
        rec = Recording()
        runs.append(Simulator(Trace(tuple(jobs), "one app per user"), TOPO8, rec, SimConfig(tenancy=t)).run())
        recs.append(rec)
    assert [(j.job_id, j.first_start, j.finish) for j in runs[0].jobs] == [
        (j.job_id, j.first_start, j.finish) for j in runs[1].jobs]  # fmt: skip
    assert len(recs[0].seen) > 5 and recs[0].seen.keys() == recs[1].seen.keys()
    for now, flat in recs[0].seen.items():
        nested = recs[1].seen[now]
        assert {a: n for a, (n, _) in nested.items()} == pytest.approx(
            {a: n for a, (n, _) in flat.items()}, rel=1e-9
        )
    flat_end, nested_end = ({a.app_id: a.contention for a in r.apps} for r in runs)
    assert nested_end == pytest.approx(flat_end, rel=1e-9) and max(flat_end.values()) > 2


# ----------------------------------------------------------------------------------- per-tenant metrics
def test_tenant_metrics_by_hand() -> None:
    """Two users on 3 GPUs. a (user u, account A): job a1 waits [0, 10), holds 1 GPU [10, 30). b (v, B): b1
    holds 2 GPUs [0, 10); b2 holds 1 [0, 5), is preempted, waits [5, 10), holds 1 [10, 30). u waits [0, 10),
    while v holds all that is held (3 GPUs, then 2): share 0; v waits [5, 10), holding the 2 held: share 1."""
    spans = [Span("a", 0.0, 30.0, ((10.0, 30.0, 1),)), Span("b", 0.0, 10.0, ((0.0, 10.0, 2),)),
             Span("b", 0.0, 30.0, ((0.0, 5.0, 1), (10.0, 30.0, 1)))]  # fmt: skip
    apps = [
        AppMetrics("a", "u", 0, 30, 30, 20, 1.5, 1, 1, 20, 1),
        AppMetrics("b", "v", 0, 30, 30, 30, 1.0, 1, 2, 40, 2),
    ]
    got = {(t.level, t.name): t for t in tenant_metrics(spans, apps, {"a": "A", "b": "B"})}
    u = got[("user", "u")]
    assert (u.gpu_seconds, u.waiting_s, u.gpu_seconds_waiting, u.share_waiting) == (20.0, 10.0, 0.0, 0.0)
    v = got[("user", "v")]
    assert (v.gpu_seconds, v.waiting_s, v.gpu_seconds_waiting, v.share_waiting) == (45.0, 5.0, 10.0, 1.0)
    assert v.n_jobs == 2 and v.mean_jct_s == 20.0
    assert got[("account", "A")].max_rho == 1.5 and got[("account", "B")].gpu_seconds == 45.0
    assert [t.level for t in tenant_metrics(spans, apps, {})][:1] == ["account"]


def test_splitting_buys_gpu_time_with_the_levels_app_and_not_with_user_app() -> None:
    """The issue's case: 8 GPUs, A's eight 1-hour jobs as 8 apps, B's as one. GPU time over the window
    both wait: with app alone A gets several times B's; with user,app the same."""
    ratios = {}
    for levels in ("app", "user,app"):
        res = Simulator(splitting_trace([3600.0] * 16, 8), TOPO8, make_policy("themis", ArbiterConfig()),
                        SimConfig(tenancy=make_tenancy(levels))).run()  # fmt: skip
        window, got = contested_gpu_time(spans_of(res), lambda app: app.split("/")[0], ["A", "B"])
        assert window > 0
        ratios[levels] = got["A"] / got["B"]
    assert ratios["app"] > 2 and ratios["user,app"] == pytest.approx(1.0, abs=0.05)


# ----------------------------------------------------------------------------------------- report, CLI
def test_report_shows_tenants_only_with_levels(tmp_path: Path) -> None:
    res = Simulator(tiny_trace(), TOPO8, FifoFirstFit(), SimConfig(tenancy=NESTED)).run()
    m = compute(res)
    assert "share waiting" in format_table({"fifo": m}) and "tenants" in summary_dict({"fifo": m})
    assert summary_dict({"fifo": m})["tenants"]["fifo"]["accounts"]["X"]["n_apps"] == 2
    flat = compute(Simulator(tiny_trace(), TOPO8, FifoFirstFit(), SimConfig()).run())
    assert "share waiting" not in format_table({"fifo": flat}) and list(summary_dict({"fifo": flat})) == [
        "policies"
    ]
    write_run(tmp_path, {"fifo": m})
    with (tmp_path / "tenants_fifo.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["level"], r["name"]) for r in rows] == [("account", "X"), ("account", "Y"), ("user", "u1"),
                                                       ("user", "u3")]  # fmt: skip
    assert float(rows[3]["gpu_seconds"]) == 400.0 and rows[3]["share_waiting"] == ""  # r never waited


QUICK = ["simulate", "--max-jobs", "12", "--racks", "1", "--nodes-per-rack", "2", "--gpus-per-node", "4",
         "--policies", "themis", "--json"]  # fmt: skip


def test_cli_levels_app_is_the_default() -> None:
    a, b = (CliRunner().invoke(cli, [*QUICK, *extra]) for extra in ((), ("--levels", "app")))
    assert a.exit_code == 0 and a.output == b.output and "tenants" not in json.loads(a.output)


def test_cli_levels_and_shares(tmp_path: Path) -> None:
    trace = write(tmp_path, f"{CHRONUS_HEAD}\n1,vc_a,1,0,vgg16,600\n2,vc_a,1,0,vgg16,600\n3,vc_b,1,0,vgg16,600\n",
                  "t.csv")  # fmt: skip
    shares = write(tmp_path, "account,user,shares\nvc_a,,3\n")
    r = CliRunner().invoke(cli, ["simulate", "--trace", str(trace), "--format", "chronus", "--racks", "1",
                                 "--nodes-per-rack", "1", "--gpus-per-node", "2", "--policies", "themis", "--json",
                                 "--levels", "account,user,app", "--shares", str(shares)])  # fmt: skip
    assert r.exit_code == 0, r.output
    tenants = json.loads(r.output)["tenants"]["themis"]
    assert set(tenants["accounts"]) == {"vc_a", "vc_b"} and set(tenants["users"]) == {"vc_a", "vc_b"}
    assert not math.isnan(tenants["accounts"]["vc_a"]["gpu_seconds"])


@pytest.mark.parametrize(("args", "message"), [
    (("--levels", "team,app"), "Invalid value for '--levels': unknown level 'team'"),
    (("--shares", "SHARES"), "Invalid value for '--shares': needs --levels with account or user"),
    (("--levels", "user,app", "--shares", "MISSING"), "none.csv': no such file"),
    (("--levels", "user,app", "--shares", "BAD"), "field shares: value 'x' is not a number >= 0"),
])  # fmt: skip
def test_cli_bad_tenancy_options(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    files = {
        "SHARES": write(tmp_path, "account,user,shares\na,,1\n", "s.csv"),
        "BAD": write(tmp_path, "account,user,shares\na,,x\n", "bad.csv"),
        "MISSING": tmp_path / "none.csv",
    }
    argv = [str(files[a]) if a in files else a for a in args]
    r = CliRunner().invoke(cli, [*QUICK, *argv])
    assert r.exit_code == 2 and message in r.output, r.output


def test_without_the_user_level_an_accounts_apps_split_its_share() -> None:
    """Levels account,app: p, q (X) and r (Y) at t = 20: X and Y 1/2 each, p and q 1/4 (N = 4), r N = 2."""
    rec, _ = run_tiny(Tenancy(("account", "app")))
    assert {a: n for a, (n, _) in rec.seen[20.0].items()} == {"p": 2.0, "q": 2.0, "r": 2.0}  # so far
    at80 = rec.seen[80.0]  # p: (20 x 2 + 30 x 4 + 30 x 2) / 80 (q left at 50); r: 2 throughout
    assert at80["p"][0] == pytest.approx((40 + 120 + 60) / 80) and at80["r"][0] == pytest.approx(2.0)


def test_a_core_that_stops_splitting_equally_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator asks the core about one app per user and relies on its apps splitting the user's
    fraction equally; it checks that against the core's answer for every app once, and stops if it fails."""
    import themis_slurm.sim.engine as engine

    real = engine.tenancy_contention

    def uneven(tenancy: Tenancy, apps: list) -> dict[str, float]:
        out = real(tenancy, apps)
        owners = [a.owner for a in apps]
        return {k: v * (1.5 if owners.count(a.owner) > 1 and a is apps[0] else 1.0)
                for (k, v), a in zip(out.items(), apps, strict=True)}  # fmt: skip

    monkeypatch.setattr(engine, "tenancy_contention", uneven)
    with pytest.raises(RuntimeError, match="no longer splits an entity's fraction equally"):
        run_tiny(NESTED)
