#!/usr/bin/env bash
# demo/stop.sh - undo demo/run.sh: cancel the demo's jobs, stop its themisd, stop the local cluster if the
# demo started it, delete $DEMO_DIR (default /var/tmp/themis-demo). Safe to run twice.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly DEMO_DIR=${DEMO_DIR:-/var/tmp/themis-demo}
[ "$(id -u)" = 0 ] || { echo "demo/stop.sh: error: run me as root" >&2; exit 1; }
if [ ! -d "$DEMO_DIR" ]; then echo "demo/stop.sh: nothing to stop ($DEMO_DIR does not exist)"; exit 0; fi

if "$here/slurm_conf/cluster.sh" status >/dev/null 2>&1; then
  eval "$("$here/slurm_conf/cluster.sh" env)"
  if [ -s "$DEMO_DIR/jobids" ]; then
    mapfile -t ids <"$DEMO_DIR/jobids"
    scancel "${ids[@]}" 2>/dev/null || true
    echo "cancelled the demo's jobs: ${ids[*]}"
  fi
fi

# the pid must still be our themisd (not a reused pid): check its command line
if [ -s "$DEMO_DIR/themisd.pid" ]; then
  pid=$(cat "$DEMO_DIR/themisd.pid")
  if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$DEMO_DIR/themis.yaml"; then
    kill -TERM "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    echo "stopped themisd (pid $pid)"
  fi
fi

if [ "$(cat "$DEMO_DIR/started_cluster" 2>/dev/null || echo 0)" = 1 ]; then
  "$here/slurm_conf/cluster.sh" down --purge >/dev/null
  echo "stopped the local Slurm cluster the demo started"
fi
rm -rf "$DEMO_DIR"
echo "removed $DEMO_DIR"
