"""Every config the GPU-side roles write, rendered offline for blueprints/h100-ib.yaml (16 x 8 H100, NDR, NFS home,
Lustre scratch, enroot + pyxis): the role templates with jinja2 and Ansible's own filters, fed the role defaults
and the inventory and extravars hpckit builds. No host is contacted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import hostlist
import pytest
import yaml

from hpckit.blueprint import Blueprint, load_blueprint
from hpckit.clusters import SshAccess
from hpckit.deploy.inventory import build_extravars
from hpckit.deploy.playvars import build_vars
from hpckit.deploy.render import Inventory, host_context, render, render_value, topology_filter
from hpckit.paths import ansible_dir

REPO = Path(__file__).resolve().parent.parent
ROLES = REPO / "ansible" / "roles"
FABRIC = (
    Path(__file__).parent
    / "data"
    / "preflight"
    / "infiniband"
    / "ibnetdiscover-6switch-edr-fattree-96ca-4xDDR-link.txt"
)
GPU_NODES = [f"gpu{i:03d}" for i in range(1, 17)]


def context(bp: Blueprint, host: str, role: str, **facts: Any) -> dict[str, Any]:
    """Variables as Ansible would see them in ``role`` on ``host`` (hpckit.deploy.render, which `hpckit expand`
    uses), from what deploy and plan hand to site.yml, plus the facts the role's own tasks set."""
    inventory, extravars = build_vars(bp, SshAccess("root"))
    return dict(host_context(Inventory(inventory), extravars, host, role, **facts))


def task(role: str, tasks_file: str, name: str) -> dict[str, Any]:
    for entry in yaml.safe_load((ROLES / role / "tasks" / tasks_file).read_text()):
        if entry.get("name") == name:
            return dict(entry)
        for inner in entry.get("block", []):
            if inner.get("name") == name:
                return dict(inner)
    raise AssertionError(f"no task {name!r} in {role}/tasks/{tasks_file}")


@pytest.fixture(scope="module")
def bp() -> Blueprint:
    return load_blueprint(REPO / "blueprints" / "h100-ib.yaml")


# --- nvidia ----------------------------------------------------------------------------------------------------


def gres(bp: Blueprint, host: str, nvml: bool = False) -> str:
    ctx = context(bp, host, "nvidia", nvidia_state={"reads": {}, "paths": {}})  # what a fresh node's inspection reads
    ctx.update(nvidia_gpu_count=int(ctx["hpckit_gpu_count"]), nvidia_gres_nvml=nvml)
    return render("nvidia", "gres.conf.j2", ctx)


def test_gres_conf_of_every_node_gives_128_gpus_near_their_socket(bp: Blueprint) -> None:
    assert gres(bp, "gpu001") == (
        "# gres.conf of gpu001, managed by hpckit (role nvidia). Must agree with Gres= of this node in\n"
        "# slurm.conf: 8 x gpu:h100.\n"
        "Name=gpu Type=h100 File=/dev/nvidia[0-3] Cores=0-55\n"
        "Name=gpu Type=h100 File=/dev/nvidia[4-7] Cores=56-111\n"
    )
    total = 0
    for host in GPU_NODES:
        lines = [line for line in gres(bp, host).splitlines() if line.startswith("Name=gpu")]
        assert len(lines) == 2, host
        total += sum(int(b) - int(a) + 1 for a, b in (line.split("[")[1].split("]")[0].split("-") for line in lines))
    assert total == 128
    # ... and slurm.conf declares the same type and count on every node.
    (nodes,) = build_extravars(bp)["slurm_nodes"]
    assert (nodes["names"], nodes["gres"]) == ("gpu[001-016]", "gpu:h100:8")


def test_gres_conf_with_nvml_leaves_the_devices_to_slurm(bp: Blueprint) -> None:
    text = gres(bp, "gpu007", nvml=True)
    assert "AutoDetect=nvml\n" in text and "File=" not in text


def test_the_nvidia_role_only_reads_the_gpus() -> None:
    """Clocks, power limits, persistence and MIG modes are never set: nvidia-smi only queries."""
    calls = []
    for tasks_file in (ROLES / "nvidia" / "tasks").glob("*.yml"):
        text = tasks_file.read_text()
        for entry in yaml.safe_load(text):
            for item in [entry, *entry.get("block", [])]:
                assert "ansible.builtin.shell" not in item and "ansible.builtin.command" not in item, item.get("name")
    # The role's inspection (hpckit_inspect) runs the one nvidia-smi call its variables name.
    script = yaml.safe_load((ROLES / "nvidia" / "vars" / "main.yml").read_text())["nvidia_smi_read"]["smi"]
    calls += [line.split() for line in script.split(";") if "nvidia-smi" in line]
    assert calls
    for line in calls:
        at = next(i for i, word in enumerate(line) if word.endswith("nvidia-smi"))
        args = line[at + 1 :]
        assert [a.split("=")[0] for a in args[:2]] == ["--query-gpu", "--format"], line


# --- infiniband --------------------------------------------------------------------------------------------------


def test_nccl_conf_names_the_eight_hcas_exactly(bp: Blueprint) -> None:
    ctx = context(bp, "gpu003", "infiniband", infiniband_nccl_socket_ifname="ens21f0np0")
    assert render("infiniband", "nccl.conf.j2", ctx) == (
        "# NCCL defaults of gpu003, managed by hpckit (role infiniband). A job's environment overrides them.\n"
        '# "=" makes NCCL match the HCA names exactly (mlx5_1 would otherwise also pick mlx5_10 and mlx5_11).\n'
        "NCCL_IB_HCA==mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1\n"
        "NCCL_SOCKET_IFNAME=ens21f0np0\n"
    )


def test_nccl_conf_for_roce_sets_the_gid_index(bp: Blueprint) -> None:
    ctx = context(bp, "gpu003", "infiniband", infiniband_nccl_socket_ifname="", infiniband_roce=True)
    ctx["infiniband_nccl_extra"] = {"NCCL_DEBUG": "WARN"}
    text = render("infiniband", "nccl.conf.j2", ctx)
    assert "NCCL_IB_GID_INDEX=3\n" in text and "NCCL_DEBUG=WARN\n" in text and "SOCKET_IFNAME" not in text


def test_topology_conf_from_the_recorded_fabric(bp: Blueprint) -> None:
    """The role's filter (hpckit's generator) on a recorded ibnetdiscover, for the cluster's Slurm nodes."""
    ctx = context(bp, "head01", "infiniband")
    assert ctx["infiniband_topology_nodes"] == GPU_NODES
    conf = topology_filter()(FABRIC.read_text(), ctx["infiniband_topology_nodes"])
    assert conf == (
        "# Slurm topology.conf (TopologyPlugin=topology/tree), generated by hpckit from ibnetdiscover\n"
        "SwitchName=S-ec0d9a0300ec8240 Nodes=gpu[001-003]\n"
        "SwitchName=S-ec0d9a0300ec8480 Nodes=gpu[004-016]\n"
        "SwitchName=S-ec0d9a0300ec81e0 Switches=S-ec0d9a0300ec8240,S-ec0d9a0300ec8480\n"
        "SwitchName=S-ec0d9a0300ec8200 Switches=S-ec0d9a0300ec8240,S-ec0d9a0300ec8480\n"
        "SwitchName=S-ec0d9a0300f548c0 Switches=S-ec0d9a0300ec81e0,S-ec0d9a0300ec8200\n"
        "SwitchName=S-ec0d9a0300f548e0 Switches=S-ec0d9a0300ec81e0,S-ec0d9a0300ec8200\n"
    )


def test_topology_filter_names_an_unreadable_dump() -> None:
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="cannot read the ibnetdiscover output"):
        topology_filter()('Switch\t36 "S-00"\n[1]\tgarbage\n', GPU_NODES)


def test_topology_filter_runs_with_the_standard_library_alone() -> None:
    """A plain ansible-playbook has neither hpckit nor python-hostlist to import: the filter's file runs on a
    bare interpreter (no site-packages) and gives the same topology, its node lists written out in full."""
    path = ansible_dir() / "roles" / "infiniband" / "filter_plugins" / "hpckit_topology.py"
    code = (
        "import importlib.util, sys\n"
        "spec = importlib.util.spec_from_file_location('f', sys.argv[1])\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "print(module.hpckit_topology_conf(open(sys.argv[2]).read(), sys.argv[3:]), end='')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('hpckit', 'hostlist', 'ansible')))\n"
    )
    bare = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, str(path), str(FABRIC), *GPU_NODES],
        capture_output=True,
        text=True,
        check=True,
    )
    *conf, imported = bare.stdout.splitlines()
    assert imported == "[]"
    expanded = [
        re.sub(r"Nodes=(\S+)", lambda m: "Nodes=" + ",".join(hostlist.expand_hostlist(m[1])), line)
        for line in topology_filter()(FABRIC.read_text(), GPU_NODES).splitlines()
    ]
    assert conf == expanded


# --- enroot + pyxis ------------------------------------------------------------------------------------------------


def test_enroot_conf_keeps_the_per_user_paths_for_enroot(bp: Blueprint) -> None:
    ctx = context(bp, "gpu010", "enroot_pyxis")
    assert render("enroot_pyxis", "enroot.conf.j2", ctx) == (
        "# enroot configuration of gpu010, managed by hpckit (role enroot_pyxis).\n"
        "# enroot expands $(id -u) and $(id -g) for each user.\n"
        "ENROOT_RUNTIME_PATH /run/enroot/user-$(id -u)\n"
        "ENROOT_CACHE_PATH /raid/enroot/cache/group-$(id -g)\n"
        "ENROOT_DATA_PATH /raid/enroot/data/user-$(id -u)\n"
        "ENROOT_ROOTFS_WRITABLE yes\n"
        "ENROOT_SQUASH_OPTIONS -noI -noD -noF -noX -no-duplicates\n"
    )
    assert ctx["enroot_pyxis_base_dirs"] == ["/run/enroot", "/raid/enroot/cache", "/raid/enroot/data"]
    assert render("enroot_pyxis", "tmpfiles.conf.j2", ctx).splitlines()[1:] == ["d /run/enroot 1777 root root -"]


def test_plugstack_conf_loads_pyxis_on_nodes_and_login_hosts(bp: Blueprint) -> None:
    for host in ("gpu001", "login01"):
        ctx = context(bp, host, "enroot_pyxis")
        assert ctx["enroot_pyxis_pyxis"] is True
        assert render("enroot_pyxis", "plugstack.conf.j2", ctx).splitlines()[1:] == [
            "include /etc/slurm/plugstack.conf.d/*.conf"
        ]
        assert render("enroot_pyxis", "pyxis.conf.j2", ctx) == (
            "# pyxis 0.24.0 (srun/sbatch --container-image), managed by hpckit (role enroot_pyxis).\n"
            "required /usr/local/lib/slurm/spank_pyxis.so container_scope=job\n"
        )
    ctx = context(bp, "gpu001", "enroot_pyxis")
    ctx["enroot_pyxis_pyxis_args"] = {"container_scope": "job", "sbatch_support": 1}
    assert render("enroot_pyxis", "pyxis.conf.j2", ctx).endswith(
        "required /usr/local/lib/slurm/spank_pyxis.so container_scope=job sbatch_support=1\n"
    )
    assert context(bp, "head01", "enroot_pyxis")["enroot_pyxis_pyxis"] is False


# --- shared filesystems -------------------------------------------------------------------------------------------


def test_exports_of_the_nfs_server_list_every_cluster_host(bp: Blueprint) -> None:
    ctx = context(bp, "head01", "shared_fs")
    assert [fs["name"] for fs in ctx["shared_fs_served"]] == ["home"]
    opts = "(rw,sync,no_subtree_check,no_root_squash)"
    clients = ["10.10.0.10/31", "10.10.0.12/32", "10.10.0.101/32", "10.10.0.102/31", "10.10.0.104/29"]
    clients += ["10.10.0.112/30", "10.10.0.116/32"]
    assert render("shared_fs", "exports.j2", ctx).splitlines()[1:] == [
        "/export/home " + " ".join(c + opts for c in clients)
    ]
    assert context(bp, "gpu001", "shared_fs")["shared_fs_served"] == []


def fstab_line(bp: Blueprint, host: str) -> str:
    line = task("shared_fs", "client.yml", "Declare the mounts in fstab")["ansible.builtin.lineinfile"]["line"]
    ctx = context(bp, host, "shared_fs")
    (fs,) = ctx["shared_fs_nfs"]
    return str(render_value(line, {**ctx, "item": fs, "shared_fs_index": 0}))  # the loop's index_var


def test_fstab_lines_mount_home_from_the_server_and_bind_it_on_the_server(bp: Blueprint) -> None:
    for host in [*GPU_NODES, "login01", "login02"]:
        assert fstab_line(bp, host) == "10.10.0.10:/export/home /home nfs rw,hard,noatime,vers=4.2,_netdev 0 0"
    assert fstab_line(bp, "head01") == "/export/home /home none bind 0 0"


def test_existing_lustre_is_only_checked(bp: Blueprint) -> None:
    ctx = context(bp, "gpu001", "shared_fs")
    assert ctx["shared_fs_existing"] == [{"name": "scratch", "mount": "/lustre", "fstype": "lustre"}]
    assert ctx["shared_fs_mode"] == "mount" and "/lustre" not in str(ctx["shared_fs_nfs"])


# --- slurm.conf: what the GPU roles and the health checks add ------------------------------------------------


def slurm_conf(bp: Blueprint, **facts: Any) -> str:
    ctx = context(bp, "gpu001", "slurm", **facts)  # the contract's defaults; slurm_common only renders
    return render("slurm_common", "slurm.conf.j2", ctx)


def test_slurm_conf_runs_the_quick_tier_and_the_tree_topology_from_the_fabric(bp: Blueprint) -> None:
    lines = slurm_conf(bp, slurm_topology_plugin="topology/tree", slurm_dbd_addr="10.0.0.10").splitlines()
    for wanted in (
        "HealthCheckProgram=/etc/hpckit/health-check",
        f"HealthCheckInterval={bp.health.quick_interval_s}",
        "HealthCheckNodeState=ANY",
        "TopologyPlugin=topology/tree",
        "PriorityType=priority/multifactor",  # the blueprint's own overrides still there
    ):
        assert wanted in lines, wanted
    flat = slurm_conf(bp, slurm_dbd_addr="10.0.0.10")
    assert "TopologyPlugin" not in flat  # no topology.conf found: Slurm's flat default


def test_nvidia_reads_the_driver_and_mig_columns_as_ansible_does() -> None:
    """nvidia-smi --query-gpu=index,name,driver_version,mig.mode.current lines, through the role's own
    expressions as Ansible reads YAML ('\\s' and '\\2' kept as written inside {{ }})."""
    from hpckit.deploy.render import render_value

    role_vars = yaml.safe_load((ansible_dir() / "roles" / "nvidia" / "vars" / "main.yml").read_text())
    lines = ["0, NVIDIA H100 80GB HBM3, 590.48.01, Enabled", "1, NVIDIA H100 80GB HBM3, 590.48.01 , Disabled"]
    assert render_value(role_vars["nvidia_drivers"], {"nvidia_lines": lines}) == ["590.48.01"]
    assert render_value(role_vars["nvidia_mig_enabled"], {"nvidia_lines": lines}) is True
    assert render_value(role_vars["nvidia_mig_enabled"], {"nvidia_lines": lines[1:]}) is False
