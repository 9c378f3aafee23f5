"""Tenancy end to end on the real local Slurm cluster (issue 33 items 2 and 7): themisd reads Slurm's
account tree (sshare) and divides the cluster account -> user -> app.

Two accounts are made for the test with ``sacctmgr -i`` (themis-e2e-gold with 3 shares, themis-e2e-silver
with 1), themis-alice in the first and themis-bob in the second; they are removed again afterwards,
whatever happens (jobs cancelled first: Slurm refuses to delete an account with active jobs).

1. themisd (``tenancy.levels: auto`` on a cluster with accounting) logs the tree it read once, stores each
   app's account, feeds each app's contention clock its nested share, and picks up a change of shares
   made with sacctmgr while the jobs run (``refresh_s: 10``).
2. Both accounts saturated (alice splits her work into 16 one-GPU apps, bob submits one 16-task array):
   over a window of four 20 s leases the GPU-seconds held per account follow the shares, 3:1 within 10%.
   Whether they do depends on the core's tenancy-aware auction and leftover; the test samples the cluster
   every second (the managed jobs Slurm shows running, by their Slurm account) and reports the numbers.
3. Two users of one account (both in themis-e2e-gold, one share each), themisd with its default tenancy:
   alice splits her work into 16 apps, bob submits it as one array; splitting buys alice nothing (at most 5%
   more GPU time than bob), and she is not starved (at least 0.85 of his).
"""

from __future__ import annotations

import importlib.util
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import test_daemon_e2e as e2e
from test_daemon_e2e import ALICE, BOB, LEASE_S, make_themisd, submit
from themisd_guard import running_themisd  # tests/slurm is on sys.path under pytest

from themis_slurm.slurm.backend import CliBackend
from themis_slurm.slurm.model import ManagedJob
from themis_slurm.slurm.shares import parse_sshare

if TYPE_CHECKING:
    from conftest import Cluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
daemon_dir = e2e.daemon_dir  # the fixture: a folder themisd's account can reach

GOLD, SILVER = "themis-e2e-gold", "themis-e2e-silver"
SSHARE = ["sshare", "-P", "-a", "-n", "-o", "Account,User,RawShares"]
TREE_LINE = re.compile(r"tenancy: account -> user -> app, (\d+) accounts?, (\d+) users? \(shares from slurm\)")


def _sacctmgr(cluster: Cluster, *args: str) -> None:
    cluster.check(["sacctmgr", "-i", "-Q", *args])


def _active(cluster: Cluster, account: str) -> int:
    out = cluster.run(["squeue", "-h", "-A", account, "-o", "%i"]).stdout
    return len(out.split())


def _remove(cluster: Cluster) -> None:
    """Cancel what the test submitted, wait for the accounts' jobs to leave, delete users' associations
    and the accounts (each step tolerates what is already gone)."""
    cluster.cancel_submitted()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(_active(cluster, a) for a in (GOLD, SILVER)):
        time.sleep(1)
    for account in (GOLD, SILVER):
        for user in (ALICE, BOB):
            cluster.run(["sacctmgr", "-i", "-Q", "delete", "user", f"name={user}", f"account={account}"])
    for account in (GOLD, SILVER):
        cluster.run(["sacctmgr", "-i", "-Q", "delete", "account", account])


def _associations(cluster: Cluster, accounts: dict[str, int], users: dict[str, str]) -> Iterator[Cluster]:
    """`accounts` (name -> Fairshare) with `users` (user -> account) in them, made with sacctmgr and removed
    afterwards whatever happened."""
    shape = dict(item.split("=", 1) for item in (cluster.dir / "shape").read_text().split())
    if shape.get("acct") != "1":
        pytest.skip("the cluster has no accounting (cluster.sh up --no-accounting): no accounts to share")
    other = running_themisd(cluster.env["SLURM_CONF"])
    if other:
        pytest.skip(f"another themisd would start the test's jobs ({other})")
    _remove(cluster)  # a previous run killed before its cleanup
    try:
        for account, shares in accounts.items():
            _sacctmgr(cluster, "add", "account", account, "Cluster=themis-local", f"Fairshare={shares}")
        for user, account in users.items():
            _sacctmgr(cluster, "add", "user", user, f"Account={account}", "Cluster=themis-local")
        deadline = time.monotonic() + 30  # slurmctld learns of new associations from slurmdbd shortly after
        while time.monotonic() < deadline:
            tree = parse_sshare(cluster.check(SSHARE))
            if all((account, user) in tree.users for user, account in users.items()):
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"slurmctld did not show the new associations within 30 s:\n{cluster.check(SSHARE)}")
        yield cluster
    finally:
        _remove(cluster)


@pytest.fixture
def accounts(cluster: Cluster) -> Iterator[Cluster]:
    """gold (3 shares) with alice, silver (1 share) with bob; removed afterwards whatever happened."""
    yield from _associations(cluster, {GOLD: 3, SILVER: 1}, {ALICE: GOLD, BOB: SILVER})


@pytest.fixture
def one_account(cluster: Cluster) -> Iterator[Cluster]:
    """alice and bob, one share each, both in gold."""
    yield from _associations(cluster, {GOLD: 1}, {ALICE: GOLD, BOB: GOLD})


def _wait_for(what: str, check, timeout: float, log: Path):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.5)
    pytest.fail(f"{what} within {timeout:g} s\n--- themisd log ---\n{log.read_text()[-4000:]}")


def _apps(d: e2e.Themisd) -> dict[str, tuple[str, float]]:
    db = d.db()
    try:
        return {
            k: (a, c)
            for k, a, c in db.execute("SELECT app_key, account, clock_current FROM apps WHERE active = 1")
        }
    finally:
        db.close()


@pytest.mark.parametrize("backend", ["cli", "pyslurm"])
def test_themisd_reads_the_tree_and_the_apps_carry_their_accounts(
    accounts: Cluster, daemon_dir: Path, backend: str
) -> None:
    """Both backends read the tree with sshare (pyslurm 25.11 has no shares call: slurm/shares.py)."""
    cluster = accounts
    if backend == "pyslurm" and cluster.slurm != "25.11":
        pytest.skip(f"pyslurm 25.11 needs Slurm 25.11; this cluster is {cluster.slurm}")
    if backend == "pyslurm" and importlib.util.find_spec("pyslurm") is None:
        pytest.skip("pyslurm is not installed (pip install .[pyslurm])")
    d = make_themisd(
        daemon_dir,
        cluster,
        log=f"tenancy-{backend}.log",
        backend=backend,
        tenancy="{levels: auto, refresh_s: 10}",
    )
    try:
        a = submit(cluster, ALICE, "gpu:1", "themis:app=train,est=10m", 600, "-A", GOLD)
        b = submit(cluster, BOB, "gpu:1", "themis:app=eval,est=10m", 600, "-A", SILVER)
        d.start()
        m = _wait_for(
            "no tenancy line in themisd's log", lambda: TREE_LINE.search(d.log.read_text()), 30, d.log
        )
        tree = parse_sshare(cluster.check(SSHARE))
        users = {u for (acct, u) in tree.users if acct != "root"}
        assert (int(m.group(1)), int(m.group(2))) == (len(tree.account_names), len(users))
        assert len(TREE_LINE.findall(d.log.read_text())) == 1  # logged once while the tree stays the same
        assert f"slurm backend {backend}" in d.log.read_text()
        want = {f"{ALICE}/train": GOLD, f"{BOB}/eval": SILVER}

        def stored() -> dict[str, tuple[str, float]] | None:
            got = _apps(d)
            return got if {k: v[0] for k, v in got.items()} == want else None

        apps = _wait_for("the apps not stored with their accounts", stored, 30, d.log)
        # gold 3/4 of the cluster, alice's one app all of it: N = 4/3; silver 1/4: N = 4
        assert apps[f"{ALICE}/train"][1] == pytest.approx(4 / 3)
        assert apps[f"{BOB}/eval"][1] == pytest.approx(4.0)
        assert {j["account"] for j in (cluster.job(a), cluster.job(b))} == {GOLD, SILVER}
        _shown(d, cluster, {GOLD: 0.75, SILVER: 0.25})

        # the tree changes while the jobs run: silver 3 shares, as many as gold
        _sacctmgr(cluster, "modify", "account", SILVER, "set", "Fairshare=3")
        _wait_for(
            "the new shares not applied",
            lambda: _apps(d).get(f"{BOB}/eval", ("", 0.0))[1] == pytest.approx(2.0),
            40,
            d.log,
        )
        assert _apps(d)[f"{ALICE}/train"][1] == pytest.approx(2.0)
        assert "applies from the next round, the apps' clocks keep their history" in d.log.read_text()
        _shown(d, cluster, {GOLD: 0.5, SILVER: 0.5})
    finally:
        d.stop()


def _shown(d: e2e.Themisd, cluster: Cluster, shares: dict[str, float]) -> None:
    """Issue 33 item 5: what `themis apps` shows, from the state database themisd wrote (the API's views in
    database mode, as root): the tree in force without a Slurm call, each account and user with its share."""
    from themis_slurm.api.server import build_app

    api = build_app(d.config.parent / "state" / "themis.db", cluster.env["SLURM_CONF"], snapshot=lambda: None,
                    decoder=lambda cred: 0, names=lambda uid: "root")

    def tenants() -> dict[tuple[str, str | None], float] | None:
        status, doc = api.handle("/v1/apps", "", "MUNGE root")
        assert status == 200, doc
        got = {(t["account"], t["user"]): t["share"] for t in doc["tenancy"]["tenants"]}
        want = {**{(a, None): f for a, f in shares.items()}, (GOLD, ALICE): shares[GOLD], (SILVER, BOB): shares[SILVER]}
        return got if got == pytest.approx(want) else None

    _wait_for(f"the API does not show the accounts' shares {shares}", tenants, 20, d.log)
    _, doc = api.handle("/v1/apps", "", "MUNGE root")
    assert doc["tenancy"]["levels"] == ["account", "user", "app"] and TREE_LINE.match(f"tenancy: {doc['tenancy']['line']}")
    assert {a["app"]: (a["account"], a["tenant"]["user"]) for a in doc["apps"]} == {
        f"{ALICE}/train": (GOLD, ALICE), f"{BOB}/eval": (SILVER, BOB)}


def _gpu_seconds(d: e2e.Themisd, key: Callable[[ManagedJob], str], tenants: tuple[str, str]) -> dict[str, float]:
    """GPU-seconds the managed jobs of each tenant (`key` of a job: its account or its user) held, sampled
    every second over four leases after the first, while both tenants have jobs waiting (the window the
    targets are about: both saturated)."""
    backend = CliBackend()
    _wait_for(
        "no managed job started",
        lambda: any(m.state == "RUNNING" for m in backend.snapshot().managed),
        60,
        d.log,
    )
    time.sleep(LEASE_S + 5)  # one lease: the first round's allocation settles into the auction's
    held = dict.fromkeys(tenants, 0.0)
    start = last = time.monotonic()
    while last - start < 4 * LEASE_S:
        snap = backend.snapshot()
        now = time.monotonic()
        waiting = {t: sum(1 for m in snap.managed if key(m) == t and m.state == "PENDING") for t in held}
        assert all(waiting.values()), f"a tenant is not saturated: waiting jobs {waiting}"
        for m in snap.managed:
            if m.state == "RUNNING" and key(m) in held:
                held[key(m)] += m.gpus * (now - last)
        last = now
        time.sleep(1)
    return held


def _measured(cluster: Cluster, held: dict[str, float]) -> tuple[float, str]:
    first, second = held
    ratio = held[first] / held[second] if held[second] else float("inf")
    total = sum(held.values())
    text = (
        f"GPU-seconds over {4 * LEASE_S:g} s: { {t: round(g) for t, g in held.items()} }, "
        f"fractions { {t: round(g / total, 3) for t, g in held.items()} }, {first}/{second} {ratio:.2f}"
    )
    print(f"Slurm {cluster.slurm}: {text}")  # shown with -rP: the numbers of a passing run too
    return ratio, text


def test_gpu_time_follows_the_accounts_shares(accounts: Cluster, daemon_dir: Path) -> None:
    """Both accounts saturated, alice (gold, 3 shares) splitting her work into one app per job, bob (silver,
    1 share) one array: GPU time 3:1 within 10% (issue 33's target)."""
    cluster = accounts
    d = make_themisd(daemon_dir, cluster, log="tenancy-share.log", tenancy="{levels: auto, refresh_s: 10}")
    total = cluster.nodes * cluster.gpus
    try:
        for _ in range(total):  # alice splits her work: one app per job
            submit(cluster, ALICE, "gpu:1", "themis:est=10m", 600, "-A", GOLD)
        submit(cluster, BOB, "gpu:1", "themis:app=sweep,est=10m", 600, "-A", SILVER, f"--array=0-{total - 1}")
        d.start()
        ratio, measured = _measured(cluster, _gpu_seconds(d, lambda m: m.account, (GOLD, SILVER)))
        assert 2.7 <= ratio <= 3.3, f"{measured} (want 3 +- 10%)"
    finally:
        d.stop()


def test_splitting_buys_a_user_nothing_within_an_account(one_account: Cluster, daemon_dir: Path) -> None:
    """Two users of one account with equal shares, themisd's default tenancy (auto: account -> user -> app):
    alice splits her work into one app per job, bob submits the same work as one array. Splitting buys alice
    nothing: at most 5% more GPU time than bob (with the levels [app], the paper's 1/N per app, she held
    about 95% of it: the issue's measurement). Over four 20 s leases the ratio moves by a few percent either
    way with when jobs start and how long a preempted job takes to leave (grace, requeue): measured alice/bob
    0.96, 0.99 and 1.03 on an idle machine and 0.91 in a CI run with four clusters busy (the simulator, with
    no such delays: 1.00-1.03). The floor of 0.85 says the splitter is not starved either."""
    cluster = one_account
    d = make_themisd(daemon_dir, cluster, log="tenancy-split.log")  # tenancy as themis.yaml's default
    total = cluster.nodes * cluster.gpus
    try:
        for _ in range(total):
            submit(cluster, ALICE, "gpu:1", "themis:est=10m", 600, "-A", GOLD)
        submit(cluster, BOB, "gpu:1", "themis:app=sweep,est=10m", 600, "-A", GOLD, f"--array=0-{total - 1}")
        d.start()
        ratio, measured = _measured(cluster, _gpu_seconds(d, lambda m: m.user, (ALICE, BOB)))
        assert 0.85 <= ratio <= 1.05, f"{measured} (want at most 1.05: splitting buys nothing; at least 0.85)"
        assert TREE_LINE.search(d.log.read_text()), "themisd's default is not the account tree"
    finally:
        d.stop()
