"""The blueprint model: what an admin declares about a cluster.

Field-level rules (types, hostlist syntax, known GPU types, address counts) live here so that pydantic
reports them all in one pass; rules that span objects live in `hpckit.blueprint.checks`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from functools import cached_property
from typing import Annotated, ClassVar, Literal

import hostlist
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from hpckit.cron import parse_cron
from hpckit.errors import InputError
from hpckit.hardware import hardware_table
from hpckit.slurm_accounts import (
    ASSOC_LIMITS,
    PREEMPT_MODES,
    QOS_FLAGS,
    QOS_LIMITS,
    Setting,
    setting_problem,
)
from hpckit.slurm_releases import ReleaseError, Version, build_features, default_series, release, version_text

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


class VmProvider(Strict):
    """Every host becomes a virtual machine on this box, with its own kernel and systemd (`hpckit lab`)."""

    type: Literal["vm"]
    subnet: str = Field("10.78.0.0/24", description="the machines' subnet; this box takes the first address")
    # This box's end of the link into the lab's network namespace; the same rule as the lab's bridge.
    bridge: str = Field("hpkvm0", pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,8}$", description="at most 9 characters")
    memory_mib: int = Field(1024, ge=512, le=16384, description="memory of each machine")
    controller_memory_mib: int = Field(1536, ge=512, le=16384, description="the controller's (MariaDB, slurmdbd)")
    cpus: int = Field(1, ge=1, le=4, description="virtual CPUs of each machine (emulated: few is faster)")

    @field_validator("subnet")
    @classmethod
    def _subnet(cls, value: str) -> str:
        return LabProvider._subnet(value)


Provider = Annotated[StaticProvider | LabProvider | VmProvider, Field(discriminator="type")]


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


def _whole(value: object) -> object:
    """YAML reads 1e6 or 2.0 as a float: a whole one is an integer; any other stays and fails as one."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Count = Annotated[int, BeforeValidator(_whole)]
MAX_MEMORY_MB = 64 * 1024 * 1024  # 64 TiB: more than any single machine holds


class Hardware(Strict):
    cpus: Count = Field(ge=1, le=65535)
    sockets: Count = Field(1, ge=1, le=1024)
    cores_per_socket: Count = Field(ge=1, le=65535)
    threads_per_core: Count = Field(1, ge=1, le=8)
    memory_mb: Count = Field(ge=64, le=MAX_MEMORY_MB, description="RealMemory Slurm may schedule, MB")
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

    @property
    def mem_per_cpu(self) -> int:
        """DefMemPerCPU that shares the node's memory evenly over its CPUs, MB."""
        return self.memory_mb // self.cpus

    @property
    def mem_per_gpu(self) -> int | None:
        """DefMemPerGPU that shares the node's memory evenly over its GPUs, MB (None without GPUs)."""
        return self.memory_mb // self.gpus.count if self.gpus is not None else None


def _yes_no(value: object) -> object:
    """YAML 1.1 reads a bare NO or YES as a boolean; Slurm means the word."""
    return ("YES" if value else "NO") if isinstance(value, bool) else value


# Slurm's time limits: minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or no limit.
TIME_RE = r"^(INFINITE|UNLIMITED|\d+(:\d{1,2}){0,2}|\d+-\d{1,2}(:\d{1,2}){0,2})$"
SlurmTime = Annotated[
    str,
    BeforeValidator(lambda v: str(v) if isinstance(v, int) and not isinstance(v, bool) else v),  # minutes
    Field(pattern=TIME_RE, description="a Slurm time: MIN, H:M:S, D-H, D-H:M:S or INFINITE"),
]
# Account and QOS names as sacctmgr keeps them (no commas, spaces or '=' that would split the line).
SlurmName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")]


def minutes(limit: str) -> float:
    """A Slurm time limit in minutes (infinity for no limit)."""
    if limit in ("INFINITE", "UNLIMITED"):
        return float("inf")
    days, _, clock = limit.rpartition("-") if "-" in limit else ("", "", limit)
    parts = [int(p) for p in clock.split(":")]
    if days:  # D-H, D-H:M, D-H:M:S
        parts += [0] * (3 - len(parts))
        return int(days) * 1440 + parts[0] * 60 + parts[1] + parts[2] / 60
    if len(parts) == 1:  # MIN
        return parts[0]
    if len(parts) == 2:  # M:S
        return parts[0] + parts[1] / 60
    return parts[0] * 60 + parts[1] + parts[2] / 60  # H:M:S


class Partition(Strict):
    """A Slurm partition. The one with `hardware:` declares its nodes; one without it takes nodes that other
    partitions declare, so a node may be in several partitions and its hardware is written once."""

    name: Name
    nodes: str = Field(description="hostlist expression, e.g. gpu[001-016]")
    addresses: str | list[str] | None = Field(
        None, description="one IPv4 per node: a list or a hostlist of IPs, e.g. 10.0.0.[11-26]"
    )
    hardware: Hardware | None = Field(
        None,
        description="what each node has; leave it out for a partition of nodes that other partitions declare",
    )
    default: bool = False
    max_time: SlurmTime = "INFINITE"
    default_time: SlurmTime | None = Field(None, description="DefaultTime: a job's limit when it sets none")
    oversubscribe: Annotated[str | None, BeforeValidator(_yes_no)] = Field(
        None,
        pattern=r"^(NO|EXCLUSIVE|YES(:\d+)?|FORCE(:\d+)?)$",
        description="OverSubscribe: NO, EXCLUSIVE, YES[:N] or FORCE[:N] (Slurm's default: NO)",
    )
    allow_accounts: list[SlurmName] | None = Field(None, min_length=1, description="AllowAccounts (default: all)")
    allow_qos: list[SlurmName] | None = Field(None, min_length=1, description="AllowQos (default: all)")
    def_mem_per_cpu: Count | None = Field(
        None, ge=0, le=MAX_MEMORY_MB, description="DefMemPerCPU, MB (default: the nodes' memory / CPUs; 0: none)"
    )
    def_mem_per_gpu: Count | None = Field(
        None, ge=0, le=MAX_MEMORY_MB, description="DefMemPerGPU, MB (default on GPU nodes: memory / GPUs; 0: none)"
    )
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
        if self.hardware is None:
            raise ValueError("addresses go with the partition that declares these nodes (the one with hardware:)")
        addrs = self.address_list()
        for addr in addrs:
            _ipv4(addr)
        if len(addrs) != len(self.hostnames()):
            raise ValueError(f"{len(self.hostnames())} nodes but {len(addrs)} addresses")
        return self

    @model_validator(mode="after")
    def _times(self) -> Partition:
        if self.default_time is not None and minutes(self.default_time) > minutes(self.max_time):
            raise ValueError(f"default_time {self.default_time} is longer than max_time {self.max_time}")
        return self

    @cached_property
    def _hosts(self) -> tuple[str, ...]:
        return tuple(expand_hosts(self.nodes))

    def hostnames(self) -> list[str]:
        return list(self._hosts)

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


def _slurm_version(value: str) -> str:
    try:
        release(value)
    except ReleaseError as exc:
        raise ValueError(str(exc)) from None
    return value


def _build_feature(value: str) -> str:
    known = build_features()
    if value not in known:
        raise ValueError(f"unknown build feature {value!r}; known: {', '.join(known)}")
    return value


SlurmVersion = Annotated[
    str,
    BeforeValidator(lambda v: version_text(v) if isinstance(v, float) else v),
    AfterValidator(_slurm_version),
    WithJsonSchema({"type": "string", "pattern": r"^\d{2}\.\d{2}(\.\d+)?$"}),
]
BuildFeature = Annotated[
    str, AfterValidator(_build_feature), WithJsonSchema({"type": "string", "enum": list(build_features())})
]


def _site_package(value: str) -> str:
    if not (value.endswith(".deb") or re.match(r"^deb\s+\S+\s+\S+", value)):
        raise ValueError(f"{value!r} is neither a .deb (path or URL) nor an apt source line ('deb URL SUITE ...')")
    return value


SitePackage = Annotated[str, AfterValidator(_site_package)]
SHA256 = Annotated[str, Field(pattern=r"^[0-9a-fA-F]{64}$", description="SHA256 of the file, 64 hex digits")]


class SlurmBuild(Strict):
    """How `install: build` builds SchedMD's release: where, and with which optional parts."""

    host: Hostname | None = Field(None, description="the declared host that builds (default: the controller)")
    features: list[BuildFeature] = Field(
        default_factory=lambda: list(build_features()),
        description="optional parts to build (default: all; nvml where NVIDIA's headers are on the build host)",
    )


InstallMode = Literal["distro", "build", "packages"]


def install_mode(install: str | None, version: str | None) -> str:
    """The way Slurm gets onto the hosts: as given, else the distribution's packages when the blueprint
    names no release or the distribution's own, else a build of the named release."""
    if install is not None:
        return install
    if version is None or Version.parse(version).series == default_series().series:
        return "distro"
    return "build"


class SlurmSettings(Strict):
    version: SlurmVersion | None = Field(
        None,
        description='the Slurm release, quoted: "24.11.5" (default: the distribution\'s, Debian 12: 22.05)',
    )
    install: InstallMode | None = Field(
        None,
        description="distro: the distribution's packages; build: SchedMD's source built on slurm.build.host; "
        "packages: the site's own (slurm.packages). Default: distro without a version or with the "
        "distribution's, build otherwise",
    )
    source: str | None = Field(
        None,
        description="install: build: URL or absolute local path of SchedMD's release tarball (default: hpckit's "
        "source cache)",
    )
    source_sha256: SHA256 | None = Field(None, description="SHA256 the source tarball must have")
    build: SlurmBuild = SlurmBuild()
    packages: list[SitePackage] = Field(
        default_factory=list,
        description="install: packages: the site's Slurm .debs (paths or URLs), or its apt source line "
        "('deb URL SUITE COMPONENT')",
    )
    topology: BlockTopology | None = Field(None, description="network topology Slurm schedules by (block)")
    cluster_name: Name | None = Field(None, description="ClusterName (default: the blueprint's name)")
    accounting: bool = True
    auth: Literal["munge", "slurm"] = Field(
        "munge",
        description="how Slurm authenticates: munge (MUNGE), or slurm (Slurm's own auth/slurm and cred/slurm, "
        "23.11 and newer: one slurm.key on every host, sackd on the login nodes, no munge)",
    )
    configless: bool = Field(
        False,
        description="Slurm's configless mode: slurmd on the compute nodes fetches slurm.conf, cgroup.conf and "
        "gres.conf from slurmctld (--conf-server) and the nodes hold no copy of their own",
    )
    conf: dict[str, str | int | bool] = Field(
        default_factory=dict, description="slurm.conf overrides, KEY: value, applied last"
    )

    @field_validator("conf")
    @classmethod
    def _keys(cls, value: dict[str, str | int | bool]) -> dict[str, str | int | bool]:
        for key in value:
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", key):  # fullmatch: `$` lets a trailing newline in
                raise ValueError(f"{key!r} is not a slurm.conf parameter name")
        return value

    @property
    def install_mode(self) -> str:
        """distro, build or packages: `install:`, or what its absence means for this version."""
        return install_mode(self.install, self.version)


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


# enroot and pyxis release numbers as NVIDIA tags them (3.5.0, 0.20.0); the roles compare them with what a
# node has installed and build file names from them, so nothing else may pass.
RELEASE_RE = r"^[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4}$"
_ENROOT_DEB_VERSION = re.compile(r"(?:^|/)enroot_([^_/]+?)(?:-[^-_/]+)?_[^/]*\.deb$")


# Where NVIDIA publishes each release (the default source of enroot's packages and pyxis' tarball); an
# air-gapped site names its own copies (a URL it serves, or a path on the deploying machine).
ENROOT_RELEASE_URL = "https://github.com/NVIDIA/enroot/releases/download/v{version}/enroot_{version}-1_{arch}.deb"
PYXIS_RELEASE_URL = "https://github.com/NVIDIA/pyxis/archive/refs/tags/v{version}.tar.gz"


class Enroot(Strict):
    package: str | None = Field(
        None,
        description="URL or path (on the deploying machine) of the enroot .deb; its enroot+caps twin is taken "
        "from beside it (default: NVIDIA's release of `version`)",
    )
    sha256: SHA256 | None = None
    caps_sha256: SHA256 | None = Field(None, description="SHA256 of the enroot+caps .deb")
    version: str = Field("4.1.2", pattern=RELEASE_RE, description="enroot release, e.g. 4.1.2")
    arch: str = Field("amd64", pattern=r"^[a-z0-9]+$", description="Debian architecture of the nodes' packages")
    runtime_path: AbsPath = "/run/enroot/user-$(id -u)"
    cache_path: AbsPath = "/raid/enroot/cache/group-$(id -g)"
    data_path: AbsPath = "/raid/enroot/data/user-$(id -u)"
    hooks: dict[str, str] = Field(
        default_factory=dict,
        description="extra enroot hooks to install: file name -> URL or local path (the PMIx and PyTorch hooks "
        "come with enroot)",
    )

    @model_validator(mode="after")
    def _package_matches(self) -> Enroot:
        found = _ENROOT_DEB_VERSION.search(self.package or "")
        if found is not None and found.group(1) != self.version:
            raise ValueError(f"package {self.package} is enroot {found.group(1)}, but version is {self.version}")
        return self

    @property
    def package_source(self) -> str:
        """The enroot .deb to install: the named one, else NVIDIA's release."""
        return self.package or ENROOT_RELEASE_URL.format(version=self.version, arch=self.arch)


class SourceRelease(Strict):
    """A source tarball the hosts build: a release of `version`, from `source` or the project's own release URL."""

    RELEASE_URL: ClassVar[str]
    source: str | None = Field(
        None,
        description="URL or path (on the deploying machine) of the source tarball (default: NVIDIA's release of "
        "`version`)",
    )
    sha256: SHA256 | None = None
    version: str

    @property
    def tarball(self) -> str:
        """The source to build: the named one, else NVIDIA's release."""
        return self.source or self.RELEASE_URL.format(version=self.version)


class Pyxis(SourceRelease):
    RELEASE_URL = PYXIS_RELEASE_URL
    version: str = Field("0.24.0", pattern=RELEASE_RE, description="pyxis release, e.g. 0.24.0")


class Containers(Strict):
    enabled: bool = Field(True, description="enroot + pyxis on GPU partitions (a partition may opt out)")
    enroot: Enroot = Enroot()
    pyxis: Pyxis = Pyxis()
    smoke_image: str | None = Field(
        None,
        description="image the deploy runs once per GPU partition with srun --container-image: a registry "
        "reference (nvcr.io#nvidia/pytorch:24.05-py3, note the #) or a .sqsh path on the shared filesystem",
    )


# nccl-tests' own release; an air-gapped site names its copy (a URL it serves, or a path on the deploying machine).
NCCL_TESTS_RELEASE_URL = "https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v{version}.tar.gz"
REQUIREMENT_RE = (
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9_,.-]+\])?([<>=!~]=?[A-Za-z0-9.*+!_-]+(,[<>=!~]=?[A-Za-z0-9.*+!_-]+)*)?$"
)


class TorchToolchain(Strict):
    """A virtualenv with torch that every node of the cluster runs hpckit's torch_sweep with."""

    requirements: list[Annotated[str, Field(pattern=REQUIREMENT_RE)]] = Field(
        default_factory=lambda: ["torch"],
        min_length=1,
        description="pip requirements (name and version, e.g. torch==2.13.0): pin them, the virtualenv is "
        "rebuilt only when they (or the source) change",
    )
    wheels: AbsPath | None = Field(
        None,
        description="folder on the deploying machine holding every wheel needed (`pip download`): copied to the "
        "hosts and installed from with no index (an offline site)",
    )
    index_url: str | None = Field(
        None,
        pattern=r"^(https?|file)://[^\s]+$",
        description="package index the hosts install from (pip --index-url); default: the hosts' pip settings",
    )
    location: Literal["shared", "node"] | None = Field(
        None,
        description="shared: one virtualenv on the first shared filesystem, made once; node: one per node "
        "under /opt (default: shared where the blueprint has a filesystem)",
    )

    @model_validator(mode="after")
    def _one_source(self) -> TorchToolchain:
        if self.wheels and self.index_url:
            raise ValueError("give wheels (a folder, offline) or index_url, not both")
        return self


class NcclTests(SourceRelease):
    """NVIDIA's nccl-tests on the GPU partitions: built on each GPU node against its CUDA, NCCL and MPI, or
    taken from a container image the jobs run through pyxis."""

    RELEASE_URL = NCCL_TESTS_RELEASE_URL
    version: str = Field("2.13.12", pattern=RELEASE_RE, description="nccl-tests release, e.g. 2.13.12")
    image: str | None = Field(
        None,
        description="instead of a build: a container image with nccl-tests' binaries in `image_bin_dir` "
        "(registry reference with # or a .sqsh path), run through pyxis",
    )
    image_bin_dir: AbsPath = Field("/usr/local/bin", description="where the image keeps the *_perf binaries")
    cuda_home: AbsPath = "/usr/local/cuda"
    nccl_home: AbsPath = Field("/usr", description="where include/nccl.h and lib*/libnccl.so are")
    mpi_home: AbsPath = Field("/usr/lib/x86_64-linux-gnu/openmpi", description="where include/mpi.h is")
    gencode: str | None = Field(
        None,
        pattern=r"^(-gencode=arch=compute_[0-9a-z]+,code=(sm|compute)_[0-9a-z]+ ?)+$",
        description="NVCC_GENCODE for the build (default: nccl-tests' own list for the CUDA found)",
    )


class BenchToolchain(Strict):
    """What `hpckit bench` and `verify` run on the nodes, installed by the deploy and named in its record."""

    torch: TorchToolchain | None = Field(None, description="hpckit's torch_sweep: a virtualenv with torch")
    nccl_tests: NcclTests | None = Field(None, description="nccl-tests on the partitions with GPUs")


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

    @field_validator("nightly")
    @classmethod
    def _cron(cls, value: str) -> str:
        try:
            parse_cron(value)
        except InputError as exc:
            raise ValueError(str(exc)) from None
        return value


# --- metrics and alerts (Prometheus) --------------------------------------------------------------------

_EMAIL = r"^[^@\s]+@[^@\s]+$"


class AlertReceivers(Strict):
    """Where Alertmanager sends what fires. A webhook URL that carries a token is a secret: point the webhook
    at a relay on the site's network instead (the URL goes into alertmanager.yml and hpckit's record)."""

    webhooks: list[Annotated[str, Field(pattern=r"^https?://\S+$")]] = Field(
        default_factory=list, description="webhook URLs (Alertmanager's webhook_configs)"
    )
    email: list[Annotated[str, Field(pattern=_EMAIL)]] = Field(default_factory=list, description="addresses")
    email_from: str | None = Field(None, pattern=_EMAIL)
    smarthost: str | None = Field(None, pattern=r"^[A-Za-z0-9.-]+:\d+$", description="SMTP relay, host:port")

    @model_validator(mode="after")
    def _mail_needs_relay(self) -> AlertReceivers:
        if self.email and (self.email_from is None or self.smarthost is None):
            raise ValueError("email alerts need email_from and smarthost (the site's SMTP relay, host:port)")
        return self


class MonitoringSettings(Strict):
    """Prometheus and Alertmanager on one host, node exporter on every Slurm host, hpckit's Slurm exporter on
    the first login node (and Slurm's own metrics endpoint from 25.11 on), alert rules made from the blueprint."""

    enabled: bool = False
    host: str | None = Field(None, description="the declared host that runs Prometheus (default: the controller)")
    scrape_interval_s: int = Field(30, ge=5, le=300)
    retention_days: int = Field(15, ge=1, le=3650)
    node_down_for_s: int = Field(300, ge=0, description="how long a node is down before its alert fires")
    pending_resources_max_s: int = Field(
        3600, ge=60, description="a job pending on Resources longer than this fires an alert"
    )
    slurm_exporter_port: int = Field(9341, ge=1024, le=65535)
    dcgm_exporter_port: int | None = Field(
        None, ge=1, le=65535, description="where the site runs NVIDIA's dcgm-exporter on GPU nodes: scraped there"
    )
    alerts: AlertReceivers = AlertReceivers()


# --- accounts, users and QOS (sacctmgr) -----------------------------------------------------------------

# Slurm's database keeps these names in lower case: a blueprint that says "Vision" would never match.
DbName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,62}$", description="lower case: a-z, 0-9, '-', '_'")]
UserName = Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_.-]{0,31}$", description="a Unix login name")]
Limits = dict[str, int | str]


class UnixUser(Strict):
    """A local Unix account made on every Slurm host with the same uid and gid (sites with LDAP or SSSD leave
    `users:` out: hpckit then only checks that accounting's users resolve alike)."""

    uid: int = Field(ge=1000, le=60000, description="the same on every host (Debian's range for ordinary users)")
    gid: int | None = Field(None, ge=1000, le=60000, description="its own group's gid (default: the uid)")
    shell: AbsPath = "/bin/bash"
    home: AbsPath | None = Field(None, description="home folder (default /home/NAME); hpckit does not create it")


def _limits(value: Limits, table: Mapping[str, Setting], what: str) -> Limits:
    for key, raw in value.items():
        setting = table.get(key)
        if setting is None:
            raise ValueError(f"{key!r} is not {what} limit hpckit sets; known: {', '.join(table)}")
        problem = setting_problem(setting.kind, raw)
        if problem:
            raise ValueError(f"{key}: {problem}")
    return value


class Qos(Strict):
    description: str | None = None
    priority: int | None = Field(None, ge=0, description="added to a job's priority (multifactor weight)")
    preempt: list[DbName] = Field(default_factory=list, description="QOS whose jobs this one may preempt")
    preempt_mode: str | None = Field(None, description="cancel, requeue, suspend, off ... (PreemptMode)")
    flags: list[str] = Field(default_factory=list, description="DenyOnLimit, NoDecay, OverPartQOS ...")
    usage_factor: float | None = Field(None, ge=0)
    limits: Limits = Field(default_factory=dict, description="GrpTRES, MaxTRESPerUser, MaxJobsPerUser, MaxWall ...")

    @field_validator("limits")
    @classmethod
    def _known(cls, value: Limits) -> Limits:
        return _limits(value, QOS_LIMITS, "a QOS")

    @field_validator("flags")
    @classmethod
    def _flags(cls, value: list[str]) -> list[str]:
        for flag in value:
            if flag not in QOS_FLAGS:
                raise ValueError(f"{flag!r} is not a QOS flag; known: {', '.join(sorted(QOS_FLAGS))}")
        return value

    @field_validator("preempt_mode")
    @classmethod
    def _mode(cls, value: str | None) -> str | None:
        if value is not None and not set(value.lower().split(",")) <= PREEMPT_MODES:
            raise ValueError(f"{value!r} is not a PreemptMode; known: {', '.join(sorted(PREEMPT_MODES))}")
        return value


class _Association(Strict):
    """What an account and a user's association in it both take."""

    fairshare: int | Literal["parent"] | None = Field(None, description="shares (default 1), or 'parent'")
    default_qos: DbName | None = None
    qos: list[DbName] = Field(default_factory=list, description="QOS its jobs may use")
    limits: Limits = Field(default_factory=dict, description="GrpTRES, MaxJobs, MaxSubmitJobs, MaxWall ...")

    @field_validator("limits")
    @classmethod
    def _known(cls, value: Limits) -> Limits:
        return _limits(value, ASSOC_LIMITS, "an association")

    @field_validator("fairshare")
    @classmethod
    def _shares(cls, value: int | str | None) -> int | str | None:
        if isinstance(value, int) and value < 0:
            raise ValueError("fairshare is a number of shares (>= 0) or 'parent'")
        return value


class Account(_Association):
    parent: DbName | None = Field(None, description="the parent account (default: root)")
    description: str | None = None
    organization: str | None = None


class AccountUser(_Association):
    default_account: DbName
    accounts: list[DbName] = Field(default_factory=list, description="every account (default: the default one)")
    admin: Literal["none", "operator", "administrator"] = "none"

    @property
    def all_accounts(self) -> list[str]:
        return self.accounts or [self.default_account]


class PriorityWeights(Strict):
    """priority/multifactor's weights (PriorityWeight*): how much each factor counts in a job's priority."""

    fairshare: int = Field(10000, ge=0, le=4_294_967_295, description="PriorityWeightFairshare")
    qos: int = Field(10000, ge=0, le=4_294_967_295, description="PriorityWeightQOS")
    age: int = Field(1000, ge=0, le=4_294_967_295, description="PriorityWeightAge")
    job_size: int = Field(0, ge=0, le=4_294_967_295, description="PriorityWeightJobSize")
    partition: int = Field(0, ge=0, le=4_294_967_295, description="PriorityWeightPartition")
    assoc: int = Field(0, ge=0, le=4_294_967_295, description="PriorityWeightAssoc")


class PrioritySpec(Strict):
    """How jobs of a cluster with declared accounts are ordered (slurm.conf's priority/multifactor keys)."""

    weights: PriorityWeights = PriorityWeights()
    decay_half_life: str | None = Field(None, description="PriorityDecayHalfLife, e.g. 7-0 (Slurm's default)")
    max_age: str | None = Field(None, description="PriorityMaxAge: the age at which the age factor is full")

    @field_validator("decay_half_life", "max_age")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        problem = setting_problem("duration", value) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value

    def conf(self) -> dict[str, int | str]:
        """The slurm.conf keys and values, in the release table's names."""
        w = self.weights
        out: dict[str, int | str] = {
            "PriorityWeightFairshare": w.fairshare,
            "PriorityWeightQOS": w.qos,
            "PriorityWeightAge": w.age,
            "PriorityWeightJobSize": w.job_size,
            "PriorityWeightPartition": w.partition,
            "PriorityWeightAssoc": w.assoc,
        }
        if self.decay_half_life is not None:
            out["PriorityDecayHalfLife"] = self.decay_half_life
        if self.max_age is not None:
            out["PriorityMaxAge"] = self.max_age
        return out


class AccountingSpec(Strict):
    """Accounts, users and QOS as code: `hpckit deploy` makes sacctmgr's state match them."""

    owns_tree: bool = Field(
        False,
        description="remove live accounts, users and QOS the blueprint does not declare (else only report them)",
    )
    qos: dict[DbName, Qos] = Field(default_factory=dict)
    accounts: dict[DbName, Account] = Field(default_factory=dict)
    users: dict[UserName, AccountUser] = Field(default_factory=dict)
    priority: PrioritySpec = Field(
        PrioritySpec(), description="priority/multifactor's weights, which apply once anything is declared"
    )

    @property
    def declares(self) -> bool:
        """Whether it names anything to manage (an empty section changes nothing)."""
        return bool(self.qos or self.accounts or self.users)


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
    monitoring: MonitoringSettings = MonitoringSettings()
    bench: BenchToolchain = BenchToolchain()
    accounting: AccountingSpec | None = Field(None, description="accounts, users and QOS (needs slurm.accounting)")
    users: dict[UserName, UnixUser] = Field(
        default_factory=dict, description="local Unix users made alike on every Slurm host: name -> uid, gid ..."
    )

    @field_validator("users")
    @classmethod
    def _distinct_ids(cls, value: dict[str, UnixUser]) -> dict[str, UnixUser]:
        for kind, ids in (
            ("uid", {n: u.uid for n, u in value.items()}),
            ("gid", {n: u.gid or u.uid for n, u in value.items()}),
        ):
            seen: dict[int, str] = {}
            for name, number in ids.items():
                if number in seen:
                    raise ValueError(f"{name} and {seen[number]} have the same {kind} {number}")
                seen[number] = name
        return value

    @property
    def cluster_name(self) -> str:
        return self.slurm.cluster_name or self.name

    def compute_hosts(self) -> list[tuple[Partition, str, str | None]]:
        """Every compute node once, as (the partition that declares it, hostname, address or None)."""
        return list(self._nodes.values())

    def node(self, host: str) -> tuple[Partition, str, str | None] | None:
        """A compute node's (declaring partition, hostname, address); None for any other host."""
        return self._nodes.get(host)

    def partitions_of(self, host: str) -> list[Partition]:
        """Every partition a compute node is in, in blueprint order."""
        return list(self._memberships.get(host, ()))

    def hardware_in(self, part: Partition) -> Hardware:
        """What the nodes of a partition have: its own `hardware:`, or that of the partition declaring its
        first node (a partition that takes nodes from others)."""
        if part.hardware is not None:
            return part.hardware
        for host in part.hostnames():
            found = self._nodes.get(host)
            if found is not None and found[0].hardware is not None:
                return found[0].hardware
        raise ValueError(f"partition {part.name!r}: none of its nodes is declared with hardware")

    def node_hardware(self, part: Partition) -> list[Hardware]:
        """The distinct hardware of a partition's nodes, in order of first appearance."""
        if part.hardware is not None:
            return [part.hardware]
        seen: dict[int, Hardware] = {}
        for host in part.hostnames():
            found = self._nodes.get(host)
            if found is not None and found[0].hardware is not None:
                seen.setdefault(id(found[0]), found[0].hardware)
        return list(seen.values())

    def containers_on(self, part: Partition) -> bool:
        if part.containers is not None:
            return part.containers
        return self.containers.enabled and any(hw.gpus is not None for hw in self.node_hardware(part))

    # Built once: deploy, plan and expand look nodes up per host, which must not cost a pass over the fleet.
    @cached_property
    def _nodes(self) -> dict[str, tuple[Partition, str, str | None]]:
        out: dict[str, tuple[Partition, str, str | None]] = {}
        for part in self.partitions:
            if part.hardware is None:
                continue
            hosts = part.hostnames()
            addrs: list[str | None] = list(part.address_list()) or [None] * len(hosts)
            for host, addr in zip(hosts, addrs, strict=True):
                out.setdefault(host, (part, host, addr))
        return out

    @cached_property
    def _memberships(self) -> dict[str, tuple[Partition, ...]]:
        out: dict[str, list[Partition]] = {}
        for part in self.partitions:
            for host in part.hostnames():
                out.setdefault(host, []).append(part)
        return {host: tuple(parts) for host, parts in out.items()}
