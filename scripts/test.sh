#!/usr/bin/env bash
# hpckit's whole check: lint, types, Ansible lint, then every test (the lab tests need root).
set -euo pipefail
cd "$(dirname "$0")/.."
V=.venv/bin
# The whole suite deploys a lab on SchedMD's Slurm built from source (tests/test_build_deploy_lab.py). A cold
# build takes ~15-25 min on 2 cores: it starts now, beside lint and the other tests, into hpckit's keyed
# package cache (a machine that keeps /var/cache/hpckit builds once); that test waits for it. The test release
# 24.11.99 that tests/test_rolling_upgrade_lab.py upgrades to builds next (another ~15-25 min), in the same
# background job. A run that ends first stops them (their own process group); a later run starts again from
# nothing.
build_pgid=""
cache=${HPCKIT_CACHE:-/var/cache/hpckit}
if (($# == 0)) && [[ $EUID -eq 0 && -f $cache/sources/slurm-wlm_24.11.5.orig.tar.gz ]]; then
  mkdir -p "$cache/packages"
  setsid bash -c 'scripts/build-slurm.sh >"$1/build-slurm.log" 2>&1
    scripts/build-slurm-test-release.sh >"$1/build-slurm-test-release.log" 2>&1' _ "$cache/packages" &
  build_pgid=$!
  trap '[[ -z $build_pgid ]] || kill -- "-$build_pgid" 2>/dev/null || true' EXIT
fi
$V/ruff check hpckit tests benchmarks
$V/ruff format --check hpckit tests benchmarks
$V/python -m mypy
if [[ -f ansible/site.yml ]]; then
  (cd ansible && ../$V/ansible-lint --offline -q .)
fi
# pytest exits 5 when it collected nothing: that is a failure here, like any other non-zero code.
$V/python -m pytest "$@"
