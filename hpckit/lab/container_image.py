"""A container image that needs no registry: a Debian minbase tree packed as squashfs, as enroot imports it.

An air-gapped site (and hpckit's own container tests) still wants to prove that enroot and pyxis run a
container under Slurm. ``srun --container-image=/path/image.sqsh`` takes a squashfs file directly, so a
minbase system from the Debian archive this machine's apt already uses is enough. Its ``/dev`` is left empty:
enroot, run by an ordinary user, cannot create an image's device nodes and refuses the whole image.
Images are cached by suite and architecture under hpckit's cache (``images/container-<suite>-<arch>.sqsh``).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from hpckit.lab.errors import LabError
from hpckit.lab.vm.image import checked, images_locked, images_root, unmount_below
from hpckit.lab.vm.mirror import debian_mirror

__all__ = ["container_image", "image_path"]

Log = Callable[[str], None]
_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


def image_path(suite: str, root: Path | None = None) -> Path:
    """Where the image of ``suite`` for this machine's architecture is cached."""
    arch = _ARCH.get(platform.machine(), platform.machine())
    return (root or images_root()) / f"container-{suite}-{arch}.sqsh"


def container_image(suite: str, root: Path | None = None, log: Log | None = None) -> Path:
    """The cached image of ``suite``, made first where absent (needs root and the archive; a minute or two)."""
    if not re.fullmatch(r"[a-z][a-z0-9-]{0,31}", suite):
        raise LabError(f"container image: {suite!r} is not a Debian suite name (bookworm, trixie ...)")
    dest = image_path(suite, root)
    if dest.is_file():
        return dest
    if os.geteuid() != 0:
        raise LabError("making a container image needs root (debootstrap)")
    for tool in ("debootstrap", "mksquashfs"):
        if shutil.which(tool) is None:
            raise LabError(f"making a container image needs {tool} (Debian packages debootstrap, squashfs-tools)")
    say = log or (lambda _: None)
    with images_locked(dest.parent):
        if dest.is_file():  # another process made it while this one waited
            return dest
        work = dest.parent / f".build-{dest.stem}"
        unmount_below(work)
        shutil.rmtree(work, ignore_errors=True)
        tree = work / "tree"
        tree.mkdir(parents=True)
        started = time.monotonic()
        mirror = debian_mirror()
        say(f"debootstrap --variant=minbase {suite} from {mirror}")
        checked(
            ["debootstrap", "--variant=minbase", "--components=main", suite, str(tree), mirror],
            f"debootstrap {suite} from {mirror}",
            timeout=3600,
        )
        _strip(tree)
        part = work / "image.sqsh"
        checked(["mksquashfs", str(tree), str(part), "-noappend", "-no-progress", "-quiet"], "mksquashfs")
        part.chmod(0o644)
        part.replace(dest)
        shutil.rmtree(work, ignore_errors=True)
        say(f"container image {dest} made in {time.monotonic() - started:.0f} s ({dest.stat().st_size >> 20} MiB)")
    return dest


def _strip(tree: Path) -> None:
    """No device nodes (ordinary users' enroot refuses them), no package lists or caches (size, staleness)."""
    dev = tree / "dev"
    shutil.rmtree(dev, ignore_errors=True)
    dev.mkdir(mode=0o755)
    for folder in ("var/lib/apt/lists", "var/cache/apt/archives"):
        for leftover in (tree / folder).glob("*"):
            if leftover.is_file():
                leftover.unlink()
