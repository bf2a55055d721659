"""slurm.source, and the enroot packages and pyxis source of containers, given as URLs: fetched once, on the
deploying machine, into hpckit's source cache.

The build host then reads it by path like any local tarball (on the lab the cache is the same path in every
node). A download is written beside its final name and moved there only when it is whole and, where
slurm.source_sha256 is given, has that hash: an interrupted or wrong download never passes for the release.
The cached file is used again while it still has the hash asked for (or, without one, while it is there).
The container inputs given as paths are checked here too (there, and of their hash), so that a wrong file
stops the deploy before any host is touched.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from hpckit.blueprint.models import Blueprint, Enroot
from hpckit.blueprint.toolchain import has_gpus
from hpckit.deploy.gpu_vars import caps_twin
from hpckit.errors import InputError
from hpckit.paths import source_cache

__all__ = ["FETCH_TIMEOUT_S", "fetch_source", "with_local_containers", "with_local_source", "with_local_toolchain"]

FETCH_TIMEOUT_S = 60.0
_CHUNK = 1 << 20


def with_local_source(bp: Blueprint, say: Callable[[str], None] = lambda _: None) -> Blueprint:
    """``bp`` with a URL slurm.source replaced by the cached file's path (fetched first where needed);
    ``bp`` itself where the source is a path or absent, or Slurm is not built."""
    slurm = bp.slurm
    if slurm.install_mode != "build" or slurm.source is None or slurm.source.startswith("/"):
        return bp
    path = fetch_source(slurm.source, slurm.source_sha256, source_cache(), say)
    return bp.model_copy(update={"slurm": slurm.model_copy(update={"source": str(path)})})


def with_local_containers(
    bp: Blueprint, say: Callable[[str], None] = lambda _: None, *, enroot: bool = True
) -> Blueprint:
    """``bp`` with enroot's packages (unless ``enroot`` is false: an upgrade rebuilds pyxis alone) and pyxis'
    source as checked files on this machine (URLs fetched into the cache first), where some partition runs
    containers; ``bp`` itself otherwise."""
    if not any(bp.containers_on(part) for part in bp.partitions):
        return bp
    pyxis = bp.containers.pyxis
    name = f"pyxis-{pyxis.version}.tar.gz"
    tarball = _local_file(pyxis.tarball, pyxis.sha256, "containers.pyxis.source", say, name)
    update: dict[str, object] = {"pyxis": pyxis.model_copy(update={"source": str(tarball)})}
    if enroot:
        update["enroot"] = _local_enroot(bp.containers.enroot, say)
    return bp.model_copy(update={"containers": bp.containers.model_copy(update=update)})


def with_local_toolchain(bp: Blueprint, say: Callable[[str], None] = lambda _: None) -> Blueprint:
    """``bp`` with the nccl-tests source as a checked file on this machine (a URL fetched into the cache first),
    where some node builds it; the torch wheel folder checked to be there and hold wheels. ``bp`` otherwise."""
    torch, tests = bp.bench.torch, bp.bench.nccl_tests
    if torch is not None and torch.wheels:
        folder = Path(torch.wheels)
        if not folder.is_dir():
            raise InputError(f"bench.torch.wheels: {torch.wheels}: no such folder on this machine")
        if not any(folder.glob("*.whl")):
            raise InputError(f"bench.torch.wheels: {torch.wheels} holds no wheel (*.whl); fill it with pip download")
    if tests is None or tests.image or not any(has_gpus(bp, p) for p in bp.partitions):
        return bp
    name = f"nccl-tests-{tests.version}.tar.gz"
    tarball = _local_file(tests.tarball, tests.sha256, "bench.nccl_tests.source", say, name)
    bench = bp.bench.model_copy(update={"nccl_tests": tests.model_copy(update={"source": str(tarball)})})
    return bp.model_copy(update={"bench": bench})


def _local_enroot(enroot: Enroot, say: Callable[[str], None]) -> Enroot:
    field = "containers.enroot.package"
    deb = _local_file(enroot.package_source, enroot.sha256, field, say)
    twin = caps_twin(enroot.package_source)
    if twin is not None:
        _local_file(twin, enroot.caps_sha256, f"{field} (its enroot+caps twin)", say)
    return enroot.model_copy(update={"package": str(deb)})


def _local_file(
    source: str, sha256: str | None, field: str, say: Callable[[str], None], name: str | None = None
) -> Path:
    if not source.startswith("/"):
        return fetch_source(source, sha256, source_cache(), say, field=field, name=name)
    path = Path(source)
    if not path.is_file():
        raise InputError(f"{field}: {source}: no such file on this machine")
    if sha256 is not None and (got := _sha256(path)) != sha256.lower():
        raise InputError(f"{field}: {source} has SHA256 {got}, not {sha256.lower()}")
    return path


def fetch_source(
    url: str,
    sha256: str | None,
    cache: Path,
    say: Callable[[str], None] = lambda _: None,
    *,
    field: str = "slurm.source",
    name: str | None = None,
) -> Path:
    """The cached copy of ``url`` in ``cache`` (as ``name``, else the URL's file name), downloaded where absent
    or not of ``sha256``; InputError naming ``field`` and what went wrong otherwise (nothing is left under the
    final name)."""
    name = name or Path(urllib.parse.urlsplit(url).path).name
    if not name:
        raise InputError(f"{field}: {url} names no file to fetch")
    dest = cache / name
    if dest.is_file() and (sha256 is None or _sha256(dest) == sha256.lower()):
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(f".{name}.{os.getpid()}.part")
    say(f"fetching {field} from {url}")
    try:
        got = _download(url, part, field)
        if sha256 is not None and got != sha256.lower():
            raise InputError(f"{field}: {url} has SHA256 {got}, not {sha256.lower()}; the download was removed")
        os.replace(part, dest)
    finally:
        part.unlink(missing_ok=True)
    return dest


def _download(url: str, part: Path, field: str) -> str:
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as response, part.open("wb") as out:
            while chunk := response.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
    except urllib.error.HTTPError as e:
        raise InputError(f"{field}: fetching {url} failed: HTTP {e.code} {e.reason}") from e
    except (urllib.error.URLError, OSError) as e:
        reason = e.reason if isinstance(e, urllib.error.URLError) else e
        raise InputError(f"{field}: fetching {url} failed: {reason}") from e
    return digest.hexdigest()


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
