"""Blueprint -> Ansible inventory + extravars. Pure functions: no I/O, no secrets (see ANSIBLE contract in
ansible/README.md). The same two documents work with hpckit's runner and with plain `ansible-playbook`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import hostlist

from hpckit.blueprint.models import Blueprint, Hardware, LabProvider, Partition, VmProvider
from hpckit.clusters import SshAccess
from hpckit.hardware import hardware_table
from hpckit.lab.blueprint import spec_from_blueprint, vm_spec_from_blueprint
from hpckit.slurm.conf import collect_names

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
    """Every host in a stable order (controller, logins, compute); lab and VM hosts without an address get one."""
    entries = [HostEntry(bp.controller.host, bp.controller.address, "controller")]
    entries += [HostEntry(h.host, h.address, "login") for h in bp.login if h.host != bp.controller.host]
    entries += [HostEntry(host, addr, "compute", part.name) for part, host, addr in bp.compute_hosts()]
    if isinstance(bp.provider, LabProvider):
        nodes = spec_from_blueprint(bp).nodes
    elif isinstance(bp.provider, VmProvider):
        nodes = vm_spec_from_blueprint(bp).nodes
    else:
        return entries
    # The lab provider decides the addresses it did not get; ask it rather than guess the same way twice.
    lab = {node.name: node.address for node in nodes}
    return [HostEntry(e.name, lab[e.name], e.role, e.partition) for e in entries]


def _node_vars(hw: Hardware) -> dict[str, Any]:
    """The contract's variables that come from a node's hardware."""
    if hw.gpus is None:
        return {}
    return {"hpckit_gpu_count": hw.gpus.count, "hpckit_gpu_type": hardware_table().gpus[hw.gpus.type].gres}


def build_inventory(bp: Blueprint, access: SshAccess) -> dict[str, Any]:
    """Groups slurm_controller, slurm_login, slurm_compute (one child group per partition) and slurm_dbd.

    What a node's hardware implies is a group variable of the partition that declares it, not a host
    variable of each node: the inventory of 10,000 nodes stays one line per host. A node in several
    partitions is in each of their groups; only its declaring partition's group carries variables.
    """
    entries = {e.name: e for e in host_entries(bp)}
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

    def group(names: list[str], group_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        hosts = {n: ({"ansible_host": a} if (a := entries[n].address) else {}) for n in names if n in entries}
        return {"hosts": hosts, **({"vars": group_vars} if group_vars else {})}

    children: dict[str, Any] = {
        "slurm_controller": group([bp.controller.host]),
        "slurm_login": group([h.host for h in bp.login]),
        "slurm_compute": {
            "children": {
                f"partition_{p.name}": group(p.hostnames(), _node_vars(p.hardware) if p.hardware else None)
                for p in bp.partitions
            },
        },
    }
    if bp.slurm.accounting:
        children["slurm_dbd"] = group([bp.controller.host])
    return {"all": {"vars": all_vars, "children": children}}


def partition_groups(bp: Blueprint, inventory: dict[str, Any]) -> dict[str, tuple[Partition, dict[str, Any]]]:
    """The inventory group of each partition that declares nodes: group name -> (partition, group)."""
    groups = inventory["all"]["children"]["slurm_compute"]["children"]
    return {
        name: (p, groups[name]) for p in bp.partitions if p.hardware is not None and (name := f"partition_{p.name}")
    }


def _node_line(names: list[str], hw: Hardware, addresses: list[str]) -> dict[str, Any]:
    """One NodeName line: the nodes as a hostlist, their addresses in the same order (compressed too)."""
    entry: dict[str, Any] = {
        "names": collect_names(names),
        "cpus": hw.cpus,
        "sockets": hw.sockets,
        "cores_per_socket": hw.cores_per_socket,
        "threads_per_core": hw.threads_per_core,
        "real_memory": hw.memory_mb,
        "gres": "",
    }
    if addresses:
        # Slurm pairs NodeAddr with NodeName in expansion order: order the addresses as the hostlist expands.
        where = dict(zip(names, addresses, strict=True))
        entry["addrs"] = ordered_hostlist([where[n] for n in hostlist.expand_hostlist(entry["names"])])
    if hw.gpus is not None:
        entry["gres"] = f"gpu:{hardware_table().gpus[hw.gpus.type].gres}:{hw.gpus.count}"
    return entry


def ordered_hostlist(names: list[str]) -> str:
    """A hostlist expression that expands to exactly ``names``, in their order (python-hostlist's
    collect_hostlist sorts): runs of names that differ only in a trailing number counting up by one
    become prefix[first-last]."""
    runs: list[tuple[str, str, str]] = []  # prefix, first number, last number
    for name in names:
        match = _TRAILING_NUMBER.match(name)
        prefix, number = (match.group(1), match.group(2)) if match else (name, "")
        if runs and number and runs[-1][0] == prefix and runs[-1][2] and _follows(runs[-1][2], number):
            runs[-1] = (prefix, runs[-1][1], number)
        else:
            runs.append((prefix, number, number))
    parts = [f"{p}{a}" if a == b else f"{p}[{a}-{b}]" for p, a, b in runs]
    return ",".join(parts)


_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$")


def _follows(last: str, number: str) -> bool:
    same_width = len(number) == len(last) or not (last.startswith("0") or number.startswith("0"))
    return same_width and int(number) == int(last) + 1


def partition_settings(bp: Blueprint, part: Partition) -> dict[str, str | int]:
    """A PartitionName line's settings beyond Nodes/Default/MaxTime, in slurm.conf's spelling.

    Memory defaults come from the nodes' declared hardware, so that a job that asks for no memory gets its
    share instead of the whole node (which would leave the node's other CPUs idle): DefMemPerCPU is the
    memory per CPU of the partition's smallest node, and on GPU partitions DefMemPerGPU is its memory per
    GPU. Either can be set in the blueprint; 0 leaves it out (Slurm's default: the whole node).
    """
    hardware = bp.node_hardware(part)
    per_cpu = min((hw.mem_per_cpu for hw in hardware), default=0)
    per_gpu = min((m for hw in hardware if (m := hw.mem_per_gpu) is not None), default=0)
    wanted: dict[str, str | int | None] = {
        "DefaultTime": part.default_time,
        "DefMemPerCPU": per_cpu if part.def_mem_per_cpu is None else part.def_mem_per_cpu,
        "DefMemPerGPU": per_gpu if part.def_mem_per_gpu is None else part.def_mem_per_gpu,
        "OverSubscribe": part.oversubscribe,
        "AllowAccounts": ",".join(part.allow_accounts) if part.allow_accounts else None,
        "AllowQos": ",".join(part.allow_qos) if part.allow_qos else None,
    }
    return {k: v for k, v in wanted.items() if v not in (None, 0, "")}


def build_extravars(bp: Blueprint) -> dict[str, Any]:
    """The cluster's settings for the playbooks; never holds a secret."""
    entries = host_entries(bp)
    addr = {e.name: e.address for e in entries}
    nodes = []
    for part in bp.partitions:
        if part.hardware is None:
            continue  # its nodes have their NodeName line with the partition that declares them
        hosts = part.hostnames()
        addrs = [a for h in hosts if (a := addr.get(h))]
        nodes.append(_node_line(hosts, part.hardware, addrs if len(addrs) == len(hosts) else []))
    default = next((p.name for p in bp.partitions if p.default), bp.partitions[0].name)
    out: dict[str, Any] = {
        "hpckit_cluster_name": bp.cluster_name,
        "hpckit_lab": isinstance(bp.provider, LabProvider),
        "slurm_controller_host": bp.controller.host,
        "slurm_controller_addr": addr[bp.controller.host] or bp.controller.host,
        "slurm_accounting": bp.slurm.accounting,
        # only where the blueprint declares accounts: every other cluster's slurm.conf stays as it is
        **(
            {"slurm_accounts_enforced": True, "slurm_priority": bp.accounting.priority.conf()}
            if bp.accounting and bp.accounting.declares
            else {}
        ),
        "slurm_dbd_host": bp.controller.host,
        "slurm_auth": bp.slurm.auth,
        "slurm_configless": bp.slurm.configless,
        "slurm_nodes": nodes,
        "slurm_partitions": [
            {
                "name": p.name,
                "nodes": collect_names(p.hostnames()),
                "default": p.name == default,
                "max_time": p.max_time,
                "settings": partition_settings(bp, p),
            }
            for p in bp.partitions
        ],
        "slurm_conf_overrides": {k: _conf_value(v) for k, v in bp.slurm.conf.items()},
        # site.yml's users play has no hosts without them (a no-op deploy pays nothing)
        "unix_users_list": [
            {"name": name, "uid": u.uid, "gid": u.gid or u.uid, "shell": u.shell, "home": u.home or f"/home/{name}"}
            for name, u in bp.users.items()
        ],
    }
    if isinstance(bp.provider, LabProvider):
        out.update(LAB_SLURM_VARS)
    return out


def _conf_value(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "YES" if value else "NO"
    return str(value)
