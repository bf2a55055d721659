"""What a lab is: a named set of nodes on one bridge. Pure data, validated on construction."""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from hpckit.lab.errors import LabError

DEFAULT_STATE_ROOT = Path("/var/lib/hpckit/lab")

_CLUSTER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
# Host-side veth names are "<bridge>v<offset>" and Linux caps interface names at 15 characters,
# so the bridge name keeps room for "v" plus a five-digit offset.
_BRIDGE_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9_-]{0,8}$")
_MAX_GPUS = 64
# Paths a shared directory may not cover: kernel filesystems and what each node keeps private.
_RESERVED_PATHS = ("/", "/proc", "/sys", "/dev", "/run", "/etc", "/usr", "/bin", "/sbin", "/lib", "/var")


@dataclass(frozen=True)
class LabNode:
    """One machine of the lab."""

    name: str
    address: str
    gpus: int = 0

    def __post_init__(self) -> None:
        if not _HOSTNAME_RE.fullmatch(self.name):
            raise LabError(
                f"node name {self.name!r} is not a valid hostname (letters, digits and '-', at most 63 characters)"
            )
        try:
            ip = ipaddress.ip_address(self.address)
        except ValueError:
            raise LabError(f"node {self.name}: address {self.address!r} is not an IPv4 address") from None
        if ip.version != 4:
            raise LabError(f"node {self.name}: address {self.address!r} is not an IPv4 address")
        if isinstance(self.gpus, bool) or not 0 <= self.gpus <= _MAX_GPUS:
            raise LabError(f"node {self.name}: gpus must be between 0 and {_MAX_GPUS}, got {self.gpus!r}")


@dataclass(frozen=True)
class LabSpec:
    """A lab: its nodes, the bridge they share, and the host directories every node sees."""

    cluster: str
    nodes: tuple[LabNode, ...]
    subnet: str = "10.77.0.0/24"
    bridge: str = "hpck0"
    shared_dirs: tuple[str, ...] = ()
    state_root: Path = field(default=DEFAULT_STATE_ROOT)

    def __post_init__(self) -> None:
        _check_cluster(self.cluster)
        _check_bridge(self.bridge)
        network = _parse_subnet(self.subnet)
        _check_nodes(self.nodes, network)
        _check_shared_dirs(self.shared_dirs)
        _check_state_root(self.state_root)

    @property
    def network(self) -> ipaddress.IPv4Network:
        return _parse_subnet(self.subnet)

    @property
    def host_address(self) -> str:
        """The host's own address on the bridge: the subnet's first address."""
        return str(next(self.network.hosts()))

    def node(self, name: str) -> LabNode:
        for node in self.nodes:
            if node.name == name:
                return node
        known = ", ".join(n.name for n in self.nodes)
        raise LabError(f"lab {self.cluster!r} has no node {name!r} (nodes: {known})")

    def veth_name(self, node: LabNode) -> str:
        """Host-side interface name of a node's link; unique per address, so stable across `up`s."""
        offset = int(ipaddress.IPv4Address(node.address)) - int(self.network.network_address)
        return f"{self.bridge}v{offset}"

    def to_json(self) -> str:
        data = {
            "cluster": self.cluster,
            "subnet": self.subnet,
            "bridge": self.bridge,
            "shared_dirs": list(self.shared_dirs),
            "state_root": str(self.state_root),
            "nodes": [{"name": n.name, "address": n.address, "gpus": n.gpus} for n in self.nodes],
        }
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, origin: str = "lab spec") -> LabSpec:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LabError(f"{origin}: not valid JSON ({exc})") from None
        return cls.from_mapping(data, origin)

    @classmethod
    def from_mapping(cls, data: Any, origin: str = "lab spec") -> LabSpec:
        """Build a spec from plain data (parsed JSON/YAML); wrong shapes become a LabError."""
        if not isinstance(data, dict):
            raise LabError(f"{origin}: expected a mapping, got {type(data).__name__}")
        try:
            nodes = tuple(
                LabNode(name=str(n["name"]), address=str(n["address"]), gpus=int(n.get("gpus", 0)))
                for n in data["nodes"]
            )
            return cls(
                cluster=str(data["cluster"]),
                nodes=nodes,
                subnet=str(data.get("subnet", "10.77.0.0/24")),
                bridge=str(data.get("bridge", "hpck0")),
                shared_dirs=tuple(str(d) for d in data.get("shared_dirs", ())),
                state_root=Path(str(data.get("state_root", DEFAULT_STATE_ROOT))),
            )
        except KeyError as exc:
            raise LabError(f"{origin}: missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise LabError(f"{origin}: malformed ({exc})") from None


def _check_cluster(cluster: str) -> None:
    if not _CLUSTER_RE.fullmatch(cluster):
        raise LabError(
            f"cluster name {cluster!r} is not usable for a lab (letters, digits, '-' and '_', at most 63 characters)"
        )


def _check_bridge(bridge: str) -> None:
    if not _BRIDGE_RE.fullmatch(bridge):
        raise LabError(
            f"bridge name {bridge!r} is not usable: a letter, then letters, digits, '-' or '_', "
            "at most 9 characters (node links are named <bridge>v<N>, within Linux's 15)"
        )


def _parse_subnet(subnet: str) -> ipaddress.IPv4Network:
    try:
        network = ipaddress.ip_network(subnet, strict=True)
    except ValueError as exc:
        raise LabError(f"subnet {subnet!r} is not an IPv4 network ({exc})") from None
    if not isinstance(network, ipaddress.IPv4Network) or not 16 <= network.prefixlen <= 30:
        raise LabError(f"subnet {subnet!r} must be an IPv4 network between /16 and /30")
    return network


def _check_nodes(nodes: tuple[LabNode, ...], network: ipaddress.IPv4Network) -> None:
    if not nodes:
        raise LabError("a lab needs at least one node")
    host = next(network.hosts())
    names: set[str] = set()
    addresses: dict[str, str] = {}
    for node in nodes:
        if node.name in names:
            raise LabError(f"node name {node.name!r} is used twice")
        names.add(node.name)
        ip = ipaddress.IPv4Address(node.address)
        if ip not in network or ip in (network.network_address, network.broadcast_address):
            raise LabError(f"node {node.name}: address {node.address} is outside subnet {network}")
        if ip == host:
            raise LabError(f"node {node.name}: address {node.address} is the host's own address on the bridge")
        if node.address in addresses:
            raise LabError(f"nodes {addresses[node.address]} and {node.name} share address {node.address}")
        addresses[node.address] = node.name


def _check_shared_dirs(shared_dirs: tuple[str, ...]) -> None:
    seen: list[PurePosixPath] = []
    for raw in shared_dirs:
        path = PurePosixPath(raw)
        if not path.is_absolute() or str(path) != raw or ".." in path.parts:
            raise LabError(f"shared dir {raw!r} must be a normalised absolute path")
        if any(path == PurePosixPath(r) or _is_under(PurePosixPath(r), path) for r in _RESERVED_PATHS):
            raise LabError(f"shared dir {raw!r} would hide a system directory")
        if raw in {"/proc", "/sys", "/dev"} or any(
            _is_under(path, PurePosixPath(r)) for r in ("/proc", "/sys", "/dev")
        ):
            raise LabError(f"shared dir {raw!r} lies in a kernel filesystem")
        for other in seen:
            if path == other or _is_under(path, other) or _is_under(other, path):
                raise LabError(f"shared dirs {other} and {raw} overlap")
        if any(c in raw for c in ",: \t\n"):
            raise LabError(f"shared dir {raw!r} contains a character mount options cannot carry")
        seen.append(path)


def _check_state_root(state_root: Path) -> None:
    text = str(state_root)
    if not state_root.is_absolute():
        raise LabError(f"state root {text!r} must be an absolute path")
    if any(c in text for c in ",: \t\n"):
        raise LabError(f"state root {text!r} contains a character overlay mount options cannot carry")


def _is_under(path: PurePosixPath, parent: PurePosixPath) -> bool:
    """True when ``path`` lies strictly inside ``parent``."""
    return path != parent and parent in path.parents
