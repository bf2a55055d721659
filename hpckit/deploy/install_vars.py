"""Blueprint -> where Slurm comes from, as the roles read it. Pure.

``install: distro`` (the default) adds nothing: every role installs the distribution's packages, as it always
did. ``install: build`` runs the slurm_build role on the build host (SchedMD's release tarball built with its
own Debian packaging, cached) and slurm_packages on every Slurm host, and points each role's own package
inspection at SchedMD's package names, so that no role installs a Debian Slurm package beside them.
"""

from __future__ import annotations

from typing import Any

from hpckit.blueprint.models import Blueprint, LabProvider

__all__ = ["BUILT_ROLE_PACKAGES", "install_extravars"]

# What each role's inspection looks for once SchedMD's packages replace Debian's (slurm_packages installs
# them before these roles run; slurm-smd is the base every host has).
BUILT_ROLE_PACKAGES: dict[str, list[str]] = {
    "slurm_common_packages": ["slurm-smd"],
    "slurm_controller_packages": ["slurm-smd-slurmctld"],
    "slurm_compute_packages": ["slurm-smd-slurmd"],
    "slurm_login_packages": ["slurm-smd-client"],
    "slurm_login_sackd_packages": ["slurm-smd-sackd"],
    "slurm_accounting_packages": ["mariadb-server", "slurm-smd-slurmdbd"],
}


def install_extravars(bp: Blueprint) -> dict[str, Any]:
    """The extravars of the blueprint's install mode (none for the distribution's packages)."""
    slurm = bp.slurm
    if slurm.install_mode != "build" or slurm.version is None:
        return {}
    out: dict[str, Any] = {
        "slurm_install": "build",
        "slurm_build_host": slurm.build.host or bp.controller.host,
        "slurm_build_version": slurm.version,
        "slurm_build_features": sorted(set(slurm.build.features)),
        "slurm_build_source": slurm.source or "",
        "slurm_build_source_sha256": slurm.source_sha256 or "",
        **BUILT_ROLE_PACKAGES,
    }
    if isinstance(bp.provider, LabProvider):
        out["slurm_packages_sysv_init"] = True  # lab nodes have no systemd; SchedMD ships no init scripts
    return out
