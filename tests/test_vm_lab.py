"""VM labs end to end: two virtual machines (Debian 13, systemd) on a test-only subnet, then nothing left.

Needs root, the VM host packages (scripts/install.sh) and the image (built on first use: minutes;
cached afterwards). Traffic only ever goes to the lab's own addresses.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpckit.lab import (
    LabNode,
    LabSpec,
    LabStatus,
    VmSpec,
    lab_down,
    lab_exec,
    lab_status,
    missing_vm_packages,
    procs,
    ssh_identity,
    vm_up,
)
from hpckit.lab.state import LabPaths
from hpckit.lab.vm import machines
from hpckit.lab.vm import net as vmnet
from hpckit.proc import TransportError

CLUSTER = "pytest-vm"
STATE_ROOT = Path("/var/lib/hpckit/lab-pytest-vm")
SPEC = VmSpec(
    LabSpec(
        cluster=CLUSTER,
        nodes=(LabNode("vm1", "10.78.130.10"), LabNode("vm2", "10.78.130.11")),
        subnet="10.78.130.0/24",
        bridge="hpkvt130",
        state_root=STATE_ROOT,
    )
)


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "VM labs need root"
    missing = missing_vm_packages()
    if missing:
        return f"VM host packages missing ({' '.join(missing)}): bash scripts/install.sh"
    return None


# The first test counts building the image on first use (203 s cold) and booting the machines under emulation.
pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason())),
    pytest.mark.timeout(2400),
]


@pytest.fixture(scope="module")
def vms() -> Iterator[LabStatus]:
    lab_down(CLUSTER, STATE_ROOT)  # a leftover from an interrupted run
    try:
        yield vm_up(SPEC, log=print)
    finally:
        lab_down(CLUSTER, STATE_ROOT)
        if STATE_ROOT.is_dir() and not any(STATE_ROOT.iterdir()):
            STATE_ROOT.rmdir()


def out(node: str, *argv: str) -> str:
    result = lab_exec(CLUSTER, node, argv, state_root=STATE_ROOT, timeout=60)
    assert result.rc == 0, result.stderr
    return result.stdout.strip()


def test_every_machine_is_up_with_sshd(vms: LabStatus) -> None:
    assert vms.all_up
    assert [(n.name, n.address) for n in vms.nodes] == [(n.name, n.address) for n in SPEC.nodes]
    assert lab_status(CLUSTER, STATE_ROOT).all_up


def test_pid_1_is_systemd_with_cgroup_v2_over_ssh(vms: LabStatus) -> None:
    identity = ssh_identity(CLUSTER, STATE_ROOT)
    for node in SPEC.nodes:
        argv = identity.ssh_command(node.address, "cat /proc/1/comm; stat -fc %T /sys/fs/cgroup; hostname")
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["systemd", "cgroup2fs", node.name]


def test_exec_and_the_network(vms: LabStatus) -> None:
    assert out("vm1", "hostname") == "vm1"
    assert "10.78.130.11/24" in out("vm2", "ip", "-4", "-o", "addr", "show", "dev", "eth0")
    out("vm1", "ping", "-c", "1", "-W", "5", "vm2")  # by name, from /etc/hosts
    # The default route leads nowhere: a dummy device, the machine's own address as source.
    assert out("vm1", "ip", "-4", "route", "show", "default").startswith("default dev dead0")
    assert out("vm1", "cat", "/etc/apt/sources.list").startswith("#")  # no archive: nothing to reach
    result = lab_exec(CLUSTER, "vm2", ["sh", "-c", "cat; exit 3"], state_root=STATE_ROOT, stdin="in", timeout=60)
    assert (result.rc, result.stdout) == (3, "in")


def test_cli_exec(vms: LabStatus) -> None:
    argv = [sys.executable, "-m", "hpckit", "lab", "exec", "--state-root", str(STATE_ROOT), "-c", CLUSTER]
    done = subprocess.run([*argv, "vm2", "--", "hostname"], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "vm2"), done.stderr


def test_a_reboot_inside_brings_the_machine_back(vms: LabStatus) -> None:
    record = machines.load_record(LabPaths.of(STATE_ROOT, CLUSTER), "vm2")
    assert record is not None
    boot_id = out("vm2", "cat", "/proc/sys/kernel/random/boot_id")
    lab_exec(CLUSTER, "vm2", ["systemctl", "reboot", "--no-block"], state_root=STATE_ROOT, timeout=60)
    deadline = time.monotonic() + 600
    while True:
        assert time.monotonic() < deadline, "vm2 did not come back after a reboot"
        time.sleep(5)
        try:
            again = lab_exec(CLUSTER, "vm2", ["cat", "/proc/sys/kernel/random/boot_id"], state_root=STATE_ROOT)
        except TransportError:
            continue  # going down, or not up yet
        if again.rc == 0 and again.stdout.strip() != boot_id:
            break
    assert procs.is_alive(record.pid, record.start)  # the same qemu: the machine rebooted, not restarted
    assert out("vm2", "hostname") == "vm2"


def test_down_leaves_nothing(vms: LabStatus) -> None:
    paths = LabPaths.of(STATE_ROOT, CLUSTER)
    records = [machines.load_record(paths, n.name) for n in SPEC.nodes]
    disks = [paths.node_dir(n.name) / "disk.qcow2" for n in SPEC.nodes]
    assert all(d.exists() for d in disks)
    lab_down(CLUSTER, STATE_ROOT)
    assert all(r is not None and not procs.is_alive(r.pid, r.start) for r in records)
    assert not (vmnet.NETNS_DIR / SPEC.netns).exists()
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    assert SPEC.lab.bridge not in links and "tap10" not in links
    assert not any(d.exists() for d in disks)
    assert not paths.root.exists()
