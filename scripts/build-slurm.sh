#!/usr/bin/env bash
# Build SchedMD's Slurm (24.11.5 unless named, every optional feature: what a blueprint's `install: build`
# asks for by default) into hpckit's package cache on this machine with the slurm_build role, unless that
# build is cached already. Usage: build-slurm.sh [VERSION [SOURCE_TARBALL]] (without a tarball, the role
# looks in the source cache). Run as root from a checkout with its .venv (scripts/install.sh).
#
# A cold build takes ~15-25 min on 2 cores, so scripts/test.sh starts this in the background before the
# tests: the lab test that deploys `install: build` then finds the packages, or waits for this build (it holds
# PACKAGES/.build.lock while it builds; the role waits on that lock) instead of building them a second time.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-24.11.5}
source=${2:-}
cache=${HPCKIT_CACHE:-/var/cache/hpckit}
mkdir -p "$cache/packages"
work=$(mktemp -d "${TMPDIR:-/tmp}/hpckit-build-slurm.XXXXXX")
trap 'rm -rf "$work"' EXIT
printf -- '- hosts: localhost\n  connection: local\n  gather_facts: false\n  roles: [slurm_build]\n' >"$work/build.yml"
exec 9>"$cache/packages/.build.lock"
flock 9
start=$(date +%s)
ANSIBLE_CONFIG=$PWD/ansible/ansible.cfg ANSIBLE_ROLES_PATH=$PWD/ansible/roles ANSIBLE_NOCOLOR=1 \
  ANSIBLE_CACHE_PLUGIN_CONNECTION=$work/facts ANSIBLE_LOCAL_TEMP=$work/ansible \
  .venv/bin/ansible-playbook -i localhost, "$work/build.yml" -e "$(printf \
  '{"slurm_build_version": "%s", "slurm_build_source": "%s", "slurm_build_cache_dir": "%s", "slurm_build_wait_s": 0, "ansible_python_interpreter": "%s"}' \
  "$version" "$source" "$cache" "$PWD/.venv/bin/python")"
echo "Slurm $version's packages are in $cache/packages ($(($(date +%s) - start)) s)"
