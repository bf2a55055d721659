"""Which Slurm release a blueprint runs, for everything that differs between releases (the per-release
table in hpckit/slurm_releases.py): slurm.conf keys and plugins, restart classes, topology.conf.

`slurm.version` names it; without one the cluster runs the distribution's package (Debian 12: 22.05; the
vm provider's Debian 13: 24.11).
Both readers go through here, so that the one default lives in the table.
"""

from __future__ import annotations

from typing import Any

from hpckit.blueprint.models import Blueprint
from hpckit.slurm_releases import ReleaseError, Version, default_series, version_text

__all__ = ["raw_slurm_release", "slurm_release_of"]


def slurm_release_of(bp: Blueprint) -> Version:
    """The Slurm release of a validated blueprint."""
    version = getattr(bp.slurm, "version", None)
    return Version.parse(str(version)) if version else default_series(bp.provider.type)


def raw_slurm_release(data: Any) -> Version | None:
    """The Slurm release of a blueprint's raw (var-resolved) data; None when `slurm.version` is there but
    not a version (the model reports that), so that release-specific checks do not guess."""
    slurm = data.get("slurm") if isinstance(data, dict) else None
    version = slurm.get("version") if isinstance(slurm, dict) else None
    if version is None:
        provider = data.get("provider") if isinstance(data, dict) else None
        kind = provider.get("type") if isinstance(provider, dict) else None
        return default_series(kind if isinstance(kind, str) else None)
    try:
        return Version.parse(version_text(version))
    except ReleaseError:
        return None
