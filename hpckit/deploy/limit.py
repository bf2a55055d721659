"""`hpckit deploy --limit PATTERN`: which hosts an Ansible pattern keeps, and the one limit deploy refuses.

With `slurm.install: build` every Slurm host installs the packages the build host holds (slurm_packages reads
where they are from the build host's own play): a limit that leaves that host out would fail on every host it
keeps, after touching them. It is refused first, naming the host to add.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml

from hpckit.blueprint.models import Blueprint
from hpckit.clusters import SshAccess
from hpckit.deploy.inventory import build_inventory
from hpckit.errors import InputError

__all__ = ["limit_guard", "limited_hosts"]


def limited_hosts(inventory: dict[str, Any], pattern: str) -> set[str]:
    """The hosts of ``inventory`` that Ansible's ``--limit pattern`` keeps (Ansible's own pattern rules)."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    with tempfile.TemporaryDirectory(prefix="hpckit-limit-") as folder:
        path = Path(folder) / "hosts.yml"  # a private copy for Ansible to read
        path.write_text(yaml.safe_dump(inventory), encoding="utf-8")
        manager = InventoryManager(loader=DataLoader(), sources=[str(path)])
        manager.subset(pattern)
        return {host.name for host in manager.get_hosts()}


def limit_guard(bp: Blueprint, limit: str | None) -> None:
    """InputError when ``limit`` leaves out the build host of a built Slurm; nothing else is checked here."""
    if limit is None or bp.slurm.install_mode != "build":
        return
    build_host = bp.slurm.build.host or bp.controller.host
    # the groups and hosts are the deploy's; how SSH reaches them does not matter to a pattern
    kept = limited_hosts(build_inventory(bp, SshAccess(user="root", key_file=None)), limit)
    if build_host not in kept:
        raise InputError(
            f"--limit {limit!r} leaves out {build_host}, the build host of slurm.install: build: every host it keeps "
            f"installs the Slurm packages {build_host} holds; add it (--limit '{limit},{build_host}')"
        )
