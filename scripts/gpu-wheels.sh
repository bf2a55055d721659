#!/usr/bin/env bash
# The wheels benchmarks/gpu_proof.sh needs on a GPU machine that has PyTorch, pandas, pyarrow, click, PyYAML
# and nvidia-ml-py but no package index: pydantic and what it needs, at the versions this checkout's
# virtualenv runs, for that machine's Python (default 3.12). Run here, where pip reaches an index; the
# wheels land in .whl/ (git-ignored), which travels with the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
pyver=${1:-3.12}
venv=.venv/bin/python
mkdir -p .whl
for name in pydantic pydantic_core annotated-types typing-inspection; do
  version=$("$venv" -m pip show "$name" | sed -n 's/^Version: //p')
  [ -n "$version" ] || { echo "gpu-wheels: $name is not installed in .venv" >&2; exit 1; }
  "$venv" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "$name==$version"
done
ls -l .whl
