"""Blueprint + SSH access -> the inventory and extravars of one site.yml run. Pure.

The one place that composes what the deploy needs from every area: the Slurm contract
(`hpckit.deploy.inventory`), the GPU-side roles (`hpckit.deploy.gpu_vars`), the health checks
(`hpckit.health.deployvars`) and monitoring (`hpckit.deploy.monitoring`). `hpckit deploy`, `hpckit plan` and
the tests all call `build_vars`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hpckit.blueprint.models import Blueprint
from hpckit.clusters import SshAccess
from hpckit.deploy.gpu_vars import merge_gpu_vars
from hpckit.deploy.install_vars import install_extravars
from hpckit.deploy.inventory import build_extravars, build_inventory, partition_groups
from hpckit.deploy.monitoring import monitoring_extravars
from hpckit.deploy.release_vars import release_extravars
from hpckit.deploy.toolchain_vars import toolchain_extravars
from hpckit.health.deployvars import health_extravars, health_host_vars, slurm_conf_lines

__all__ = ["build_vars", "with_health_conf"]


def build_vars(bp: Blueprint, access: SshAccess) -> tuple[dict[str, Any], dict[str, Any]]:
    """(inventory, extravars) for ansible/site.yml; neither holds a secret."""
    inventory, extravars = merge_gpu_vars(bp, build_inventory(bp, access), build_extravars(bp))
    _add_health_host_vars(bp, inventory)
    extravars.update(health_extravars(bp))
    extravars.update(install_extravars(bp))
    extravars.update(monitoring_extravars(bp))
    extravars.update(toolchain_extravars(bp))
    extravars["slurm_conf_overrides"] = with_health_conf(bp, extravars.get("slurm_conf_overrides", {}))
    # Last: the cluster's Slurm release decides which keys are written and which changes restart.
    extravars.update(release_extravars(bp, extravars["slurm_conf_overrides"]))
    return inventory, extravars


def with_health_conf(bp: Blueprint, overrides: Mapping[str, str]) -> dict[str, str]:
    """slurm.conf's health lines, then the blueprint's own overrides, which win (Slurm's keys are
    case-insensitive, so an override spelled in another case replaces the health line too)."""
    own = {key.lower() for key in overrides}
    health = {k: v for k, v in slurm_conf_lines(bp).items() if k.lower() not in own}
    return {**health, **overrides}


def _add_health_host_vars(bp: Blueprint, inventory: dict[str, Any]) -> None:
    """Each partition's health expectations, as variables of its group (in place)."""
    for part, group in partition_groups(bp, inventory).values():
        extra = health_host_vars(part)
        if extra:
            group["vars"] = {**group.get("vars", {}), **extra}
