"""The blueprint model: what an admin declares about a cluster.

Field-level rules (types, hostlist syntax, known GPU types, address counts) live here so that pydantic
reports them all in one pass; rules that span objects live in `hpckit.blueprint.checks`.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

import hostlist
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hpckit.hardware import hardware_table

NAME_RE = r"^[A-Za-z][A-Za-z0-9_-]{0,62}$"
HOST_RE = r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$"
Name = Annotated[str, Field(pattern=NAME_RE, description="a name: letters, digits, '-' and '_'")]
Hostname = Annotated[str, Field(pattern=HOST_RE, description="a short hostname")]
AbsPath = Annotated[str, Field(pattern=r"^/", description="an absolute path")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


def expand_hosts(expr: str) -> list[str]:
    """Expand a hostlist expression; ValueError with the reason when it is malformed."""
    try:
        hosts: list[str] = hostlist.expand_hostlist(expr)
    except hostlist.BadHostlist as exc:
        raise ValueError(f"bad hostlist {expr!r}: {exc}") from None
    if not hosts:
        raise ValueError(f"hostlist {expr!r} names no host")
    return hosts


# --- how hosts are reached ---------------------------------------------------------------------------


class SshAccess(Strict):
    user: str = "root"
    key: str | None = Field(None, description="private key file (default: the SSH agent / ~/.ssh)")
    port: int = Field(22, ge=1, le=65535)


class StaticProvider(Strict):
    """Existing machines reached over SSH."""

    type: Literal["static"]
    ssh: SshAccess = SshAccess()


class LabProvider(Strict):
    """Every host becomes a namespace machine on this box (`hpckit lab`)."""

    type: Literal["lab"]
    subnet: str = Field("10.77.0.0/24", description="bridge subnet; the host side takes the first address")
    # Node links are named <bridge>v<N>; Linux caps interface names at 15 characters.
    bridge: str = Field("hpck0", pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,8}$", description="at most 9 characters")

    @field_validator("subnet")
    @classmethod
    def _subnet(cls, value: str) -> str:
        try:
            net = ipaddress.IPv4Network(value, strict=True)
        except ValueError as exc:
            raise ValueError(f"not an IPv4 subnet: {exc}") from None
        if net.num_addresses < 8:
            raise ValueError("subnet too small for a lab")
        return value


Provider = Annotated[StaticProvider | LabProvider, Field(discriminator="type")]


# --- hosts and hardware --------------------------------------------------------------------------------


class Host(Strict):
    host: Hostname
    address: str | None = Field(None, description="IPv4 address (default: the name resolves)")

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None:
            _ipv4(value)
        return value


def _ipv4(value: str) -> None:
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IPv4 address") from None


class Gpus(Strict):
    type: str = Field(description="a GPU type from the hardware table (key, GRES name or product name)")
    count: int = Field(ge=1, le=64)
    driver: str | None = Field(
        None, description="the NVIDIA driver version every node must run, e.g. 550.90.07 (checked, never installed)"
    )
    dcgm: bool = Field(False, description="install and run DCGM (nv-hostengine) on these nodes")

    @field_validator("type")
    @classmethod
    def _known(cls, value: str) -> str:
        table = hardware_table()
        gpu = table.gpu(value)
        if gpu is None:
            raise ValueError(f"unknown GPU type {value!r}; known: {', '.join(sorted(table.gpus))}")
        return gpu.key

    @field_validator("driver")
    @classmethod
    def _driver_version(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9]+(\.[0-9]+){1,2}", value):
            raise ValueError(f"{value!r} is not a driver version as nvidia-smi prints it (e.g. 550.127.08)")
        return value


class Infiniband(Strict):
    hcas: list[str] = Field(min_length=1, description="HCA device names, e.g. mlx5_0")
    rate: str = Field(description="link generation from the hardware table: edr, hdr, ndr, xdr ...")
    roce: bool = False

    @field_validator("rate")
    @classmethod
    def _known_rate(cls, value: str) -> str:
        rates = hardware_table().ib_rates
        if value.lower() not in rates:
            raise ValueError(f"unknown InfiniBand rate {value!r}; known: {', '.join(rates)}")
        return value.lower()

    @property
    def rate_gbps(self) -> int:
        return hardware_table().ib_rates[self.rate]


class Hardware(Strict):
    cpus: int = Field(ge=1)
    sockets: int = Field(1, ge=1)
    cores_per_socket: int = Field(ge=1)
    threads_per_core: int = Field(1, ge=1, le=8)
    memory_mb: int = Field(ge=64, description="RealMemory Slurm may schedule, MB")
    gpus: Gpus | None = None
    infiniband: Infiniband | None = None

    @model_validator(mode="after")
    def _shape(self) -> Hardware:
        if self.sockets * self.cores_per_socket * self.threads_per_core != self.cpus:
            raise ValueError(
                f"cpus ({self.cpus}) must equal sockets x cores_per_socket x threads_per_core "
                f"({self.sockets}x{self.cores_per_socket}x{self.threads_per_core})"
            )
        return self


class Partition(Strict):
    name: Name
    nodes: str = Field(description="hostlist expression, e.g. gpu[001-016]")
    addresses: str | list[str] | None = Field(
        None, description="one IPv4 per node: a list or a hostlist of IPs, e.g. 10.0.0.[11-26]"
    )
    hardware: Hardware
    default: bool = False
    max_time: str = Field("INFINITE", pattern=r"^(INFINITE|UNLIMITED|\d+(-\d{1,2})?(:\d{1,2}){0,2})$")
    containers: bool | None = Field(None, description="enroot + pyxis here (default: on where nodes have GPUs)")

    @field_validator("nodes")
    @classmethod
    def _nodes(cls, value: str) -> str:
        hosts = expand_hosts(value)
        bad = [h for h in hosts if not re.match(HOST_RE, h)]
        if bad:
            raise ValueError(f"not a valid hostname: {bad[0]!r}")
        return value

    @model_validator(mode="after")
    def _addresses(self) -> Partition:
        if self.addresses is None:
            return self
        addrs = self.address_list()
        for addr in addrs:
            _ipv4(addr)
        if len(addrs) != len(self.hostnames()):
            raise ValueError(f"{len(self.hostnames())} nodes but {len(addrs)} addresses")
        return self

    def hostnames(self) -> list[str]:
        return expand_hosts(self.nodes)

    def address_list(self) -> list[str]:
        if self.addresses is None:
            return []
        if isinstance(self.addresses, list):
            return list(self.addresses)
        return expand_hosts(self.addresses)


# --- services --------------------------------------------------------------------------------------------


class TopologyBlock(Strict):
    name: Name
    nodes: str = Field(description="hostlist of the block's nodes, e.g. gb[001-018]")

    @field_validator("nodes")
    @classmethod
    def _hosts(cls, value: str) -> str:
        expand_hosts(value)
        return value


class BlockTopology(Strict):
    """topology/block (Slurm 23.11+): nodes in blocks with a fast fabric inside each, such as the NVLink
    domain of an NVL72 rack; jobs are packed into as few blocks as they fit."""

    type: Literal["block"]
    block_size: int | None = Field(
        None, ge=1, description="nodes per block: the compute nodes, in order, cut into blocks of this many (NVL72: 18)"
    )
    blocks: list[TopologyBlock] = Field(default_factory=list, description="the blocks, named (instead of block_size)")
    sizes: list[int] = Field(
        default_factory=list,
        description="BlockSizes (Slurm 24.05+): the base block size, then larger sizes a job may span, each a "
        "power-of-two multiple of the one before",
    )


class SlurmSettings(Strict):
    topology: BlockTopology | None = Field(None, description="network topology Slurm schedules by (block)")
    cluster_name: Name | None = Field(None, description="ClusterName (default: the blueprint's name)")
    accounting: bool = True
    conf: dict[str, str | int | bool] = Field(
        default_factory=dict, description="slurm.conf overrides, KEY: value, applied last"
    )

    @field_validator("conf")
    @classmethod
    def _keys(cls, value: dict[str, str | int | bool]) -> dict[str, str | int | bool]:
        for key in value:
            if not re.match(r"^[A-Za-z][A-Za-z0-9]*$", key):
                raise ValueError(f"{key!r} is not a slurm.conf parameter name")
        return value


class NfsFilesystem(Strict):
    type: Literal["nfs"]
    name: Name
    server: Hostname = Field(description="the declared host that serves it")
    export: AbsPath
    mount: AbsPath
    options: str = "rw,hard,noatime,vers=4.2"


class ExistingFilesystem(Strict):
    """Already mounted by the site (Lustre, GPFS, Weka ...): hpckit checks presence and writability."""

    type: Literal["existing"]
    name: Name
    mount: AbsPath
    fstype: str = Field("lustre", pattern=r"^[a-z0-9_.]+$")


Filesystem = Annotated[NfsFilesystem | ExistingFilesystem, Field(discriminator="type")]


class Enroot(Strict):
    package: str | None = Field(None, description="URL or local path of the enroot .deb (pinned)")
    version: str = "3.5.0"
    runtime_path: AbsPath = "/run/enroot/user-$(id -u)"
    cache_path: AbsPath = "/raid/enroot/cache/group-$(id -g)"
    data_path: AbsPath = "/raid/enroot/data/user-$(id -u)"
    hooks: dict[str, str] = Field(
        default_factory=dict,
        description="extra enroot hooks to install: file name -> URL or local path (the PMIx and PyTorch hooks "
        "come with enroot)",
    )


class Pyxis(Strict):
    version: str = "0.20.0"
    source: str | None = Field(None, description="URL or local path of the pyxis source tarball")


class Containers(Strict):
    enabled: bool = Field(True, description="enroot + pyxis on GPU partitions (a partition may opt out)")
    enroot: Enroot = Enroot()
    pyxis: Pyxis = Pyxis()
    smoke_image: str | None = Field(
        None,
        description="image the deploy runs once per GPU partition with srun --container-image: a registry "
        "reference (nvcr.io#nvidia/pytorch:24.05-py3, note the #) or a .sqsh path on the shared filesystem",
    )


class SshProbeSettings(Strict):
    """Out-of-band checks: the sweep host runs a node's quick tier over SSH when no sweep job can run on it
    (munge or slurmd down, the node not answering), to say why and to re-check nodes hpckit took out."""

    user: str = "root"
    key: str | None = Field(None, description="private key on the sweep host (default: ssh's own keys)")
    known_hosts: str | None = Field(None, description="known_hosts on the sweep host (default: ssh's own)")


class HealthSettings(Strict):
    enabled: bool = True
    quick_interval_s: int = Field(300, ge=30, description="Slurm HealthCheckInterval for the quick tier")
    nightly: str = Field("0 2 * * *", description="cron schedule of the nightly sweep")
    drain: bool = Field(True, description="drain failing nodes (false: report only)")
    resume_after: int = Field(2, ge=1, description="consecutive passes before hpckit resumes a node")
    escalate_unknown_after: int = Field(3, ge=1)
    circuit_breaker: float = Field(0.3, gt=0, le=1, description="fraction of nodes failing one check")
    disabled_checks: list[str] = Field(default_factory=list)
    ssh_probe: SshProbeSettings | None = Field(
        None, description="allow out-of-band checks over SSH from the sweep host (the lab sets its own key)"
    )


# --- the blueprint ---------------------------------------------------------------------------------------


class Blueprint(Strict):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"title": "hpckit blueprint", "description": "A Slurm GPU cluster, declared."},
    )

    name: Name
    vars: dict[str, object] = Field(default_factory=dict, description="values referenced as $(vars.NAME)")
    provider: Provider
    slurm: SlurmSettings = SlurmSettings()
    controller: Host
    login: list[Host] = Field(min_length=1)
    partitions: list[Partition] = Field(min_length=1)
    filesystems: list[Filesystem] = Field(default_factory=list)
    containers: Containers = Containers()
    health: HealthSettings = HealthSettings()

    @property
    def cluster_name(self) -> str:
        return self.slurm.cluster_name or self.name

    def compute_hosts(self) -> list[tuple[Partition, str, str | None]]:
        """Every compute node as (partition, hostname, address or None)."""
        out: list[tuple[Partition, str, str | None]] = []
        for part in self.partitions:
            addrs: list[str | None] = list(part.address_list()) or [None] * len(part.hostnames())
            out.extend((part, host, addr) for host, addr in zip(part.hostnames(), addrs, strict=True))
        return out

    def containers_on(self, part: Partition) -> bool:
        if part.containers is not None:
            return part.containers
        return self.containers.enabled and part.hardware.gpus is not None
