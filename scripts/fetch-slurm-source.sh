#!/usr/bin/env bash
# Put SchedMD's Slurm 24.11.5 release tarball into hpckit's source cache (${HPCKIT_CACHE:-/var/cache/hpckit}/sources),
# where `install: build` and the tests that read Slurm's own source find it.
#
# Debian's source pool carries the tarball unchanged as slurm-wlm_24.11.5.orig.tar.gz. It is fetched with apt's own
# downloader from the archives this machine's apt already uses (its sources.list and sources.list.d, one-line and
# deb822 files alike), so the machine's mirror or proxy settings apply and no archive is named here. The hash is
# checked before the file takes its place; a cached file with the right hash is not fetched again.
#
#   scripts/fetch-slurm-source.sh          fetch unless cached; exit 1 with the reason when it cannot
#   scripts/fetch-slurm-source.sh --urls   print the URLs it would try, one a line, and exit
#
# HPCKIT_APT_ETC (default /etc/apt) names the apt configuration folder to read the sources from.
set -euo pipefail

FILE=slurm-wlm_24.11.5.orig.tar.gz
SHA256=e1a5547edd212c38b5e3230a284133f777b32746551f094aaa81cc4af375e332
POOL=pool/main/s/slurm-wlm
APT_ETC=${HPCKIT_APT_ETC:-/etc/apt}
DEST_DIR=${HPCKIT_CACHE:-/var/cache/hpckit}/sources

# The archive roots of every enabled source, in apt's order, each once. apt reads sources.list, then the
# files in sources.list.d ending in .list or .sources.
archive_roots() {
  local files=()
  [[ -f $APT_ETC/sources.list ]] && files+=("$APT_ETC/sources.list")
  local f
  for f in "$APT_ETC"/sources.list.d/*; do
    [[ -f $f && ($f == *.list || $f == *.sources) ]] && files+=("$f")
  done
  for f in "${files[@]}"; do
    if [[ $f == *.sources ]]; then deb822_uris "$f"; else one_line_uris "$f"; fi
  done | awk '{ sub(/\/+$/, "") } /^(https?|file):/ && !seen[$0]++'
}

# `deb [options] URI suite components` and `deb-src ...`; the options may hold spaces inside the brackets.
one_line_uris() {
  sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$1" | awk '$1 == "deb" || $1 == "deb-src" { print $2 }'
}

# deb822 stanzas, separated by blank lines: every URI of the URIs field, unless the stanza says Enabled: no.
deb822_uris() {
  awk '
    function flush() { if (enabled && uris != "") { n = split(uris, u, " "); for (i = 1; i <= n; i++) print u[i] } uris = ""; enabled = 1 }
    BEGIN { enabled = 1 }
    /^[[:space:]]*#/ { next }
    /^[[:space:]]*$/ { flush(); next }
    tolower($1) == "uris:" { sub(/^[^:]*:[[:space:]]*/, ""); uris = $0; next }
    tolower($1) == "enabled:" { enabled = (tolower($2) != "no") }
    END { flush() }
  ' "$1"
}

urls() {
  local root
  archive_roots | while read -r root; do printf '%s/%s/%s\n' "$root" "$POOL" "$FILE"; done
}

if [[ ${1:-} == --urls ]]; then
  urls
  exit 0
fi

hash_ok() { [[ -f $1 ]] && [[ $(sha256sum "$1" | cut -d' ' -f1) == "$SHA256" ]]; }

if hash_ok "$DEST_DIR/$FILE"; then
  echo "Slurm source: $DEST_DIR/$FILE is cached"
  exit 0
fi
if ! mkdir -p "$DEST_DIR" 2>/dev/null || [[ ! -w $DEST_DIR ]]; then
  echo "Slurm source: cannot write $DEST_DIR (run as root, or set HPCKIT_CACHE)" >&2
  exit 1
fi
mapfile -t candidates < <(urls)
if ((${#candidates[@]} == 0)); then
  echo "Slurm source: no http, https or file archive in $APT_ETC's sources to fetch $FILE from" >&2
  exit 1
fi
part=$(mktemp "$DEST_DIR/.$FILE.XXXXXX")
trap 'rm -f "$part"' EXIT
for url in "${candidates[@]}"; do
  # apt-helper drops privileges to _apt where it can: the partial file must be writable by it.
  chmod 666 "$part"
  if ! said=$(/usr/lib/apt/apt-helper download-file "$url" "$part" 2>&1); then
    echo "Slurm source: $(printf '%s\n' "$said" | grep -m 1 '^E: ' || echo "$url: apt-helper failed")" >&2
    continue
  fi
  # From a file: archive apt links to the file instead of copying it; the cache keeps its own copy.
  if [[ -L $part ]]; then
    target=$(readlink -f "$part")
    rm -f "$part"
    cp "$target" "$part"
  fi
  if hash_ok "$part"; then
    chmod 644 "$part"
    mv "$part" "$DEST_DIR/$FILE"
    echo "Slurm source: fetched $FILE into $DEST_DIR"
    exit 0
  fi
  echo "Slurm source: $url has SHA256 $(sha256sum "$part" | cut -d' ' -f1), not $SHA256; not used" >&2
done
echo "Slurm source: could not fetch $FILE from any of: ${candidates[*]}" >&2
exit 1
