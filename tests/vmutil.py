"""Helpers for tests that start VM clusters (root, qemu, the lab's packages)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hpckit.lab.spec import DEFAULT_STATE_ROOT
from tests.labutil import REPO, lab_skip_reason


def vm_skip_reason() -> str | None:
    reason = lab_skip_reason()
    if reason is not None:
        return reason
    from hpckit.lab import missing_vm_packages

    missing = missing_vm_packages()
    if missing:
        return f"VM host packages missing: {' '.join(missing)} (bash scripts/install.sh)"
    return None


def needs_vms() -> pytest.MarkDecorator:
    reason = vm_skip_reason()
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def leftovers(cluster: str, bridge: str, state_root: Path = DEFAULT_STATE_ROOT) -> list[str]:
    """What a VM cluster may leave on this machine: qemu processes, its network namespace (which holds its
    bridge and taps), the link named after its bridge, its state folder with the disk overlays."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and b"qemu-system" in argv[0] and any(cluster.encode() in arg for arg in argv):
            found.append(f"qemu process {proc.name}")
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    found += [f"network namespace {line.split()[0]}" for line in netns.splitlines() if cluster in line]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=False).stdout
    found += [f"link {line.split(':')[1].strip()}" for line in links.splitlines() if bridge in line]
    folder = state_root / cluster
    found += [f"overlay {p}" for p in folder.rglob("*.qcow2")] + ([f"state folder {folder}"] if folder.exists() else [])
    return found


def vm_blueprint(tmp: Path, name: str, net: str, bridge: str, one_node: bool = False) -> Path:
    """blueprints/vm.yaml under another name, subnet and host link, so tests never touch an admin's VMs;
    `one_node`: node1 alone in its partition (two machines: each one costs minutes of emulated CPU)."""
    text = (REPO / "blueprints" / "vm.yaml").read_text()
    if one_node:
        two = ("nodes: node[1-2]\n", "addresses: $(vars.net).[21-22]\n")
        assert all(line in text for line in two), "blueprints/vm.yaml no longer declares node[1-2]"
        text = text.replace(two[0], "nodes: node1\n").replace(two[1], "addresses: $(vars.net).21\n")
    text = text.replace("name: vm\n", f"name: {name}\n", 1).replace('net: "10.78.0"', f'net: "{net}"')
    path = tmp / f"{name}.yaml"
    path.write_text(text.replace("bridge: hpcv0", f"bridge: {bridge}"))
    return path
