"""blueprints/vm.yaml as the deploy hands it to site.yml: a real cluster's settings (systemd, cgroup v2, kernel NFS,
Slurm 24.11 from Debian 13), never the namespace lab's, and hpckit installed as a wheel of this checkout. Rendered
offline; no VM is started."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from hpckit.blueprint import Blueprint, load_blueprint
from hpckit.blueprint.release import slurm_release_of
from hpckit.clusters import SshAccess
from hpckit.deploy.inventory import LAB_SLURM_VARS
from hpckit.deploy.playvars import build_vars
from hpckit.deploy.render import Inventory, host_context, render, render_value
from hpckit.deploy.targets import vm_extravars
from hpckit.deploy.wheel import WHEEL_INPUTS, wheel_inputs_digest

REPO = Path(__file__).resolve().parent.parent
WHEEL = Path("/var/cache/hpckit/wheels/0123/hpckit-0.1.0-py3-none-any.whl")


@pytest.fixture(scope="module")
def bp() -> Blueprint:
    return load_blueprint(REPO / "blueprints" / "vm.yaml")


def context(bp: Blueprint, host: str, role: str, **facts: Any) -> dict[str, Any]:
    """What ``role`` sees on ``host`` in a VM deploy: the blueprint's variables and the VM runtime's."""
    inventory, extravars = build_vars(bp, SshAccess("root", 22, "/k/id", "/k/known_hosts"))
    extravars.update(vm_extravars(WHEEL))
    return dict(host_context(Inventory(inventory), extravars, host, role, **facts))


def test_vm_blueprint_runs_debian_13s_slurm(bp: Blueprint) -> None:
    assert bp.provider.type == "vm"
    assert str(slurm_release_of(bp)) == "24.11"
    assert bp.slurm.install_mode == "distro"
    _, extravars = build_vars(bp, SshAccess("root"))
    assert extravars["slurm_release"] == "24.11"


def test_vm_inventory_reaches_each_machine_with_the_vm_key(bp: Blueprint) -> None:
    inventory, _ = build_vars(bp, SshAccess("root", 22, "/k/id", "/k/known_hosts"))
    every = inventory["all"]
    assert every["vars"]["ansible_ssh_private_key_file"] == "/k/id"
    assert "UserKnownHostsFile=/k/known_hosts" in every["vars"]["ansible_ssh_common_args"]
    children = every["children"]
    assert children["slurm_controller"]["hosts"] == {"ctl": {"ansible_host": "10.78.0.10"}}
    assert children["slurm_dbd"]["hosts"] == {"ctl": {"ansible_host": "10.78.0.10"}}
    assert children["slurm_login"]["hosts"] == {"ctl": {"ansible_host": "10.78.0.10"}}  # the controller logs in too
    nodes = children["slurm_compute"]["children"]["partition_cpu"]["hosts"]
    assert nodes == {"node1": {"ansible_host": "10.78.0.21"}, "node2": {"ansible_host": "10.78.0.22"}}


def test_vm_extravars_are_a_real_clusters(bp: Blueprint) -> None:
    _, extravars = build_vars(bp, SshAccess("root"))
    assert extravars["hpckit_lab"] is False
    assert not set(LAB_SLURM_VARS) & set(extravars)  # the roles' defaults: cgroup, systemd, MariaDB on TCP
    assert extravars["shared_fs_mode"] == "mount"
    assert extravars["shared_fs_nfs"] == [
        {
            "name": "home",
            "server": "ctl",
            "server_addr": "10.78.0.10",
            "export": "/srv/home",
            "mount": "/home",
            "options": "rw,hard,noatime,vers=4.2",
        }
    ]
    assert extravars["nvidia_emulated"] is False and extravars["enroot_pyxis_smoke_partitions"] == []
    assert extravars["hpckit_health_enabled"] is True and extravars["hpckit_health_mounts"] == ["/home"]


def test_vm_slurm_conf_has_the_production_settings(bp: Blueprint) -> None:
    lines = render("slurm_common", "slurm.conf.j2", context(bp, "ctl", "slurm_common")).splitlines()
    for wanted in (
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/cgroup,task/affinity",
        "ReturnToService=2",
        "HealthCheckProgram=/etc/hpckit/health-check",
        "ScronParameters=enable",
        "AccountingStorageType=accounting_storage/slurmdbd",
        "NodeName=node[1-2] NodeAddr=10.78.0.[21-22] CPUs=1 Sockets=1 CoresPerSocket=1 ThreadsPerCore=1 "
        "RealMemory=700 State=UNKNOWN",
    ):
        assert wanted in lines, wanted
    assert not any(line.startswith("SlurmdParameters=") for line in lines)  # no config_overrides


def test_vm_cgroup_conf_constrains_cores_memory_and_devices(bp: Blueprint) -> None:
    text = render("slurm_compute", "cgroup.conf.j2", context(bp, "node1", "slurm_compute"))
    lines = text.splitlines()
    for wanted in ("ConstrainCores=yes", "ConstrainRAMSpace=yes", "ConstrainDevices=yes"):
        assert wanted in lines, wanted
    assert any(line in ("CgroupPlugin=autodetect", "CgroupPlugin=cgroup/v2") for line in lines)


def test_vm_exports_let_root_write_and_clients_mount_over_nfs(bp: Blueprint) -> None:
    exports = render("shared_fs", "exports.j2", context(bp, "ctl", "shared_fs")).splitlines()[1:]
    assert exports == [
        "/srv/home "
        + " ".join(
            f"{c}(rw,sync,no_subtree_check,no_root_squash)" for c in ("10.78.0.10/32", "10.78.0.21/32", "10.78.0.22/32")
        )
    ]
    fstab = render_value("{{ shared_fs_fstab_lines }}", context(bp, "node1", "shared_fs"))
    assert fstab == ["10.78.0.10:/srv/home /home nfs rw,hard,noatime,vers=4.2,_netdev 0 0"]
    assert render_value("{{ shared_fs_fstab_lines }}", context(bp, "ctl", "shared_fs")) == [
        "/srv/home /home none bind 0 0"
    ]


def test_vm_nodes_run_hpckit_from_the_wheels_virtualenv(bp: Blueprint) -> None:
    for host in ("node1", "login"):
        ctx = context(bp, host, "hpckit_health")
        assert render_value("{{ hpckit_health_python }}", ctx) == "/opt/hpckit/bin/python"
        assert render_value("{{ hpckit_health_pythonpath }}", ctx) == ""
    login = context(bp, "login", "hpckit_login")
    assert render_value("{{ hpckit_login_wheel_version }}", login) == "0.1.0"
    assert login["hpckit_login_pip_extra_args"] == "--no-index --no-deps"


def test_wheel_digest_follows_the_wheels_content(tmp_path: Path) -> None:
    root = tmp_path / "src"
    for name in WHEEL_INPUTS:
        source = REPO / name
        if source.is_file():
            root.mkdir(exist_ok=True)
            shutil.copy2(source, root / name)
    (root / "hpckit").mkdir()
    (root / "hpckit" / "a.py").write_text("A = 1\n")
    first = wheel_inputs_digest(root)
    (root / "hpckit" / "__pycache__").mkdir()
    (root / "hpckit" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (root / "build").mkdir()  # never in the wheel: setup.py builds from the inputs alone
    (root / "build" / "x").write_text("x")
    assert wheel_inputs_digest(root) == first
    (root / "hpckit" / "a.py").write_text("A = 2\n")
    assert wheel_inputs_digest(root) != first
