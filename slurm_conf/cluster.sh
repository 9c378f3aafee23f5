#!/usr/bin/env bash
# cluster.sh - a real multi-node Slurm cluster on ONE machine, for tests, CI and demos of themis-slurm.
#
#   cluster.sh up [--slurm 22.05|25.11] [--nodes N] [--gpus G] [--racks R] [--types T1,T2..] [--[no-]accounting]
#                 [--dir DIR] [--force]
#   cluster.sh down [--dir DIR] [--purge]
#   cluster.sh status | env | restart-ctld [--dir DIR]
#
# Run as root on Debian 12. Two Slurm versions: 22.05 from Debian (the default), or with --slurm 25.11 the
# tree in /opt/slurm-25.11 (SchedMD's 25.11.7 built for Debian 12; when missing it is unpacked from
# $THEMIS_SLURM_DIST, default ../shared/slurm beside the repository, or rebuilt from the source tarball
# there if the prebuilt tree does not run). One cluster at a time: switching version needs --force.
# `up` installs what is missing (slurmctld, slurmd, slurm-client, munge), writes every file under DIR (default ${THEMIS_CLUSTER_DIR:-/var/tmp/themis-cluster}),
# starts a private munged, one slurmctld and one slurmd per node (Slurm's "multiple-slurmd" mode: every node is
# NodeHostname=localhost NodeAddr=127.0.0.1 with its own port), waits until all nodes are idle, writes
# DIR/env and prints it on stdout (export SLURM_CONF=..., and for 25.11 first export PATH=... with its bin
# and sbin), so   eval "$(slurm_conf/cluster.sh up)"   works.
#
# Shape: N nodes (default 4), each with G fake GPUs (default 4) of one type (--types a100,h100: the list
# cycled over the nodes, node1 a100, node2 h100, ...; default a100) made of character devices
# DIR/dev/nvidiaK (major 195, like the real driver: gres/gpu drops GPUs without a device file). Each node is
# two NVLink islands of G/2 GPUs (gres.conf Links=2 inside an island, 0 across) on two sockets of 8 cores
# (gres.conf Cores=). Nodes are spread over R racks (default 2) under one spine switch (topology.conf).
# Nodes advertise 16 CPUs and 16 GiB whatever the machine has (SlurmdParameters=config_overrides); both are
# consumed (CR_Core_Memory, DefMemPerCPU=1024). Node features: the node's GPU type, plus `ib` on node2, node4, ...
#
# Partitions: `gpu` (Default=YES, all nodes, managed by Themis through job_submit.lua) and `debug`
# (all nodes, NOT managed: Slurm schedules it alone). The job_submit.lua and its config are copied from
# the site files (themis_slurm/site/slurm/ of this checkout, or THEMIS_SITE_FILES: e.g. /usr/share/themis-slurm
# of the Debian package) into DIR/etc (next to slurm.conf, where Slurm looks for them) on every `up`, so an
# edited repository copy is picked up by the next `up` (slurmctld reloads the script when its mtime changes).
# The Themis SPANK plugin (the site files' spank/: sbatch --themis-app=... and friends) is built against the
# version's headers (Debian's libslurm-dev for 22.05, installed if missing; the 25.11 tree's include/) into
# DIR/lib and listed in DIR/etc/plugstack.conf, also on every `up`; THEMIS_SPANK_SO=FILE lists that plugin
# instead (one built elsewhere, e.g. by the Debian package) and builds nothing.
#
# Accounting (the default; --no-accounting leaves it out): a private MariaDB (datadir, socket and pid file
# under DIR/mariadb, TCP on 127.0.0.1:26815 only, so a system MariaDB is untouched; initialised on the first
# `up`) and slurmdbd on port 26816 (DIR/etc/slurmdbd.conf, mode 0600), started before slurmctld.
# slurm.conf then has AccountingStorageType=accounting_storage/slurmdbd, AccountingStorageTRES=gres/gpu
# (GPUs in sacct's AllocTRES) and AccountingStoreFlags=job_comment. `up` registers, when missing, the
# cluster themis-local, the account themis-test with the test users in it, and the daemon's account
# `themis` with AdminLevel=Operator (docs/admin-guide.md). It installs slurmdbd (22.05; Debian's package
# brings the MySQL plugin) and mariadb-server if missing, with a policy-rc.d that stops the package from
# starting the system's MariaDB. The 25.11 tree has no accounting_storage/mysql plugin: the first `up`
# builds just that plugin from the source tarball in $THEMIS_SLURM_DIST (with libmariadb-dev; ~1 min on
# 2 cores). Cost measured on 2 cores: a fresh `up` 8.5 s instead of 1.4 s, a restart of a stopped cluster
# 6 s. Accounting is part of the shape (acct=0|1 in DIR/shape): switching needs --force. Without it,
# AccountingStorageType=accounting_storage/none and no database, as before.
#
# This is a TEST cluster: SlurmUser=root and SlurmdUser=root (fine on a throw-away machine; production runs
# slurmctld as the `slurm` user, see the site files' slurm/slurm.conf.snippet), no cgroups (proctrack/linuxproc,
# task/none), ports 26817 (slurmctld) and 26818.. (one per slurmd) so that a system Slurm on the standard
# 6817/6818 ports is not disturbed. AuthInfo cred_expire=30 makes a plain `scontrol requeue` restart a job
# after ~31 s instead of ~121 s.
#
# Idempotent: `up` of the shape that is already up does nothing (it only refreshes job_submit.lua if the
# repository copy changed) and exits 0; shape flags that contradict a cluster already in DIR are refused
# (exit 1) unless --force, which stops it, deletes DIR and starts the new shape. Without shape flags `up`
# keeps the shape DIR already has. `down` stops exactly the processes it started (pid files under DIR,
# checked against /proc/PID/cmdline), then the job step daemons those slurmd started and their job processes
# (found by SLURM_CONF in their environment), then slurmdbd (found by SLURM_CONF=DIR/etc/slurm.conf in its
# environment) and MariaDB, and keeps every file (the accounting database too): pending and held jobs are
# still queued after the next `up` (running ones are lost). `down --purge` also deletes DIR. `restart-ctld` restarts only
# slurmctld (same StateSaveLocation: jobs and job ids survive; THEMIS_CTLD_DOWN_S=N keeps it down N s). `status` exits 0 when everything is up, 3 when not.
#
# Two unprivileged users, themis-alice and themis-bob (with home directories), are created if missing so
# tests can act as ordinary users:  runuser -u themis-alice -- sbatch -o DIR/jobs/%j.out ...
# and a system user `themis` (home /var/lib/themis, no login shell): the daemon's account.
# DIR/jobs is world-writable and sticky (1777) for job output files.
#
# Environment: THEMIS_SLURM_DIST (folder with the Slurm 25.11 tarballs, default ../shared/slurm beside the
# repository), THEMIS_SLURM25_PREFIX (where 25.11 is installed, default /opt/slurm-25.11),
# THEMIS_CLUSTER_DIR (default DIR), THEMIS_CLUSTER_PORT (slurmctld port, default 26817; a second
# cluster on the same machine needs another DIR and another port), THEMIS_CLUSTER_TIMEOUT (seconds to wait
# for daemons and nodes, default 120: on a busy 2-core machine, four other clusters running their tests, 4
# slurmd took more than 60 s to register), THEMIS_SITE_FILES and THEMIS_SPANK_SO (above).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly SCRIPT_DIR
readonly SITE_FILES=${THEMIS_SITE_FILES:-$SCRIPT_DIR/../themis_slurm/site}
readonly CTLD_PORT=${THEMIS_CLUSTER_PORT:-26817}   # slurmd ports follow: 26818, 26819, ...
readonly TEST_USERS=(themis-alice themis-bob)
readonly CPUS_PER_NODE=16                          # 2 sockets x 8 cores, more than the machine has
readonly MEM_PER_NODE=16384                        # MiB, consumed (CR_Core_Memory)
readonly DEF_MEM_PER_CPU=1024                      # MiB per CPU for jobs without --mem (16 such jobs per node)
readonly WAIT_SECONDS=${THEMIS_CLUSTER_TIMEOUT:-120}

log() { echo "cluster.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
  sed -n '2,6p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# ---------------------------------------------------------------------------------------------- arguments
cmd=${1:-}
[ -n "$cmd" ] || usage
shift
opt_nodes="" opt_gpus="" opt_racks="" opt_force=0 opt_purge=0 opt_slurm="" opt_acct="" opt_types=""
DIR=${THEMIS_CLUSTER_DIR:-/var/tmp/themis-cluster}
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) opt_nodes=${2:?--nodes needs a value}; shift 2 ;;
    --gpus) opt_gpus=${2:?--gpus needs a value}; shift 2 ;;
    --racks) opt_racks=${2:?--racks needs a value}; shift 2 ;;
    --dir) DIR=${2:?--dir needs a value}; shift 2 ;;
    --slurm) opt_slurm=${2:?--slurm needs a value}; shift 2 ;;
    --slurm=*) opt_slurm=${1#*=}; shift ;;
    --nodes=*) opt_nodes=${1#*=}; shift ;;
    --gpus=*) opt_gpus=${1#*=}; shift ;;
    --racks=*) opt_racks=${1#*=}; shift ;;
    --types) opt_types=${2:?--types needs a value}; shift 2 ;;
    --types=*) opt_types=${1#*=}; shift ;;
    --dir=*) DIR=${1#*=}; shift ;;
    --accounting) opt_acct=1; shift ;;
    --no-accounting) opt_acct=0; shift ;;
    --force) opt_force=1; shift ;;
    --purge) opt_purge=1; shift ;;
    -h|--help) usage ;;
    *) die "unknown argument '$1' (see: $0 --help)" ;;
  esac
done
for v in "$opt_nodes" "$opt_gpus" "$opt_racks"; do
  [ -z "$v" ] || [[ "$v" =~ ^[1-9][0-9]*$ ]] || die "--nodes/--gpus/--racks take a positive integer, not '$v'"
done
case "$opt_slurm" in ""|22.05|25.11) ;; *) die "--slurm takes 22.05 or 25.11, not '$opt_slurm'" ;; esac
[ -z "$opt_types" ] || [[ "$opt_types" =~ ^[a-z0-9_]+(,[a-z0-9_]+)*$ ]] \
  || die "--types takes GPU type names separated by commas (a100,h100), not '$opt_types'"
case "$DIR" in /*) ;; *) DIR="$PWD/$DIR" ;; esac
DIR=${DIR%/}
readonly DIR
readonly ETC=$DIR/etc CONF=$DIR/etc/slurm.conf RUN=$DIR/run MUNGE=$DIR/munge
readonly MARKER=$DIR/.themis-cluster SHAPE_FILE=$DIR/shape ENV_FILE=$DIR/env
readonly DB=$DIR/mariadb DBD_CONF=$DIR/etc/slurmdbd.conf
readonly DBD_PORT=$((CTLD_PORT - 1)) DB_PORT=$((CTLD_PORT - 2))   # slurmdbd 26816, MariaDB 26815
readonly ACCT_ACCOUNT=themis-test OPERATOR_USER=themis
export SLURM_CONF=$CONF
readonly SLURM25_PREFIX=${THEMIS_SLURM25_PREFIX:-/opt/slurm-25.11}
readonly SLURM_DIST=${THEMIS_SLURM_DIST:-$SCRIPT_DIR/../../shared/slurm}

# The Slurm version of the cluster in DIR (from its shape file), else the one asked for, else 22.05.
recorded_slurm() { [ -f "$SHAPE_FILE" ] && sed -n 's/.*slurm=\([0-9.]*\).*/\1/p' "$SHAPE_FILE"; }
SLURM_VERSION=$(recorded_slurm || true)
SLURM_VERSION=${SLURM_VERSION:-22.05}
[ "$cmd" = up ] && [ -n "$opt_slurm" ] && WANT_SLURM=$opt_slurm || WANT_SLURM=$SLURM_VERSION
# Accounting (slurmdbd + MariaDB): recorded in the shape file as acct=0|1; a shape file from before this
# option has none, which means 0. A new cluster gets DEFAULT_ACCT unless --accounting/--no-accounting.
readonly DEFAULT_ACCT=1
recorded_acct() {
  [ -f "$SHAPE_FILE" ] || return 1
  local v
  v=$(sed -n 's/.*acct=\([01]\).*/\1/p' "$SHAPE_FILE")
  echo "${v:-0}"
}
ACCT=$(recorded_acct || true)
ACCT=${ACCT:-$DEFAULT_ACCT}
WANT_ACCT=${opt_acct:-$ACCT}
# Put the version's binaries first on PATH (22.05: Debian's in /usr/bin, so the 25.11 tree must be off it).
use_slurm() {
  SLURM_VERSION=$1
  local p="" d
  local IFS=:
  for d in $PATH; do
    case "$d" in "$SLURM25_PREFIX/bin"|"$SLURM25_PREFIX/sbin") ;; *) p+="${p:+:}$d" ;; esac
  done
  PATH=$p
  if [ "$SLURM_VERSION" = 25.11 ]; then PATH="$SLURM25_PREFIX/bin:$SLURM25_PREFIX/sbin:$PATH"; fi
  export PATH
}
use_slurm "$SLURM_VERSION"

# ------------------------------------------------------------------------------------------------ helpers
need_root() { [ "$(id -u)" = 0 ] || die "run me as root (I start daemons and create users)"; }

# Prints the pid in FILE when that process is alive AND its command line mentions PATTERN (a path under
# DIR), so a stale pid file whose number was reused by an unrelated process is never acted upon.
live_pid() {
  local file=$1 pattern=$2 pid
  [ -s "$file" ] || return 1
  pid=$(tr -dc '0-9' <"$file")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$pattern" || return 1
  echo "$pid"
}

acct_words() { if [ "$1" = 1 ]; then echo ", with accounting"; else echo ", no accounting"; fi; }

shape_nodes() { sed -n 's/.*nodes=\([0-9]*\).*/\1/p' "$SHAPE_FILE"; }

node_names() { local n; n=$(shape_nodes); for ((i = 1; i <= n; i++)); do echo "node$i"; done; }

munged_pid() { live_pid "$MUNGE/munged.pid" "$MUNGE/munge.sock"; }
ctld_pid() { live_pid "$RUN/slurmctld.pid" "$CONF"; }
slurmd_pid() { live_pid "$RUN/slurmd-$1.pid" "$CONF -N $1"; }

# Job step daemons started by our slurmd inherit SLURM_CONF=$CONF in their environment: that is how `down`
# finds them without touching a system Slurm's jobs. (Plain /proc reads: procps is not installed everywhere.)
stepd_pids() {
  local d
  for d in /proc/[0-9]*; do
    [ "$(cat "$d/comm" 2>/dev/null)" = slurmstepd ] || continue
    if tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$CONF"; then echo "${d#/proc/}"; fi
  done
}

# The given pids and all their descendants (job scripts started by a slurmstepd are its children).
with_descendants() {
  [ $# -gt 0 ] || return 0
  local -A keep=() parent=()
  local d p stat ppid changed=1
  for p in "$@"; do keep[$p]=1; done
  for d in /proc/[0-9]*; do
    stat=$(cat "$d/stat" 2>/dev/null) || continue
    read -r _ ppid _ <<<"${stat##*) }"   # fields after "(comm) ": state ppid ...
    parent[${d#/proc/}]=$ppid
  done
  while [ "$changed" = 1 ]; do
    changed=0
    for p in "${!parent[@]}"; do
      if [ -z "${keep[$p]:-}" ] && [ -n "${keep[${parent[$p]}]:-}" ]; then keep[$p]=1; changed=1; fi
    done
  done
  printf '%s\n' "${!keep[@]}"
}

# slurmdbd takes no config path (it reads slurmdbd.conf next to $SLURM_CONF), so ours is the slurmdbd whose
# environment carries SLURM_CONF=$CONF; MariaDB's command line names our my.cnf.
dbd_pid() {
  local pid
  [ -s "$RUN/slurmdbd.pid" ] || return 1
  pid=$(tr -dc '0-9' <"$RUN/slurmdbd.pid")
  [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = slurmdbd ] || return 1
  tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$CONF" || return 1
  echo "$pid"
}
mariadb_pid() { live_pid "$DB/mariadbd.pid" "$DB/my.cnf"; }

all_up() {
  [ -f "$SHAPE_FILE" ] && munged_pid >/dev/null && ctld_pid >/dev/null || return 1
  if [ "$ACCT" = 1 ]; then mariadb_pid >/dev/null && dbd_pid >/dev/null || return 1; fi
  local n
  for n in $(node_names); do slurmd_pid "$n" >/dev/null || return 1; done
}

wait_until() { # wait_until SECONDS DESCRIPTION COMMAND...
  local limit=$1 what=$2 start=$SECONDS
  shift 2
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS - start >= limit)); then die "timed out after ${limit}s waiting for $what (logs: $DIR/log)"; fi
    sleep 0.2
  done
}

ctld_responds() { scontrol ping 2>/dev/null | grep -q 'is UP'; }

# All nodes answer and can run jobs: idle/mixed/allocated/completing without a '*' (not responding) and
# nothing unknown/down/drained/invalid.
nodes_ready() {
  local states
  states=$(sinfo -h -N -p debug -o '%T' 2>/dev/null) || return 1
  [ "$(echo "$states" | grep -c .)" = "$(shape_nodes)" ] || return 1
  ! echo "$states" | grep -qvE '^(idle|mixed|allocated|completing)$'
}

print_env() { cat "$ENV_FILE"; }

# ----------------------------------------------------------------------------------------------- install
install_packages() {
  local missing=0 c
  for c in slurmctld slurmd sbatch munged; do command -v "$c" >/dev/null || missing=1; done
  [ -e /usr/lib/x86_64-linux-gnu/slurm-wlm/job_submit_lua.so ] || [ -n "$(find /usr/lib -name job_submit_lua.so -print -quit 2>/dev/null)" ] || missing=1
  [ "$missing" = 1 ] || return 0
  log "installing slurmctld slurmd slurm-client munge"
  local pkgs=(slurmctld slurmd slurm-client munge)
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
  fi
}

# 25.11: the prebuilt tree from $SLURM_DIST (unpacked into /opt), its runtime libraries from Debian, and a
# rebuild from the source tarball when the prebuilt binaries do not run on this machine.
install_slurm25() {
  local deps=(munge libmunge2 libjson-c5 liblua5.3-0 libyaml-0-2 libhttp-parser2.9 libreadline8 libdbus-1-3 libjwt0)
  local missing=()
  local d
  for d in "${deps[@]}"; do dpkg -s "$d" >/dev/null 2>&1 || missing+=("$d"); done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
      || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
  fi
  if [ -x "$SLURM25_PREFIX/sbin/slurmctld" ] && "$SLURM25_PREFIX/sbin/slurmctld" -V >/dev/null 2>&1; then return 0; fi
  local tree src
  tree=$(ls "$SLURM_DIST"/slurm-25.11.*-debian12-amd64.tar.xz 2>/dev/null | head -1 || true)
  src=$(ls "$SLURM_DIST"/slurm-25.11.*.tar.xz 2>/dev/null | grep -v debian12 | head -1 || true)
  [ -n "$tree$src" ] || die "Slurm 25.11 is not installed in $SLURM25_PREFIX and no Slurm 25.11 tarball is in $SLURM_DIST (set THEMIS_SLURM_DIST to the folder holding slurm-25.11.*-debian12-amd64.tar.xz or the source tarball)"
  if [ -n "$tree" ]; then
    log "unpacking $tree into /opt"
    tar xJf "$tree" -C /opt
    if "$SLURM25_PREFIX/sbin/slurmctld" -V >/dev/null 2>&1; then return 0; fi
    log "the prebuilt Slurm 25.11 does not run here: rebuilding it from source"
  fi
  [ -n "$src" ] || die "the prebuilt Slurm 25.11 does not run here and there is no source tarball in $SLURM_DIST"
  build_slurm25 "$src"
}

# What building Slurm 25.11 from source needs (Debian packages), and its configure, for both builds below.
slurm25_build_deps() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends build-essential libmunge-dev libjson-c-dev liblua5.3-dev \
    libyaml-dev libhttp-parser-dev pkg-config libreadline-dev libdbus-1-dev libjwt-dev libmariadb-dev >/dev/null
}
slurm25_configure() {
  ./configure -q --prefix="$SLURM25_PREFIX" --sysconfdir="$SLURM25_PREFIX/etc" --with-munge --enable-pam=no \
    --enable-multiple-slurmd
}

build_slurm25() {
  local src=$1 work
  slurm25_build_deps
  work=$(mktemp -d)
  tar xJf "$src" -C "$work"
  (cd "$work"/slurm-25.11.* && slurm25_configure >/dev/null && make -s -j"$(nproc)" >/dev/null \
      && make -s install >/dev/null) || die "building Slurm 25.11 from $src failed"
  rm -rf "$work"
}

# Accounting needs slurmdbd (Debian's package brings its MySQL plugin) and MariaDB. Installing mariadb-server
# must not start the system's MariaDB: where no policy-rc.d forbids it already, one does for the install.
install_accounting_packages() {
  local pkgs=() p
  [ "$SLURM_VERSION" = 25.11 ] || command -v slurmdbd >/dev/null || pkgs+=(slurmdbd)
  command -v mariadbd >/dev/null && command -v mariadb-install-db >/dev/null || pkgs+=(mariadb-server)
  command -v mariadb >/dev/null || pkgs+=(mariadb-client)
  dpkg -s libmariadb3 >/dev/null 2>&1 || pkgs+=(libmariadb3)
  [ ${#pkgs[@]} -gt 0 ] || return 0
  log "installing ${pkgs[*]} (accounting)"
  local own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d && own_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null; } \
    || p=failed
  [ "$own_policy" = 0 ] || rm -f /usr/sbin/policy-rc.d
  [ "${p:-}" != failed ] || die "installing ${pkgs[*]} failed"
}

# The prebuilt 25.11 tree has no accounting_storage/mysql plugin (it was configured without MariaDB's
# headers). Build just that plugin from the same source tarball with the same configure options, and put it
# next to the others: configure (~1 min on 2 cores) and the plugin's own sources, not all of Slurm.
ensure_slurm25_mysql() {
  local so=$SLURM25_PREFIX/lib/slurm/accounting_storage_mysql.so src work
  [ -f "$so" ] && return 0
  src=$(ls "$SLURM_DIST"/slurm-25.11.*.tar.xz 2>/dev/null | grep -v debian12 | head -1 || true)
  [ -n "$src" ] || die "$so is missing and there is no Slurm 25.11 source tarball in $SLURM_DIST to build it from"
  log "building Slurm 25.11's accounting_storage/mysql plugin from $src (a few minutes, once)"
  slurm25_build_deps
  work=$(mktemp -d)
  tar xJf "$src" -C "$work"
  (cd "$work"/slurm-25.11.* && slurm25_configure \
      && grep -q '^S\["WITH_MYSQL_TRUE"\]=""' config.status \
      && make -s -C src/plugins/accounting_storage/mysql \
      && install -m 0755 src/plugins/accounting_storage/mysql/.libs/accounting_storage_mysql.so "$so") \
      >"$work/build.log" 2>&1 \
    || { log "$(tail -20 "$work/build.log")"; rm -rf "$work"; die "building accounting_storage_mysql.so for Slurm 25.11 from $src failed"; }
  rm -rf "$work"
}

ensure_users() {
  local u
  for u in "${TEST_USERS[@]}"; do
    id -u "$u" >/dev/null 2>&1 || { useradd --create-home --user-group --shell /bin/bash "$u"; log "created user $u"; }
  done
  # The daemon's account (job_submit.lua's `operators`; a Slurm Operator when accounting is on).
  id -u "$OPERATOR_USER" >/dev/null 2>&1 || {
    useradd --system --user-group --create-home --home-dir "/var/lib/$OPERATOR_USER" --shell /usr/sbin/nologin \
      "$OPERATOR_USER"
    log "created system user $OPERATOR_USER"
  }
}

# ------------------------------------------------------------------------------------------------ config
# Node k of N goes to rack r when floor((r-1)*N/R) < k <= floor(r*N/R): racks differ by at most one node.
write_topology() {
  local nodes=$1 racks=$2 r lo hi
  {
    echo "# Generated by slurm_conf/cluster.sh: $racks racks under one spine switch."
    for ((r = 1; r <= racks; r++)); do
      lo=$(((r - 1) * nodes / racks + 1)); hi=$((r * nodes / racks))
      if ((lo == hi)); then echo "SwitchName=rack$r Nodes=node$lo"; else echo "SwitchName=rack$r Nodes=node[$lo-$hi]"; fi
    done
    if ((racks == 1)); then echo "SwitchName=spine Switches=rack1"; else echo "SwitchName=spine Switches=rack[1-$racks]"; fi
  } >"$ETC/topology.conf"
}

# One File= per line so that Links= can be given (gres.conf requires it). Island of GPU i = i / ceil(G/2);
# island 0 sits on socket 0 (cores 0-7), island 1 on socket 1 (cores 8-15).
write_gres() {
  local nodes=$1 gpus=$2 types=$3 half i k n links island
  half=$(((gpus + 1) / 2))
  {
    echo "# Generated by slurm_conf/cluster.sh: fake GPUs ($types, one type per node, cycling), two NVLink"
    echo "# islands of $half GPUs per node."
    echo "AutoDetect=off"
    for ((n = 1; n <= nodes; n++)); do
      for ((i = 0; i < gpus; i++)); do
        island=$((i / half)); links=""
        for ((k = 0; k < gpus; k++)); do
          if ((k == i)); then links+="-1"; elif ((k / half == island)); then links+="2"; else links+="0"; fi
          ((k == gpus - 1)) || links+=","
        done
        echo "NodeName=node$n Name=gpu Type=$(node_type "$types" "$n") File=$DIR/dev/nvidia$i Cores=$((island * 8))-$((island * 8 + 7)) Links=$links"
      done
    done
  } >"$ETC/gres.conf"
}

# The GPU type of node N: the types list (a100,h100) cycled over the nodes.
node_type() {
  local -a list
  IFS=, read -r -a list <<<"$1"
  echo "${list[$((($2 - 1) % ${#list[@]}))]}"
}

# The features of node N (sbatch --constraint): its GPU type, and `ib` on every second node (node2, node4,
# ...), so that a job can ask for a type and a fabric together (--constraint="h100&ib": node4 of a100,a100,h100,h100).
node_features() {
  local f
  f=$(node_type "$1" "$2")
  (($2 % 2 == 0)) && f+=",ib"
  echo "$f"
}

write_slurm_conf() {
  local nodes=$1 gpus=$2 types=$3 i
  {
    cat <<EOF
# Generated by slurm_conf/cluster.sh for a local TEST cluster (Slurm $SLURM_VERSION, $nodes nodes x $gpus GPUs); do not edit,
# edit cluster.sh. Production settings: see themis_slurm/site/slurm/slurm.conf.snippet.
ClusterName=themis-local
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmdPort=$((CTLD_PORT + 1))
# Test cluster only: daemons run as root. Production: SlurmUser=slurm.
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE/munge.sock,cred_expire=30
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$ETC/plugstack.conf
TmpFS=$DIR/tmp
MailProg=/bin/true
$( [ "$SLURM_VERSION" = 25.11 ] && echo "PluginDir=$SLURM25_PREFIX/lib/slurm" )
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$(accounting_conf)
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.log
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
# CPUs and memory are consumed as on a production GPU cluster: a job without --mem gets DefMemPerCPU
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$DEF_MEM_PER_CPU
GresTypes=gpu
TopologyPlugin=topology/tree
# Themis: managed jobs are held at submit by job_submit.lua (next to this file) and released by the daemon.
JobSubmitPlugins=lua
JobRequeue=1
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=30
KillWait=2
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
MessageTimeout=10
EOF
    for ((i = 1; i <= nodes; i++)); do
      echo "NodeName=node$i NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((CTLD_PORT + i)) CPUs=$CPUS_PER_NODE Boards=1 SocketsPerBoard=2 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=$MEM_PER_NODE Features=$(node_features "$types" "$i") Gres=gpu:$(node_type "$types" "$i"):$gpus State=UNKNOWN"
    done
    echo "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    echo "PartitionName=debug Nodes=ALL MaxTime=INFINITE State=UP"
  } >"$CONF"
}

# slurm.conf lines for accounting: to slurmdbd (gres/gpu in AllocTRES, job comments stored) or none.
accounting_conf() {
  if [ "$ACCT" = 1 ]; then
    cat <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$MUNGE/munge.sock
AccountingStorageTRES=gres/gpu
AccountingStoreFlags=job_comment
EOF
  else
    echo "AccountingStorageType=accounting_storage/none"
  fi
}

# A private MariaDB (datadir, socket, pid file under DIR/mariadb, TCP on 127.0.0.1:$DB_PORT only) and
# slurmdbd.conf (mode 0600: it holds the database password, generated once per DIR).
write_accounting_conf() {
  mkdir -p "$DB/data" && chmod 0700 "$DB"
  if [ ! -s "$DB/slurm.pass" ]; then (umask 077 && od -An -N12 -tx1 /dev/urandom | tr -d ' \n' >"$DB/slurm.pass"); fi
  cat >"$DB/my.cnf" <<EOF
# Generated by slurm_conf/cluster.sh: the test cluster's own MariaDB (a system MariaDB is not touched).
[mariadbd]
datadir=$DB/data
socket=$DB/mariadbd.sock
pid-file=$DB/mariadbd.pid
log-error=$DIR/log/mariadbd.log
port=$DB_PORT
bind-address=127.0.0.1
user=root
skip-name-resolve
skip-log-bin
innodb_buffer_pool_size=64M
innodb_log_file_size=16M
innodb_flush_log_at_trx_commit=2
innodb_doublewrite=0
innodb_lock_wait_timeout=900
[client]
socket=$DB/mariadbd.sock
user=root
EOF
  (umask 077 && cat >"$DBD_CONF.new" <<EOF
# Generated by slurm_conf/cluster.sh for the local TEST cluster (slurmdbd reads it next to slurm.conf).
AuthType=auth/munge
AuthInfo=socket=$MUNGE/munge.sock
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$RUN/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$(cat "$DB/slurm.pass")
StorageLoc=slurm_acct_db
$( [ "$SLURM_VERSION" = 25.11 ] && echo "PluginDir=$SLURM25_PREFIX/lib/slurm" )
EOF
  ) && mv -f "$DBD_CONF.new" "$DBD_CONF"
}

# Copies job_submit.lua and its config next to slurm.conf when the site files' copy differs. cp gives the
# copy a new mtime, which is what makes slurmctld reload the script. The config's fail-open is off on the
# test cluster (no themisd runs for most tests: every job would go unheld) and its heartbeat file is
# DIR/themisd/heartbeat (DIR/themisd belongs to the daemon's account `themis`); the fail-open tests turn it
# on in their own copy.
refresh_lua() {
  local f changed=0
  install -d -m 0755 "$DIR/themisd"
  if id themis >/dev/null 2>&1; then chown themis: "$DIR/themisd"; fi
  for f in job_submit.lua themis_job_submit.conf.lua; do
    [ -f "$SITE_FILES/slurm/$f" ] || die "missing $SITE_FILES/slurm/$f"
    if [ "$f" = themis_job_submit.conf.lua ]; then
      sed -e "s|^\(  heartbeat_file = \).*|\1\"$DIR/themisd/heartbeat\",|" \
          -e "s|^\(  fail_open_after_s = \).*|\10,|" "$SITE_FILES/slurm/$f" > "$ETC/$f.new"
    else
      cp "$SITE_FILES/slurm/$f" "$ETC/$f.new"
    fi
    if ! cmp -s "$ETC/$f.new" "$ETC/$f"; then
      chmod 0644 "$ETC/$f.new" && mv -f "$ETC/$f.new" "$ETC/$f"
      changed=1
    else
      rm -f "$ETC/$f.new"
    fi
  done
  # Touch the script last so a config-only change also makes slurmctld reload both.
  if [ "$changed" = 1 ]; then touch "$ETC/job_submit.lua"; log "installed job_submit.lua and config into $ETC"; fi
}

# Builds the Themis SPANK plugin (the site files' spank/) against this Slurm's headers into DIR/lib and lists
# it in plugstack.conf, so sbatch/salloc/srun know --themis-*. Rebuilt when a source is newer than the build.
# With THEMIS_SPANK_SO, lists that plugin instead.
refresh_spank() {
  local inc src=$SITE_FILES/spank so=$DIR/lib/spank_themis.so
  if [ -n "${THEMIS_SPANK_SO:-}" ]; then
    [ -f "$THEMIS_SPANK_SO" ] || die "THEMIS_SPANK_SO=$THEMIS_SPANK_SO: no such file"
    so=$THEMIS_SPANK_SO
  else
    if [ "$SLURM_VERSION" = 25.11 ]; then inc=$SLURM25_PREFIX/include; else inc=/usr/include; fi
    local need=()
    [ -f "$inc/slurm/spank.h" ] || need+=(libslurm-dev)
    command -v cc >/dev/null || need+=(gcc libc6-dev)
    command -v make >/dev/null || need+=(make)
    if [ ${#need[@]} -gt 0 ]; then
      log "installing ${need[*]} (to build the SPANK plugin)"
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
        || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; }
    fi
    if [ ! -f "$so" ] || [ -n "$(find "$src" -newer "$so" -name '*.[ch]' -print -quit)" ]; then
      make -s -C "$src" SLURM_INCLUDE="$inc" BUILD="$DIR/lib" "$DIR/lib/spank_themis.so" >"$DIR/log/spank-build.log" 2>&1 \
        || die "building the SPANK plugin failed: $(cat "$DIR/log/spank-build.log")"
      chmod 0755 "$DIR/lib"
      log "built the SPANK plugin $so"
    fi
  fi
  local line="required $so"
  if [ "$(cat "$ETC/plugstack.conf" 2>/dev/null)" != "$line" ]; then echo "$line" >"$ETC/plugstack.conf"; fi
}

make_tree() {
  local nodes=$1 gpus=$2 racks=$3 types=$4 i
  mkdir -p "$DIR"
  chmod 0755 "$DIR"
  touch "$MARKER"
  mkdir -p "$ETC" "$RUN" "$DIR/state" "$DIR/log" "$DIR/dev" "$DIR/tmp" "$MUNGE"
  for ((i = 1; i <= nodes; i++)); do mkdir -p "$DIR/spool/node$i"; done
  mkdir -p "$DIR/jobs" && chmod 1777 "$DIR/jobs" "$DIR/tmp"
  chmod 0711 "$MUNGE"   # clients (the test users) must reach the socket, not list the key
  for ((i = 0; i < gpus; i++)); do
    if [ ! -c "$DIR/dev/nvidia$i" ]; then rm -f "$DIR/dev/nvidia$i"; mknod -m 0666 "$DIR/dev/nvidia$i" c 195 "$i"; fi
  done
  if [ ! -s "$MUNGE/munge.key" ]; then
    (umask 077 && dd if=/dev/urandom of="$MUNGE/munge.key" bs=1024 count=1 status=none)
  fi
  write_slurm_conf "$nodes" "$gpus" "$types"
  write_gres "$nodes" "$gpus" "$types"
  write_topology "$nodes" "$racks"
  refresh_lua
  refresh_spank
  echo "nodes=$nodes gpus=$gpus racks=$racks slurm=$SLURM_VERSION acct=$ACCT types=$types" >"$SHAPE_FILE"
  {
    if [ "$SLURM_VERSION" = 25.11 ]; then echo "export PATH=$SLURM25_PREFIX/bin:$SLURM25_PREFIX/sbin:\$PATH"; fi
    echo "export SLURM_CONF=$CONF"
  } >"$ENV_FILE"
}

# ------------------------------------------------------------------------------------------------ daemons
start_munged() {
  munged_pid >/dev/null && return 0
  rm -f "$MUNGE/munge.sock" "$MUNGE/munge.sock.lock"
  munged --socket="$MUNGE/munge.sock" --key-file="$MUNGE/munge.key" --pid-file="$MUNGE/munged.pid" \
    --seed-file="$MUNGE/munged.seed" --log-file="$MUNGE/munged.log" --num-threads=4
  wait_until 10 "munged socket" test -S "$MUNGE/munge.sock"
}

start_ctld() {
  ctld_pid >/dev/null && return 0
  slurmctld -f "$CONF"
  wait_until "$WAIT_SECONDS" "slurmctld to answer" ctld_responds
}

start_slurmds() {
  local n
  for n in $(node_names); do
    slurmd_pid "$n" >/dev/null || slurmd -f "$CONF" -N "$n"
  done
}

# MariaDB: a new datadir is initialised first (root over the private socket only); then the account
# slurmdbd uses, on 127.0.0.1 with the generated password (CREATE/ALTER are idempotent).
start_mariadb() {
  if ! mariadb_pid >/dev/null; then
    if [ ! -d "$DB/data/mysql" ]; then
      mariadb-install-db --defaults-file="$DB/my.cnf" --auth-root-authentication-method=socket --skip-test-db \
        >"$DIR/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed: $(tail -5 "$DIR/log/mariadb-install.log")"
    fi
    rm -f "$DB/mariadbd.sock"
    setsid mariadbd --defaults-file="$DB/my.cnf" </dev/null >>"$DIR/log/mariadbd.log" 2>&1 &
    wait_until "$WAIT_SECONDS" "MariaDB to answer" mariadb --defaults-file="$DB/my.cnf" -e 'SELECT 1'
  fi
  local pass
  pass=$(cat "$DB/slurm.pass")
  mariadb --defaults-file="$DB/my.cnf" <<EOF || die "setting up the slurm database account failed"
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
EOF
}

dbd_responds() { sacctmgr -n -P list cluster format=cluster >/dev/null 2>&1; }

start_dbd() {
  dbd_pid >/dev/null || slurmdbd
  wait_until "$WAIT_SECONDS" "slurmdbd to answer" dbd_responds
}

# The cluster, one account, the test users in it, and the daemon's account `themis` as a Slurm Operator
# (what docs/admin-guide.md tells admins to do). Only what is missing is added.
register_accounting() {
  local have u
  have=$(sacctmgr -n -P list cluster format=cluster)
  grep -qxF themis-local <<<"$have" || sacctmgr -i -Q add cluster themis-local >/dev/null
  have=$(sacctmgr -n -P list account format=account)
  grep -qxF "$ACCT_ACCOUNT" <<<"$have" || sacctmgr -i -Q add account "$ACCT_ACCOUNT" Cluster=themis-local \
    Description="themis-slurm tests" Organization=themis >/dev/null
  have=$(sacctmgr -n -P list user format=user,adminlevel)
  for u in "${TEST_USERS[@]}" "$OPERATOR_USER"; do
    grep -q "^$u|" <<<"$have" || sacctmgr -i -Q add user "$u" Account="$ACCT_ACCOUNT" Cluster=themis-local >/dev/null
  done
  grep -qxF "$OPERATOR_USER|Operator" <<<"$have" \
    || sacctmgr -i -Q modify user "$OPERATOR_USER" set AdminLevel=Operator >/dev/null
  [ "$(sacctmgr -n -P list user "$OPERATOR_USER" format=adminlevel)" = Operator ] \
    || die "could not make $OPERATOR_USER a Slurm Operator"
}

# TERM the given pids, wait for them to exit, KILL what is left after 20 s.
stop_pids() {
  local pids=("$@") p start=$SECONDS alive
  [ ${#pids[@]} -gt 0 ] || return 0
  kill -TERM "${pids[@]}" 2>/dev/null || true
  while :; do
    alive=()
    for p in "${pids[@]}"; do [ -d "/proc/$p" ] && alive+=("$p"); done
    [ ${#alive[@]} -gt 0 ] || return 0
    if ((SECONDS - start >= 20)); then log "killing ${alive[*]} (did not stop within 20s)"; kill -KILL "${alive[@]}" 2>/dev/null || true; return 0; fi
    sleep 0.1
  done
}

# ------------------------------------------------------------------------------------------------ commands
cmd_up() {
  need_root
  local nodes gpus racks types
  if [ -f "$SHAPE_FILE" ]; then
    local cur_nodes cur_gpus cur_racks cur_types
    cur_nodes=$(shape_nodes)
    cur_gpus=$(sed -n 's/.*gpus=\([0-9]*\).*/\1/p' "$SHAPE_FILE")
    cur_racks=$(sed -n 's/.*racks=\([0-9]*\).*/\1/p' "$SHAPE_FILE")
    cur_types=$(sed -n 's/.*types=\([a-z0-9_,]*\).*/\1/p' "$SHAPE_FILE")
    cur_types=${cur_types:-a100}   # clusters made before --types existed
    nodes=${opt_nodes:-$cur_nodes} gpus=${opt_gpus:-$cur_gpus} racks=${opt_racks:-$cur_racks}
    types=${opt_types:-$cur_types}
    if [ "$nodes/$gpus/$racks/$types/$WANT_SLURM/$WANT_ACCT" != "$cur_nodes/$cur_gpus/$cur_racks/$cur_types/$SLURM_VERSION/$ACCT" ]; then
      if [ "$opt_force" != 1 ]; then
        log "$DIR holds a Slurm $SLURM_VERSION cluster of $cur_nodes nodes x $cur_gpus GPUs ($cur_types) in $cur_racks racks$(acct_words "$ACCT"); you asked for Slurm $WANT_SLURM, $nodes x $gpus ($types) in $racks$(acct_words "$WANT_ACCT")."
        log "use 'up --force' to replace it (its jobs are lost) or another --dir"
        exit 1
      fi
      log "replacing the Slurm $SLURM_VERSION $cur_nodes x $cur_gpus cluster in $DIR (--force)"
      cmd_down_impl 1
      use_slurm "$WANT_SLURM"
    elif all_up; then
      refresh_lua
      refresh_spank
      log "already up (Slurm $SLURM_VERSION, $nodes nodes x $gpus GPUs ($types), $racks racks$(acct_words "$ACCT")) in $DIR"
      print_env
      return 0
    fi
  fi
  nodes=${nodes:-${opt_nodes:-4}} gpus=${gpus:-${opt_gpus:-4}} racks=${racks:-${opt_racks:-2}}
  types=${types:-${opt_types:-a100}}
  ((racks <= nodes)) || die "--racks $racks is more than --nodes $nodes"
  ((nodes <= 64)) || die "--nodes $nodes: at most 64 nodes (one port each from $((CTLD_PORT + 1)))"
  use_slurm "$WANT_SLURM"
  install_packages
  if [ "$SLURM_VERSION" = 25.11 ]; then install_slurm25; fi
  ACCT=$WANT_ACCT
  if [ "$ACCT" = 1 ]; then
    install_accounting_packages
    if [ "$SLURM_VERSION" = 25.11 ]; then ensure_slurm25_mysql; fi
  fi
  ensure_users
  make_tree "$nodes" "$gpus" "$racks" "$types"
  start_munged
  if [ "$ACCT" = 1 ]; then
    write_accounting_conf
    start_mariadb
    start_dbd
    register_accounting
  fi
  start_ctld
  start_slurmds
  wait_until "$WAIT_SECONDS" "all $nodes nodes to be idle" nodes_ready
  log "up: Slurm $SLURM_VERSION, $nodes nodes x $gpus GPUs ($types) in $racks racks$(acct_words "$ACCT"), state in $DIR"
  print_env
}

# Stops what we started (slurmd + slurmctld together, then their job steps, then munged); purge=1 also
# deletes DIR (only if it carries our marker file, so a mistyped --dir cannot remove someone's data).
cmd_down_impl() {
  local purge=$1 pids=() p n
  if [ -f "$SHAPE_FILE" ]; then
    for n in $(node_names); do p=$(slurmd_pid "$n") && pids+=("$p"); done
  fi
  p=$(ctld_pid) && pids+=("$p")
  stop_pids "${pids[@]}"
  # Job step daemons ignore SIGTERM: end their job processes and them with TERM, then KILL after KillWait.
  mapfile -t pids < <(stepd_pids)
  mapfile -t pids < <(with_descendants "${pids[@]}")
  if [ ${#pids[@]} -gt 0 ]; then
    kill -TERM "${pids[@]}" 2>/dev/null || true
    local alive
    for _ in $(seq 20); do   # up to 2 s for the job processes to end (the step daemons themselves ignore TERM)
      alive=0
      for p in "${pids[@]}"; do
        if [ -d "/proc/$p" ] && [ "$(cat "/proc/$p/comm" 2>/dev/null)" != slurmstepd ]; then alive=1; break; fi
      done
      [ "$alive" = 1 ] || break
      sleep 0.1
    done
    kill -KILL "${pids[@]}" 2>/dev/null || true
  fi
  # slurmdbd after slurmctld (which sends it the last job records on the way down), then MariaDB.
  if p=$(dbd_pid); then stop_pids "$p"; fi
  if p=$(mariadb_pid); then stop_pids "$p"; fi
  if p=$(munged_pid); then stop_pids "$p"; fi
  if [ "$purge" = 1 ] && [ -d "$DIR" ]; then
    [ -f "$MARKER" ] || die "$DIR has no $MARKER: not deleting it"
    rm -rf "$DIR"
    log "deleted $DIR"
  fi
}

cmd_down() {
  need_root
  cmd_down_impl "$opt_purge"
  log "down ($DIR)"
}

cmd_status() {
  local rc=0 p n
  if [ ! -f "$SHAPE_FILE" ]; then echo "no cluster in $DIR"; exit 3; fi
  echo "dir: $DIR ($(cat "$SHAPE_FILE"))"
  if p=$(munged_pid); then echo "munged: running (pid $p)"; else echo "munged: stopped"; rc=3; fi
  if [ "$ACCT" = 1 ]; then
    if p=$(mariadb_pid); then echo "mariadbd: running (pid $p, 127.0.0.1:$DB_PORT)"; else echo "mariadbd: stopped"; rc=3; fi
    if p=$(dbd_pid); then echo "slurmdbd: running (pid $p)"; else echo "slurmdbd: stopped"; rc=3; fi
  fi
  if p=$(ctld_pid); then echo "slurmctld: running (pid $p)"; else echo "slurmctld: stopped"; rc=3; fi
  for n in $(node_names); do
    if p=$(slurmd_pid "$n"); then echo "slurmd $n: running (pid $p)"; else echo "slurmd $n: stopped"; rc=3; fi
  done
  if [ "$rc" = 0 ]; then
    if ctld_responds; then sinfo -N -o '%N %P %T %G' 2>/dev/null || true; else echo "slurmctld does not answer"; rc=3; fi
  fi
  exit "$rc"
}

cmd_env() {
  [ -f "$ENV_FILE" ] || die "no cluster in $DIR (run: $0 up)"
  print_env
}

cmd_restart_ctld() {
  need_root
  [ -f "$SHAPE_FILE" ] || die "no cluster in $DIR (run: $0 up)"
  local p
  if p=$(ctld_pid); then stop_pids "$p"; fi
  # THEMIS_CTLD_DOWN_S keeps it away that long: Slurm clients retry a refused connection for MessageTimeout
  # (10 s here) before they fail, so only a longer absence makes a client's read fail.
  if [ -n "${THEMIS_CTLD_DOWN_S:-}" ]; then sleep "$THEMIS_CTLD_DOWN_S"; fi
  start_munged
  start_ctld
  start_slurmds
  wait_until "$WAIT_SECONDS" "nodes to answer the restarted slurmctld" nodes_ready
  log "slurmctld restarted"
}

case "$cmd" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) cmd_env ;;
  restart-ctld) cmd_restart_ctld ;;
  -h|--help|help) usage ;;
  *) die "unknown command '$cmd' (up, down, status, env, restart-ctld)" ;;
esac
