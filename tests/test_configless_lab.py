"""Slurm's configless mode on a small lab (controller, login, node[1-2], no GPUs): the compute nodes hold no
slurm.conf, cgroup.conf or gres.conf (slurmd fetches them from slurmctld), jobs run across both nodes from the
login node, slurmctld runs with enable_configless, a second deploy changes nothing, and `plan` shows a slurm.conf
change on the controller and the login node only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.labutil import Cluster, assert_no_change, hpckit, lab_blueprint, needs_lab

pytestmark = [pytest.mark.lab, needs_lab()]
NAME, NET, BRIDGE = "hqcl", "10.77.126", "hqcl0"
GPUS = "      gpus: {type: lab, count: $(vars.gpus_per_node)}\n"


def blueprint(tmp: Path) -> Path:
    path = lab_blueprint(tmp, NAME, NET, BRIDGE)
    text = path.read_text().replace("node[1-4]", "node[1-2]").replace("$(vars.net).[21-24]", "$(vars.net).[21-22]")
    assert GPUS in text and "  accounting: true\n" in text
    text = text.replace(GPUS, "").replace("  accounting: true\n", "  accounting: false\n  configless: true\n", 1)
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Any]]:
    tmp = tmp_path_factory.mktemp("configless")
    cluster = Cluster(NAME, blueprint(tmp), tmp / "state")
    try:
        done = cluster.deploy()
        assert done.rc == 0, done.stdout[-3000:] + done.stderr[-3000:]
        again = cluster.deploy()
        yield cluster, again
    finally:
        cluster.destroy()


def test_compute_nodes_hold_no_slurm_configs(lab: tuple[Cluster, Any]) -> None:
    cluster, _ = lab
    for node in ("node1", "node2"):
        found = cluster.on(node, "ls", "/etc/slurm", check=True).stdout.split()
        assert not {"slurm.conf", "cgroup.conf", "gres.conf"} & set(found), (node, found)
        # slurmd fetched them from slurmctld into its cache.
        cache = cluster.on(node, "ls", "/var/spool/slurmd/conf-cache").stdout.split()
        assert "slurm.conf" in cache, (node, cache)
    for host in ("ctl", "login"):
        cluster.on(host, "test", "-f", "/etc/slurm/slurm.conf")


def test_jobs_run_on_both_nodes_from_the_login_node(lab: tuple[Cluster, Any]) -> None:
    cluster, _ = lab
    done = cluster.on("login", "srun", "-N2", "-t", "1", "hostname", timeout=90)
    assert sorted(done.stdout.split()) == ["node1", "node2"], done.describe()


def test_slurmctld_runs_configless(lab: tuple[Cluster, Any]) -> None:
    cluster, _ = lab
    out = cluster.on("login", "scontrol", "show", "config").stdout
    line = next((x for x in out.splitlines() if x.startswith("SlurmctldParameters")), "")
    assert "enable_configless" in line, line


def test_a_second_deploy_changes_nothing(lab: tuple[Cluster, Any]) -> None:
    _, again = lab
    assert_no_change(again)


def test_plan_shows_slurm_conf_on_the_controller_and_login_only(lab: tuple[Cluster, Any]) -> None:
    cluster, _ = lab
    edited = cluster.blueprint.with_name("edited.yaml")
    edited.write_text(cluster.blueprint.read_text().replace("batch_sched_delay=0", "batch_sched_delay=1"))
    plan = hpckit("plan", str(edited), "--json", state=cluster.state)
    assert plan.rc == 0, plan.stdout + plan.stderr
    diffs = plan.json()["diffs"]
    assert isinstance(diffs, list)
    assert sorted(d["host"] for d in diffs if d["path"] == "/etc/slurm/slurm.conf") == ["ctl", "login"], diffs
