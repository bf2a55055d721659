"""slurm.source as a URL: fetched from a real HTTP server on loopback into the source cache, hash checked, kept
only when whole and right, used again without a second download; failures name slurm.source, the URL and why.
The containers' enroot packages and pyxis source the same way, and as local files checked before any host."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from hpckit.blueprint import parse_blueprint
from hpckit.deploy.source_fetch import fetch_source, with_local_containers, with_local_source
from hpckit.errors import InputError
from tests.test_blueprint import GOOD

NAME = "slurm-24.11.5.tar.bz2"
BODY = b"not really a tarball, but bytes with a hash\n" * 5000
SHA = hashlib.sha256(BODY).hexdigest()


class _Server:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[str] = []
        log = self.requests

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                log.append(self.path)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{name}"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[_Server]:
    root = tmp_path / "www"
    root.mkdir()
    (root / NAME).write_bytes(BODY)
    s = _Server(root)
    s.thread.start()
    try:
        yield s
    finally:
        s.httpd.shutdown()
        s.httpd.server_close()


def test_a_url_is_fetched_once_into_the_cache(server: _Server, tmp_path: Path) -> None:
    cache = tmp_path / "sources"
    said: list[str] = []
    path = fetch_source(server.url(NAME), SHA.upper(), cache, said.append)
    assert path == cache / NAME and path.read_bytes() == BODY
    assert said == [f"fetching slurm.source from {server.url(NAME)}"]
    assert fetch_source(server.url(NAME), SHA, cache) == path
    assert fetch_source(server.url(NAME), None, cache) == path
    assert len([r for r in server.requests if r.endswith(NAME)]) == 1  # the cached copy served the others
    assert sorted(p.name for p in cache.iterdir()) == [NAME]


def test_a_wrong_hash_keeps_nothing(server: _Server, tmp_path: Path) -> None:
    cache = tmp_path / "sources"
    with pytest.raises(InputError, match=rf"slurm.source: \S+ has SHA256 {SHA}, not {'0' * 64}"):
        fetch_source(server.url(NAME), "0" * 64, cache)
    assert list(cache.iterdir()) == []


def test_a_cached_file_of_another_hash_is_fetched_again(server: _Server, tmp_path: Path) -> None:
    cache = tmp_path / "sources"
    cache.mkdir()
    (cache / NAME).write_bytes(b"half a download")
    assert fetch_source(server.url(NAME), SHA, cache).read_bytes() == BODY


def test_a_missing_file_and_a_closed_port_say_why(server: _Server, tmp_path: Path) -> None:
    cache = tmp_path / "sources"
    with pytest.raises(
        InputError, match=r"slurm.source: fetching http://127\.0\.0\.1:\d+/slurm-24\.11\.6\.tar\.bz2 failed: HTTP 404"
    ):
        fetch_source(server.url("slurm-24.11.6.tar.bz2"), None, cache)
    port = server.httpd.server_address[1]
    server.httpd.shutdown()
    server.httpd.server_close()
    with pytest.raises(InputError, match=r"slurm.source: fetching \S+ failed: .*[Cc]onnection refused"):
        fetch_source(f"http://127.0.0.1:{port}/{NAME}", None, cache)
    assert list(cache.iterdir()) == []


def test_the_blueprint_given_to_the_roles_names_the_cached_file(
    server: _Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCKIT_CACHE", str(tmp_path / "cache"))
    bp = parse_blueprint(GOOD + f'slurm:\n  version: "24.11.5"\n  source: {server.url(NAME)}\n  source_sha256: {SHA}\n')
    local = with_local_source(bp)
    assert local.slurm.source == str(tmp_path / "cache" / "sources" / NAME)
    assert bp.slurm.source == server.url(NAME)  # the blueprint itself is unchanged
    assert with_local_source(local) is local


# --- containers: enroot's two packages and pyxis' source --------------------------------------------------

DEB, CAPS, PYXIS = b"enroot package\n", b"enroot+caps package\n", b"pyxis source\n"


def _containers(enroot: str, pyxis: str, hashes: tuple[bytes, bytes, bytes] = (DEB, CAPS, PYXIS)) -> str:
    deb, caps, tar = (hashlib.sha256(b).hexdigest() for b in hashes)
    return (
        GOOD
        + "containers:\n  enabled: true\n"
        + f"  enroot:\n    version: 4.1.2\n    package: {enroot}\n    sha256: {deb}\n    caps_sha256: {caps}\n"
        + f"  pyxis:\n    version: 0.24.0\n    source: {pyxis}\n    sha256: {tar}\n"
    )


def _files(folder: Path) -> tuple[Path, Path]:
    folder.mkdir(exist_ok=True)
    (folder / "enroot_4.1.2-1_amd64.deb").write_bytes(DEB)
    (folder / "enroot+caps_4.1.2-1_amd64.deb").write_bytes(CAPS)
    (folder / "pyxis-0.24.0.tar.gz").write_bytes(PYXIS)
    return folder / "enroot_4.1.2-1_amd64.deb", folder / "pyxis-0.24.0.tar.gz"


def test_container_files_are_checked_where_they_lie(tmp_path: Path) -> None:
    deb, tar = _files(tmp_path)
    bp = parse_blueprint(_containers(str(deb), str(tar)))
    assert any(bp.containers_on(p) for p in bp.partitions)
    local = with_local_containers(bp)
    assert (local.containers.enroot.package, local.containers.pyxis.source) == (str(deb), str(tar))


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        ("enroot_4.1.2-1_amd64.deb", r"containers.enroot.package: \S+/enroot_4.1.2-1_amd64.deb has SHA256 \w+, not"),
        ("enroot+caps_4.1.2-1_amd64.deb", r"containers.enroot.package \(its enroot\+caps twin\): \S+ has SHA256"),
        ("pyxis-0.24.0.tar.gz", r"containers.pyxis.source: \S+/pyxis-0.24.0.tar.gz has SHA256"),
    ],
)
def test_a_container_file_of_another_hash_is_refused(tmp_path: Path, broken: str, message: str) -> None:
    deb, tar = _files(tmp_path)
    (tmp_path / broken).write_bytes(b"something else")
    with pytest.raises(InputError, match=message):
        with_local_containers(parse_blueprint(_containers(str(deb), str(tar))))


def test_a_missing_container_file_is_named(tmp_path: Path) -> None:
    deb, tar = _files(tmp_path)
    (tmp_path / "enroot+caps_4.1.2-1_amd64.deb").unlink()
    with pytest.raises(InputError, match=r"enroot\+caps twin\): \S+/enroot\+caps_4.1.2-1_amd64.deb: no such file"):
        with_local_containers(parse_blueprint(_containers(str(deb), str(tar))))
    with pytest.raises(InputError, match=r"containers.pyxis.source: /nowhere/pyxis.tar.gz: no such file"):
        _files(tmp_path)
        with_local_containers(parse_blueprint(_containers(str(deb), "/nowhere/pyxis.tar.gz")))


def test_container_urls_are_fetched_into_the_cache(
    server: _Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCKIT_CACHE", str(tmp_path / "cache"))
    _files(server.root)
    bp = parse_blueprint(_containers(server.url("enroot_4.1.2-1_amd64.deb"), server.url("v0.24.0.tar.gz")))
    with pytest.raises(InputError, match=r"containers.pyxis.source: fetching \S+/v0.24.0.tar.gz failed: HTTP 404"):
        with_local_containers(bp)
    bp = parse_blueprint(_containers(server.url("enroot_4.1.2-1_amd64.deb"), server.url("pyxis-0.24.0.tar.gz")))
    local = with_local_containers(bp)
    cache = tmp_path / "cache" / "sources"
    assert local.containers.enroot.package == str(cache / "enroot_4.1.2-1_amd64.deb")
    assert local.containers.pyxis.source == str(cache / "pyxis-0.24.0.tar.gz")
    assert (cache / "enroot+caps_4.1.2-1_amd64.deb").read_bytes() == CAPS


def test_no_partition_with_containers_fetches_nothing(tmp_path: Path) -> None:
    bp = parse_blueprint(
        _containers("/nowhere/enroot_4.1.2-1_amd64.deb", "/nowhere/p.tar.gz").replace(
            "  enabled: true\n", "  enabled: false\n"
        )
    )
    assert with_local_containers(bp) is bp
