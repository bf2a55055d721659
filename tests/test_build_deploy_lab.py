"""install: build on the lab: blueprints/lab-built.yaml (controller, login, node[1-4], accounting) deployed with
SchedMD's Slurm 24.11.5, built from the tarball in hpckit's source cache on the lab's controller with SchedMD's
own Debian packaging. Every node reports 24.11.5, a job runs across the four nodes from the login node and sacct
shows it, the record says what was built and installed, the box itself keeps its own Slurm (each node's /usr is
its own), and a second deploy builds and changes nothing.

With hpckit's package cache empty (a fresh CI machine) the first deploy builds on the lab's controller, or waits
for scripts/build-slurm.sh's build when scripts/test.sh started one: the whole file took 1304 s so on this 2-core
box under load 4-9 (the build itself 905 s at load 2-5), which is why the deploy has an hour. With the build
cached, the deploy installs the packages and the file takes a few minutes.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.labutil import REPO, CliRun, Cluster, assert_no_change, hpckit, needs_built_slurm, needs_lab

pytestmark = [pytest.mark.lab, needs_lab(), needs_built_slurm("24.11.5"), pytest.mark.built_slurm]
NAME, NET, BRIDGE = "hpkbd", "10.77.193", "hpkp3"
COMPUTE = ["node1", "node2", "node3", "node4"]
BUILD_TIMEOUT_S = 3600.0


def blueprint(tmp: Path) -> Path:
    text = (REPO / "blueprints" / "lab-built.yaml").read_text()
    text = text.replace("name: labbuilt\n", f"name: {NAME}\n", 1).replace('net: "10.77.1"', f'net: "{NET}"')
    path = tmp / f"{NAME}.yaml"
    path.write_text(text.replace("bridge: hpck1", f"bridge: {BRIDGE}"))
    return path


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, CliRun]]:
    tmp = tmp_path_factory.mktemp("built")
    cluster = Cluster(NAME, blueprint(tmp), tmp / "state")
    deploy = ("deploy", str(cluster.blueprint), "--json", "-q", "--join-timeout", "90")
    try:
        done = hpckit(*deploy, state=cluster.state, timeout=BUILD_TIMEOUT_S)
        assert done.rc == 0, done.stdout[-3000:] + done.stderr[-3000:]
        again = hpckit(*deploy, state=cluster.state)
        yield cluster, again
    finally:
        cluster.destroy()


def test_every_node_runs_the_built_release(lab: tuple[Cluster, CliRun]) -> None:
    cluster, _ = lab
    out = cluster.on("login", "sinfo", "-h", "-N", "-o", "%N %v").stdout
    versions = dict(line.split() for line in out.splitlines())
    assert versions == dict.fromkeys(COMPUTE, "24.11.5"), out
    for host in ("ctl", "login"):
        assert cluster.on(host, "sinfo", "-V").stdout.strip() == "slurm 24.11.5"
    assert cluster.on("ctl", "slurmctld", "-V").stdout.strip() == "slurm 24.11.5"


def test_a_job_runs_on_four_nodes_and_accounting_has_it(lab: tuple[Cluster, CliRun]) -> None:
    cluster, _ = lab
    done = cluster.on("login", "srun", "-N4", "-J", "built", "-t", "1", "hostname", timeout=120)
    assert sorted(done.stdout.split()) == COMPUTE, done.describe()
    jobs = cluster.on("login", "sacct", "-X", "-n", "-P", "--name", "built", "-o", "JobName,State,NNodes").stdout
    assert "built|COMPLETED|4" in jobs.splitlines(), jobs


def test_the_record_says_what_was_built(lab: tuple[Cluster, CliRun]) -> None:
    cluster, _ = lab
    versions: dict[str, Any] = json.loads((cluster.state / "clusters" / NAME / "current" / "versions.json").read_text())
    assert versions["slurm"] == "24.11.5"
    built = versions["slurm_install"]
    assert built["mode"] == "build" and built["version"] == "24.11.5" and built["build_host"] == "ctl"
    assert "slurm-smd-slurmd_24.11.5-1_amd64.deb" in built["packages"]
    assert built["gpu_detection"] == ("AutoDetect=nvml" if built["nvml"] else "AutoDetect=nvidia")
    assert Path(built["build_dir"], "manifest.json").is_file()  # the lab's controller sees this machine's cache


def test_the_box_keeps_its_own_slurm(lab: tuple[Cluster, CliRun]) -> None:
    cluster, _ = lab
    assert "slurm-smd-slurmd" in cluster.on("node1", "dpkg-query", "-W", "slurm-smd-slurmd").stdout
    box = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "slurm-smd-slurmd"], capture_output=True, text=True)
    assert "install ok installed" not in box.stdout  # dpkg inside a node changed that node only


def test_a_second_deploy_builds_and_changes_nothing(lab: tuple[Cluster, CliRun]) -> None:
    cluster, again = lab
    assert_no_change(again)
    events = (cluster.state / "clusters" / NAME / "current" / "events.jsonl").read_text()
    assert "Build the packages (several minutes)" not in events
