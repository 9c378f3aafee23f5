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

# --- the ML environment of the training-example tests (tests/slurm/test_training_e2e.py, marker `ml`) ---
# torch (CPU build), lightning and submitit in an environment of their own, never in .venv (tests/ml-env.sh
# says why and what it costs: about 25 s and 1 GB); only when real-cluster tests run. THEMIS_ML=0 leaves it
# out; those tests then skip, saying why.
if [ "${THEMIS_SKIP_SLURM:-0}" != 1 ] && [ "${THEMIS_ML:-1}" != 0 ]; then
  tests/ml-env.sh || echo "tests/run.sh: tests/ml-env.sh failed: the ML tests will skip" >&2
fi
# --- end of the ML environment ---

read -r -a versions <<<"${THEMIS_SLURM_VERSIONS:-22.05 25.11}"
# Two GPU generations, as most sites have: node1-2 a100, node3-4 h100 (typed jobs must land on their type)
types=${THEMIS_CLUSTER_TYPES:-a100,a100,h100,h100}
started_cluster=0 pids=() stop_others=()
cleanup() {  # stop only the clusters this run started (and a second pass still running after an error)
  for pid in "${pids[@]}"; do kill -- "$pid" 2>/dev/null || true; done
  if [ "${THEMIS_KEEP_CLUSTER:-0}" != 1 ]; then
    if [ "$started_cluster" = 1 ]; then slurm_conf/cluster.sh down || true; fi
    for o in "${stop_others[@]}"; do
      THEMIS_CLUSTER_DIR=${o%%:*} THEMIS_CLUSTER_PORT=${o##*:} slurm_conf/cluster.sh down || true
    done
  fi
}
trap cleanup EXIT
if [ "${THEMIS_SKIP_SLURM:-0}" != 1 ] && [ -x slurm_conf/cluster.sh ]; then
  if ! slurm_conf/cluster.sh status >/dev/null 2>&1; then
    # a stopped cluster of another version or shape is scratch: replace it
    slurm_conf/cluster.sh up --slurm "${versions[0]}" --types "$types" --force
    started_cluster=1
  fi
fi

# The whole suite on Slurm 22.05 (Debian's), and at the same time the real-cluster tests (-m slurm) again on
# Slurm 25.11, on a local cluster of its own (DIR /var/tmp/themis-cluster-25.11, ports from 28815; their
# report lines say "[Slurm 25.11]"; they skip with the reason where no 25.11 is available). The files that
# wait longest run on one more cluster per version (DIR ...-22.05-b and ...-25.11-b, ports from 30815 and
# 32815). The passes share no cluster, munged, slurmdbd or themisd, and the Slurm tests mostly wait on
# Slurm, so running them side by side divides the wall time on a 2-core machine. The other passes' output
# is printed after the first's. With arguments, only the first pass runs, with those arguments;
# THEMIS_SLURM_VERSIONS="25.11" picks passes (the first listed runs on the default cluster).
set +e
rc=0
later=()
if [ $# -eq 0 ] && [ "${THEMIS_SKIP_SLURM:-0}" != 1 ]; then later=("${versions[@]:1}"); fi
dist=${THEMIS_SLURM_DIST:-$here/../shared/slurm}
# pyslurm exists only for 25.11 and must be built against it: install the wheel built for the 25.11 tree
# when there is one (the pyslurm tests skip, saying so, without it), before any pass imports the package
if [[ " ${versions[0]} ${later[*]} " == *" 25.11 "* ]] \
    && ! "$venv/bin/python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("pyslurm") is None)'; then
  for whl in "$dist"/pyslurm-25.11.*.whl; do
    [ -f "$whl" ] && "$venv/bin/python" -m pip install -q "$whl" && break
  done
fi
logs=()
# The real-cluster files that wait longest (a slurmctld outage replayed, the demo, owner requeues waiting for
# BeginTime, ...) run on a second cluster of each version, beside the other files: the tests mostly wait on
# Slurm, so four clusters side by side take about half the wall time of two. THEMIS_TEST_SPLIT=0: one cluster
# per version, as before. Each pass: "VERSION DIR PORT WHAT" (WHAT: all, rest or long).
long_files=(tests/slurm/test_reliability_e2e.py tests/slurm/test_demo.py tests/slurm/test_constraints_e2e.py
            tests/slurm/test_calibration_e2e.py tests/slurm/test_estimate_gaming_e2e.py tests/slurm/test_spank.py
            tests/slurm/test_training_e2e.py)
split=0
if [ $# -eq 0 ] && [ "${THEMIS_SKIP_SLURM:-0}" != 1 ] && [ "${THEMIS_TEST_SPLIT:-1}" != 0 ]; then split=1; fi
ignore=()
for f in "${long_files[@]}"; do ignore+=("--ignore=$f"); done
passes=()
if [ "$split" = 1 ]; then passes+=("${versions[0]} /var/tmp/themis-cluster-${versions[0]}-b 30817 long"); fi
port=28817
for v in "${later[@]}"; do
  passes+=("$v /var/tmp/themis-cluster-$v $port $([ "$split" = 1 ] && echo rest || echo all)")
  if [ "$split" = 1 ]; then passes+=("$v /var/tmp/themis-cluster-$v-b $((port + 4000)) long"); fi
  port=$((port + 1000))
done
for pass in "${passes[@]}"; do
  read -r v other port what <<<"$pass"
  log=$(mktemp "/tmp/themis-tests-$v.XXXXXX")
  if ! THEMIS_CLUSTER_DIR=$other THEMIS_CLUSTER_PORT=$port slurm_conf/cluster.sh status >/dev/null 2>&1; then
    stop_others+=("$other:$port")
    # up before any test runs, so that its installs never overlap the first pass; where it cannot come up,
    # its tests say why (they skip where no 25.11 is at hand, else fail)
    THEMIS_CLUSTER_DIR=$other THEMIS_CLUSTER_PORT=$port slurm_conf/cluster.sh up --slurm "$v" --types "$types" --force \
      >"$log" 2>&1 || echo "tests/run.sh: the Slurm $v cluster in $other did not come up (its pass says why)" >&2
  fi
  case $what in
    long) files=("${long_files[@]}") ;;
    rest) files=(tests/slurm "${ignore[@]}") ;;
    *) files=(tests/slurm) ;;
  esac
  (
    export THEMIS_CLUSTER_DIR=$other THEMIS_CLUSTER_PORT=$port THEMIS_SLURM_VERSION=$v
    echo "== Slurm $v: real-cluster tests ($what; cluster $other) =="
    # separate pytest cache and temp folders: the first pass runs meanwhile
    exec "$venv/bin/python" -m pytest -m slurm "${files[@]}" -p no:cacheprovider \
      --basetemp="/tmp/pytest-themis-$v-$what"
  ) >>"$log" 2>&1 &
  pids+=($!) logs+=("$log")
done
if [ "$split" = 1 ]; then set -- "${ignore[@]}"; fi
THEMIS_SLURM_VERSION=${versions[0]} "$venv/bin/python" -m pytest "$@"
rc=$?
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  r=$?
  cat "${logs[$i]}"
  rm -f "${logs[$i]}"
  [ "$r" = 0 ] || rc=$r
done
pids=()
set -e
exit $rc
