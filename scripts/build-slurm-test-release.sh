#!/usr/bin/env bash
# Make the test release 24.11.99 and build it into hpckit's package cache: SchedMD's 24.11.5 source with
# only its version changed (META's micro version, debian/changelog's package version), so the rolling
# upgrade test has a real version change to make between two builds of the same code. The fixture tarball
# is CACHE/sources/slurm-24.11.99-hpckit-test.tar.bz2; the SHA256 of the tarball it was made from sits
# beside it, and it is made again only when that differs. Run as root from a checkout with its .venv.
#
# A cold build takes ~15-25 min on 2 cores (930 s under load; 4 s when cached) (scripts/test.sh starts this in the background after the
# 24.11.5 build; both take the package cache's build lock in turn).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${HPCKIT_CACHE:-/var/cache/hpckit}
base=$cache/sources/slurm-wlm_24.11.5.orig.tar.gz
fixture=$cache/sources/slurm-24.11.99-hpckit-test.tar.bz2
base_sha=$(sha256sum "$base" | cut -d' ' -f1)
if [[ ! -f $fixture || "$(cat "$fixture.base-sha256" 2>/dev/null)" != "$base_sha" ]]; then
  rm -f "$fixture.base-sha256" # written last: a fixture without it is made again
  work=$(mktemp -d "${TMPDIR:-/tmp}/hpckit-test-release.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  tar -xzf "$base" -C "$work"
  top=$(find "$work" -mindepth 1 -maxdepth 1 -type d)
  sed -i -E 's/^(\s*Micro:\s*)5$/\199/; s/^(\s*Version:\s*)24\.11\.5$/\124.11.99/' "$top/META"
  sed -i '1s/(24\.11\.5-1)/(24.11.99-1)/' "$top/debian/changelog"
  # The edit must have taken, or the build would quietly be 24.11.5 again.
  grep -Eq '^\s*Micro:\s*99$' "$top/META" && grep -Eq '^\s*Version:\s*24\.11\.99$' "$top/META"
  head -1 "$top/debian/changelog" | grep -q '(24\.11\.99-1)'
  mv "$top" "$work/slurm-24.11.99"
  # Fixed order, owners and times: the same base tarball gives the same fixture.
  tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - slurm-24.11.99 \
    | bzip2 -9 >"$work/fixture.tar.bz2"
  mv "$work/fixture.tar.bz2" "$fixture.part"
  mv "$fixture.part" "$fixture"
  echo "$base_sha" >"$fixture.base-sha256"
  rm -rf "$work"
  trap - EXIT
  echo "made $fixture from $base"
fi
exec scripts/build-slurm.sh 24.11.99 "$fixture"
