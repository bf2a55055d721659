"""`hpckit deploy` on the real lab: a working Slurm cluster, idempotent, failure-tolerant, secret-free.

One module-scoped lab; the tests run in file order and build on each other.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hpckit.lab import provider
from tests.labutil import CliRun, Cluster, hpckit, lab_blueprint, needs_lab

pytestmark = [pytest.mark.lab, needs_lab()]
# This module's own lab (not the shared one of HPCKIT_TEST_LAB, which may run in the same session); two
# checkouts testing at once set HPCKIT_TEST_DEPLOY_LAB=NAME,NET,BRIDGE.
NAME, NET, BRIDGE = os.environ.get("HPCKIT_TEST_DEPLOY_LAB", "labtest,10.77.7,hpckt7").split(",")
HOSTS = ["ctl", "login", "node1", "node2", "node3", "node4"]


class Lab(Cluster):
    first: CliRun | None = None

    def on(self, host: str, *argv: str, check: bool = True, timeout: float = 60) -> Any:
        return super().on(host, *argv, check=check, timeout=timeout).stdout


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    tmp = tmp_path_factory.mktemp("deploy")
    lab = Lab(NAME, lab_blueprint(tmp, NAME, NET, BRIDGE), tmp / "state")
    try:
        lab.first = lab.deploy()
        yield lab
    finally:
        lab.destroy()


def test_deploy_builds_a_cluster_whose_nodes_join(lab: Lab) -> None:
    first = lab.first
    assert first is not None
    assert first.rc == 0, first.stdout + first.stderr
    summary = first.json()
    assert summary["ok"] is True
    join = summary["join"]
    assert isinstance(join, dict) and sorted(join["joined"]) == ["node1", "node2", "node3", "node4"]


def test_jobs_through_the_login_node(lab: Lab) -> None:
    login = lab.login()
    names = login.run(["srun", "-N4", "hostname"], timeout=60)
    assert names.ok, names.describe()
    assert sorted(set(names.stdout.split())) == ["node1", "node2", "node3", "node4"]
    test_only = login.run(["sbatch", "--test-only", "-N2", "--wrap", "hostname"], timeout=30)
    assert test_only.ok and "to start at" in test_only.stderr, test_only.describe()
    gpus = login.run(["srun", "-N1", "--gpus-per-node=2", "printenv", "CUDA_VISIBLE_DEVICES"], timeout=60)
    assert gpus.ok and gpus.stdout.strip() == "0,1", gpus.describe()
    job = login.run(["sbatch", "--parsable", "-N1", "--wrap", "hostname"], timeout=30)
    assert job.ok, job.describe()
    job_id = job.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 60
    state = ""
    while time.monotonic() < deadline:
        acct = login.run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State"], timeout=30)
        state = acct.stdout.strip()
        if state.endswith("|COMPLETED"):
            break
        time.sleep(1)
    assert state == f"{job_id}|COMPLETED"


def test_munge_key_is_private_on_every_host(lab: Lab) -> None:
    for host in HOSTS:
        assert lab.on(host, "stat", "-c", "%a %U %G", "/etc/munge/munge.key").strip() == "400 munge munge", host


def test_second_deploy_changes_nothing(lab: Lab) -> None:
    again = lab.deploy()
    assert again.rc == 0, again.stdout + again.stderr
    hosts = again.json()["hosts"]
    assert isinstance(hosts, dict) and set(hosts) == set(HOSTS)
    assert {h: t["changed"] for h, t in hosts.items()} == dict.fromkeys(HOSTS, 0)


def test_db_password_is_in_no_log_record_or_artifact(lab: Lab) -> None:
    password = lab.on("ctl", "cat", "/etc/slurm/.slurmdbd-db-password").strip()
    assert len(password) >= 16
    assert lab.on("ctl", "stat", "-c", "%a", "/etc/slurm/.slurmdbd-db-password").strip() == "600"
    leaked = [p for p in lab.state.rglob("*") if p.is_file() and password in p.read_text(errors="replace")]
    assert leaked == []
    for log in ("/var/log/slurm/slurmctld.log", "/var/log/slurm/slurmdbd.log"):
        assert password not in lab.on("ctl", "cat", log)
    assert not list((lab.state / "tmp").glob("hpckit-runner-*")), "runner data dirs must not outlive a run"


def test_unreachable_node_fails_alone_then_converges(lab: Lab) -> None:
    provider.node_stop_sshd(NAME, "node3")
    # Sessions outlive the listener (Ansible keeps an SSH master per host): a dead node has neither.
    provider.lab_exec(NAME, "node3", ["pkill", "-x", "sshd"])
    try:
        broken = lab.deploy()
    finally:
        provider.node_start_sshd(NAME, "node3")
    assert broken.rc == 1
    summary = broken.json()
    failures = summary["failures"]
    assert isinstance(failures, list) and failures and all(f.startswith("node3: unreachable") for f in failures)
    hosts = summary["hosts"]
    assert isinstance(hosts, dict)
    for host in HOSTS:
        if host != "node3":
            assert hosts[host]["failed"] == 0 and hosts[host]["unreachable"] == 0, host
            assert hosts[host]["ok"] > 0, host
    healed = lab.deploy()
    assert healed.rc == 0, healed.stdout + healed.stderr


def test_plan_shows_labelled_diffs_and_changes_nothing(lab: Lab) -> None:
    clean = hpckit("plan", str(lab.blueprint), "--json", state=lab.state)
    assert clean.rc == 0, clean.stdout + clean.stderr
    assert clean.json()["changes"] == []
    live = lab.on("ctl", "cat", "/etc/slurm/slurm.conf")
    edited = lab.blueprint.with_name("edited.yaml")
    edited.write_text(lab.blueprint.read_text().replace("batch_sched_delay=0", "batch_sched_delay=1"))
    plan = hpckit("plan", str(edited), "--json", state=lab.state)
    assert plan.rc == 0, plan.stdout + plan.stderr
    report = plan.json()
    assert report["changes"] == [
        {"file": "/etc/slurm/slurm.conf", "what": "schedulerparameters changed", "action": "live scontrol reconfigure"}
    ]
    diffs = report["diffs"]
    assert isinstance(diffs, list) and {d["host"] for d in diffs} == set(HOSTS)
    assert "batch_sched_delay=1" in diffs[0]["after"] and "batch_sched_delay=0" in diffs[0]["before"]
    assert lab.on("ctl", "cat", "/etc/slurm/slurm.conf") == live


def test_destroy_leaves_nothing_behind(lab: Lab) -> None:
    status = provider.lab_status(NAME)
    pids = [n.pid for n in status.nodes if n.pid]
    done = hpckit("destroy", str(lab.blueprint), state=lab.state)
    assert done.rc == 0, done.stderr
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    links = Path("/proc/net/dev").read_text()
    assert not re.search(rf"\b{BRIDGE}", links)
    assert f"/lab/{NAME}/" not in Path("/proc/mounts").read_text()
