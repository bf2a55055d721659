"""Blueprint -> what each host should show before a deploy. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from hpckit.blueprint.models import Blueprint, Hardware, LabProvider, NfsFilesystem
from hpckit.deploy.gpu_vars import pinned_driver
from hpckit.deploy.inventory import host_entries

# Where the deployed daemons keep their state (the slurm_* roles' defaults) and how much free space each
# needs: below `block_gib` the daemon fails, below `warn_gib` it will before long.
SLURMD_SPOOL = "/var/spool/slurmd"
SLURMCTLD_STATE = "/var/spool/slurmctld"
MYSQL_DATA = "/var/lib/mysql"
# The operating systems the roles are written for (their apt tasks and Debian package names).
SUPPORTED_OS = {("debian", "12"), ("ubuntu", "22.04"), ("ubuntu", "24.04")}
SUPPORTED_OS_TEXT = "Debian 12, Ubuntu 22.04 or 24.04"
ACCOUNTS = ("slurm", "munge")


@dataclass(frozen=True)
class DiskNeed:
    path: str
    purpose: str
    warn_gib: float
    block_gib: float
    local: bool = False  # must not be a network filesystem (enroot unpacks images there)


@dataclass(frozen=True)
class MountNeed:
    name: str
    mount: str
    fstype: str | None  # None: any type (the lab shows every filesystem as a bind mount of a host folder)


@dataclass(frozen=True)
class HostPlan:
    host: str
    address: str
    role: str  # controller | login | compute
    hardware: Hardware | None = None
    driver: str = ""  # pinned NVIDIA driver, "" = any
    disks: tuple[DiskNeed, ...] = ()
    mounts: tuple[MountNeed, ...] = ()


@dataclass(frozen=True)
class Expectations:
    plans: tuple[HostPlan, ...]
    controller: str
    emulated: bool  # the lab: GPUs are device nodes, there is no fabric, filesystems are bind mounts

    @property
    def hosts(self) -> list[str]:
        return [p.host for p in self.plans]


def expectations(bp: Blueprint, gpu_driver: str = "") -> Expectations:
    """One plan per host. ``gpu_driver`` pins the NVIDIA driver for every GPU partition (over the blueprint)."""
    lab = isinstance(bp.provider, LabProvider)
    parts = {p.name: p for p in bp.partitions}
    mounts = _mounts(bp, lab)
    plans = []
    for entry in host_entries(bp):
        part = parts.get(entry.partition or "")
        hardware = bp.hardware_in(part) if part is not None else None
        driver = gpu_driver or (pinned_driver(hardware.gpus) if hardware and hardware.gpus else "")
        disks = _disks(bp, entry.name, entry.role, part is not None and bp.containers_on(part))
        plans.append(HostPlan(entry.name, entry.address or entry.name, entry.role, hardware, driver, disks, mounts))
    return Expectations(tuple(plans), bp.controller.host, lab)


def _disks(bp: Blueprint, host: str, role: str, containers: bool) -> tuple[DiskNeed, ...]:
    needs: list[DiskNeed] = []
    if host == bp.controller.host:
        needs.append(DiskNeed(SLURMCTLD_STATE, "slurmctld state", warn_gib=5, block_gib=0.5))
        if bp.slurm.accounting:
            needs.append(DiskNeed(MYSQL_DATA, "accounting database", warn_gib=10, block_gib=1))
    if role == "compute":
        needs.append(DiskNeed(SLURMD_SPOOL, "slurmd spool", warn_gib=1, block_gib=0.1))
    if containers:
        enroot = bp.containers.enroot
        needs.append(DiskNeed(_static_part(enroot.cache_path), "enroot cache", 50, 5, local=True))
        needs.append(DiskNeed(_static_part(enroot.data_path), "enroot data", 50, 5, local=True))
    return tuple(dict.fromkeys(needs))


def _static_part(path: str) -> str:
    """``/raid/enroot/cache/group-$(id -g)`` -> ``/raid/enroot/cache``: the folder every user's path is in."""
    if "$" not in path:
        return path
    head = path.split("$", 1)[0]
    return head.rsplit("/", 1)[0] or "/"


def _mounts(bp: Blueprint, lab: bool) -> tuple[MountNeed, ...]:
    """Existing filesystems are mounted by the site before hpckit runs; NFS ones only after the deploy,
    except in the lab, whose provider bind-mounts every filesystem at boot."""
    needs = []
    for fs in bp.filesystems:
        if isinstance(fs, NfsFilesystem):
            if lab:
                needs.append(MountNeed(fs.name, fs.mount, None))
        else:
            needs.append(MountNeed(fs.name, fs.mount, None if lab else fs.fstype))
    return tuple(needs)
