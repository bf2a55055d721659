"""The lab's network: a host bridge holding the subnet's first address, one veth per node.

Nothing is routed or NATed: with no route out of a node (its default route ends in a veth pair
whose both ends sit inside the node), nodes reach each other and the host, and nothing else.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Sequence
from typing import Any

from hpckit import proc
from hpckit.lab.errors import LabError
from hpckit.lab.spec import LabNode, LabSpec

# Inside a node: eth0 is on the bridge; dead0/dead1 only carry the default route (see module doc).
NODE_IFACE = "eth0"
DEAD_END = ("dead0", "dead1")


def run_ip(args: Sequence[str], what: str, stdin: str | None = None) -> str:
    result = proc.run(["ip", *args], stdin=stdin)
    if result.rc != 0:
        raise LabError(f"{what} failed: ip {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def _links() -> dict[str, dict[str, Any]]:
    data = json.loads(run_ip(["-j", "-d", "link", "show"], "listing host links") or "[]")
    return {str(link["ifname"]): link for link in data}


def link_exists(name: str) -> bool:
    return name in _links()


def check_subnet_free(spec: LabSpec, own_link: str) -> None:
    """Refuse a subnet that a host route other than through ``own_link`` (the lab's own host side) covers."""
    network = spec.network
    routes = json.loads(run_ip(["-j", "-4", "route", "show", "table", "all"], "listing host routes") or "[]")
    for route in routes:
        dst = str(route.get("dst", "default"))
        if dst == "default" or route.get("dev") == own_link:
            continue
        try:
            other = ipaddress.ip_network(dst, strict=False)
        except ValueError:
            continue
        if isinstance(other, ipaddress.IPv4Network) and other.overlaps(network):
            raise LabError(
                f"subnet {network} of lab {spec.cluster!r} collides with the host's route to {dst} "
                f"on {route.get('dev', '?')}; pick another subnet"
            )


def check_host_network(spec: LabSpec) -> None:
    """Refuse a subnet that any host interface other than the lab's bridge already uses."""
    check_subnet_free(spec, spec.bridge)
    links = _links()
    link = links.get(spec.bridge)
    if link is not None and link.get("linkinfo", {}).get("info_kind") != "bridge":
        raise LabError(f"interface {spec.bridge} exists on the host and is not a bridge; pick another bridge name")
    ours = {spec.veth_name(n) for n in spec.nodes}
    strangers = sorted(name for name, info in links.items() if info.get("master") == spec.bridge and name not in ours)
    if strangers:
        raise LabError(
            f"bridge {spec.bridge} already carries {', '.join(strangers)}, which lab {spec.cluster!r} "
            "did not make; pick another bridge name"
        )


def ensure_bridge(spec: LabSpec) -> None:
    """Create the bridge with the host's address unless it is already there."""
    cidr = f"{spec.host_address}/{spec.network.prefixlen}"
    if not link_exists(spec.bridge):
        run_ip(["link", "add", spec.bridge, "type", "bridge"], f"creating bridge {spec.bridge}")
    addrs = json.loads(run_ip(["-j", "-4", "addr", "show", "dev", spec.bridge], "reading bridge") or "[]")
    present = {f"{a['local']}/{a['prefixlen']}" for link in addrs for a in link.get("addr_info", [])}
    if cidr not in present:
        run_ip(["addr", "add", cidr, "dev", spec.bridge], f"giving {spec.bridge} address {cidr}")
    run_ip(["link", "set", spec.bridge, "up"], f"bringing up {spec.bridge}")


def delete_link(name: str) -> None:
    """Remove a host link if it exists (a node's veth usually vanishes with its namespace)."""
    result = proc.run(["ip", "link", "del", name])
    if result.rc != 0 and link_exists(name):
        raise LabError(f"cannot remove host link {name}: {result.stderr.strip()}")


def node_mac(node: LabNode) -> str:
    """A fixed, locally administered MAC per address, so neighbours' ARP caches survive a node restart."""
    octets = ipaddress.IPv4Address(node.address).packed
    return "02:68:" + ":".join(f"{b:02x}" for b in octets)


def attach_node(spec: LabSpec, node: LabNode, netns_pid: int) -> None:
    """Create the node's veth: host end on the bridge, the other end as eth0 in the node."""
    veth = spec.veth_name(node)
    if link_exists(veth):
        delete_link(veth)  # left by a node that died without `down`
    run_ip(
        [
            "link",
            "add",
            veth,
            "type",
            "veth",
            "peer",
            "name",
            NODE_IFACE,
            "address",
            node_mac(node),
            "netns",
            str(netns_pid),
        ],
        f"creating link {veth} for node {node.name}",
    )
    run_ip(["link", "set", veth, "master", spec.bridge, "up"], f"attaching {veth} to {spec.bridge}")


def node_network_batch(spec: LabSpec, node: LabNode) -> str:
    """`ip -batch` commands run inside the node: address, loopback, dead-end default route."""
    a, b = DEAD_END
    return "\n".join(
        [
            "link set lo up",
            f"addr add {node.address}/{spec.network.prefixlen} dev {NODE_IFACE}",
            f"link set {NODE_IFACE} up",
            f"link add {a} type veth peer name {b}",
            f"link set {b} up",
            f"link set {a} up",
            # Ansible fills ansible_default_ipv4 only when a default route exists; this one leads
            # nowhere, and its src makes the node's lab address the "default" one.
            f"route add default dev {a} src {node.address}",
            "",
        ]
    )
