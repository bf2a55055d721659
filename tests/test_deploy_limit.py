"""`hpckit deploy --limit`: Ansible's own pattern rules, and a limit that leaves out the build host of a built Slurm
refused before any host is touched (exit 2, naming the host to add)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hpckit.blueprint import load_blueprint
from hpckit.clusters import SshAccess
from hpckit.deploy.inventory import build_inventory
from hpckit.deploy.limit import limit_guard, limited_hosts
from hpckit.errors import InputError

REPO = Path(__file__).resolve().parent.parent
BUILT = load_blueprint(REPO / "blueprints" / "lab-built.yaml")
DISTRO = load_blueprint(REPO / "blueprints" / "lab.yaml")
INVENTORY = build_inventory(DISTRO, SshAccess(user="root", key_file=None))


@pytest.mark.parametrize(
    ("pattern", "hosts"),
    [
        ("node1,node2", {"node1", "node2"}),
        ("all:!ctl", {"login", "node1", "node2", "node3", "node4"}),
        ("slurm_controller:slurm_login", {"ctl", "login"}),
        ("node*", {"node1", "node2", "node3", "node4"}),
    ],
)
def test_patterns_are_ansibles(pattern: str, hosts: set[str]) -> None:
    assert limited_hosts(INVENTORY, pattern) == hosts


@pytest.mark.parametrize("limit", ["node1,node2", "all:!ctl", "slurm_compute"])
def test_a_built_slurm_needs_its_build_host_in_the_limit(limit: str) -> None:
    with pytest.raises(InputError, match=rf"leaves out ctl, the build host .* add it \(--limit '{limit},ctl'\)"):
        limit_guard(BUILT, limit)


@pytest.mark.parametrize("limit", [None, "ctl,node1", "all"])
def test_a_limit_with_the_build_host_passes(limit: str | None) -> None:
    limit_guard(BUILT, limit)


def test_the_distributions_slurm_takes_any_limit() -> None:
    limit_guard(DISTRO, "node1")


def test_deploy_refuses_it_before_touching_a_host(tmp_path: Path) -> None:
    """The real command: exit 2 and the message, with no lab and no record made."""
    argv = [sys.executable, "-m", "hpckit", "deploy", str(REPO / "blueprints" / "lab-built.yaml"), "--limit", "node1"]
    env = {"HPCKIT_STATE": str(tmp_path / "state"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "leaves out ctl, the build host" in done.stderr
    assert not (tmp_path / "state").exists() or not list((tmp_path / "state").rglob("*.json"))
