#!/usr/bin/env bash
# CI's Debian-package step (.ci/run, after tests/run.sh): builds the package from this checkout, installs it as
# an admin would (apt-get install ./themis-slurm_*.deb), brings up a local cluster per Slurm version from the
# package's files (its job_submit.lua; the SPANK plugin its install built, and for 25.11 the one
# `themis-spank-build /opt/slurm-25.11/include` builds), runs tests/slurm/test_package_e2e.py on each (the
# installed themisd and themis, not the checkout's), then stops those clusters and purges the package, so the
# machine is as before. Where no Slurm 25.11 tree is installed (tests/run.sh installs it from ../shared/slurm),
# the 25.11 pass is left out, saying so. As root on Debian 12.
#   debian/ci-smoke.sh
# Environment: THEMIS_VENV (the Python with pytest, default .venv), THEMIS_DEB_PORT (slurmctld port of the
# 22.05 cluster, default 34817; 25.11's is 2000 above), THEMIS_DEB_CLUSTER_DIR (the clusters' folder with
# VERSION for the version, default /var/tmp/themis-cluster-VERSION-deb): tests/run.sh's clusters use neither.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
venv=${THEMIS_VENV:-$here/.venv}
export DEBIAN_FRONTEND=noninteractive
types=${THEMIS_CLUSTER_TYPES:-a100,a100,h100,h100}
t0=$SECONDS
clusters=()
cleanup() {
  for c in "${clusters[@]}"; do
    THEMIS_CLUSTER_DIR=${c%%:*} THEMIS_CLUSTER_PORT=${c##*:} slurm_conf/cluster.sh down --purge >/dev/null 2>&1 || true
  done
  if dpkg-query -W -f '${Status}' themis-slurm 2>/dev/null | grep -q "ok installed"; then
    apt-get purge -y -qq themis-slurm >/dev/null 2>&1 || echo "debian/ci-smoke.sh: could not purge themis-slurm" >&2
  fi
}
trap cleanup EXIT

deb=$(debian/build-deb.sh "$here/dist" | tail -1)
echo "== Debian package: built $(basename "$deb") ($(du -m "$deb" | cut -f1) MB) in $((SECONDS - t0)) s"
t1=$SECONDS
apt-get install -y -qq "$deb" >/dev/null
echo "== Debian package: installed in $((SECONDS - t1)) s"
versions=(22.05)
if [ -f /opt/slurm-25.11/include/slurm/spank.h ]; then
  themis-spank-build /opt/slurm-25.11/include >/dev/null
  versions+=(25.11)
else
  echo "== Debian package: no Slurm 25.11 in /opt/slurm-25.11: its pass is left out"
fi
rc=0
port=${THEMIS_DEB_PORT:-34817}
pattern=${THEMIS_DEB_CLUSTER_DIR:-/var/tmp/themis-cluster-VERSION-deb}
for v in "${versions[@]}"; do
  t1=$SECONDS
  dir=${pattern//VERSION/$v}
  clusters+=("$dir:$port")
  export THEMIS_CLUSTER_DIR=$dir THEMIS_CLUSTER_PORT=$port THEMIS_SLURM_VERSION=$v THEMIS_PACKAGE_TEST=1 \
         THEMIS_SITE_FILES=/usr/share/themis-slurm THEMIS_SPANK_SO=/usr/lib/themis-slurm/spank/$v/spank_themis.so
  slurm_conf/cluster.sh up --slurm "$v" --types "$types" --force >/dev/null
  echo "== Debian package on Slurm $v: the installed themisd and themis (cluster $dir)"
  "$venv/bin/python" -m pytest -m slurm tests/slurm/test_package_e2e.py -p no:cacheprovider \
    --basetemp="/tmp/pytest-themis-deb-$v" || rc=1
  echo "== Debian package on Slurm $v: $((SECONDS - t1)) s"
  port=$((port + 2000))
done
echo "== Debian package step: $((SECONDS - t0)) s in all"
exit $rc
