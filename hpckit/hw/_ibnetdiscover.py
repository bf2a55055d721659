"""``ibnetdiscover`` -> the fabric's switches, adapters and the links between their ports.

Every link is printed twice (once from each end); the two halves must agree, or the dump is refused.
Blank lines between node blocks are optional (copies of real dumps often lose them), and a node that is
only seen from its neighbours' port lines (a truncated dump) is still known by its id and description.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from hpckit.hw.errors import HwParseError, normalise_guid

SOURCE = "ibnetdiscover"

NodeKind = Literal["Switch", "Ca", "Router"]
_KINDS: dict[str, NodeKind] = {"Switch": "Switch", "Ca": "Ca", "Rt": "Router"}
_ID_PREFIX: dict[str, NodeKind] = {"S": "Switch", "H": "Ca", "R": "Router"}


@dataclass(frozen=True)
class IbNode:
    id: str  # ibnetdiscover's node id, e.g. "S-ec0d9a0300ec8240" / "H-506b4b030043f9e2"
    kind: NodeKind
    guid: str  # 16 lower-case hex digits
    description: str  # the node description: "node018 HCA-1", "SwitchIB Mellanox Technologies"
    ports: int | None = None  # port count from the node line; None when only seen from a neighbour
    lid: int | None = None


@dataclass(frozen=True)
class IbLink:
    """A cable: ``a`` is the end that sorts first, so a link has one spelling whichever end printed it."""

    a: str
    a_port: int
    b: str
    b_port: int
    speed: str | None  # "4xEDR"; a degraded link shows as e.g. "4xDDR"


@dataclass(frozen=True)
class IbFabric:
    nodes: Mapping[str, IbNode]
    links: tuple[IbLink, ...]
    generated: str | None = None  # the "# Topology file: generated on ..." date
    _neighbours: Mapping[str, tuple[tuple[int, str, int, IbLink], ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Indexed once: topology building asks for every switch's neighbours.
        object.__setattr__(self, "_neighbours", _neighbour_index(self.links))

    @property
    def switches(self) -> tuple[IbNode, ...]:
        return tuple(n for n in self.nodes.values() if n.kind == "Switch")

    @property
    def cas(self) -> tuple[IbNode, ...]:
        return tuple(n for n in self.nodes.values() if n.kind == "Ca")

    def neighbours(self, node_id: str) -> tuple[tuple[int, str, int, IbLink], ...]:
        """(local port, peer id, peer port, link) for each cabled port of ``node_id``, by local port."""
        return self._neighbours.get(node_id, ())


_HEADER = re.compile(r"^(?P<key>vendid|devid|sysimgguid|switchguid|caguid|rtguid)=(?P<value>[^(\s]+)")
_NODE = re.compile(
    r'^(?P<kind>Switch|Ca|Rt)\s+(?P<ports>\d+)\s+"(?P<id>[^"]+)"\s*'
    r'(?:#\s*"(?P<desc>[^"]*)"(?P<tail>.*))?$'
)
_PORT = re.compile(
    r"^\[(?P<port>\d+)\](?:\[ext \d+\])?(?:\((?P<guid>[0-9a-fA-F]+)\))?\s*"
    r'"(?P<peer>[^"]+)"\[(?P<peer_port>\d+)\](?:\[ext \d+\])?(?:\((?P<peer_guid>[0-9a-fA-F]+)\))?\s*'
    r"(?:#\s*(?P<comment>.*))?$"
)
_PEER_COMMENT = re.compile(r'"(?P<desc>[^"]*)"\s+lid\s+(?P<lid>\d+)\s+(?P<speed>\S+)\s*$')
_OWN_LID = re.compile(r"^lid\s+(?P<lid>\d+)\b")
_TAIL_LID = re.compile(r"\blid\s+(?P<lid>\d+)\b")
_GENERATED = re.compile(r"^#\s*Topology file: generated on (?P<date>.+)$")


@dataclass
class _Builder:
    source: str
    nodes: dict[str, IbNode] = field(default_factory=dict)
    seen: dict[str, IbNode] = field(default_factory=dict)  # nodes known only from a neighbour's line
    ends: dict[tuple[str, int], tuple[str, int, str | None, int]] = field(default_factory=dict)
    guid: str | None = None
    current: str | None = None
    generated: str | None = None


def parse_ibnetdiscover(text: str, source: str = SOURCE) -> IbFabric:
    builder = _Builder(source)
    for number, raw in enumerate(text.splitlines(), start=1):
        _line(builder, raw.strip(), number)
    if not builder.nodes:
        raise HwParseError(source, None, "no Switch/Ca node found; is this ibnetdiscover output?")
    return _fabric(builder)


def _line(builder: _Builder, line: str, number: int) -> None:
    if not line:
        return
    if line.startswith("#"):
        generated = _GENERATED.match(line)
        if generated is not None:
            builder.generated = generated.group("date").strip()
        return
    header = _HEADER.match(line)
    if header is not None:
        if header.group("key") in ("switchguid", "caguid", "rtguid"):
            builder.guid = normalise_guid(header.group("value"), builder.source, number)
        return
    node = _NODE.match(line)
    if node is not None:
        _node(builder, node, number)
        return
    port = _PORT.match(line)
    if port is None:
        raise HwParseError(builder.source, number, f"unexpected line {line[:120]!r}")
    _port(builder, port, number)


def _node(builder: _Builder, match: re.Match[str], number: int) -> None:
    node_id = match.group("id")
    if node_id in builder.nodes:
        raise HwParseError(builder.source, number, f"node {node_id!r} described twice")
    tail = _TAIL_LID.search(match.group("tail") or "")
    builder.nodes[node_id] = IbNode(
        id=node_id,
        kind=_KINDS[match.group("kind")],
        guid=builder.guid or _guid_from_id(node_id, builder.source, number),
        description=match.group("desc") or "",
        ports=int(match.group("ports")),
        lid=int(tail.group("lid")) if tail else None,
    )
    builder.guid = None
    builder.current = node_id


def _port(builder: _Builder, match: re.Match[str], number: int) -> None:
    if builder.current is None:
        raise HwParseError(builder.source, number, "port line before any Switch/Ca line")
    here = (builder.current, int(match.group("port")))
    peer = (match.group("peer"), int(match.group("peer_port")))
    comment = match.group("comment") or ""
    described = _PEER_COMMENT.search(comment)
    speed = described.group("speed") if described else None
    if here in builder.ends and builder.ends[here][:2] != peer:
        raise HwParseError(builder.source, number, f"port {here[1]} of {here[0]} is listed twice")
    builder.ends[here] = (*peer, speed, number)
    _remember_peer(builder, peer[0], described, number)
    own = _OWN_LID.match(comment)
    node = builder.nodes[builder.current]
    if own is not None and node.lid is None:  # an adapter's LID is printed on its port lines
        builder.nodes[builder.current] = IbNode(
            node.id, node.kind, node.guid, node.description, node.ports, int(own.group("lid"))
        )


def _remember_peer(builder: _Builder, peer: str, described: re.Match[str] | None, number: int) -> None:
    if peer in builder.seen:
        return
    kind = _ID_PREFIX.get(peer[:1], "Ca")
    guid = _guid_from_id(peer, builder.source, number)
    if described is None:
        builder.seen[peer] = IbNode(peer, kind, guid, "")
    else:
        builder.seen[peer] = IbNode(peer, kind, guid, described.group("desc"), None, int(described.group("lid")))


def _guid_from_id(node_id: str, source: str, number: int) -> str:
    match = re.fullmatch(r"[SHR]-([0-9a-fA-F]{1,16})", node_id)
    if match is None:
        raise HwParseError(source, number, f"cannot tell the GUID of node {node_id!r}")
    return normalise_guid(match.group(1), source, number)


def _fabric(builder: _Builder) -> IbFabric:
    nodes = dict(builder.nodes)
    for seen_id, seen in builder.seen.items():
        nodes.setdefault(seen_id, seen)
    links: dict[tuple[str, int, str, int], IbLink] = {}
    for (node_id, port), (peer, peer_port, speed, number) in builder.ends.items():
        back = builder.ends.get((peer, peer_port))
        if back is not None and back[:2] != (node_id, port):
            raise HwParseError(
                builder.source,
                number,
                f"{node_id}[{port}] -> {peer}[{peer_port}], but {peer}[{peer_port}] -> {back[0]}[{back[1]}]",
            )
        (a, a_port), (b, b_port) = sorted([(node_id, port), (peer, peer_port)])
        links.setdefault((a, a_port, b, b_port), IbLink(a, a_port, b, b_port, speed))
    ordered = tuple(links[key] for key in sorted(links))
    return IbFabric(nodes, ordered, builder.generated)


def _neighbour_index(links: tuple[IbLink, ...]) -> dict[str, tuple[tuple[int, str, int, IbLink], ...]]:
    index: dict[str, list[tuple[int, str, int, IbLink]]] = {}
    for link in links:
        index.setdefault(link.a, []).append((link.a_port, link.b, link.b_port, link))
        index.setdefault(link.b, []).append((link.b_port, link.a, link.a_port, link))
    return {node: tuple(sorted(ends, key=lambda end: (end[0], end[1]))) for node, ends in index.items()}
