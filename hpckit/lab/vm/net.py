"""A VM lab's network: a network namespace of its own holding a bridge, one tap per machine, and the
qemu processes; one veth pair gives this box an address on the lab's subnet.

Nothing is routed: the namespace forwards nothing (a new namespace starts with forwarding off), this
box's end of the veth does not forward either, and the machines' default route ends in a dummy device.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

from hpckit.lab import net
from hpckit.lab.errors import LabError
from hpckit.lab.spec import LabNode
from hpckit.lab.vm.spec import VmSpec

BRIDGE = "br0"  # inside the namespace: names there are the lab's own
UPLINK = "uplink0"
NETNS_DIR = Path("/run/netns")
_PROC_SYS_NET = Path("/proc/sys/net")


def tap_name(spec: VmSpec, node: LabNode) -> str:
    """A machine's tap inside the namespace, by its address's offset in the subnet (stable across `up`s)."""
    offset = int(ipaddress.IPv4Address(node.address)) - int(spec.lab.network.network_address)
    return f"tap{offset}"


def netns_exists(spec: VmSpec) -> bool:
    return (NETNS_DIR / spec.netns).exists()


def check_host_network(spec: VmSpec) -> None:
    """The subnet is free on this box, and the host link name is the lab's own or unused."""
    net.check_subnet_free(spec.lab, spec.lab.bridge)
    if net.link_exists(spec.lab.bridge) and not netns_exists(spec):
        raise LabError(
            f"interface {spec.lab.bridge} exists on this box and is not VM lab {spec.cluster!r}'s; "
            "pick another bridge name"
        )


def ensure_network(spec: VmSpec) -> None:
    """Namespace, bridge and uplink, and this box's address on the subnet; what exists stays."""
    if not netns_exists(spec):
        net.run_ip(["netns", "add", spec.netns], f"creating network namespace {spec.netns}")
    inside = _links_in(spec)
    batch = ["link set lo up"]
    if BRIDGE not in inside:
        batch.append(f"link add {BRIDGE} type bridge")
    batch.append(f"link set {BRIDGE} up")
    _in_netns(spec, batch, "setting up the lab's bridge")
    host_link = spec.lab.bridge
    if not net.link_exists(host_link):
        net.run_ip(
            ["link", "add", host_link, "type", "veth", "peer", "name", UPLINK, "netns", spec.netns],
            f"creating link {host_link} into {spec.netns}",
        )
    _in_netns(spec, [f"link set {UPLINK} master {BRIDGE} up"], "attaching the uplink")
    # This box answers on the subnet and passes nothing on: no forwarding, no IPv6 on the link.
    _sysctl(f"ipv4/conf/{host_link}/forwarding", "0")
    _sysctl(f"ipv6/conf/{host_link}/disable_ipv6", "1")
    cidr = f"{spec.lab.host_address}/{spec.lab.network.prefixlen}"
    addrs = json.loads(net.run_ip(["-j", "-4", "addr", "show", "dev", host_link], "reading the host link") or "[]")
    if cidr not in {f"{a['local']}/{a['prefixlen']}" for link in addrs for a in link.get("addr_info", [])}:
        net.run_ip(["addr", "add", cidr, "dev", host_link], f"giving {host_link} address {cidr}")
    net.run_ip(["link", "set", host_link, "up"], f"bringing up {host_link}")


def ensure_tap(spec: VmSpec, node: LabNode) -> str:
    """The machine's tap on the bridge (a tap outlives its qemu: a restarted machine finds it again)."""
    tap = tap_name(spec, node)
    batch = [] if tap in _links_in(spec) else [f"tuntap add dev {tap} mode tap"]
    _in_netns(spec, [*batch, f"link set {tap} master {BRIDGE} up"], f"creating tap {tap} for {node.name}")
    return tap


def remove_network(spec: VmSpec) -> None:
    """Delete the namespace (its bridge, taps and uplink go with it) and this box's end of the link."""
    if netns_exists(spec):
        net.run_ip(["netns", "delete", spec.netns], f"deleting network namespace {spec.netns}")
    net.delete_link(spec.lab.bridge)


def _links_in(spec: VmSpec) -> set[str]:
    data = json.loads(net.run_ip(["-n", spec.netns, "-j", "link", "show"], f"listing links in {spec.netns}") or "[]")
    return {str(link["ifname"]) for link in data}


def _in_netns(spec: VmSpec, batch: list[str], what: str) -> None:
    net.run_ip(["-n", spec.netns, "-batch", "-"], what, stdin="\n".join([*batch, ""]))


def _sysctl(key: str, value: str) -> None:
    path = _PROC_SYS_NET / key
    try:
        path.write_text(value, encoding="ascii")
    except OSError as exc:
        raise LabError(f"cannot set {path} to {value}: {exc.strerror}") from None
