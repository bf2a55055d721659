"""Blueprint -> the variables of the GPU-side roles (nvidia, infiniband, enroot_pyxis, shared_fs). Pure.

`gpu_extravars` gives the cluster-wide settings and `gpu_host_vars` one host's; both are merged into what
`hpckit.deploy.inventory` builds. Lab blueprints switch the roles to what the lab can show: emulated GPUs
(device nodes, no driver), no fabric and filesystems the provider bind-mounts on every node. enroot and pyxis
are the real ones everywhere: a lab node installs packages into its own copy-on-write /usr from files the
deploying machine has (it reaches no archive, so their dependencies come from the host, lab-packages.txt).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from hpckit.blueprint.models import Blueprint, Enroot, Gpus, Hardware, LabProvider, NfsFilesystem, Partition
from hpckit.deploy.inventory import HostEntry, host_entries, partition_groups

__all__ = [
    "caps_twin",
    "enroot_packages",
    "gpu_extravars",
    "gpu_host_vars",
    "gres_devices",
    "merge_gpu_vars",
    "nfs_clients",
    "pinned_driver",
]


def gpu_extravars(bp: Blueprint) -> dict[str, Any]:
    """Cluster-wide settings of the four roles; never a secret."""
    lab = isinstance(bp.provider, LabProvider)
    out: dict[str, Any] = {
        "nvidia_emulated": lab,
        "infiniband_topology": "off" if lab else "auto",
        "infiniband_discovery_host": _first_ib_host(bp),
        # No partition with containers: site.yml's container plays get no hosts (a no-op deploy pays nothing).
        "enroot_pyxis_enabled": any(bp.containers_on(p) for p in bp.partitions),
        **_container_vars(bp),
        **_filesystem_vars(bp),
    }
    return out


def gpu_host_vars(bp: Blueprint, host: str) -> dict[str, Any]:
    """What the roles need to know about one host beyond the lead inventory's hpckit_gpu_* vars."""
    node = bp.node(host)
    out: dict[str, Any] = {}
    if node is not None:
        out.update(_node_vars(bp, node[0]))
    elif _is_login(bp, host) and any(bp.containers_on(p) for p in bp.partitions):
        out["enroot_pyxis_pyxis"] = True  # srun/sbatch on a login node parse the --container-* options
    return out


def merge_gpu_vars(
    bp: Blueprint, inventory: Mapping[str, Any], extravars: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The inventory and extravars that ``build_inventory`` / ``build_extravars`` made, with these roles'
    variables added (copies; the inputs are left alone): a node's as group variables of the partition
    that declares it (once per partition, not per host), any other host's as its host variables."""
    merged: dict[str, Any] = _plain_copy(dict(inventory))
    for _, (part, group) in partition_groups(bp, merged).items():
        extra = _node_vars(bp, part)
        if extra:
            group["vars"] = {**group.get("vars", {}), **extra}

    def add(group: dict[str, Any]) -> None:
        hosts = group.get("hosts", {})
        for host, own in hosts.items():
            if bp.node(host) is None:
                hosts[host] = {**(own or {}), **gpu_host_vars(bp, host)}
        for child in group.get("children", {}).values():
            add(child)

    add(merged["all"])
    return merged, {**extravars, **gpu_extravars(bp)}


def _plain_copy(value: Any) -> Any:
    """A copy of plain data (dicts, lists, scalars), at a fifth of copy.deepcopy's cost."""
    if isinstance(value, dict):
        return {k: _plain_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_copy(v) for v in value]
    return value


def _node_vars(bp: Blueprint, part: Partition) -> dict[str, Any]:
    hw = bp.hardware_in(part)
    out: dict[str, Any] = {}
    if hw.gpus is not None:
        out["nvidia_gres_devices"] = gres_devices(hw)
        driver = pinned_driver(hw.gpus)
        if driver:
            out["nvidia_driver_version"] = driver
        if hw.gpus.dcgm:
            out["nvidia_dcgm"] = True
    if hw.infiniband is not None:
        out["infiniband_hcas"] = list(hw.infiniband.hcas)
        out["infiniband_rate_gbps"] = hw.infiniband.rate_gbps
        out["infiniband_roce"] = hw.infiniband.roce
    if bp.containers_on(part):
        out["enroot_pyxis_enroot"] = True
        out["enroot_pyxis_pyxis"] = True
    return out


def _is_login(bp: Blueprint, host: str) -> bool:
    return any(h.host == host for h in bp.login)


def pinned_driver(gpus: Gpus) -> str:
    """The driver version a partition pins (``hardware.gpus.driver``; "" = any)."""
    return gpus.driver or ""


# --- nvidia: gres.conf devices ---------------------------------------------------------------------------


def gres_devices(hw: Hardware) -> list[dict[str, Any]]:
    """gres.conf device groups: consecutive GPUs that share a socket, with that socket's Slurm core ids.

    GPUs are spread evenly over the sockets in index order (GPU0-3 on socket 0 and GPU4-7 on socket 1 on
    an 8-GPU, 2-socket HGX board). Slurm numbers cores socket by socket, so socket s holds cores
    s*cores_per_socket .. (s+1)*cores_per_socket-1. One socket gives no Cores= at all: every core is as
    close as any other, and Cores= would only restate that.
    """
    if hw.gpus is None:
        return []
    count, sockets, per = hw.gpus.count, hw.sockets, hw.cores_per_socket
    groups: list[dict[str, Any]] = []
    for index in range(count):
        socket = index * sockets // count
        cores = f"{socket * per}-{(socket + 1) * per - 1}" if sockets > 1 else ""
        if groups and groups[-1]["cores"] == cores:
            groups[-1]["last"] = index
        else:
            groups.append({"first": index, "last": index, "cores": cores})
    return groups


# --- infiniband ----------------------------------------------------------------------------------------


def _first_ib_host(bp: Blueprint) -> str:
    """ibnetdiscover runs on one node: the first one with HCAs ("" when no partition declares any)."""
    for part, host, _ in bp.compute_hosts():
        if bp.hardware_in(part).infiniband is not None:
            return host
    return ""


# --- enroot + pyxis ------------------------------------------------------------------------------------


def enroot_packages(enroot: Enroot) -> list[str]:
    """The .deb files (URLs or paths on the deploying machine) to install: the package and its +caps twin."""
    twin = caps_twin(enroot.package_source)
    return [enroot.package_source] if twin is None else [enroot.package_source, twin]


def caps_twin(package: str) -> str | None:
    """NVIDIA publishes enroot as two .debs side by side: enroot_V_ARCH.deb and enroot+caps_V_ARCH.deb (the
    capabilities that let unprivileged users import images); a pinned enroot package implies its twin."""
    head, sep, tail = package.rpartition("/")
    if not tail.startswith("enroot_") or not tail.endswith(".deb"):
        return None
    return f"{head}{sep}enroot+caps_{tail.removeprefix('enroot_')}"


def _container_vars(bp: Blueprint) -> dict[str, Any]:
    enroot, pyxis = bp.containers.enroot, bp.containers.pyxis
    return {
        "enroot_pyxis_enroot_version": enroot.version,
        "enroot_pyxis_enroot_packages": enroot_packages(enroot),
        "enroot_pyxis_runtime_path": enroot.runtime_path,
        "enroot_pyxis_cache_path": enroot.cache_path,
        "enroot_pyxis_data_path": enroot.data_path,
        "enroot_pyxis_pyxis_version": pyxis.version,
        "enroot_pyxis_pyxis_source": pyxis.tarball,
        # pyxis is compiled against the headers of the Slurm that loads it: Debian's, or the cluster's own build.
        **(
            {"enroot_pyxis_slurm_package": "slurm-smd", "enroot_pyxis_slurm_dev_package": "slurm-smd-dev"}
            if bp.slurm.install_mode == "build"
            else {}
        ),
        "enroot_pyxis_smoke_partitions": [p.name for p in bp.partitions if bp.containers_on(p)],
        "enroot_pyxis_smoke_image": bp.containers.smoke_image or "",
        "enroot_pyxis_hook_sources": dict(enroot.hooks),
    }


# --- shared filesystems --------------------------------------------------------------------------------


def _filesystem_vars(bp: Blueprint) -> dict[str, Any]:
    entries = {e.name: e for e in host_entries(bp)}
    nfs = [fs for fs in bp.filesystems if isinstance(fs, NfsFilesystem)]
    return {
        # In the lab the provider already shows every export at its mount path on every node.
        "shared_fs_mode": "bind" if isinstance(bp.provider, LabProvider) else "mount",
        "shared_fs_nfs": [
            {
                "name": fs.name,
                "server": fs.server,
                "server_addr": _address(entries.get(fs.server), fs.server),
                "export": fs.export,
                "mount": fs.mount,
                "options": fs.options,
            }
            for fs in nfs
        ],
        "shared_fs_existing": [
            {"name": fs.name, "mount": fs.mount, "fstype": fs.fstype}
            for fs in bp.filesystems
            if not isinstance(fs, NfsFilesystem)
        ],
        "shared_fs_nfs_clients": nfs_clients(list(entries.values())) if nfs else [],
    }


def _address(entry: HostEntry | None, fallback: str) -> str:
    return entry.address if entry is not None and entry.address else fallback


def nfs_clients(entries: Sequence[HostEntry]) -> list[str]:
    """Who may mount the exports: every cluster host, as the fewest exact CIDR blocks (contiguous node
    addresses merge: 10.0.0.[101-116] -> 4 blocks), then, for hosts without an address, their names."""
    addresses = [ipaddress.IPv4Network(e.address) for e in entries if e.address]
    blocks = [str(net) for net in ipaddress.collapse_addresses(addresses)]
    names = sorted(e.name for e in entries if not e.address)
    return blocks + names
