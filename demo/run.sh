#!/usr/bin/env bash
# demo/run.sh - Themis on a real (local) Slurm cluster in one command. Debian 12, as root.
#
#   demo/run.sh [--quick]     install, start the cluster and themisd, run a workload, show it, summarise
#   demo/stop.sh              stop what the demo started and remove its files
#
# 1. installs the project in .venv (python3-venv from apt if needed);
# 2. brings up the local cluster (slurm_conf/cluster.sh up: 4 nodes x 4 fake GPUs in 2 racks), unless it is up;
# 3. starts themisd with 45 s leases (30 s with --quick) on it, state in $DEMO_DIR (default /var/tmp/themis-demo);
# 4. submits four apps from two users with the --themis-* options (the SPANK plugin), in two acts: first
#    themis-bob (an 8-GPU two-node gang and a sweep array of 2-GPU trials), who gets the whole cluster;
#    then themis-alice (a tagged group "bert" of 4-GPU jobs and an array of 1-GPU trials), who has nothing,
#    so that at the next lease expiry some of bob's GPUs change hands (SIGUSR1, checkpoint, requeue, resume)
#    and the rest are renewed in place. Every job runs docs/examples/ckpt_job.sh;
# 5. shows `themis status` live until the jobs finish, then a summary: every round with the worst rho,
#    the leases that changed hands, renewals, the jobs that resumed from a checkpoint, each app's rho and
#    GPU time, utilisation, and where to look next. themisd and the cluster keep running until demo/stop.sh.
# --quick: a smaller, shorter workload (about 2 minutes in all) for CI.
# Environment: DEMO_DIR; DEMO_API_PORT and DEMO_METRICS_PORT (default 8787 and 9798, on 127.0.0.1);
# THEMIS_CLUSTER_DIR and THEMIS_CLUSTER_PORT pick another local cluster (slurm_conf/cluster.sh).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly here
readonly DEMO_DIR=${DEMO_DIR:-/var/tmp/themis-demo}
readonly API_PORT=${DEMO_API_PORT:-8787} METRICS_PORT=${DEMO_METRICS_PORT:-9798}
quick=0
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo/run.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
die() { echo "demo/run.sh: error: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run me as root (I install packages, start Slurm and act as the test users)"

# ------------------------------------------------------------------------------------------------ 1. install
say "1/5 installing themis-slurm into $here/.venv"
venv=${THEMIS_VENV:-$here/.venv}
if [ ! -x "$venv/bin/python" ]; then
  if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
  fi
  python3 -m venv "$venv"
fi
mkdir -p "$DEMO_DIR"
# flock: pip builds in the checkout (its egg-info), and another install from it may run meanwhile
flock "$here" "$venv/bin/python" -m pip install -q -e "$here" >"$DEMO_DIR/install.log" 2>&1 \
  || { cat "$DEMO_DIR/install.log" >&2; die "pip install failed (log above)"; }
themis=$venv/bin/themis
themisd=$venv/bin/themisd

# ------------------------------------------------------------------------------------------------ 2. cluster
say "2/5 starting the local Slurm cluster (4 nodes x 4 GPUs, 2 racks)"
mkdir -p "$DEMO_DIR"
if [ -s "$DEMO_DIR/themisd.pid" ] && kill -0 "$(cat "$DEMO_DIR/themisd.pid")" 2>/dev/null; then
  die "a demo is already running (themisd pid $(cat "$DEMO_DIR/themisd.pid")): run demo/stop.sh first"
fi
if "$here/slurm_conf/cluster.sh" status >/dev/null 2>&1; then
  echo "already up: the demo will leave it running"
  echo 0 >"$DEMO_DIR/started_cluster"
else
  "$here/slurm_conf/cluster.sh" up --force >/dev/null   # a stopped cluster of another shape or version is replaced
  echo 1 >"$DEMO_DIR/started_cluster"
fi
eval "$("$here/slurm_conf/cluster.sh" env)"
etc=$(dirname "$SLURM_CONF")
cluster_dir=$(dirname "$etc")
# one themisd per cluster: two would fight over the same held jobs. A themisd is on this cluster when its
# environment's SLURM_CONF or its config file names this cluster's slurm.conf (themisd on another cluster
# of this machine is no concern).
for p in /proc/[0-9]*; do
  cmd=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
  case $cmd in *bin/themisd*|*themis_slurm.daemon.main*) ;; *) continue ;; esac
  conf=$(tr '\0' '\n' <"$p/environ" 2>/dev/null | sed -n 's/^SLURM_CONF=//p') || true
  config=$(tr '\0' '\n' <"$p/cmdline" 2>/dev/null | sed -n '/^--config$/{n;p}' | head -1) || true
  config=${config:-/etc/themis/themis.yaml}; [ "${config#/}" != "$config" ] || config=$p/cwd/$config
  if [ "${conf:-/etc/slurm/slurm.conf}" = "$SLURM_CONF" ] || grep -qsF "$SLURM_CONF" "$config"; then
    die "another themisd is running on this cluster (pid ${p#/proc/}: $cmd): stop it first"
  fi
done

# ------------------------------------------------------------------------------------------------ 3. themisd
lease_min=0.75; [ "$quick" = 1 ] && lease_min=0.5
say "3/5 starting themisd (leases of $(awk -v m=$lease_min 'BEGIN{print m*60}') s)"
rm -rf "$DEMO_DIR/state"
sed -e "s|@DIR@|$DEMO_DIR|g" -e "s|@ETC@|$etc|g" -e "s|@CLUSTER@|$cluster_dir|g" -e "s|@LEASE_MIN@|$lease_min|g" \
  -e "s|@API_PORT@|$API_PORT|g" -e "s|@METRICS_PORT@|$METRICS_PORT|g" \
  "$here/demo/themis-demo.yaml" >"$DEMO_DIR/themis.yaml"
"$themisd" --check-config "$DEMO_DIR/themis.yaml"
# the job_submit.lua filter must hold managed jobs for Themis (enforce); the cluster ships it so
grep -q 'mode = "enforce"' "$etc/themis_job_submit.conf.lua" \
  || die "$etc/themis_job_submit.conf.lua is not in mode \"enforce\" (after a themisd handback?): set it back"
setsid "$themisd" run --config "$DEMO_DIR/themis.yaml" >"$DEMO_DIR/themisd.log" 2>&1 </dev/null &
echo $! >"$DEMO_DIR/themisd.pid"
export THEMISD_CONFIG=$DEMO_DIR/themis.yaml
for _ in $(seq 50); do
  "$themis" status >/dev/null 2>&1 && break
  kill -0 "$(cat "$DEMO_DIR/themisd.pid")" 2>/dev/null || { cat "$DEMO_DIR/themisd.log" >&2; die "themisd exited"; }
  sleep 0.2
done
"$themis" status >/dev/null || die "themisd's API did not come up: see $DEMO_DIR/themisd.log"
echo "themisd pid $(cat "$DEMO_DIR/themisd.pid"), log $DEMO_DIR/themisd.log"

# ------------------------------------------------------------------------------------------------ 4. workload
# Two acts, so that a lease changes hands. Act 1: themis-bob arrives on an empty cluster, and Themis gives
# him every GPU (no GPU idles while work waits). Act 2: themis-alice arrives and has nothing, so her apps
# have the worst rho; as bob's leases expire, the auctions move some of his GPUs to her (his jobs get
# SIGUSR1, checkpoint, are requeued and later resume from the checkpoint) and renew the others in place.
say "4/5 submitting: themis-bob first (he gets the whole cluster), then themis-alice"
jobs=$DEMO_DIR/jobs
chmod 0755 "$DEMO_DIR"   # the test users read the job script here and write into jobs/
install -d -m 1777 "$jobs"
install -m 0755 "$here/docs/examples/ckpt_job.sh" "$DEMO_DIR/ckpt_job.sh"
: >"$DEMO_DIR/jobids"
submit() {  # submit USER WORK_SECONDS sbatch-options...
  local user=$1 work=$2; shift 2
  local id
  id=$(cd "$jobs" && runuser -u "$user" -- sbatch --parsable --requeue --open-mode=append -p gpu \
        --output="$jobs/%x-%j.out" --export="ALL,WORK=$work,CKPT_DIR=$jobs" "$@" "$DEMO_DIR/ckpt_job.sh")
  echo "${id%%;*}" >>"$DEMO_DIR/jobids"
  printf '  %-13s %-6s %s\n' "$user" "${id%%;*}" "$*"
}
running_of() { squeue -h -u "$1" -t RUNNING -o %i 2>/dev/null | wc -l; }
started=$(date +%s)
if [ "$quick" = 1 ]; then
  submit themis-bob 70 -J big -N2 --gres=gpu:4 --themis-app=big --themis-model=vgg16 --themis-est=70s
  submit themis-bob 50 -J sweep --array=0-3 --gres=gpu:2 --themis-app=sweep --themis-est=50s
else
  submit themis-bob 110 -J big -N2 --gres=gpu:4 --themis-app=big --themis-model=vgg16 --themis-est=110s
  submit themis-bob 70 -J sweep --array=0-3 --gres=gpu:2 --themis-app=sweep --themis-est=70s
fi
for _ in $(seq 60); do [ "$(running_of themis-bob)" -ge 2 ] && break; sleep 0.5; done
echo "  themis-bob runs $(running_of themis-bob) job(s) on the whole cluster; themis-alice arrives:"
sleep 5
if [ "$quick" = 1 ]; then
  submit themis-alice 45 -J bert --gres=gpu:4 --themis-app=bert --themis-sens=high --themis-est=45s
  submit themis-alice 30 -J trial --array=0-3 --gres=gpu:1 --themis-est=30s
else
  submit themis-alice 60 -J bert --gres=gpu:4 --themis-app=bert --themis-sens=high --themis-est=60s
  submit themis-alice 60 -J bert --gres=gpu:4 --themis-app=bert --themis-sens=high --themis-est=60s
  submit themis-alice 40 -J trial --array=0-5 --gres=gpu:1 --themis-est=40s
fi

# ------------------------------------------------------------------------------------------------ 5. watch
say "5/5 themis status, live (the jobs need about $([ "$quick" = 1 ] && echo 2 || echo 3) minutes)"
limit=$([ "$quick" = 1 ] && echo 240 || echo 480)
mapfile -t ids <"$DEMO_DIR/jobids"
# the jobs already started: the clock runs from bob's arrival
left() { squeue -h -j "$(IFS=,; echo "${ids[*]}")" -o %i 2>/dev/null | wc -l; }
tty=0; [ -t 1 ] && tty=1
last_print=0
while :; do
  n=$(left)
  now=$(date +%s)
  if [ "$tty" = 1 ]; then
    printf '\033[H\033[2J'
    "$themis" status 2>/dev/null || true
    echo; echo "demo: $n job(s) left, $((now - started)) s elapsed (Ctrl-C stops watching; jobs keep running)"
  elif [ $((now - last_print)) -ge 20 ] || [ "$n" = 0 ]; then
    echo "--- $(date +%T), $n job(s) left"; "$themis" status 2>/dev/null || true; last_print=$now
  fi
  [ "$n" = 0 ] && break
  [ $((now - started)) -ge "$limit" ] && { echo "demo: still $n job(s) after ${limit} s: summarising anyway"; break; }
  sleep 3
done
elapsed=$(( $(date +%s) - started ))

# ------------------------------------------------------------------------------------------------ summary
say "Summary"
"$venv/bin/python" "$here/demo/summary.py" --config "$DEMO_DIR/themis.yaml" --elapsed "$elapsed" \
  --start "$started" --jobs-dir "$jobs" \
  --gpus "$(sed -n 's/.*nodes=\([0-9]*\) gpus=\([0-9]*\).*/\1 \2/p' "$cluster_dir/shape" | awk '{print $1*$2}')"
first=$(sed -n 1p "$DEMO_DIR/jobids")   # bob's gang (not an array: explain takes 123 or 123_4)
cat <<TXT

Where to look next:
  $themis explain $first            why a job ran or waited (its rounds, bids, hidden payment, lease)
  $themis apps --all / jobs / topology
  $DEMO_DIR/themisd.log          themisd's decisions, one line each
  http://127.0.0.1:$METRICS_PORT/metrics   Prometheus metrics (Grafana: themis_slurm/site/grafana-dashboard.json)
  http://127.0.0.1:$API_PORT/v1/cluster  the status API (read-only JSON)
  $jobs/*.out      the jobs' output: checkpoints, SIGUSR1 warnings, resumes
  (export THEMISD_CONFIG=$DEMO_DIR/themis.yaml SLURM_CONF=$SLURM_CONF to use these commands)

Stop everything and clean up:  demo/stop.sh
TXT
