"""Blueprint -> inventory + extravars: pure functions, checked on both example blueprints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from hpckit.blueprint import load_blueprint, parse_blueprint
from hpckit.clusters import SshAccess
from hpckit.deploy.inventory import LAB_SLURM_VARS, build_extravars, build_inventory, host_entries
from hpckit.deploy.playvars import build_vars, with_health_conf
from hpckit.deploy.render import Inventory

ACCESS = SshAccess("root", 22, "/keys/id", "/keys/known_hosts")


def test_lab_inventory_groups_and_host_vars(repo: Path) -> None:
    bp = load_blueprint(repo / "blueprints" / "lab.yaml")
    inv = build_inventory(bp, ACCESS)
    children = inv["all"]["children"]
    assert set(children) == {"slurm_controller", "slurm_login", "slurm_compute", "slurm_dbd"}
    assert children["slurm_controller"]["hosts"] == {"ctl": {"ansible_host": "10.77.0.10"}}
    gpu = children["slurm_compute"]["children"]["partition_gpu"]
    assert list(gpu["hosts"]) == ["node1", "node2", "node3", "node4"]
    # What the hardware implies is the partition's, once; a host carries only its own address.
    assert gpu["hosts"]["node3"] == {"ansible_host": "10.77.0.23"}
    assert gpu["vars"] == {"hpckit_gpu_count": 4, "hpckit_gpu_type": "lab"}
    seen = Inventory(inv).variables("node3")  # as Ansible merges them
    assert seen["ansible_host"] == "10.77.0.23" and seen["hpckit_gpu_count"] == 4 and seen["ansible_user"] == "root"
    assert "UserKnownHostsFile=/keys/known_hosts" in inv["all"]["vars"]["ansible_ssh_common_args"]
    yaml.safe_load(yaml.safe_dump(inv))  # plain data, loadable by ansible-playbook -i


def test_lab_extravars(repo: Path) -> None:
    ev = build_extravars(load_blueprint(repo / "blueprints" / "lab.yaml"))
    assert ev["slurm_nodes"] == [
        {
            "names": "node[1-4]",
            "cpus": 2,
            "sockets": 1,
            "cores_per_socket": 2,
            "threads_per_core": 1,
            "real_memory": 1000,
            "gres": "gpu:lab:4",
            "addrs": "10.77.0.[21-24]",
        }
    ]
    assert ev["slurm_partitions"] == [
        {
            "name": "gpu",
            "nodes": "node[1-4]",
            "default": True,
            "max_time": "INFINITE",
            "settings": {"DefMemPerCPU": 500, "DefMemPerGPU": 250},  # 1000 MB over 2 CPUs and 4 GPUs
        }
    ]
    assert ev["slurm_controller_addr"] == "10.77.0.10" and ev["slurm_accounting"] is True
    for key, value in LAB_SLURM_VARS.items():
        assert ev[key] == value


def test_real_cluster_extravars_have_no_lab_switches(repo: Path) -> None:
    bp = load_blueprint(repo / "blueprints" / "h100-ib.yaml")
    ev = build_extravars(bp)
    assert not set(LAB_SLURM_VARS) & set(ev)
    assert ev["slurm_nodes"][0]["names"] == "gpu[001-016]" and ev["slurm_nodes"][0]["gres"] == "gpu:h100:8"
    assert ev["slurm_conf_overrides"] == {"PriorityType": "priority/multifactor", "MaxJobCount": "20000"}
    assert ev["hpckit_cluster_name"] == "h100"
    inv = build_inventory(bp, SshAccess("root", 22, "/root/.ssh/id_ed25519"))
    assert list(inv["all"]["children"]["slurm_login"]["hosts"]) == ["login01", "login02"]


# Canaries planted where a deploying machine holds secrets: the SSH private key's bytes, and the environment.
CANARY_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nhpckitCanaryKeyBytes0f9d2c\n-----END OPENSSH PRIVATE KEY-----\n"
CANARY_ENV = {
    "MYSQL_PWD": "hpckitCanaryDbPw71ac",
    "SLURM_JWT": "hpckitCanaryJwt5e02",
    "MUNGE_KEY": "hpckitCanaryMunge3b",
}


def _secret_variables(roles: Path) -> set[str]:
    """The variables whose values are secret bytes, as the roles themselves say: what a no_log task registers,
    and every role variable computed from one of those (slurm_accounting_db_password, ...)."""
    registered: set[str] = set()
    for path in roles.glob("*/tasks/*.yml"):
        stack = list(yaml.safe_load(path.read_text()) or [])
        while stack:
            task = stack.pop()
            stack += [t for k in ("block", "rescue", "always") for t in task.get(k, [])]
            if task.get("no_log") and task.get("register"):
                registered.add(task["register"])
    derived = {
        name
        for path in roles.glob("*/vars/main.yml")
        for name, value in (yaml.safe_load(path.read_text()) or {}).items()
        if any(secret in str(value) for secret in registered)
    }
    return registered | derived


def _leaks(text: str) -> list[str]:
    import base64

    secrets = [CANARY_KEY.splitlines()[1], *CANARY_ENV.values()]
    spellings = {s: (s, base64.b64encode(s.encode()).decode()[:16], s.encode().hex()) for s in secrets}
    return [s for s, forms in spellings.items() if any(form in text for form in forms)]


def test_no_secret_ever_in_extravars(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Structural: plant secret values where this machine holds them, build both example clusters' vars and
    write a record of them; no planted value reaches inventory, extravars, the record or its events, and no
    variable the roles hold secret bytes in is set from here (extravars would override it, and sit on disk)."""
    from hpckit.clusters import ClusterAccess
    from hpckit.deploy.record import DeploymentRecord, run_info
    from hpckit.deploy.runner import _slim

    key = tmp_path / "id_canary"
    key.write_text(CANARY_KEY)
    for name, value in CANARY_ENV.items():
        monkeypatch.setenv(name, value)
    secret_names = _secret_variables(repo / "ansible" / "roles")
    assert {"slurm_auth_key_content", "slurm_accounting_db_password"} <= secret_names  # the walk sees the roles
    h100 = (repo / "blueprints" / "h100-ib.yaml").read_text().replace("$(vars.ssh_key)", str(key))
    for bp in (load_blueprint(repo / "blueprints" / "lab.yaml"), parse_blueprint(h100)):
        access = SshAccess("root", 22, str(key), str(tmp_path / "known_hosts"))
        inventory, extravars = build_vars(bp, access)
        host_vars = [v for g in _groups(inventory) for v in (g.get("hosts") or {}).values() if v]
        set_here = set(extravars) | set(inventory["all"]["vars"]) | {k for v in host_vars for k in v}
        assert not set_here & secret_names, bp.name
        record = DeploymentRecord.create(bp.cluster_name, tmp_path / "state")
        expanded = bp.model_dump(mode="json")
        record.write_json("blueprint.json", expanded)
        record.write_json("run.json", run_info(expanded))
        record.write_yaml("inventory.yml", inventory)
        record.write_yaml("extravars.yml", extravars)
        record.write_access(ClusterAccess(bp.cluster_name, "l", "a", "c", {}, access, False))
        # A no_log task's event as ansible-runner hands it over, had Ansible failed to censor it.
        res = {"content": CANARY_ENV["MUNGE_KEY"], "stdout": CANARY_ENV["MYSQL_PWD"], "changed": True}
        event = {"event": "runner_on_ok", "event_data": {"host": "ctl", "task": "t", "res": res}}
        record.events_file.write_text(yaml.safe_dump(_slim(event)))
        on_disk = "".join(p.read_text() for p in record.path.rglob("*") if p.is_file())
        assert str(key) in on_disk  # the key's path is recorded, so the scan sees what deploy writes
        assert _leaks(on_disk) == [], bp.name
    assert _leaks(CANARY_KEY + "".join(CANARY_ENV.values())) != []  # the scan finds a planted value


def _groups(inventory: dict[str, Any]) -> list[dict[str, Any]]:
    found, stack = [], [inventory["all"]]
    while stack:
        group = stack.pop()
        found.append(group)
        stack += list((group.get("children") or {}).values())
    return found


def test_lab_addresses_are_assigned_when_absent() -> None:
    bp = parse_blueprint(
        """\
name: t
provider: {type: lab, subnet: 10.77.3.0/24}
controller: {host: ctl}
login: [{host: login}]
partitions:
  - {name: c, nodes: "n[1-3]", hardware: {cpus: 2, cores_per_socket: 2, memory_mb: 500}}
  - {name: d, nodes: "m1", addresses: [10.77.3.10], hardware: {cpus: 2, cores_per_socket: 2, memory_mb: 500}}
"""
    )
    addrs = {e.name: e.address for e in host_entries(bp)}
    assert addrs == {
        "ctl": "10.77.3.11",
        "login": "10.77.3.12",
        "n1": "10.77.3.13",
        "n2": "10.77.3.14",
        "n3": "10.77.3.15",
        "m1": "10.77.3.10",
    }
    ev = build_extravars(bp)
    assert ev["slurm_partitions"][0]["default"] is True and ev["slurm_partitions"][1]["default"] is False


# --- build_vars: everything one site.yml run needs ------------------------------------------------------------


def test_build_vars_wires_gpu_roles_and_health_into_the_lab(repo: Path) -> None:
    bp = load_blueprint(repo / "blueprints" / "lab.yaml")
    inv, ev = build_vars(bp, SshAccess("root"))
    assert ev["nvidia_emulated"] is True and ev["infiniband_topology"] == "off"
    assert ev["shared_fs_mode"] == "bind" and ev["enroot_pyxis_enabled"] is False  # lab.yaml: containers off
    assert ev["hpckit_health_enabled"] is True and ev["hpckit_health_mounts"] == ["/shared"]
    assert ev["hpckit_health_settings"]["quick_interval_s"] == bp.health.quick_interval_s
    assert ev["slurm_conf_overrides"] == {
        "HealthCheckProgram": "/etc/hpckit/health-check",
        "HealthCheckInterval": str(bp.health.quick_interval_s),
        "HealthCheckNodeState": "ANY",
        "ScronParameters": "enable",
        "SchedulerParameters": "batch_sched_delay=0,sched_min_interval=100000",
        "AuthInfo": "cred_expire=40",
    }
    node = Inventory(inv).variables("node1")
    assert node["hpckit_gpu_count"] == 4 and node["nvidia_gres_devices"] == [{"first": 0, "last": 3, "cores": ""}]
    assert "hpckit_health_infiniband" not in node  # no fabric in the lab
    # Exactly the contract's inventory plus the GPU roles' device lines for the GPU partition (its group
    # vars: every node of it has the same GPUs): nothing dropped, no contract value changed, and the lab's
    # health checks need no host vars (no fabric, emulated GPUs).
    expected = build_inventory(bp, SshAccess("root"))
    gpu_group = expected["all"]["children"]["slurm_compute"]["children"]["partition_gpu"]
    gpu_group["vars"]["nvidia_gres_devices"] = [{"first": 0, "last": 3, "cores": ""}]
    assert inv == expected


def test_build_vars_of_a_real_cluster(repo: Path) -> None:
    bp = load_blueprint(repo / "blueprints" / "h100-ib.yaml")
    inv, ev = build_vars(bp, SshAccess("root", 22, "/root/.ssh/id_ed25519"))
    assert ev["enroot_pyxis_enabled"] is True and ev["shared_fs_mode"] == "mount" and ev["nvidia_emulated"] is False
    overrides = ev["slurm_conf_overrides"]
    assert overrides["PriorityType"] == "priority/multifactor" and overrides["HealthCheckProgram"]
    node = Inventory(inv).variables("gpu001")
    assert node["hpckit_health_infiniband"]["hcas"] == node["infiniband_hcas"]
    assert node["enroot_pyxis_enroot"] is True
    text = yaml.safe_dump(ev).lower()
    assert "password" not in text and "secret" not in text


def test_blueprint_slurm_conf_wins_over_the_health_lines(repo: Path) -> None:
    text = (repo / "blueprints" / "lab.yaml").read_text()
    text = text.replace("  conf:\n", "  conf:\n    healthcheckinterval: 900\n", 1)
    bp = parse_blueprint(text.replace("$(vars.net)", "10.77.0").replace("$(vars.gpus_per_node)", "4"))
    overrides = with_health_conf(bp, build_extravars(bp)["slurm_conf_overrides"])
    assert overrides["healthcheckinterval"] == "900" and "HealthCheckInterval" not in overrides
    assert overrides["HealthCheckProgram"] == "/etc/hpckit/health-check"


def test_health_off_adds_no_slurm_conf_lines(repo: Path) -> None:
    text = (repo / "blueprints" / "lab.yaml").read_text().replace("  drain: true\n", "  enabled: false\n")
    bp = parse_blueprint(text.replace("$(vars.net)", "10.77.0").replace("$(vars.gpus_per_node)", "4"))
    _, ev = build_vars(bp, SshAccess("root"))
    assert ev["slurm_conf_overrides"] == {
        "SchedulerParameters": "batch_sched_delay=0,sched_min_interval=100000",
        "AuthInfo": "cred_expire=40",
    }
    assert ev["hpckit_health_enabled"] is False
