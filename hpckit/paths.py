"""Where hpckit's shipped assets (Ansible playbooks, sbatch templates, data files) live at run time.

In a source checkout they sit at the top of the repository; in an installed wheel they are carried
inside the package as ``hpckit._assets``. Callers never care which. Also where this machine keeps hpckit's
cache (sources to build from, built packages).
"""

from __future__ import annotations

import importlib.util
import os
from functools import cache
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
DATA_DIR = PACKAGE_DIR / "data"


class AssetNotFoundError(RuntimeError):
    """An asset folder is missing from both the checkout and the installed package."""


@cache
def asset_dir(name: str) -> Path:
    """Return the folder holding the asset ``name`` ("ansible", "sbatch_templates" or "blueprints")."""
    spec = importlib.util.find_spec(f"hpckit._assets.{name}") if _assets_installed() else None
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            if Path(location).is_dir():
                return Path(location)
    checkout = PACKAGE_DIR.parent / name
    if checkout.is_dir():
        return checkout
    raise AssetNotFoundError(f"hpckit cannot find its {name!r} folder (looked in the package and {checkout})")


def _assets_installed() -> bool:
    try:
        return importlib.util.find_spec("hpckit._assets") is not None
    except ModuleNotFoundError:
        return False


def ansible_dir() -> Path:
    return asset_dir("ansible")


def templates_dir() -> Path:
    return asset_dir("sbatch_templates")


def blueprints_dir() -> Path:
    """The example blueprints (lab.yaml, h100-ib.yaml)."""
    return asset_dir("blueprints")


def schema_file() -> Path:
    """The blueprint JSON Schema, where the example blueprints' `$schema` comment points."""
    return blueprints_dir().parent / "hpckit-blueprint.schema.json"


def cache_dir() -> Path:
    """hpckit's cache on this machine (``$HPCKIT_CACHE``, else /var/cache/hpckit): downloaded sources, built
    packages. scripts/fetch-slurm-source.sh fills it with the same rule."""
    return Path(os.environ.get("HPCKIT_CACHE") or "/var/cache/hpckit")


def source_cache() -> Path:
    """Where release tarballs wait for a build (SchedMD's Slurm 24.11.5 among them, from scripts/install.sh)."""
    return cache_dir() / "sources"
