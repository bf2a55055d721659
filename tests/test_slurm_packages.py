"""install: build, the pure parts: the extravars hpckit passes, and the slurm_packages role's choice of packages
for each host (its vars evaluated by Ansible's own templating over a local connection, on a made-up dpkg
state): which packages each group gets, what is left to install at the build's version, which Debian Slurm
packages go first, which daemons get an init script."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hpckit.blueprint import parse_blueprint
from hpckit.clusters import SshAccess
from hpckit.deploy.install_vars import BUILT_ROLE_PACKAGES, install_extravars
from hpckit.deploy.playvars import build_vars
from tests.test_ansible_static import ANSIBLE, _ansible_env, _tool
from tests.test_blueprint import GOOD

ROLE = ANSIBLE / "roles" / "slurm_packages"
NAMES = [
    "slurm-smd",
    "slurm-smd-client",
    "slurm-smd-dev",
    "slurm-smd-doc",
    "slurm-smd-libnss-slurm",
    "slurm-smd-libpam-slurm-adopt",
    "slurm-smd-libpmi0",
    "slurm-smd-libpmi2-0",
    "slurm-smd-libslurm-perl",
    "slurm-smd-openlava",
    "slurm-smd-sackd",
    "slurm-smd-slurmctld",
    "slurm-smd-slurmd",
    "slurm-smd-slurmdbd",
    "slurm-smd-slurmrestd",
    "slurm-smd-sview",
    "slurm-smd-torque",
]
BUILD_DIR = "/var/cache/hpckit/packages/24.11.5_debian-12_amd64_0123456789"
BUILD = [f"{BUILD_DIR}/{n}_24.11.5-1_{'all' if n == 'slurm-smd-doc' else 'amd64'}.deb" for n in NAMES]


def test_distro_adds_nothing_and_build_names_its_release() -> None:
    assert install_extravars(parse_blueprint(GOOD)) == {}
    bp = parse_blueprint(GOOD + 'slurm:\n  version: "24.11.5"\n  build: {host: login, features: [json, restd, pmix]}\n')
    out = install_extravars(bp)
    assert out == {
        "slurm_install": "build",
        "slurm_build_host": "login",
        "slurm_build_version": "24.11.5",
        "slurm_build_features": ["json", "pmix", "restd"],
        "slurm_build_source": "",
        "slurm_build_source_sha256": "",
        **BUILT_ROLE_PACKAGES,
        "slurm_packages_sysv_init": True,
    }
    _, extravars = build_vars(bp, SshAccess("root", 22, None, None))
    assert {k: extravars[k] for k in out} == out
    assert "slurm-client" not in json.dumps(extravars)  # no role installs Debian's Slurm beside SchedMD's


def _evaluate(tmp_path: Path, dpkg: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The role's vars on three local hosts (controller + dbd, compute, login), as Ansible evaluates them."""
    playbook = _tool("ansible-playbook")
    inventory = {
        "all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
            "children": {
                "slurm_controller": {"hosts": {"ctl": {}}},
                "slurm_dbd": {"hosts": {"ctl": {}}},
                "slurm_compute": {"hosts": {"node1": {}}},
                "slurm_login": {"hosts": {"login": {}}},
            },
        }
    }
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    keep = ["names", "todo", "conflicts", "daemons"]
    dump = "{{ {" + ", ".join(f"'{k}': slurm_packages_{k}" for k in keep) + "} | to_json }}"
    play = [
        {
            "hosts": "all",
            "gather_facts": False,
            "vars": {
                "slurm_build_host": "ctl",
                "slurm_user": "slurm",
                "slurm_packages_state": {"reads": {"dpkg": dpkg}, "checks": {"cache_seen": True}},
            },
            "tasks": [
                {"ansible.builtin.include_vars": str(ROLE / "defaults" / "main.yml")},
                {"ansible.builtin.include_vars": str(ROLE / "vars" / "main.yml")},
                {"ansible.builtin.set_fact": {"slurm_build_packages": BUILD, "slurm_build_dir": BUILD_DIR}},
                {
                    "ansible.builtin.copy": {
                        "content": dump,
                        "dest": f"{tmp_path}/{{{{ inventory_hostname }}}}.json",
                        "mode": "0644",
                    }
                },
                {
                    "ansible.builtin.template": {
                        "src": str(ROLE / "templates" / "slurm-daemon.init.j2"),
                        "dest": f"{tmp_path}/{{{{ inventory_hostname }}}}-{{{{ item }}}}.init",
                        "mode": "0755",
                    },
                    "loop": "{{ slurm_packages_daemons }}",
                },
            ],
        }
    ]
    (tmp_path / "play.json").write_text(json.dumps(play))
    done = subprocess.run(
        # As extra vars: they win over the role's defaults, read here with include_vars.
        [playbook, "-i", str(tmp_path / "inventory.json"), "-e", json.dumps(extra or {}), str(tmp_path / "play.json")],
        env=_ansible_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return {h: json.loads((tmp_path / f"{h}.json").read_text()) for h in ("ctl", "node1", "login")}


def _debs(*names: str) -> list[str]:
    return [p for p in BUILD if Path(p).name.split("_")[0] in names]


@pytest.mark.slow  # a playbook run over three local hosts: ~8 s
def test_each_host_gets_what_its_roles_need_and_debian_slurm_goes(tmp_path: Path) -> None:
    # What a lab node starts with: Debian's 22.05 from the host, removed as much as installed.
    dpkg = (
        "ii slurmd_22.05.8-4+deb12u3\nii slurm-client_22.05.8-4+deb12u3\nii libpmix2_5.0.1-4\nrc slurmctld_22.05.8-4\n"
    )
    hosts = _evaluate(tmp_path, dpkg)
    assert hosts["ctl"]["names"] == ["slurm-smd", "slurm-smd-slurmctld", "slurm-smd-client", "slurm-smd-slurmdbd"]
    assert hosts["node1"]["names"] == [
        "slurm-smd",
        "slurm-smd-slurmd",
        "slurm-smd-client",
        "slurm-smd-libpmi0",
        "slurm-smd-libpmi2-0",
    ]
    assert hosts["login"]["names"] == ["slurm-smd", "slurm-smd-client"]
    assert hosts["ctl"]["todo"] == _debs("slurm-smd", "slurm-smd-client", "slurm-smd-slurmctld", "slurm-smd-slurmdbd")
    assert hosts["ctl"]["daemons"] == ["slurmctld", "slurmdbd"]
    assert hosts["node1"]["daemons"] == ["slurmd"] and hosts["login"]["daemons"] == []
    for host in hosts.values():  # libpmix2 is PMIx itself, not Slurm's; a removed package ("rc") is gone
        assert host["conflicts"] == ["slurmd", "slurm-client"]


@pytest.mark.slow  # two playbook runs: ~12 s
def test_nothing_to_do_at_the_build_version_and_an_upgrade_replaces_all(tmp_path: Path) -> None:
    at = "".join(f"ii {n}_24.11.5-1\n" for n in ("slurm-smd", "slurm-smd-client", "slurm-smd-sackd"))
    hosts = _evaluate(tmp_path, at, {"slurm_packages_sackd": True})
    assert hosts["login"]["names"] == ["slurm-smd", "slurm-smd-client", "slurm-smd-sackd"]
    assert hosts["login"]["todo"] == [] and hosts["login"]["conflicts"] == []
    assert hosts["login"]["daemons"] == ["sackd"]
    sackd, slurmctld = (tmp_path / "login-sackd.init").read_text(), (tmp_path / "ctl-slurmctld.init").read_text()
    # sackd writes no pid file: in the foreground as the Slurm user, its pid file start-stop-daemon's own.
    assert 'OPTIONS="-D $OPTIONS"' in sackd and "--make-pidfile --chuid slurm" in sackd
    assert "install -d -o slurm -g slurm -m 0755 /run/slurm;" in sackd
    assert "install -d -o slurm -g slurm -m 0755 /run/slurmctld;" in slurmctld and "-D $OPTIONS" not in slurmctld
    for script in tmp_path.glob("*.init"):
        subprocess.run(["sh", "-n", str(script)], check=True)
    older = at.replace("24.11.5-1", "24.11.4-1")
    hosts = _evaluate(tmp_path, older, {"slurm_packages_sackd": True, "enroot_pyxis_pyxis": True})
    assert hosts["login"]["todo"] == _debs("slurm-smd", "slurm-smd-client", "slurm-smd-dev", "slurm-smd-sackd")


@pytest.mark.parametrize("group", ["slurm_controller", "slurm_dbd", "slurm_compute", "slurm_login"])
def test_every_group_gets_the_base_package(group: str) -> None:
    import yaml

    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert defaults["slurm_packages_by_group"][group][0] == "slurm-smd"


@pytest.mark.slow  # a playbook over three local hosts: ~15 s
@pytest.mark.skipif(os.geteuid() != 0, reason="the role's copies are root's (owner: root)")
def test_packages_pass_through_a_private_folder_of_the_run(tmp_path: Path) -> None:
    """copy.yml for real over local connections: the build host's .deb files reach each host through a folder
    the run makes for itself on the deploying machine (under its TMPDIR, never a fixed /tmp path another run
    or user shares) and removes after."""
    playbook = _tool("ansible-playbook")
    build, tmp = tmp_path / "build", tmp_path / "tmp"
    build.mkdir()
    tmp.mkdir()
    debs = [build / "slurm-smd_24.11.5-1_amd64.deb", build / "slurm-smd-client_24.11.5-1_amd64.deb"]
    for deb in debs:
        deb.write_bytes(deb.name.encode() * 100)
    hosts = {name: {} for name in ("build", "node1", "node2")}
    inventory = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    inventory["all"]["hosts"] = hosts
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    variables = {
        "slurm_build_host": "build",
        "slurm_packages_build": [str(d) for d in debs],
        "slurm_packages_all_names": ["slurm-smd", "slurm-smd-client"],
        "slurm_packages_todo": [str(d) for d in debs],
        "slurm_packages_dir": f"{tmp_path}/got-{{{{ inventory_hostname }}}}",
    }
    play = [{"hosts": "node1,node2", "gather_facts": False, "vars": variables}]
    play[0]["tasks"] = [{"ansible.builtin.include_tasks": str(ROLE / "tasks" / "copy.yml")}]
    (tmp_path / "play.json").write_text(json.dumps(play))
    done = subprocess.run(
        [playbook, "-v", "-i", str(tmp_path / "inventory.json"), str(tmp_path / "play.json")],
        env={**_ansible_env(tmp_path), "TMPDIR": str(tmp)},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    for host in ("node1", "node2"):
        for deb in debs:
            assert (tmp_path / f"got-{host}" / deb.name).read_bytes() == deb.read_bytes()
    fetched = set(re.findall(r'"dest": "([^"]*hpckit-slurm-packages[^"]*)"', done.stdout))  # fetch's, with -v
    assert fetched and all(Path(dest).parent.parent == tmp for dest in fetched), fetched
    assert list(tmp.iterdir()) == []  # removed after the run
    role_text = "".join(p.read_text() for p in ROLE.rglob("*") if p.is_file())
    assert "/tmp/hpckit-slurm-packages" not in role_text
