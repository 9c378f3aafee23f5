#!/usr/bin/env bash
# Makes (or updates) the Python environment that the training-example tests run their jobs with:
# tests/ml-requirements.txt (torch CPU, lightning, submitit) in $THEMIS_ML_VENV (default
# /var/tmp/themis-ml-venv). tests/run.sh calls it; the tests skip, saying why, where it is missing.
#
# Why an environment of its own: the project's .venv and its tests never need these ~1 GB of packages, and
# a broken or missing ML install must not touch them. Why Debian's /usr/bin/python3 and a folder outside
# the checkout: the jobs run as the unprivileged test users, who can neither run a Python under /root
# (pyenv) nor enter the checkout. The environment holds third-party packages only (the jobs get this
# checkout's themis_slurm.jobkit as a copy), so clones and worktrees can share it.
#
# torch: only the CPU wheel on this machine's disk (pip's find-links) will do. Where pip finds none without
# an index, the script says so and installs nothing, rather than download PyPI's CUDA build.
# Measured on a fresh venv (no pip cache): 23.5 s, 1,009 MB.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
req=$here/ml-requirements.txt
venv=${THEMIS_ML_VENV:-/var/tmp/themis-ml-venv}
python=${THEMIS_ML_PYTHON:-/usr/bin/python3}

say() { echo "tests/ml-env.sh: $*" >&2; }
if [ ! -x "$python" ]; then
  say "no $python: the ML tests will skip"; exit 0
fi
if [ "$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" != 3.11 ]; then
  say "$python is not Python 3.11 (the CPU wheel of torch on disk is for 3.11): the ML tests will skip"; exit 0
fi
torch_pin=$(grep -E '^torch==' "$req")
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9  # one maker at a time (clones and worktrees share the environment)
if [ ! -x "$venv/bin/python" ]; then
  if ! "$python" -c 'import ensurepip' 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      { apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-venv; } >/dev/null 2>&1 || true
    fi
  fi
  "$python" -m venv "$venv" || { say "could not create $venv: the ML tests will skip"; exit 0; }
fi
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
# the CPU wheel must be at hand (find-links, no index) before anything is installed
if ! "${pip[@]}" --dry-run --no-index --no-deps "$torch_pin" >/dev/null 2>&1; then
  say "no CPU wheel for $torch_pin on this machine (pip's find-links): not downloading PyPI's CUDA build; the ML tests will skip"
  exit 0
fi
"${pip[@]}" -r "$req" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; } >&2
if ! "$venv/bin/python" -c 'import sys, torch, lightning, submitit; sys.exit(not torch.__version__.endswith("+cpu"))'; then
  say "the packages of $req do not import in $venv, or its torch is not the CPU build: the ML tests will skip"
fi
