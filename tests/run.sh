#!/usr/bin/env bash
# The project's test command (README, .ci/run): on a fresh Debian 12 machine, as root, it installs what the
# tests need, brings up the local Slurm cluster (slurm_conf/cluster.sh), runs ruff and the whole pytest
# suite (unit + Slurm tests), and stops the cluster it started.
# Extra arguments go to pytest, e.g.  tests/run.sh -m "not slurm"  or  tests/run.sh tests/unit -x
# Without arguments the real-cluster tests run a second time on Slurm 25.11 (see below).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

venv=${THEMIS_VENV:-$here/.venv}
if [ ! -x "$venv/bin/python" ]; then
  if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
  fi
  python3 -m venv "$venv"
fi
# systemd-analyze checks the unit file (tests/unit/test_systemd_unit.py); luac5.1/5.3 check job_submit.lua.
need=()
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
command -v luac5.1 >/dev/null 2>&1 || need+=(lua5.1)
command -v luac5.3 >/dev/null 2>&1 || need+=(lua5.3)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"; } >/dev/null 2>&1 \
    || echo "tests/run.sh: could not install ${need[*]}: the tests that need them will skip" >&2
fi
"$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
"$venv/bin/python" -m pip install -q -e ".[test,nvml]"

"$venv/bin/ruff" check .

started_cluster=0
if [ "${THEMIS_SKIP_SLURM:-0}" != 1 ] && [ -x slurm_conf/cluster.sh ]; then
  if ! slurm_conf/cluster.sh status >/dev/null 2>&1; then
    # a stopped cluster of the other version (the 25.11 pass of an earlier run leaves one) is scratch: replace it
    slurm_conf/cluster.sh up --slurm 22.05 --force
    started_cluster=1   # stop only a cluster this run started
  fi
fi
cleanup() { if [ "$started_cluster" = 1 ] && [ "${THEMIS_KEEP_CLUSTER:-0}" != 1 ]; then slurm_conf/cluster.sh down || true; fi; }
trap cleanup EXIT

# The whole suite on Slurm 22.05 (Debian's), then the real-cluster tests (-m slurm) again on Slurm 25.11
# (their report lines say "[Slurm 25.11]"; they skip with the reason where no 25.11 is available). With
# arguments, only the first pass runs, with those arguments; THEMIS_SLURM_VERSIONS="25.11" picks passes.
set +e
rc=0
versions=${THEMIS_SLURM_VERSIONS:-22.05 25.11}
first=1
for v in $versions; do
  if [ "$first" = 1 ]; then
    THEMIS_SLURM_VERSION=$v "$venv/bin/python" -m pytest "$@"
  elif [ $# -eq 0 ] && [ "${THEMIS_SKIP_SLURM:-0}" != 1 ]; then
    echo "== Slurm $v: the real-cluster tests again =="
    # pyslurm exists only for 25.11 and must be built against it: use the wheel built for the 25.11 tree
    # when there is one (the pyslurm tests skip, saying so, without it).
    dist=${THEMIS_SLURM_DIST:-$here/../shared/slurm}
    if [ "$v" = 25.11 ] && ! "$venv/bin/python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("pyslurm") is None)'; then
      for whl in "$dist"/pyslurm-25.11.*.whl; do
        [ -f "$whl" ] && "$venv/bin/python" -m pip install -q "$whl" && break
      done
    fi
    started_cluster=1   # the cluster is now this run's (another version replaced the one found)
    THEMIS_SLURM_VERSION=$v "$venv/bin/python" -m pytest -m slurm tests/slurm
  else
    continue
  fi
  r=$?
  [ "$r" = 0 ] || rc=$r
  first=0
done
set -e
exit $rc
