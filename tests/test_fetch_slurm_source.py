"""scripts/fetch-slurm-source.sh: the URLs come from the machine's own apt sources (one-line and deb822 files),
the hash decides, and a cached tarball is not fetched again. Archives here are local folders (file: URIs):
nothing leaves the machine."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hpckit.paths import source_cache

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "fetch-slurm-source.sh"
FILE = "slurm-wlm_24.11.5.orig.tar.gz"
POOL = f"pool/main/s/slurm-wlm/{FILE}"


def run(apt_etc: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HPCKIT_APT_ETC": str(apt_etc), "HPCKIT_CACHE": str(cache)}
    return subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def test_the_urls_come_from_every_enabled_source(tmp_path: Path) -> None:
    etc = tmp_path / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    (etc / "sources.list").write_text(
        "deb [arch=amd64 signed-by=/usr/share/keyrings/a b.gpg] http://one.invalid/debian bookworm main # note\n"
        "# deb http://commented.invalid/debian bookworm main\n"
        "deb-src http://one.invalid/debian/ bookworm main\n"
        "deb cdrom:[Debian 12]/ bookworm main\n"
    )
    (etc / "sources.list.d" / "two.sources").write_text(
        "Types: deb\nURIs: http://two.invalid/d https://three.invalid/e/\nSuites: bookworm\n\n"
        "Types: deb\nEnabled: no\nURIs: http://off.invalid/d\nSuites: bookworm\n"
    )
    (etc / "sources.list.d" / "four.list.disabled").write_text("deb http://four.invalid/d bookworm main\n")
    done = run(etc, tmp_path / "cache", "--urls")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"http://one.invalid/debian/{POOL}",
        f"http://two.invalid/d/{POOL}",
        f"https://three.invalid/e/{POOL}",
    ]


def _archive(tmp_path: Path, tarball: Path) -> Path:
    """An apt configuration whose one source is a local archive holding ``tarball`` in slurm-wlm's pool."""
    pool = tmp_path / "archive" / POOL
    pool.parent.mkdir(parents=True)
    pool.write_bytes(tarball.read_bytes())
    etc = tmp_path / "apt"
    etc.mkdir()
    (etc / "sources.list").write_text(f"deb file:{tmp_path / 'archive'} bookworm main\n")
    return etc


def test_a_tarball_with_another_hash_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "fake.tar.gz"
    fake.write_bytes(b"not slurm")
    done = run(_archive(tmp_path, fake), tmp_path / "cache")
    assert done.returncode == 1
    assert "has SHA256" in done.stderr and "not used" in done.stderr
    assert list((tmp_path / "cache" / "sources").iterdir()) == []  # no partial file left behind


def test_no_source_to_fetch_from_is_said(tmp_path: Path) -> None:
    (tmp_path / "apt").mkdir()
    done = run(tmp_path / "apt", tmp_path / "cache")
    assert done.returncode == 1 and "no http, https or file archive" in done.stderr


def test_the_real_tarball_is_fetched_once(tmp_path: Path) -> None:
    cached = source_cache() / FILE
    if not cached.is_file():
        pytest.fail(f"{cached} is missing: run scripts/fetch-slurm-source.sh (scripts/install.sh runs it)")
    etc = _archive(tmp_path, cached)
    first = run(etc, tmp_path / "cache")
    assert first.returncode == 0, first.stderr
    got = tmp_path / "cache" / "sources" / FILE
    assert got.is_file() and not got.is_symlink() and got.stat().st_size == cached.stat().st_size
    (tmp_path / "archive" / POOL).unlink()  # a second fetch would now fail: the cache must answer
    again = run(etc, tmp_path / "cache")
    assert again.returncode == 0 and "is cached" in again.stdout
