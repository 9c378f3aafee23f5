#!/usr/bin/env bash
# Regenerate docs/evaluation.md and docs/eval/*.png (the paper's evaluation on this implementation).
# Usage: benchmarks/paper_eval.sh [--quick] [--philly-jobs N]      (extra arguments go to benchmarks/paper_eval.py)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${THEMIS_VENV:-$here/.venv}/bin/python
cd "$here"
MPLBACKEND=Agg exec "$py" benchmarks/paper_eval.py "$@"
