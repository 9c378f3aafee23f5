"""How long the `themis` CLI takes, from the shell's point of view (issue #36 item 2: users put
`themis status` in `watch`; squeue answers in about 50 ms).

Each command is run as a new process, the way a user runs it, ``--runs`` times (7); the table gives the
median, min and max wall time. For scale it also times a bare interpreter start (``python -c pass``).

Where the commands get their answer:

* default: a real status API server started in this process on 127.0.0.1 (an ephemeral port) over the
  unit tests' world (tests/unit/api/world.py: a real state database and a fixed snapshot), reached with
  ``--url``; the CLI tries ``munge -n`` as it always does (without a running munged the request goes
  without a credential and the API answers with aggregates, which the table's note says);
* ``--url URL``: a running themisd (the CLI reads ``--config`` / $THEMISD_CONFIG as usual; give
  SLURM_CONF in the environment for the munge socket).

The CLI runs as ``python -m themis_slurm.cli.main`` from this checkout, or ``--themis PATH`` (an installed
``themis``, e.g. /usr/bin/themis from the Debian package).

    python benchmarks/cli_latency.py                   # table
    python benchmarks/cli_latency.py --json            # the same as JSON
    python benchmarks/cli_latency.py --runs 11 --themis /usr/bin/themis
    python benchmarks/cli_latency.py --url http://127.0.0.1:8787

Loopback only; every run has a 60 s timeout. The aim (#36): `themis status --help` and `themis status`
in at most about 0.3 s on this 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

#: (label, arguments after `themis`); "{url}" is replaced by the API's address. Job 10 is the world's.
COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("--help", ("--help",)),
    ("status --help", ("status", "--help")),
    ("status", ("status", "--url", "{url}")),
    ("apps", ("apps", "--url", "{url}")),
    ("jobs", ("jobs", "--url", "{url}")),
    ("explain 10", ("explain", "10", "--url", "{url}")),
    ("progress --help", ("progress", "--help")),
)
#: The annotated themis.yaml a site installs: `status` once more with it as the config file (read by
#: themisd's own loader, which brings in the core's configuration types).
SHIPPED_YAML = REPO / "themis_slurm" / "site" / "themis.yaml"


def world_server(tmp: Path) -> Any:
    """The real API server over the unit tests' world (as benchmarks/api_load.py starts it)."""
    sys.path.insert(0, str(REPO))
    from tests.unit.api import world  # the unit tests' small world: 8 GPUs, 4 jobs, 2 rounds
    from themis_slurm.api import start_api_server

    db = world.build_store(tmp / "state")
    conf = tmp / "slurm.conf"
    conf.write_text(world.SLURM_CONF_PRIVATE)
    snap = world.snapshot()
    return start_api_server(
        db, "127.0.0.1:0", str(conf), snapshot=lambda: snap, decoder=world.fake_decoder, names=world.names
    )


def time_once(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
    return time.perf_counter() - t0, res


def measure(themis: list[str], url: str, runs: int, env: dict[str, str]) -> list[dict[str, Any]]:
    rows = []
    cases = [("python -c pass", [sys.executable, "-c", "pass"], env)]
    cases += [(label, themis + [a.replace("{url}", url) for a in args], env) for label, args in COMMANDS]
    cases.append(
        (
            "status, themis.yaml",
            themis + ["status", "--url", url],
            dict(env, THEMISD_CONFIG=str(SHIPPED_YAML)),
        )
    )
    for label, argv, case_env in cases:
        times, res = [], None
        for _ in range(runs):
            t, res = time_once(argv, case_env)
            times.append(t)
        assert res is not None
        if res.returncode not in (0, 1):  # 1: an answer such as "not visible to you" (no credential)
            raise SystemExit(
                f"cli_latency: `{' '.join(argv)}` exited {res.returncode}: {res.stderr.strip()[-400:]}"
            )
        lines = res.stderr.strip().splitlines()
        note = (
            f"exit 1: {lines[-1][:70]}"
            if res.returncode
            else next(
                (line.removeprefix("themis: note: ")[:70] for line in lines if "credential" in line), ""
            )
        )
        rows.append(
            {
                "command": label,
                "runs": runs,
                "median_s": statistics.median(times),
                "min_s": min(times),
                "max_s": max(times),
                "note": note,
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7, help="runs per command (the median is reported)")
    ap.add_argument("--themis", default=None, help="an installed themis to time (default: this checkout's)")
    ap.add_argument(
        "--url", default=None, help="a running themisd's API (default: a world server started here)"
    )
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error(f"--runs: value {args.runs} is not a positive number")
    env = dict(os.environ)
    if args.themis:
        themis = [args.themis]
    else:
        themis = [sys.executable, "-m", "themis_slurm.cli.main"]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    server = None
    with tempfile.TemporaryDirectory(prefix="themis-cli-latency-") as tmp:
        if args.url:
            url = args.url
        else:
            server = world_server(Path(tmp))
            url = server.url
            env["THEMISD_CONFIG"] = str(Path(tmp) / "absent.yaml")  # the address is --url's; no site file
            env["SLURM_CONF"] = str(Path(tmp) / "slurm.conf")  # the world's: its munge socket is nowhere
        try:
            rows = measure(themis, url, args.runs, env)
        finally:
            if server is not None:
                server.stop()
    doc = {"themis": " ".join(themis), "api": "world server (this process)" if server else url, "rows": rows}
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    print(f"themis = {doc['themis']}; API: {doc['api']}; {args.runs} runs each\n")
    print(f"{'COMMAND':<20} {'MEDIAN_S':>9} {'MIN_S':>7} {'MAX_S':>7}  NOTE")
    for r in rows:
        print(f"{r['command']:<20} {r['median_s']:>9.3f} {r['min_s']:>7.3f} {r['max_s']:>7.3f}  {r['note']}")


if __name__ == "__main__":
    main()
