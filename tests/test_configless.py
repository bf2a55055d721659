"""slurm.configless: validation, slurm.conf's SlurmctldParameters, and which hosts hold which config (what
`hpckit expand` writes and the roles' slurm_common_holds_conf decide alike)."""

from __future__ import annotations

from pathlib import Path

import yaml

from hpckit.blueprint import parse_blueprint
from hpckit.clusters import SshAccess
from hpckit.deploy.expand import expand
from hpckit.deploy.playvars import build_vars
from hpckit.deploy.render import Inventory, host_context, render
from tests.test_blueprint import GOOD, problems

CPU_ONLY = GOOD.replace(", gpus: {type: lab, count: 4}", "")


def configless(text: str, conf: str = "") -> str:
    return text + "slurm:\n  configless: true\n" + conf


def manifest(tmp: Path, text: str) -> dict[str, str]:
    out = tmp / "out"
    expand(parse_blueprint(text, "bp.yaml"), out)
    files = yaml.safe_load((out / "files.yml").read_text())["files"]
    return {e["path"]: e["hosts"] for e in files}


def test_configless_is_off_by_default_and_renders_nothing_then(tmp_path: Path) -> None:
    assert parse_blueprint(CPU_ONLY, "bp.yaml").slurm.configless is False
    files = manifest(tmp_path, CPU_ONLY)
    assert files["files/all/etc/slurm/slurm.conf"] == "ctl,login,node[1-2]"
    assert "files/partition_gpu/etc/slurm/cgroup.conf" in files
    conf = (tmp_path / "out" / "files" / "all" / "etc" / "slurm" / "slurm.conf").read_text()
    assert "SlurmctldParameters" not in conf


def test_only_the_controller_and_login_nodes_hold_slurm_conf(tmp_path: Path) -> None:
    files = manifest(tmp_path, configless(CPU_ONLY))
    assert files["files/all/etc/slurm/slurm.conf"] == "ctl,login"
    # cgroup.conf is served by slurmctld: on the controller, none on the nodes.
    assert files["files/ctl/etc/slurm/cgroup.conf"] == "ctl"
    assert not [p for p in files if p.startswith("files/partition_gpu/etc/slurm/")], files
    conf = (tmp_path / "out" / "files" / "all" / "etc" / "slurm" / "slurm.conf").read_text().splitlines()
    assert "SlurmctldParameters=enable_configless" in conf


def test_the_blueprint_s_own_slurmctld_parameters_are_kept() -> None:
    bp = parse_blueprint(configless(CPU_ONLY, "  conf:\n    SlurmctldParameters: idle_on_node_suspend\n"), "bp.yaml")
    inventory, extravars = build_vars(bp, SshAccess("root"))
    assert extravars["slurm_configless"] is True
    conf = render("slurm_common", "slurm.conf.j2", host_context(Inventory(inventory), extravars, "ctl", "slurm_common"))
    lines = [line for line in conf.splitlines() if line.lower().startswith("slurmctldparameters")]
    assert lines == ["SlurmctldParameters=idle_on_node_suspend,enable_configless"], lines
    # Already there: not added twice.
    bp = parse_blueprint(configless(CPU_ONLY, "  conf:\n    SlurmctldParameters: enable_configless\n"), "bp.yaml")
    inventory, extravars = build_vars(bp, SshAccess("root"))
    conf = render("slurm_common", "slurm.conf.j2", host_context(Inventory(inventory), extravars, "ctl", "slurm_common"))
    assert [line for line in conf.splitlines() if "Slurmctld" in line and "Parameters" in line] == [
        "SlurmctldParameters=enable_configless"
    ]


def test_the_nodes_slurmd_options_name_the_controller() -> None:
    bp = parse_blueprint(configless(CPU_ONLY), "bp.yaml")
    inventory, extravars = build_vars(bp, SshAccess("root"))
    text = render(
        "slurm_compute", "slurmd.default.j2", host_context(Inventory(inventory), extravars, "node1", "slurm_compute")
    )
    assert 'SLURMD_OPTIONS="--conf-server 10.77.0.10:6817"' in text.splitlines()
    assert "CONFDIR=/var/spool/slurmd/conf-cache" in text.splitlines()


def test_configless_with_gpu_nodes_is_refused_at_the_line() -> None:
    found = problems(configless(GOOD))
    assert len(found) == 1 and found[0].startswith("bp.yaml:10:") and "configless" in found[0], found
