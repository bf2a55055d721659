"""slurm.configless and slurm.auth: slurm on SchedMD's Slurm 24.11.5 built from source: blueprints/lab-built.yaml
(controller, login, node[1-4], accounting) with `configless: true` and `auth: slurm`, built from the tarball in
hpckit's source cache on the lab's controller with SchedMD's own Debian packaging. Every node reports 24.11.5, a
job runs across the four nodes from the login node and sacct shows it, the record says what was built and
installed, the box itself keeps its own Slurm (each node's /usr is its own), and a second deploy builds and
changes nothing. Configless: the compute nodes hold no slurm.conf (slurmd fetched it from slurmctld). auth/slurm:
no munged runs anywhere, slurmctld reports AuthType=auth/slurm, sackd runs on the login node, every host holds
slurm.key 0600 owned by slurm, and the key's bytes appear neither in the deployment record's folder nor in
what the deploys printed. (The plain built variant, on munge, is deployed by tests/test_rolling_upgrade_lab.py.)

With hpckit's package cache empty (a fresh CI machine) the first deploy builds on the lab's controller, or waits
for scripts/build-slurm.sh's build when scripts/test.sh started one: the build alone took 905 s on this 2-core
box at load 2-5, which is why the deploy has an hour. With the build cached the whole file took 112 s (twice,
the second time beside a unit test run) on this 2-core box.
"""

from __future__ import annotations

import base64
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
HOSTS = ["ctl", "login", *COMPUTE]
BUILD_TIMEOUT_S = 3600.0
KEY = "/etc/slurm/slurm.key"
SLURM = "  install: build\n"
# The cluster, the second deploy, and both deploys' output.
Lab = tuple[Cluster, CliRun, list[CliRun]]


def blueprint(tmp: Path) -> Path:
    text = (REPO / "blueprints" / "lab-built.yaml").read_text()
    text = text.replace("name: labbuilt\n", f"name: {NAME}\n", 1).replace('net: "10.77.1"', f'net: "{NET}"')
    assert SLURM in text
    text = text.replace(SLURM, SLURM + "  configless: true\n  auth: slurm\n", 1)
    path = tmp / f"{NAME}.yaml"
    path.write_text(text.replace("bridge: hpck1", f"bridge: {BRIDGE}"))
    return path


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    tmp = tmp_path_factory.mktemp("built")
    cluster = Cluster(NAME, blueprint(tmp), tmp / "state")
    deploy = ("deploy", str(cluster.blueprint), "--json", "-q", "--join-timeout", "90")
    try:
        done = hpckit(*deploy, state=cluster.state, timeout=BUILD_TIMEOUT_S)
        assert done.rc == 0, done.stdout[-3000:] + done.stderr[-3000:]
        again = hpckit(*deploy, state=cluster.state)
        yield cluster, again, [done, again]
    finally:
        cluster.destroy()


def test_every_node_runs_the_built_release(lab: Lab) -> None:
    cluster, _, _ = lab
    out = cluster.on("login", "sinfo", "-h", "-N", "-o", "%N %v").stdout
    versions = dict(line.split() for line in out.splitlines())
    assert versions == dict.fromkeys(COMPUTE, "24.11.5"), out
    for host in ("ctl", "login"):
        assert cluster.on(host, "sinfo", "-V").stdout.strip() == "slurm 24.11.5"
    assert cluster.on("ctl", "slurmctld", "-V").stdout.strip() == "slurm 24.11.5"


def test_a_job_runs_on_four_nodes_and_accounting_has_it(lab: Lab) -> None:
    cluster, _, _ = lab
    done = cluster.on("login", "srun", "-N4", "-J", "built", "-t", "1", "hostname", timeout=120)
    assert sorted(done.stdout.split()) == COMPUTE, done.describe()
    jobs = cluster.on("login", "sacct", "-X", "-n", "-P", "--name", "built", "-o", "JobName,State,NNodes").stdout
    assert "built|COMPLETED|4" in jobs.splitlines(), jobs


def test_the_record_says_what_was_built(lab: Lab) -> None:
    cluster, _, _ = lab
    versions: dict[str, Any] = json.loads((cluster.state / "clusters" / NAME / "current" / "versions.json").read_text())
    assert versions["slurm"] == "24.11.5"
    built = versions["slurm_install"]
    assert built["mode"] == "build" and built["version"] == "24.11.5" and built["build_host"] == "ctl"
    assert "slurm-smd-slurmd_24.11.5-1_amd64.deb" in built["packages"]
    assert built["gpu_detection"] == ("AutoDetect=nvml" if built["nvml"] else "AutoDetect=nvidia")
    assert Path(built["build_dir"], "manifest.json").is_file()  # the lab's controller sees this machine's cache


def test_the_box_keeps_its_own_slurm(lab: Lab) -> None:
    cluster, _, _ = lab
    assert "slurm-smd-slurmd" in cluster.on("node1", "dpkg-query", "-W", "slurm-smd-slurmd").stdout
    box = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "slurm-smd-slurmd"], capture_output=True, text=True)
    assert "install ok installed" not in box.stdout  # dpkg inside a node changed that node only


def test_a_second_deploy_builds_and_changes_nothing(lab: Lab) -> None:
    cluster, again, _ = lab
    assert_no_change(again)
    events = (cluster.state / "clusters" / NAME / "current" / "events.jsonl").read_text()
    assert "Build the packages (several minutes)" not in events


def test_compute_nodes_hold_no_slurm_conf(lab: Lab) -> None:
    cluster, _, _ = lab
    for node in COMPUTE:
        found = cluster.on(node, "ls", "/etc/slurm", check=True).stdout.split()
        assert "slurm.conf" not in found, (node, found)
        cache = cluster.on(node, "ls", "/var/spool/slurmd/conf-cache").stdout.split()
        assert "slurm.conf" in cache, (node, cache)  # slurmd fetched it from slurmctld
    config = cluster.on("login", "scontrol", "show", "config").stdout
    assert any(li.startswith("SlurmctldParameters") and "enable_configless" in li for li in config.splitlines())


def test_auth_slurm_without_munge(lab: Lab) -> None:
    cluster, _, _ = lab
    config = dict(
        (k.strip(), v.strip())
        for k, _, v in (
            li.partition("=") for li in cluster.on("login", "scontrol", "show", "config").stdout.splitlines()
        )
    )
    assert (config["AuthType"], config["CredType"]) == ("auth/slurm", "cred/slurm"), config
    dbd = cluster.on("ctl", "grep", "^AuthType=", "/etc/slurm/slurmdbd.conf").stdout.strip()
    assert dbd == "AuthType=auth/slurm"  # and sacct answers (above): slurmdbd runs on it
    for host in HOSTS:
        assert cluster.on(host, "pgrep", "-x", "munged", check=False).stdout.strip() == "", host


def test_sackd_runs_on_the_login_node(lab: Lab) -> None:
    cluster, _, _ = lab
    pids = cluster.on("login", "pgrep", "-x", "sackd").stdout.split()
    assert len(pids) == 1, pids
    assert cluster.on("login", "ps", "-o", "user=", "-p", pids[0]).stdout.strip() == "slurm"


def test_every_host_holds_the_key_for_slurm_only(lab: Lab) -> None:
    cluster, _, _ = lab
    sums = set()
    for host in HOSTS:
        assert cluster.on(host, "stat", "-c", "%U:%G %a", KEY).stdout.strip() == "slurm:slurm 600", host
        sums.add(cluster.on(host, "sha256sum", KEY).stdout.split()[0])
    assert len(sums) == 1, sums  # one cluster key


def test_the_key_is_in_neither_the_record_nor_the_output(lab: Lab) -> None:
    cluster, _, runs = lab
    key = base64.b64decode(cluster.on("ctl", "base64", "-w0", KEY).stdout.strip())
    assert len(key) == 1024
    # The bytes themselves and base64 (Ansible's form) of a stretch of them, at each of the three offsets.
    needles = [key[:32], *(base64.b64encode(key[i:])[4:40] for i in range(3))]
    for path in (p for p in cluster.state.rglob("*") if p.is_file()):
        data = path.read_bytes()
        assert not [n for n in needles if n in data], path
    for run in runs:
        out = (run.stdout + run.stderr).encode()
        assert not [n for n in needles if n in out]
