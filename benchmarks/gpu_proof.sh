#!/usr/bin/env bash
# hpckit on a real GPU machine (H100/H200 with CUDA, PyTorch and its NVIDIA libraries installed, no
# registry reachable): bash benchmarks/gpu_proof.sh [OUT]. Under 10 minutes on one GPU; the evidence goes
# to OUT (default benchmarks/gpu-proof/<date>-<host>). See benchmarks/gpu_proof.py for the steps.
#
# hpckit's own needs that such a machine may lack travel as wheels in .whl/ (git-ignored), fetched on a
# machine with a package index by scripts/gpu-wheels.sh; they are installed into a private folder here.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-benchmarks/gpu-proof/$(date -u +%Y%m%d)-$(hostname -s)}
python=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  site=$(mktemp -d)
  trap 'rm -rf "$site"' EXIT
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1
exec timeout 570 "$python" -m benchmarks.gpu_proof --out "$out"
