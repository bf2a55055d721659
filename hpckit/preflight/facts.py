"""Probe output -> facts. Pure parsers; text they cannot read raises :class:`FactError` (which output, why)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from hpckit.errors import HpckitError
from hpckit.hw import GpuInfo, HwParseError, IbPort, meminfo, parse_ibstatus, parse_query_gpu_csv


class FactError(HpckitError):
    """A probe printed something preflight cannot read."""

    def __init__(self, source: str, message: str) -> None:
        self.source = source
        self.message = message
        super().__init__(f"{source}: {message}")


@dataclass(frozen=True)
class OsInfo:
    id: str
    version_id: str
    pretty: str


@dataclass(frozen=True)
class CpuLayout:
    cpus: int
    sockets: int
    cores: int  # physical cores, all sockets

    @property
    def cores_per_socket(self) -> int:
        return self.cores // self.sockets

    @property
    def threads_per_core(self) -> int:
        return self.cpus // self.cores

    def describe(self) -> str:
        return f"{self.sockets} x {self.cores_per_socket} x {self.threads_per_core}"


@dataclass(frozen=True)
class GpuSeen:
    index: int | None
    name: str | None
    driver: str | None
    mig: bool | None


@dataclass(frozen=True)
class Account:
    name: str
    id: int
    gid: int | None = None  # the primary group, for passwd entries


@dataclass(frozen=True)
class DiskSeen:
    path: str
    fstype: str
    avail_kib: int
    mount: str

    @property
    def avail_gib(self) -> float:
        return self.avail_kib / 1024 / 1024


def os_release(text: str, source: str = "/etc/os-release") -> OsInfo:
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[A-Z_]+", key.strip()):
            words = shlex.split(value, posix=True) if value.strip() else [""]
            values[key.strip()] = words[0] if words else ""
    if "ID" not in values:
        raise FactError(source, "no ID= line")
    return OsInfo(values["ID"].lower(), values.get("VERSION_ID", ""), values.get("PRETTY_NAME", values["ID"]))


def cpu_layout(text: str, source: str = "lscpu --parse") -> CpuLayout:
    """``lscpu --parse=CPU,CORE,SOCKET`` (or plain ``lscpu -p``, whose first three columns are the same): one
    ``cpu,core,socket[,...]`` line per online CPU; '#' lines are comments. Cores are counted per socket,
    since some kernels number them from 0 again on every socket."""
    cpus: set[int] = set()
    cores: set[tuple[int, int]] = set()
    sockets: set[int] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.strip().split(",")[:3]
        if len(fields) != 3 or not all(f.isdigit() for f in fields):
            raise FactError(source, f"line {number}: expected 'cpu,core,socket', got {line.strip()!r}")
        cpu, core, socket = (int(f) for f in fields)
        cpus.add(cpu)
        cores.add((socket, core))
        sockets.add(socket)
    if not cpus:
        raise FactError(source, "no CPU line")
    return CpuLayout(len(cpus), len(sockets), len(cores))


def mem_total_mb(text: str, source: str = "/proc/meminfo") -> int:
    """MemTotal in MiB, the unit of slurmd's RealMemory."""
    try:
        return meminfo.mem_total_mb(text, source)
    except HwParseError as exc:
        raise FactError(source, exc.message) from None


def gpus_from_csv(text: str, source: str = "nvidia-smi --query-gpu") -> list[GpuSeen]:
    try:
        rows = parse_query_gpu_csv(text, source=source)
    except HwParseError as exc:
        raise FactError(source, exc.message) from None
    out = []
    for row in rows:
        index = row.get("index")
        mig = row.get("mig.mode.current")
        out.append(
            GpuSeen(
                int(index) if isinstance(index, float) else None,
                _text(row.get("name")),
                _text(row.get("driver_version")),
                None if mig is None else str(mig).lower() == "enabled",
            )
        )
    return out


def gpus_from_query(gpus: list[GpuInfo]) -> list[GpuSeen]:
    """The same facts from a parsed ``nvidia-smi -q``."""
    return [GpuSeen(g.index, g.product_name, g.driver_version, g.mig_mode_current) for g in gpus]


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def device_files(text: str) -> list[str]:
    return sorted(line.strip() for line in text.splitlines() if line.strip().startswith("/dev/"))


_SYSFS_LINE = re.compile(r"^(?P<ca>[^/\s]+)/ports/(?P<port>\d+)/(?P<attr>[a-z_]+):(?P<value>.*)$")


def ib_ports_from_sysfs(text: str, source: str = "/sys/class/infiniband") -> list[IbPort]:
    """``grep -H . <ca>/ports/<n>/<attr>`` lines -> ports, read by the ``ibstatus`` parser: ibstatus prints
    exactly these sysfs files, one block per port."""
    blocks: dict[tuple[str, int], list[str]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _SYSFS_LINE.match(line.strip())
        if match is None:
            raise FactError(source, f"line {number}: expected '<ca>/ports/<n>/<attr>:<value>', got {line!r}")
        key = (match.group("ca"), int(match.group("port")))
        blocks.setdefault(key, []).append(f"\t{match.group('attr')}: {match.group('value').strip()}")
    if not blocks:
        return []
    text = "".join(
        f"Infiniband device '{ca}' port {port} status:\n" + "\n".join(lines) + "\n"
        for (ca, port), lines in sorted(blocks.items())
    )
    try:
        return parse_ibstatus(text, source)
    except HwParseError as exc:
        raise FactError(source, exc.message) from None


def passwd_accounts(text: str, source: str = "getent passwd") -> dict[str, Account]:
    out = {}
    for line in text.splitlines():
        fields = line.strip().split(":")
        if len(fields) < 4 or not fields[2].isdigit() or not fields[3].isdigit():
            if line.strip():
                raise FactError(source, f"not a passwd entry: {line.strip()!r}")
            continue
        out[fields[0]] = Account(fields[0], int(fields[2]), int(fields[3]))
    return out


def group_accounts(text: str, source: str = "getent group") -> dict[str, Account]:
    out = {}
    for line in text.splitlines():
        fields = line.strip().split(":")
        if len(fields) < 3 or not fields[2].isdigit():
            if line.strip():
                raise FactError(source, f"not a group entry: {line.strip()!r}")
            continue
        out[fields[0]] = Account(fields[0], int(fields[2]))
    return out


def clock_state(text: str, source: str = "adjtimex") -> int:
    value = text.strip()
    if not re.fullmatch(r"-?\d+", value):
        raise FactError(source, f"expected the adjtimex() return value, got {value!r}")
    return int(value)


def epoch(text: str, source: str = "date +%s.%N") -> float:
    value = text.strip()
    if not re.fullmatch(r"\d+(\.\d+)?", value):
        raise FactError(source, f"expected seconds since the epoch, got {value!r}")
    return float(value)


def disk_usage(text: str, source: str = "df -P -k -T") -> dict[str, DiskSeen]:
    """Lines ``<asked path> <df -PT line>``: filesystem, type, 1024-blocks, used, available, capacity, mount."""
    out = {}
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 8 or not fields[5].isdigit():
            raise FactError(source, f"line {number}: not a df -P -T line: {line.strip()!r}")
        path, fstype, avail, mount = fields[0], fields[2], int(fields[5]), " ".join(fields[7:])
        out[path] = DiskSeen(path, fstype, avail, mount)
    return out


def mounted(text: str) -> dict[str, str]:
    """``findmnt -l -n -o TARGET,FSTYPE`` -> mount point -> filesystem type (the last mount on a path wins)."""
    out = {}
    for line in text.splitlines():
        target, _, fstype = line.strip().rpartition(" ")
        if target.strip():
            out[target.strip()] = fstype
    return out
