"""Blueprint -> what the roles need to know of the cluster's Slurm release (the per-release table,
hpckit/slurm_releases.py). Pure.

* ``slurm_common_restart_keys``: the slurm.conf keys whose change the roles apply with a daemon restart
  (any other change goes live with `scontrol reconfigure`), the same table `hpckit plan` labels from;
* ``slurm_common_skip_keys``: keys the release does not read, which slurm.conf.j2 never writes;
* ``slurm_conf_overrides`` as the release reads them (renamed keys under their new name);
* topology/block: topology.conf from the blueprint's blocks, written by the infiniband role (which owns
  topology.conf) in its ``given`` mode, and ``TopologyPlugin=topology/block``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hpckit.blueprint.blocks import cut_blocks
from hpckit.blueprint.models import Blueprint, expand_hosts
from hpckit.blueprint.release import slurm_release_of
from hpckit.deploy.topology import block_topology_conf
from hpckit.slurm_releases import AsVersion, conf_for_release, restart_keys, topology_key_problem, unread_keys

__all__ = ["blueprint_blocks", "release_extravars", "slurm_conf_for_release"]


def slurm_conf_for_release(settings: Mapping[str, str], version: AsVersion) -> dict[str, str]:
    """slurm.conf settings (KEY: value) as Slurm ``version`` reads them: what a release renamed is written
    under its new name, what it removed or does not have is left out."""
    return conf_for_release(settings, version).settings


def release_extravars(bp: Blueprint, overrides: Mapping[str, str]) -> dict[str, Any]:
    """The release-specific extravars of a deploy; ``overrides`` are the slurm.conf overrides built so far."""
    release = slurm_release_of(bp)
    out: dict[str, Any] = {
        "slurm_release": release.series,
        "slurm_common_restart_keys": restart_keys(release),
        "slurm_common_skip_keys": unread_keys(release),
        "slurm_conf_overrides": slurm_conf_for_release(overrides, release),
    }
    topo = bp.slurm.topology
    if topo is not None:
        sizes = topo.sizes if topology_key_problem("BlockSizes", release) is None else []
        out.update(
            infiniband_topology="given",
            infiniband_topology_given=block_topology_conf(blueprint_blocks(bp), sizes),
            infiniband_topology_plugin="topology/block",
        )
    return out


def blueprint_blocks(bp: Blueprint) -> list[tuple[str, list[str]]]:
    """The blocks of a blueprint's topology/block: as named, or its compute nodes cut by block_size."""
    topo = bp.slurm.topology
    if topo is None:
        return []
    if topo.blocks:
        return [(b.name, expand_hosts(b.nodes)) for b in topo.blocks]
    hosts = list(dict.fromkeys(name for _, name, _ in bp.compute_hosts()))
    return cut_blocks(hosts, topo.block_size or len(hosts))
