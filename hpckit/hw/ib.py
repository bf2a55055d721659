"""InfiniBand: ``ibstat``, ``ibstatus`` and the sysfs port tree (``ibnetdiscover``: hpckit.hw.fabric)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from hpckit.hw._ib_port import IbPort, lid, physical_state, port_state, rate
from hpckit.hw.errors import HwParseError, normalise_guid, parse_int

__all__ = [
    "IbCa",
    "IbPort",
    "IbstatReport",
    "parse_ibstat",
    "parse_ibstat_report",
    "parse_ibstatus",
    "read_sysfs_ports",
]

SYSFS_ROOT = Path("/sys/class/infiniband")


@dataclass(frozen=True)
class IbCa:
    name: str
    ca_type: str | None = None  # "MT4129" (ConnectX-7)
    num_ports: int | None = None
    firmware: str | None = None
    hardware_version: str | None = None
    node_guid: str | None = None
    system_image_guid: str | None = None
    ports: tuple[IbPort, ...] = ()


@dataclass(frozen=True)
class IbstatReport:
    """What ibstat printed: the adapters it got through, and its own error lines.

    ibstat stops at the first adapter it cannot stat (``ibpanic: ... stat of IB device 'mlx5_8' failed``)
    and exits 255, so a non-empty ``errors`` means ``cas`` is incomplete.
    """

    cas: tuple[IbCa, ...]
    errors: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return not self.errors


_CA = re.compile(r"^CA '(?P<name>[^']+)'$")
_PORT = re.compile(r"^Port (?P<port>\d+):$")
_KEY_VALUE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z_ ]*?)\s*:\s*(?P<value>.*)$")
_TOOL_ERROR = re.compile(r"^(?:ibpanic|ibwarn|iberror|ibstat|ibdebug)\b.*?:\s")


def parse_ibstat(text: str, source: str = "ibstat") -> list[IbCa]:
    """The adapters in ``ibstat`` output; :func:`parse_ibstat_report` also tells whether it was cut short."""
    return list(parse_ibstat_report(text, source).cas)


def parse_ibstat_report(text: str, source: str = "ibstat") -> IbstatReport:
    cas: list[IbCa] = []
    errors: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if _TOOL_ERROR.match(line):
            errors.append(line)
            continue
        ca = _CA.match(line)
        if ca is not None:
            cas.append(IbCa(ca.group("name")))
            continue
        if not cas:
            raise HwParseError(source, number, f"expected \"CA '<name>'\" first, got {line!r}")
        cas[-1] = _ibstat_line(cas[-1], line, number, source)
    if not cas and not errors:
        raise HwParseError(source, None, "no \"CA '<name>'\" block found")
    return IbstatReport(tuple(cas), tuple(errors))


def _ibstat_line(ca: IbCa, line: str, number: int, source: str) -> IbCa:
    port = _PORT.match(line)
    if port is not None:
        return replace(ca, ports=(*ca.ports, IbPort(ca.name, int(port.group("port")))))
    match = _KEY_VALUE.match(line)
    if match is None:
        raise HwParseError(source, number, f"expected 'key: value', got {line!r}")
    key, value = match.group("key").casefold(), match.group("value").strip()
    if ca.ports:  # every line after the first "Port N:" belongs to the last port
        return replace(ca, ports=(*ca.ports[:-1], _ibstat_port_field(ca.ports[-1], key, value, number, source)))
    return _ibstat_ca_field(ca, key, value, number, source)


def _ibstat_ca_field(ca: IbCa, key: str, value: str, number: int, source: str) -> IbCa:
    if key == "ca type":
        return replace(ca, ca_type=value)
    if key == "number of ports":
        return replace(ca, num_ports=parse_int(value, source, number, "Number of ports"))
    if key == "firmware version":
        return replace(ca, firmware=value)
    if key == "hardware version":
        return replace(ca, hardware_version=value)
    if key == "node guid":
        return replace(ca, node_guid=normalise_guid(value, source, number))
    if key == "system image guid":
        return replace(ca, system_image_guid=normalise_guid(value, source, number))
    return ca  # keys newer ibstat versions may add


def _ibstat_port_field(port: IbPort, key: str, value: str, number: int, source: str) -> IbPort:
    if key == "state":
        return replace(port, state=port_state(value, source, number))
    if key == "physical state":
        return replace(port, physical_state=physical_state(value, source, number))
    if key == "rate":
        gbps, mode = rate(value, source, number)
        return replace(port, rate_gbps=gbps, width_speed=mode or port.width_speed)
    if key == "base lid":
        return replace(port, lid=lid(value, source, number))
    if key == "sm lid":
        return replace(port, sm_lid=lid(value, source, number))
    if key == "lmc":
        return replace(port, lmc=parse_int(value, source, number, "LMC"))
    if key == "capability mask":
        return replace(port, capability_mask=value)
    if key == "port guid":
        return replace(port, port_guid=normalise_guid(value, source, number))
    if key == "link layer":
        return replace(port, link_layer=value)
    return port


_IBSTATUS_PORT = re.compile(r"^Infiniband device '(?P<ca>[^']+)' port (?P<port>\d+) status:$")


def parse_ibstatus(text: str, source: str = "ibstatus") -> list[IbPort]:
    """One IbPort per ``Infiniband device '<ca>' port <n> status:`` block."""
    ports: list[IbPort] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        header = _IBSTATUS_PORT.match(line)
        if header is not None:
            ports.append(IbPort(header.group("ca"), int(header.group("port"))))
            continue
        match = _KEY_VALUE.match(line)
        if not ports or match is None:
            raise HwParseError(source, number, f"unexpected line {line!r}")
        ports[-1] = _status_field(ports[-1], match.group("key").casefold(), match.group("value"), number, source)
    if not ports:
        raise HwParseError(source, None, "no \"Infiniband device '<ca>' port <n> status:\" block found")
    return ports


def _status_field(port: IbPort, key: str, value: str, number: int | None, source: str) -> IbPort:
    """A field named as ibstatus prints it or as its sysfs file is called (they differ only in ``_``)."""
    key = key.replace("_", " ")
    value = value.strip()
    if key == "default gid":
        return replace(port, gid=value)
    if key in ("base lid", "lid"):
        return replace(port, lid=lid(value, source, number))
    if key == "sm lid":
        return replace(port, sm_lid=lid(value, source, number))
    if key == "state":
        return replace(port, state=port_state(value, source, number))
    if key == "phys state":
        return replace(port, physical_state=physical_state(value, source, number))
    if key == "rate":
        gbps, mode = rate(value, source, number)
        return replace(port, rate_gbps=gbps, width_speed=mode)
    if key == "link layer":
        return replace(port, link_layer=value)
    if key == "lid mask count":
        return replace(port, lmc=parse_int(value, source, number, "lid_mask_count"))
    if key == "cap mask":
        return replace(port, capability_mask=value)
    return port


# The sysfs files read per port, named as in /sys/class/infiniband/<ca>/ports/<n>/.
_SYSFS_FILES = ("phys_state", "rate", "link_layer", "lid", "sm_lid", "lid_mask_count", "cap_mask")


def read_sysfs_ports(root: Path = SYSFS_ROOT) -> list[IbPort]:
    """Every port under ``root/<ca>/ports/<n>``, with its counters. A missing ``root`` means no HCA: []."""
    if not root.is_dir():
        return []
    ports: list[IbPort] = []
    for ca_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        port_root = ca_dir / "ports"
        if not port_root.is_dir():
            raise HwParseError(str(ca_dir), None, "adapter without a ports/ directory")
        for port_dir in sorted(port_root.iterdir(), key=_port_number):
            ports.append(_sysfs_port(ca_dir.name, port_dir))
    return ports


def _port_number(path: Path) -> int:
    if not path.name.isdigit():
        raise HwParseError(str(path), None, "port directory name is not a number")
    return int(path.name)


def _sysfs_port(ca: str, port_dir: Path) -> IbPort:
    state = port_dir / "state"
    try:
        state_text = state.read_text(encoding="ascii", errors="replace")
    except OSError as error:
        raise HwParseError(str(state), None, f"cannot read: {error.strerror or error}") from None
    port = _status_field(IbPort(ca, _port_number(port_dir)), "state", state_text, None, str(state))
    for name in (*_SYSFS_FILES, "gids/0"):
        text = _read_optional(port_dir / name)
        if text is not None:
            port = _status_field(port, "default gid" if name == "gids/0" else name, text, None, str(port_dir / name))
    return replace(port, counters=_counters(port_dir / "counters"))


def _read_optional(path: Path) -> str | None:
    """Some drivers refuse reads (EINVAL) of attributes a port in its current mode lacks: no value then."""
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None


def _counters(directory: Path) -> dict[str, int]:
    """Counter files as integers. Some drivers refuse reads of counters they do not implement (EINVAL);
    those are left out rather than failing the whole port."""
    counters: dict[str, int] = {}
    if not directory.is_dir():
        return counters
    for path in sorted(directory.iterdir()):
        text = _read_optional(path)
        if text is None:
            continue
        value = parse_int(text, str(path), None, path.name)
        if value is not None:
            counters[path.name] = value
    return counters
