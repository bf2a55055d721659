"""The GPU-side roles against a real lab shaped like a rack of h100-ib (tests/data/preflight/gpudev.yaml).

A dry run (--check --diff) of all four roles shows every config they would write; a real run of shared_fs in the
lab's bind mode checks that each filesystem is mounted, writable and the same on every node. The lab nodes
share this box's root filesystem, so nothing here may install a package for real: only check mode does apt.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hpckit.blueprint import Blueprint, load_blueprint
from hpckit.deploy.events import Tracker
from hpckit.deploy.playvars import build_vars
from hpckit.deploy.runner import PlaybookRun, RunOutcome, run_playbook
from hpckit.deploy.targets import Target, prepare_target
from hpckit.lab import provider
from tests.labutil import needs_lab

pytestmark = [pytest.mark.lab, needs_lab()]

DATA = Path(__file__).parent / "data" / "preflight"
FABRIC = DATA / "infiniband" / "ibnetdiscover-6switch-edr-fattree-96ca-4xDDR-link.txt"
HOSTS = ["ctl", "login", "node1", "node2"]
# What a real h100-ib deploy would do where the lab's provider does it differently: serve and mount NFS, read the
# fabric (here a recorded one, for the 16 nodes of h100-ib). The lab has no HCA ports to verify.
H100_LIKE: dict[str, Any] = {
    "shared_fs_mode": "mount",
    "shared_fs_verify": False,
    "infiniband_topology": "file",
    "infiniband_ibnetdiscover_file": str(FABRIC),
    "infiniband_topology_nodes": [f"gpu{i:03d}" for i in range(1, 17)],
    "infiniband_verify_ports": False,
    "enroot_pyxis_enabled": True,  # a dry run only (tests/test_containers_lab.py installs them for real)
}


@dataclass
class Lab:
    bp: Blueprint
    target: Target

    def play(self, playbook: str, extravars: dict[str, Any], check: bool) -> tuple[Tracker, RunOutcome]:
        tracker = Tracker()
        self.diffs: dict[tuple[str, str], str] = {}

        def sink(event: Mapping[str, Any]) -> None:
            tracker.feed(event)
            self._collect(event)

        inventory, extra = build_vars(self.bp, self.target.access)
        run = PlaybookRun(playbook=str(DATA / playbook), check=check, diff=check, forks=8)
        return tracker, run_playbook(inventory, {**extra, **extravars}, run, sink)

    def _collect(self, event: Mapping[str, Any]) -> None:
        """Rendered files from diff events, loop items included (a lineinfile per mount point), filed under the
        destination and under each diff header (a template's "after" header is its temporary copy)."""
        if event.get("event") not in ("runner_on_ok", "runner_item_on_ok"):
            return
        data = event.get("event_data") or {}
        res = data.get("res") or {}
        args = (res.get("invocation") or {}).get("module_args") or {}  # a new file's result has no "dest"
        diff = res.get("diff")
        for item in diff if isinstance(diff, list) else [diff] if isinstance(diff, dict) else []:
            after = item.get("after")
            if isinstance(after, str) and after != item.get("before"):
                candidates = (res.get("dest"), args.get("dest"), args.get("path"))
                for path in (*candidates, item.get("before_header"), item.get("after_header")):
                    if path:
                        self.diffs[(str(data.get("host")), str(path))] = after

    def on(self, host: str, *argv: str) -> Any:
        conn = self.target.transport(host)
        try:
            return conn.run(argv, timeout=30)
        finally:
            conn.close()


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    bp = load_blueprint(DATA / "gpudev.yaml")
    try:
        yield Lab(bp, prepare_target(bp))
    finally:
        provider.lab_down(bp.cluster_name)


@pytest.fixture(scope="module")
def dry_run(lab: Lab) -> dict[tuple[str, str], str]:
    tracker, outcome = lab.play("gpu_roles_check.yml", H100_LIKE, check=True)
    assert outcome.status == "successful" and tracker.ok, [str(f) for f in tracker.failures]
    # What `hpckit plan` shows (the tracker's diffs) is part of what the dry run rendered.
    assert {(d.host, d.path) for d in tracker.diffs} <= set(lab.diffs)
    return lab.diffs


def rendered(diffs: dict[tuple[str, str], str], host: str, path: str) -> str:
    """What the dry run would write to ``path`` on ``host`` (lineinfile's header is "<path> (content)")."""
    found = [after for (h, p), after in diffs.items() if h == host and (p == path or p.startswith(path + " "))]
    assert found, f"no diff for {path} on {host}: {sorted(p for h, p in diffs if h == host)}"
    return found[0]


def test_dry_run_shows_gres_nccl_and_topology(dry_run: dict[tuple[str, str], str]) -> None:
    for node in ("node1", "node2"):
        gres = rendered(dry_run, node, "/etc/slurm/gres.conf")
        assert "Name=gpu Type=h100 File=/dev/nvidia[0-3] Cores=0-55\n" in gres
        assert "Name=gpu Type=h100 File=/dev/nvidia[4-7] Cores=56-111\n" in gres
        nccl = rendered(dry_run, node, "/etc/nccl.conf")
        assert "NCCL_IB_HCA==mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1\n" in nccl
        assert "NCCL_SOCKET_IFNAME=eth0\n" in nccl  # the interface holding the node's lab address
    for host in HOSTS:  # slurmctld's host needs topology.conf as much as the nodes
        topology = rendered(dry_run, host, "/etc/slurm/topology.conf")
        assert "SwitchName=S-ec0d9a0300ec8480 Nodes=gpu[004-016]\n" in topology
    assert not [p for h, p in dry_run if h in ("ctl", "login") and p in ("/etc/nccl.conf", "/etc/slurm/gres.conf")]


def test_dry_run_shows_enroot_and_pyxis(dry_run: dict[tuple[str, str], str]) -> None:
    for node in ("node1", "node2"):
        enroot = rendered(dry_run, node, "/etc/enroot/enroot.conf")
        assert "ENROOT_DATA_PATH /raid/enroot/data/user-$(id -u)\n" in enroot
        assert rendered(dry_run, node, "/etc/tmpfiles.d/enroot.conf").endswith("d /run/enroot 1777 root root -\n")
    for host in ("node1", "node2", "login"):
        assert "include /etc/slurm/plugstack.conf.d/*.conf" in rendered(dry_run, host, "/etc/slurm/plugstack.conf")
        assert rendered(dry_run, host, "/etc/slurm/plugstack.conf.d/pyxis.conf").endswith(
            "required /usr/local/lib/slurm/spank_pyxis.so container_scope=job\n"
        )
        assert rendered(dry_run, host, "/usr/local/lib/slurm/spank_pyxis.so.hpckit").startswith(
            "pyxis 0.20.0 slurm 22.05"
        )
    assert not [p for h, p in dry_run if h == "ctl" and "pyxis" in p]


def test_dry_run_shows_exports_and_fstab(dry_run: dict[tuple[str, str], str]) -> None:
    exports = rendered(dry_run, "ctl", "/etc/exports.d/hpckit.exports")
    assert exports.splitlines()[1].startswith("/hpckit-gpudev/export 10.77.10.10/31(rw,sync,no_subtree_check")
    fstab = {host: rendered(dry_run, host, "/etc/fstab") for host in HOSTS}
    assert "/hpckit-gpudev/export /hpckit-gpudev/home none bind 0 0\n" in fstab["ctl"]
    for host in ("login", "node1", "node2"):
        line = "10.77.10.10:/hpckit-gpudev/export /hpckit-gpudev/home nfs rw,hard,noatime,vers=4.2,_netdev 0 0\n"
        assert line in fstab[host]


def test_dry_run_changed_nothing(lab: Lab, dry_run: dict[tuple[str, str], str]) -> None:
    for host in HOSTS:
        done = lab.on(host, "ls", "/etc/nccl.conf", "/etc/enroot", "/etc/slurm/topology.conf", "/etc/exports.d")
        assert done.rc != 0 and done.stdout == "", (host, done.stdout)


# A real run limited to what the lab may do for real: gres.conf for its emulated GPUs and the filesystem checks
# (no package, no fabric, no containers).
LAB_REAL: dict[str, Any] = {
    "infiniband_hcas": [],
    "enroot_pyxis_enroot": False,
    "enroot_pyxis_pyxis": False,
}


def test_real_run_is_idempotent_and_writes_gres_for_the_emulated_gpus(lab: Lab) -> None:
    first, outcome = lab.play("gpu_roles_check.yml", LAB_REAL, check=False)
    assert outcome.status == "successful" and first.ok, [str(f) for f in first.failures]
    # gres.conf on the GPU nodes, and the first host's marks on the shared filesystems, once
    assert {h for h, t in first.hosts.items() if t.changed} == {"ctl", "node1", "node2"}
    again, outcome = lab.play("gpu_roles_check.yml", LAB_REAL, check=False)
    assert outcome.status == "successful" and again.ok
    assert {h: t.changed for h, t in again.hosts.items()} == dict.fromkeys(HOSTS, 0)
    gres = lab.on("node1", "cat", "/etc/slurm/gres.conf").stdout
    assert gres.splitlines()[2:] == [
        "Name=gpu Type=h100 File=/dev/nvidia[0-3] Cores=0-55",
        "Name=gpu Type=h100 File=/dev/nvidia[4-7] Cores=56-111",
    ]
    assert lab.on("ctl", "test", "-e", "/etc/slurm/gres.conf").rc != 0  # no GPUs there


def test_shared_filesystems_are_mounted_writable_and_shared(lab: Lab) -> None:
    """A real run in bind mode: only checks (once each filesystem carries the first host's mark), so runs
    after the first change nothing."""
    lab.play("shared_fs_check.yml", {}, check=False)
    for _ in range(2):
        tracker, outcome = lab.play("shared_fs_check.yml", {}, check=False)
        assert outcome.status == "successful" and tracker.ok, [str(f) for f in tracker.failures]
        assert {h: t.changed for h, t in tracker.hosts.items()} == dict.fromkeys(HOSTS, 0)
    for mount in ("/hpckit-gpudev/home", "/hpckit-gpudev/scratch"):
        source = provider.shared_dir_source(lab.bp.cluster_name, mount)
        assert not list(source.glob(".hpckit-write-*")), "the write checks leave nothing behind"
        assert lab.on("node2", "sh", "-c", f"echo from-node2 > {mount}/visible").rc == 0
        for host in HOSTS:
            assert lab.on(host, "cat", f"{mount}/visible").stdout == "from-node2\n", (host, mount)
        assert lab.on("ctl", "rm", f"{mount}/visible").rc == 0


def test_a_missing_mount_fails_on_that_node_only(lab: Lab) -> None:
    done = provider.lab_exec(lab.bp.cluster_name, "node2", ["umount", "/hpckit-gpudev/scratch"])
    assert done.rc == 0, done.stderr
    tracker, outcome = lab.play("shared_fs_check.yml", {}, check=False)
    assert outcome.status == "failed"
    assert [f.host for f in tracker.failures] == ["node2"]
    assert "nothing is mounted at /hpckit-gpudev/scratch on node2" in tracker.failures[0].message
