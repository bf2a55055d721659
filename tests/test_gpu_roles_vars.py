"""Blueprint -> the GPU-side roles' variables (hpckit.deploy.gpu_vars): pure, on the example blueprints."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hpckit.blueprint import load_blueprint, parse_blueprint
from hpckit.blueprint.models import Enroot, Hardware
from hpckit.deploy.gpu_vars import (
    enroot_packages,
    gpu_extravars,
    gpu_host_vars,
    gres_devices,
    nfs_clients,
)
from hpckit.deploy.inventory import HostEntry
from hpckit.deploy.topology import topology_for

FABRIC = (
    Path(__file__).parent
    / "data"
    / "preflight"
    / "infiniband"
    / "ibnetdiscover-6switch-edr-fattree-96ca-4xDDR-link.txt"
)


def hw(cpus: int, sockets: int, cores: int, threads: int, gpus: int | None) -> Hardware:
    data: dict[str, object] = {
        "cpus": cpus,
        "sockets": sockets,
        "cores_per_socket": cores,
        "threads_per_core": threads,
        "memory_mb": 1000,
    }
    if gpus:
        data["gpus"] = {"type": "h100-sxm", "count": gpus}
    return Hardware.model_validate(data)


@pytest.mark.parametrize(
    ("hardware", "groups"),
    [
        (hw(224, 2, 56, 2, 8), [(0, 3, "0-55"), (4, 7, "56-111")]),
        (hw(2, 1, 2, 1, 4), [(0, 3, "")]),  # one socket: no Cores= at all
        (hw(64, 2, 16, 2, 3), [(0, 1, "0-15"), (2, 2, "16-31")]),
        (hw(192, 4, 24, 2, 8), [(0, 1, "0-23"), (2, 3, "24-47"), (4, 5, "48-71"), (6, 7, "72-95")]),
        (hw(8, 2, 4, 1, 1), [(0, 0, "0-3")]),
        (hw(8, 2, 4, 1, None), []),
    ],
)
def test_gres_device_groups_follow_the_sockets(hardware: Hardware, groups: list[tuple[int, int, str]]) -> None:
    assert [(g["first"], g["last"], g["cores"]) for g in gres_devices(hardware)] == groups


def test_h100_cluster_variables(repo: Path) -> None:
    bp = load_blueprint(repo / "blueprints" / "h100-ib.yaml")
    ev = gpu_extravars(bp)
    assert ev["nvidia_emulated"] is False and ev["infiniband_topology"] == "auto"
    assert ev["infiniband_discovery_host"] == "gpu001"
    assert ev["shared_fs_mode"] == "mount"
    assert ev["shared_fs_nfs"] == [
        {
            "name": "home",
            "server": "head01",
            "server_addr": "10.10.0.10",
            "export": "/export/home",
            "mount": "/home",
            "options": "rw,hard,noatime,vers=4.2",
        }
    ]
    assert ev["shared_fs_existing"] == [{"name": "scratch", "mount": "/lustre", "fstype": "lustre"}]
    assert ev["enroot_pyxis_smoke_partitions"] == ["gpu"] and ev["enroot_pyxis_enabled"] is True
    # no package named: NVIDIA's release of the version (fetched and checked on the deploying machine)
    release = "https://github.com/NVIDIA/enroot/releases/download/v4.1.2"
    assert ev["enroot_pyxis_enroot_packages"] == [
        f"{release}/enroot_4.1.2-1_amd64.deb",
        f"{release}/enroot+caps_4.1.2-1_amd64.deb",
    ]
    assert ev["enroot_pyxis_pyxis_source"] == "https://github.com/NVIDIA/pyxis/archive/refs/tags/v0.24.0.tar.gz"
    # Debian's Slurm: the role's own default headers (libslurm-dev); a built Slurm's are SchedMD's
    assert "enroot_pyxis_slurm_dev_package" not in ev
    built = bp.model_copy(update={"slurm": bp.slurm.model_copy(update={"install": "build", "version": "24.11.5"})})
    assert gpu_extravars(built)["enroot_pyxis_slurm_dev_package"] == "slurm-smd-dev"
    node = gpu_host_vars(bp, "gpu016")
    assert node["infiniband_hcas"][0] == "mlx5_0" and node["infiniband_rate_gbps"] == 400
    assert node["enroot_pyxis_enroot"] and node["enroot_pyxis_pyxis"]
    assert gpu_host_vars(bp, "login02") == {"enroot_pyxis_pyxis": True}  # srun parses --container-* here
    assert gpu_host_vars(bp, "head01") == {}
    yaml.safe_load(yaml.safe_dump(ev))  # plain data for the extravars file


def test_lab_switches_the_roles_to_what_the_lab_has(repo: Path) -> None:
    bp = load_blueprint(repo / "blueprints" / "lab.yaml")
    ev = gpu_extravars(bp)
    assert (ev["nvidia_emulated"], ev["infiniband_topology"], ev["shared_fs_mode"]) == (True, "off", "bind")
    assert ev["enroot_pyxis_smoke_partitions"] == []  # containers are off in the lab
    assert gpu_host_vars(bp, "node1") == {"nvidia_gres_devices": [{"first": 0, "last": 3, "cores": ""}]}


def test_a_partition_can_opt_out_of_containers() -> None:
    bp = parse_blueprint(
        """\
name: t
provider: {type: static}
controller: {host: ctl}
login: [{host: ctl}]
partitions:
  - {name: gpu, nodes: "g[1-2]", hardware: {cpus: 2, cores_per_socket: 2, memory_mb: 500, gpus: {type: l40s, count: 2}}}
  - {name: big, nodes: "b1", containers: false,
     hardware: {cpus: 2, cores_per_socket: 2, memory_mb: 500, gpus: {type: l40s, count: 2}}}
  - {name: cpu, nodes: "c1", hardware: {cpus: 2, cores_per_socket: 2, memory_mb: 500}}
filesystems:
  - {type: nfs, name: home, server: ctl, export: /export/home, mount: /home}
"""
    )
    assert gpu_extravars(bp)["enroot_pyxis_smoke_partitions"] == ["gpu"]
    assert "enroot_pyxis_enroot" in gpu_host_vars(bp, "g2")
    assert "enroot_pyxis_enroot" not in gpu_host_vars(bp, "b1")
    assert gpu_host_vars(bp, "c1") == {}
    assert gpu_host_vars(bp, "ctl") == {"enroot_pyxis_pyxis": True}  # the controller is the login host
    assert gpu_extravars(bp)["shared_fs_nfs_clients"] == ["b1", "c1", "ctl", "g1", "g2"]  # names: no addresses


@pytest.mark.parametrize(
    ("package", "debs"),
    [
        (
            "https://example.org/enroot/v3.5.0/enroot_3.5.0-1_amd64.deb",
            [
                "https://example.org/enroot/v3.5.0/enroot_3.5.0-1_amd64.deb",
                "https://example.org/enroot/v3.5.0/enroot+caps_3.5.0-1_amd64.deb",
            ],
        ),
        (
            "/srv/pkgs/enroot_3.5.0-1_arm64.deb",
            ["/srv/pkgs/enroot_3.5.0-1_arm64.deb", "/srv/pkgs/enroot+caps_3.5.0-1_arm64.deb"],
        ),
        ("/srv/pkgs/site-enroot.deb", ["/srv/pkgs/site-enroot.deb"]),  # not NVIDIA's name: taken as it is
    ],
)
def test_a_pinned_enroot_brings_its_caps_package(package: str | None, debs: list[str]) -> None:
    assert enroot_packages(Enroot(package=package, version="3.5.0")) == debs


def test_nfs_clients_are_the_fewest_exact_blocks() -> None:
    entries = [HostEntry(f"n{i}", f"10.0.0.{i}", "compute") for i in range(101, 117)]
    entries += [HostEntry("ctl", "10.0.0.10", "controller"), HostEntry("x", None, "login")]
    assert nfs_clients(entries) == ["10.0.0.10/32", "10.0.0.101/32", "10.0.0.102/31", "10.0.0.104/29",
                                    "10.0.0.112/30", "10.0.0.116/32", "x"]  # fmt: skip


def test_topology_for_the_recorded_fabric_keeps_only_slurm_nodes() -> None:
    text = FABRIC.read_text()
    conf = topology_for(text, [f"gpu{i:03d}" for i in range(1, 17)])
    assert conf.splitlines()[1:3] == [
        "SwitchName=S-ec0d9a0300ec8240 Nodes=gpu[001-003]",
        "SwitchName=S-ec0d9a0300ec8480 Nodes=gpu[004-016]",
    ]
    assert "node0" not in conf and "login01" not in conf and "controller" not in conf
    assert topology_for(text, ["somewhere-else"]) == ""


def test_driver_dcgm_smoke_image_and_hooks_reach_the_roles(tmp_path: Path) -> None:
    source = Path(__file__).resolve().parent.parent / "blueprints" / "h100-ib.yaml"
    bp = load_blueprint(source)
    ev = gpu_extravars(bp)
    assert ev["enroot_pyxis_smoke_image"] == "" and ev["enroot_pyxis_hook_sources"] == {}
    assert "nvidia_dcgm" not in gpu_host_vars(bp, "gpu001") and "nvidia_driver_version" not in gpu_host_vars(
        bp, "gpu001"
    )
    text = source.read_text().replace(
        "gpus: {type: h100-sxm, count: 8}", 'gpus: {type: h100-sxm, count: 8, driver: "550.127.08", dcgm: true}'
    )
    text = text.replace(
        '  pyxis:\n    version: "0.24.0"\n',
        '  pyxis:\n    version: "0.24.0"\n  smoke_image: "nvcr.io#nvidia/pytorch:24.05-py3"\n',
    )
    text = text.replace(
        '    version: "4.1.2"\n', '    version: "4.1.2"\n    hooks: {90-site.sh: /srv/hooks/90-site.sh}\n'
    )
    pinned = tmp_path / "pinned.yaml"
    pinned.write_text(text)
    bp = load_blueprint(pinned)
    host = gpu_host_vars(bp, "gpu001")
    assert host["nvidia_driver_version"] == "550.127.08" and host["nvidia_dcgm"] is True
    ev = gpu_extravars(bp)
    assert ev["enroot_pyxis_smoke_image"] == "nvcr.io#nvidia/pytorch:24.05-py3"
    assert ev["enroot_pyxis_hook_sources"] == {"90-site.sh": "/srv/hooks/90-site.sh"}


def test_merge_adds_host_vars_and_extravars_without_touching_the_inputs(repo: Path) -> None:
    from hpckit.clusters import SshAccess
    from hpckit.deploy.gpu_vars import merge_gpu_vars
    from hpckit.deploy.inventory import build_extravars, build_inventory
    from hpckit.deploy.render import Inventory

    bp = load_blueprint(repo / "blueprints" / "h100-ib.yaml")
    inventory, extravars = build_inventory(bp, SshAccess("root")), build_extravars(bp)
    before = yaml.safe_dump(inventory)
    merged, extra = merge_gpu_vars(bp, inventory, extravars)
    assert yaml.safe_dump(inventory) == before
    node = Inventory(merged).variables("gpu002")
    assert node["hpckit_gpu_count"] == 8 and node["nvidia_gres_devices"][1]["cores"] == "56-111"
    assert merged["all"]["children"]["slurm_login"]["hosts"]["login01"]["enroot_pyxis_pyxis"] is True
    assert extra["slurm_nodes"] == extravars["slurm_nodes"] and extra["shared_fs_mode"] == "mount"
