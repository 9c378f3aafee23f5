#!/usr/bin/env bash
# Builds the Debian package from this checkout, in one command (Debian 12, as root for the build
# dependencies, which it installs when missing):
#   debian/build-deb.sh [OUTDIR]        -> OUTDIR/themis-slurm_VERSION_amd64.deb (default: dist/)
# It runs dpkg-buildpackage -b (binary only, unsigned); pip fetches the Python dependencies from the package
# index. Install: apt-get install ./dist/themis-slurm_*_amd64.deb (docs/admin-guide.md section 1).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$here/dist}" && cd "${1:-$here/dist}" && pwd)
need=()
for p in debhelper dpkg-dev python3.11-venv; do
  dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; }
fi
# dpkg-buildpackage writes its results into the parent folder: build in a copy of the checkout so that
# nothing outside OUTDIR is touched (and the checkout's own build/ and egg-info are not).
work=$(mktemp -d /tmp/themis-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src"
(cd "$here" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar -cf - | tar -xf - -C "$work/src")
(cd "$work/src" && dpkg-buildpackage -b -us -uc >"$work/build.log" 2>&1) \
  || { tail -40 "$work/build.log" >&2; echo "debian/build-deb.sh: dpkg-buildpackage failed (log above)" >&2; exit 1; }
deb=$(cd "$work" && ls themis-slurm_*.deb)
mv -f "$work/$deb" "$out/"
echo "$out/$deb"
