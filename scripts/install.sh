#!/usr/bin/env bash
# Install everything hpckit and its tests need on a fresh Debian 12 machine (run as root):
# Debian packages for the lab (Slurm, munge, MariaDB, sshd ...) and for VM labs (qemu, debootstrap), SchedMD's
# Slurm source in hpckit's cache, then a virtualenv in .venv with hpckit.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

need_apt=(python3 python3-venv python3-pip git iproute2 procps)
for list in hpckit/data/lab-packages.txt hpckit/data/vm-packages.txt; do
  if [[ -f $list ]]; then
    mapfile -t lab_pkgs < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$list")
    need_apt+=("${lab_pkgs[@]}")
  fi
done
missing=()
for pkg in "${need_apt[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "installing Debian packages: ${missing[*]}"
  # Debian starts daemons on install; the lab runs them inside its namespaces, never on the host.
  policy=/usr/sbin/policy-rc.d
  had_policy=0; [[ -e $policy ]] && had_policy=1
  ((had_policy)) || { printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 755 "$policy"; }
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
  ((had_policy)) || rm -f "$policy"
fi

# SchedMD's Slurm source for `install: build` and the tests that read it; only those need it, so a failed
# fetch warns and the install goes on.
if ! scripts/fetch-slurm-source.sh; then
  echo "warning: Slurm's source is not in hpckit's cache; building Slurm, and the tests that read its source, need it" >&2
fi

PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
# torch runs the lab's CPU (gloo) training and benchmark jobs; 2.13.0 is the CPU build this image carries.
.venv/bin/python -m pip install -q torch==2.13.0
echo "hpckit installed: $(.venv/bin/hpckit --version)"
