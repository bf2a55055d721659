"""The hpckit wheel that hosts without this machine's filesystem install (hpckit_install_mode ``wheel``): built
from the running checkout on this machine, once per content.

The cache keeps one wheel per digest of what goes into it (the package, the assets setup.py ships, the
packaging files), so a deploy from an unchanged checkout reuses the wheel it built before, and the roles
see the same file (and checksum) as last time: nothing to reinstall.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from hpckit.errors import InputError
from hpckit.paths import PACKAGE_DIR, cache_dir
from hpckit.proc import run

__all__ = ["checkout_wheel", "wheel_inputs_digest"]

# Everything setup.py and pyproject.toml put into the wheel, relative to the checkout's root.
WHEEL_INPUTS = (
    "hpckit",
    "ansible",
    "sbatch_templates",
    "blueprints",
    "hpckit-blueprint.schema.json",
    "pyproject.toml",
    "setup.py",
    "README.md",
)
_SKIPPED_PARTS = {"__pycache__", ".mypy_cache", ".pytest_cache"}


def _input_files(root: Path) -> Iterator[Path]:
    for name in WHEEL_INPUTS:
        top = root / name
        if top.is_file():
            yield top
            continue
        for path in sorted(top.rglob("*")):
            if path.is_file() and not _SKIPPED_PARTS.intersection(path.parts) and path.suffix != ".pyc":
                yield path


def wheel_inputs_digest(root: Path) -> str:
    """A digest of every file that goes into the wheel: names and contents."""
    digest = hashlib.sha256()
    for path in _input_files(root):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:20]


def checkout_wheel(root: Path | None = None) -> Path:
    """The wheel of the checkout at ``root`` (default: the one this hpckit runs from), built when the cache
    has none for its content. Built from a copy of just the wheel's inputs, so that the checkout's own
    build/ or egg-info folders neither leak into it nor get written."""
    root = root or PACKAGE_DIR.parent
    if not (root / "pyproject.toml").is_file() or not (root / "setup.py").is_file():
        raise InputError(
            f"hosts of this provider install hpckit as a wheel built from a source checkout, and {root} is not "
            "one: deploy from a checkout of hpckit"
        )
    folder = cache_dir() / "wheels" / wheel_inputs_digest(root)
    built = sorted(folder.glob("hpckit-*.whl"))
    if built:
        return built[0]
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".build-") as tmp:
        src, out = Path(tmp, "src"), Path(tmp, "out")
        for path in _input_files(root):
            dest = src / path.relative_to(root)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
        argv = [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(src),
        ]
        run(argv, timeout=600).check("building the hpckit wheel")
        wheel = next(out.glob("hpckit-*.whl"))
        # Renamed into place whole: a concurrent deploy sees either no folder or a complete one.
        Path(tmp, "done").mkdir()
        shutil.move(wheel, Path(tmp, "done", wheel.name))
        try:
            Path(tmp, "done").rename(folder)
        except OSError:
            if not any(folder.glob("hpckit-*.whl")):
                raise
    return next(folder.glob("hpckit-*.whl"))
