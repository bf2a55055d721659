#!/usr/bin/env bash
# hpckit's whole check: lint, types, Ansible lint, then every test (the lab tests need root).
set -euo pipefail
cd "$(dirname "$0")/.."
V=.venv/bin
$V/ruff check hpckit tests benchmarks
$V/ruff format --check hpckit tests benchmarks
$V/python -m mypy
if [[ -f ansible/site.yml ]]; then
  (cd ansible && ../$V/ansible-lint --offline -q .)
fi
# pytest exits 5 when it collected nothing: that is a failure here, like any other non-zero code.
$V/python -m pytest "$@"
