"""Ansible filter ``hpckit_topology_conf``: ``ibnetdiscover`` output -> Slurm topology.conf (topology/tree).

Self-contained (the standard library only) so that a plain ``ansible-playbook`` runs it without hpckit
installed. It is also the one implementation: hpckit loads this file for its own ibnetdiscover parser
(hpckit.hw.fabric) and topology.conf generator (hpckit.deploy.topology).

ibnetdiscover prints every link twice (once from each end); the two halves must agree, or the dump is
refused. Blank lines between node blocks are optional (copies of real dumps often lose them), and a node
only seen from its neighbours' port lines (a truncated dump) is still known by its id and description.

topology.conf: leaf switches are those with adapters of known hosts behind them; each gets a ``Nodes=``
line. Every other switch sits at its distance from the nearest leaf and lists the switches one level below
it in ``Switches=``. Output is sorted, so the same fabric always gives the same file.
"""

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

try:  # python-hostlist (an hpckit dependency) compresses node lists; without it they are listed in full
    from hostlist import collect_hostlist as _collect_hostlist
except ImportError:
    _collect_hostlist = None


class FabricError(ValueError):
    """ibnetdiscover output that cannot be read; args: source, the 1-based line (None: the text as a whole),
    message."""

    def __str__(self) -> str:
        source, line, message = self.args
        return f"{source}: {message}" if line is None else f"{source}, line {line}: {message}"


def normalise_guid(text: str, source: str, line: int | None) -> str:
    """A GUID as 16 lower-case hex digits (tools drop leading zeros in some places and not in others)."""
    digits = text.strip().lower().removeprefix("0x").replace(":", "")
    if not digits or len(digits) > 16 or re.fullmatch(r"[0-9a-f]+", digits) is None:
        raise FabricError(source, line, f"bad GUID {text.strip()!r}")
    return digits.rjust(16, "0")


# --- ibnetdiscover -> the fabric --------------------------------------------------------------------------------

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
        raise FabricError(source, None, "no Switch/Ca node found; is this ibnetdiscover output?")
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
        raise FabricError(builder.source, number, f"unexpected line {line[:120]!r}")
    _port(builder, port, number)


def _node(builder: _Builder, match: re.Match[str], number: int) -> None:
    node_id = match.group("id")
    if node_id in builder.nodes:
        raise FabricError(builder.source, number, f"node {node_id!r} described twice")
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
        raise FabricError(builder.source, number, "port line before any Switch/Ca line")
    here = (builder.current, int(match.group("port")))
    peer = (match.group("peer"), int(match.group("peer_port")))
    comment = match.group("comment") or ""
    described = _PEER_COMMENT.search(comment)
    speed = described.group("speed") if described else None
    if here in builder.ends and builder.ends[here][:2] != peer:
        raise FabricError(builder.source, number, f"port {here[1]} of {here[0]} is listed twice")
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
        raise FabricError(source, number, f"cannot tell the GUID of node {node_id!r}")
    return normalise_guid(match.group(1), source, number)


def _fabric(builder: _Builder) -> IbFabric:
    nodes = dict(builder.nodes)
    for seen_id, seen in builder.seen.items():
        nodes.setdefault(seen_id, seen)
    links: dict[tuple[str, int, str, int], IbLink] = {}
    for (node_id, port), (peer, peer_port, speed, number) in builder.ends.items():
        back = builder.ends.get((peer, peer_port))
        if back is not None and back[:2] != (node_id, port):
            raise FabricError(
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


# --- the fabric -> topology.conf ------------------------------------------------------------------------------

HostnameOf = Callable[[str], str | None]
SwitchNameOf = Callable[[IbNode], str | None]

_HOSTNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# Descriptions an HCA reports when nobody set a node description: they name the card, not the host.
_FACTORY_WORD = re.compile(r"^(MT\d+|ConnectX\S*|Mellanox)$", re.IGNORECASE)


def default_hostname(description: str) -> str | None:
    """``"node001 mlx5_0"`` / ``"node018 HCA-1"`` -> the first word.

    An HCA nobody gave a node description reports its model (``"MT4129 ConnectX7 Mellanox Technologies"``);
    that names the card, not the host, so it gives None, as does a first word that cannot be a hostname.
    """
    words = description.split()
    if not words or _FACTORY_WORD.match(words[0]) or _HOSTNAME.match(words[0]) is None:
        return None
    return words[0]


def _sanitise(name: str) -> str:
    """Slurm splits switch lists on commas and expands brackets, and ``#`` starts a comment; keep it plain."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")


def switch_names(fabric: IbFabric, switch_name_of: SwitchNameOf | None = None) -> dict[str, str]:
    """Slurm name per switch id: ``switch_name_of(node)`` if given, else the node description; a name that
    is empty or shared by several switches (identical factory descriptions are common) falls back to the
    ibnetdiscover id, which embeds the GUID."""
    wanted = {
        node.id: _sanitise((switch_name_of(node) if switch_name_of else node.description) or "")
        for node in fabric.switches
    }
    counts = Counter(wanted.values())
    return {
        node_id: name if name and counts[name] == 1 and name not in fabric.nodes else _sanitise(node_id)
        for node_id, name in wanted.items()
    }


def topology_conf(
    fabric: IbFabric,
    hostname_of: HostnameOf | None = None,
    *,
    switch_name_of: SwitchNameOf | None = None,
) -> str:
    """Render topology.conf. ``hostname_of`` maps an adapter's node description to a Slurm node name
    (default: its first word; return None to leave an adapter out). A host with several adapters is one
    node; if its adapters reach different leaf switches (rail-optimised fabrics) it is placed under the
    leaf most of them reach, ties going to the first switch name, because Slurm wants one leaf per node."""
    names = switch_names(fabric, switch_name_of)
    leaves = _leaf_hosts(fabric, hostname_of or default_hostname, names)
    levels = _levels(fabric, set(leaves), names)
    lines = ["# Slurm topology.conf (TopologyPlugin=topology/tree), generated by hpckit from ibnetdiscover"]
    lines += [f"SwitchName={names[s]} Nodes={_host_list(sorted(h))}" for s, h in _by_name(leaves, names)]
    for level in sorted({lv for lv in levels.values() if lv > 0}):
        for switch in sorted((s for s, lv in levels.items() if lv == level), key=names.__getitem__):
            children = sorted(
                {names[peer] for _, peer, _, _ in fabric.neighbours(switch) if levels.get(peer) == level - 1}
            )
            lines.append(f"SwitchName={names[switch]} Switches={','.join(children)}")
    return "\n".join(lines) + "\n"


def _by_name(leaves: dict[str, set[str]], names: dict[str, str]) -> list[tuple[str, set[str]]]:
    return sorted(leaves.items(), key=lambda item: names[item[0]])


def _leaf_hosts(fabric: IbFabric, hostname_of: HostnameOf, names: dict[str, str]) -> dict[str, set[str]]:
    """Leaf switch id -> hosts placed under it."""
    reach: dict[str, Counter[str]] = {}
    for ca in fabric.cas:
        host = hostname_of(ca.description)
        if host is None:
            continue
        for _, peer, _, _ in fabric.neighbours(ca.id):
            if fabric.nodes[peer].kind == "Switch":
                reach.setdefault(host, Counter())[peer] += 1
    leaves: dict[str, set[str]] = {}
    for host, switches in reach.items():
        best = min(switches, key=lambda s: (-switches[s], names[s]))
        leaves.setdefault(best, set()).add(host)
    return leaves


def _levels(fabric: IbFabric, leaves: set[str], names: dict[str, str]) -> dict[str, int]:
    """Breadth-first distance of each switch from the nearest leaf (leaves are level 0)."""
    levels = {leaf: 0 for leaf in leaves}
    frontier = sorted(leaves, key=names.__getitem__)
    while frontier:
        following: list[str] = []
        for switch in frontier:
            for _, peer, _, _ in fabric.neighbours(switch):
                if fabric.nodes[peer].kind == "Switch" and peer not in levels:
                    levels[peer] = levels[switch] + 1
                    following.append(peer)
        frontier = following
    return levels


def _host_list(hosts: list[str]) -> str:
    return str(_collect_hostlist(hosts)) if _collect_hostlist is not None else ",".join(hosts)


def topology_for(ibnetdiscover_text: str, nodes: Sequence[str], source: str = "ibnetdiscover") -> str:
    """topology.conf for the Slurm nodes ``nodes`` from a fabric dump; "" when none of them is on it.

    Adapters of other hosts (storage, login, the controller) are left out: Slurm only takes its own
    nodes in topology.conf.
    """
    wanted = set(nodes)

    def slurm_node(description: str) -> str | None:
        name = default_hostname(description)
        return name if name in wanted else None

    text = topology_conf(parse_ibnetdiscover(ibnetdiscover_text, source), slurm_node)
    return text if " Nodes=" in text else ""


# --- the filter ---------------------------------------------------------------------------------------------------


def hpckit_topology_conf(text: Any, nodes: Any) -> str:
    """topology.conf for the Slurm nodes ``nodes``; "" when none of them is on the fabric."""
    try:
        return topology_for(str(text), [str(n) for n in nodes])
    except FabricError as exc:
        from ansible.errors import AnsibleFilterError  # here: hpckit loads this file without needing Ansible

        raise AnsibleFilterError(f"cannot read the ibnetdiscover output: {exc}") from None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"hpckit_topology_conf": hpckit_topology_conf}
