"""From a blueprint whose provider is `lab` to a LabSpec (or `vm` to a VmSpec).

Typed against the few blueprint attributes it reads (structural Protocols), so the lab does not
depend on the blueprint package's classes: controller, login hosts and compute nodes become nodes
(a host declared twice is one node), GPU counts come from each partition's hardware, filesystems
become shared directories (in the lab a filesystem is a host directory bind-mounted everywhere), and
hosts without an address get the subnet's free addresses from .10 up.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

from hpckit.lab.errors import LabError
from hpckit.lab.spec import DEFAULT_STATE_ROOT, LabNode, LabSpec
from hpckit.lab.vm import spec as vmspec
from hpckit.lab.vm.spec import VmSpec

FIRST_AUTO_OFFSET = 10


class _Host(Protocol):
    @property
    def host(self) -> str: ...
    @property
    def address(self) -> str | None: ...


class _Gpus(Protocol):
    @property
    def count(self) -> int: ...


class _Hardware(Protocol):
    @property
    def gpus(self) -> _Gpus | None: ...


class _Partition(Protocol):
    @property
    def hardware(self) -> _Hardware | None: ...  # None: a partition of nodes that others declare


class _Filesystem(Protocol):
    @property
    def mount(self) -> str: ...


class BlueprintLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def provider(self) -> object: ...
    @property
    def controller(self) -> _Host: ...
    @property
    def login(self) -> Sequence[_Host]: ...
    @property
    def filesystems(self) -> Sequence[_Filesystem]: ...
    def compute_hosts(self) -> Sequence[tuple[_Partition, str, str | None]]: ...


def spec_from_blueprint(bp: BlueprintLike, state_root: Path = DEFAULT_STATE_ROOT) -> LabSpec:
    """The lab a blueprint with ``provider: {type: lab}`` describes."""
    provider = bp.provider
    if getattr(provider, "type", None) != "lab":
        raise LabError(f"blueprint {bp.name!r} has provider {getattr(provider, 'type', '?')!r}, not 'lab'")
    subnet = str(getattr(provider, "subnet", "10.77.0.0/24"))
    bridge = str(getattr(provider, "bridge", "hpck0"))
    nodes = blueprint_nodes(bp, subnet)
    shared = tuple(dict.fromkeys(fs.mount for fs in bp.filesystems))
    return LabSpec(
        cluster=bp.name,
        nodes=nodes,
        subnet=subnet,
        bridge=bridge,
        shared_dirs=shared,
        state_root=state_root,
    )


def vm_spec_from_blueprint(bp: BlueprintLike, state_root: Path = DEFAULT_STATE_ROOT) -> VmSpec:
    """The VM lab a blueprint with ``provider: {type: vm}`` describes: one machine per host; the
    controller (MariaDB, slurmdbd, the NFS server) gets the provider's controller_memory_mib."""
    provider = bp.provider
    if getattr(provider, "type", None) != "vm":
        raise LabError(f"blueprint {bp.name!r} has provider {getattr(provider, 'type', '?')!r}, not 'vm'")
    subnet = str(getattr(provider, "subnet", vmspec.DEFAULT_SUBNET))
    nodes = tuple(LabNode(n.name, n.address) for n in blueprint_nodes(bp, subnet))
    bridge = str(getattr(provider, "bridge", vmspec.DEFAULT_LINK))
    lab = LabSpec(cluster=bp.name, nodes=nodes, subnet=subnet, bridge=bridge, state_root=state_root)
    controller_mib = int(getattr(provider, "controller_memory_mib", vmspec.DEFAULT_MEMORY_MIB))
    return VmSpec(
        lab,
        memory_mib={bp.controller.host: controller_mib},
        default_memory_mib=int(getattr(provider, "memory_mib", vmspec.DEFAULT_MEMORY_MIB)),
        cpus=int(getattr(provider, "cpus", 1)),
    )


def blueprint_nodes(bp: BlueprintLike, subnet: str) -> tuple[LabNode, ...]:
    """Every host of the blueprint once, in declaration order, with its address (given, or the subnet's next
    free one from .10 up) and GPU count."""
    declared = _declared_hosts(bp)
    addresses = _assign_addresses(declared, subnet)
    return tuple(LabNode(name, addresses[name], gpus) for name, (_, gpus) in declared.items())


def _declared_hosts(bp: BlueprintLike) -> dict[str, tuple[str | None, int]]:
    """hostname -> (address or None, GPU count), in declaration order, one entry per host."""
    hosts: dict[str, tuple[str | None, int]] = {}
    for name, address, gpus in _every_host(bp):
        if name in hosts:
            old_address, old_gpus = hosts[name]
            if address is not None and old_address is not None and address != old_address:
                raise LabError(f"host {name} is declared with two addresses: {old_address} and {address}")
            hosts[name] = (old_address or address, max(old_gpus, gpus))
        else:
            hosts[name] = (address, gpus)
    return hosts


def _every_host(bp: BlueprintLike) -> Iterator[tuple[str, str | None, int]]:
    yield bp.controller.host, bp.controller.address, 0
    for login in bp.login:
        yield login.host, login.address, 0
    for partition, name, address in bp.compute_hosts():
        gpus = partition.hardware.gpus if partition.hardware is not None else None
        yield name, address, gpus.count if gpus is not None else 0


def _assign_addresses(declared: dict[str, tuple[str | None, int]], subnet: str) -> dict[str, str]:
    try:
        network = ipaddress.IPv4Network(subnet, strict=True)
    except ValueError as exc:
        raise LabError(f"lab subnet {subnet!r}: {exc}") from None
    taken = {addr for addr, _ in declared.values() if addr is not None}
    free = (str(ip) for i, ip in enumerate(network.hosts(), start=1) if i >= FIRST_AUTO_OFFSET and str(ip) not in taken)
    assigned = {}
    for name, (address, _) in declared.items():
        if address is None:
            address = next(free, None)
            if address is None:
                raise LabError(f"subnet {subnet} has no free address left for host {name}")
        assigned[name] = address
    return assigned
