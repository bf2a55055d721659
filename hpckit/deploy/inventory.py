"""Blueprint -> Ansible inventory + extravars. Pure functions: no I/O, no secrets (see ANSIBLE contract in
ansible/README.md). The same two documents work with hpckit's runner and with plain `ansible-playbook`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import hostlist

from hpckit.blueprint.models import Blueprint, LabProvider, Partition
from hpckit.clusters import SshAccess
from hpckit.hardware import hardware_table
from hpckit.lab.blueprint import spec_from_blueprint

# What a real systemd cluster uses; the lab replaces these (see `lab_overrides`).
LAB_SLURM_VARS: dict[str, Any] = {
    "slurm_proctrack_type": "proctrack/linuxproc",
    "slurm_task_plugin": "task/affinity",
    "slurm_cgroup_enabled": False,
    "slurmd_config_overrides": True,
    "slurm_accounting_mariadb_skip_networking": True,  # the controller's MariaDB on its Unix socket only
}


@dataclass(frozen=True)
class HostEntry:
    name: str
    address: str | None
    role: str  # controller | login | compute
    partition: str | None = None


def host_entries(bp: Blueprint) -> list[HostEntry]:
    """Every host in a stable order (controller, logins, compute); lab hosts without an address get one."""
    entries = [HostEntry(bp.controller.host, bp.controller.address, "controller")]
    entries += [HostEntry(h.host, h.address, "login") for h in bp.login if h.host != bp.controller.host]
    entries += [HostEntry(host, addr, "compute", part.name) for part, host, addr in bp.compute_hosts()]
    if not isinstance(bp.provider, LabProvider):
        return entries
    # The lab provider decides the addresses it did not get; ask it rather than guess the same way twice.
    lab = {node.name: node.address for node in spec_from_blueprint(bp).nodes}
    return [HostEntry(e.name, lab[e.name], e.role, e.partition) for e in entries]


def _host_vars(entry: HostEntry, bp: Blueprint) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if entry.address:
        out["ansible_host"] = entry.address
    part = next((p for p in bp.partitions if p.name == entry.partition), None)
    if part is not None and part.hardware.gpus is not None:
        gpu = hardware_table().gpus[part.hardware.gpus.type]
        out["hpckit_gpu_count"] = part.hardware.gpus.count
        out["hpckit_gpu_type"] = gpu.gres
    return out


def build_inventory(bp: Blueprint, access: SshAccess) -> dict[str, Any]:
    entries = host_entries(bp)
    by_name = {e.name: e for e in entries}
    all_vars: dict[str, Any] = {
        "ansible_user": access.user,
        "ansible_port": access.port,
        "ansible_python_interpreter": access.python,
    }
    if access.key_file:
        all_vars["ansible_ssh_private_key_file"] = access.key_file
    if access.known_hosts:
        all_vars["ansible_ssh_common_args"] = (
            f"-o UserKnownHostsFile={access.known_hosts} -o StrictHostKeyChecking=accept-new"
        )

    def group(names: list[str]) -> dict[str, Any]:
        return {"hosts": {n: _host_vars(by_name[n], bp) for n in names}}

    children: dict[str, Any] = {
        "slurm_controller": group([bp.controller.host]),
        "slurm_login": group([h.host for h in bp.login]),
        "slurm_compute": {
            "children": {f"partition_{p.name}": group(p.hostnames()) for p in bp.partitions},
        },
    }
    if bp.slurm.accounting:
        children["slurm_dbd"] = group([bp.controller.host])
    return {"all": {"vars": all_vars, "children": children}}


def _node_line(part: Partition, addresses: list[str]) -> dict[str, Any]:
    hw = part.hardware
    entry: dict[str, Any] = {
        "names": hostlist.collect_hostlist(part.hostnames()),
        "cpus": hw.cpus,
        "sockets": hw.sockets,
        "cores_per_socket": hw.cores_per_socket,
        "threads_per_core": hw.threads_per_core,
        "real_memory": hw.memory_mb,
        "gres": "",
    }
    if addresses:
        entry["addrs"] = ",".join(addresses)
    if hw.gpus is not None:
        entry["gres"] = f"gpu:{hardware_table().gpus[hw.gpus.type].gres}:{hw.gpus.count}"
    return entry


def build_extravars(bp: Blueprint) -> dict[str, Any]:
    """The cluster's settings for the playbooks; never holds a secret."""
    entries = host_entries(bp)
    addr = {e.name: e.address for e in entries}
    nodes = []
    for part in bp.partitions:
        addrs = [a for h in part.hostnames() if (a := addr.get(h))]
        nodes.append(_node_line(part, addrs if len(addrs) == len(part.hostnames()) else []))
    out: dict[str, Any] = {
        "hpckit_cluster_name": bp.cluster_name,
        "hpckit_lab": isinstance(bp.provider, LabProvider),
        "slurm_controller_host": bp.controller.host,
        "slurm_controller_addr": addr[bp.controller.host] or bp.controller.host,
        "slurm_accounting": bp.slurm.accounting,
        "slurm_dbd_host": bp.controller.host,
        "slurm_nodes": nodes,
        "slurm_partitions": [
            {
                "name": p.name,
                "nodes": hostlist.collect_hostlist(p.hostnames()),
                "default": p.default or (i == 0 and not any(q.default for q in bp.partitions)),
                "max_time": p.max_time,
            }
            for i, p in enumerate(bp.partitions)
        ],
        "slurm_conf_overrides": {k: _conf_value(v) for k, v in bp.slurm.conf.items()},
    }
    if isinstance(bp.provider, LabProvider):
        out.update(LAB_SLURM_VARS)
    return out


def _conf_value(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "YES" if value else "NO"
    return str(value)
