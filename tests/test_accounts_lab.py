"""Accounts, users and QOS as code on the shared lab cluster: real slurmdbd, slurmctld enforcing them, jobs of
two Unix users made for the test. The cluster gets its own blueprint back at the end (its slurm.conf as the
other tests expect it; the accounts stay in slurmdbd, unenforced)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from hpckit.clusters import ClusterDir
from tests.labutil import Cluster, assert_no_change, hpckit, needs_lab

pytestmark = [pytest.mark.lab, needs_lab()]

HOSTS = ("ctl", "login", "node1", "node2", "node3", "node4")
USERS = {"alice": 4101, "bob": 4102}
ACCOUNTING = """
accounting:
  qos:
    high: {priority: 1000}
    low: {limits: {MaxJobsPerUser: 1}}
  accounts:
    research: {fairshare: 10}
    vision: {parent: research, fairshare: 30, qos: [normal, high, low]}
    nlp: {parent: research, fairshare: 70, qos: [normal, high, low]}
  users:
    alice: {default_account: vision}
    bob: {default_account: nlp}
"""
# The tree without nlp and bob, owned whole: both go.
SHRUNK = ACCOUNTING.replace("accounting:\n", "accounting:\n  owns_tree: true\n").replace(
    "    nlp: {parent: research, fairshare: 70, qos: [normal, high, low]}\n", ""
)
SHRUNK = SHRUNK.replace("    bob: {default_account: nlp}\n", "")


def sbatch(cluster: Cluster, user: str, *args: str) -> str:
    argv = ["runuser", "-u", user, "--", "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", *args]
    return str(cluster.on("login", *argv).stdout.strip().split(";")[0])


def squeue(cluster: Cluster, job: str, fmt: str) -> str:
    return str(cluster.on("login", "squeue", "--noheader", "--jobs", job, f"--format={fmt}").stdout.strip())


def wait_for(what: str, check: Callable[[], bool], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"still not: {what}"
        time.sleep(1)


@pytest.fixture(scope="module")
def accounted(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Path]]:
    """The shared cluster with the test's users on every host and ACCOUNTING deployed; its own blueprint
    deployed again afterwards, whatever happened."""
    for host in HOSTS:
        script = "; ".join(
            f"getent passwd {u} >/dev/null || useradd --no-create-home --uid {uid} --shell /bin/sh {u}"
            for u, uid in USERS.items()
        )
        cluster.on(host, "sh", "-c", script)
    path = tmp_path_factory.mktemp("accounts") / f"{cluster.name}.yaml"
    path.write_text(cluster.blueprint.read_text() + ACCOUNTING)
    try:
        done = hpckit("deploy", str(path), "--json", "-q", "--join-timeout", "90", state=cluster.state)
        assert done.rc == 0, done.stdout[-3000:] + done.stderr[-3000:]
        applied = done.json()["accounting"]
        assert isinstance(applied, dict) and len(applied["changes"]) >= 7 and not applied["error"], applied
        yield cluster, path
    finally:
        cluster.on("login", "scancel", "--user=alice", "--user=bob", check=False)
        restored = cluster.deploy()
        assert restored.rc == 0, restored.stdout[-3000:] + restored.stderr[-3000:]


def test_limits_priorities_and_shares_hold(accounted: tuple[Cluster, Path]) -> None:
    cluster, _ = accounted
    # MaxJobsPerUser=1 on the low QOS: bob's second job waits for the first, on an idle cluster
    first = sbatch(cluster, "bob", "--qos=low", "--wrap=sleep 300")
    second = sbatch(cluster, "bob", "--qos=low", "--wrap=sleep 300")
    wait_for("bob's first job running", lambda: squeue(cluster, first, "%T") == "RUNNING")
    wait_for("the limit named", lambda: squeue(cluster, second, "%T|%r") == "PENDING|QOSMaxJobsPerUserLimit")
    cluster.on("login", "scancel", first, second)
    # the high QOS starts first, submitted second: both wait behind a job that holds every node
    blocker = sbatch(cluster, "root", "-N4", "--exclusive", "--wrap=sleep 300")
    wait_for("the blocker running", lambda: squeue(cluster, blocker, "%T") == "RUNNING")
    low = sbatch(cluster, "alice", "-N4", "--exclusive", "--qos=low", "--wrap=sleep 300")
    high = sbatch(cluster, "alice", "-N4", "--exclusive", "--qos=high", "--wrap=sleep 300")
    assert int(squeue(cluster, high, "%Q")) > int(squeue(cluster, low, "%Q"))
    cluster.on("login", "scancel", blocker)
    wait_for(
        "one of alice's jobs running", lambda: "RUNNING" in (squeue(cluster, low, "%T"), squeue(cluster, high, "%T"))
    )
    assert (squeue(cluster, high, "%T"), squeue(cluster, low, "%T")) == ("RUNNING", "PENDING")
    cluster.on("login", "scancel", low, high)
    # the declared shares
    shares = cluster.on("login", "sshare", "--noheader", "--parsable2", "--all", "--format=Account,User,RawShares")
    rows = {tuple(f.strip() for f in line.split("|")[:2]): line.split("|")[2] for line in shares.stdout.splitlines()}
    assert (rows[("research", "")], rows[("vision", "")], rows[("nlp", "")]) == ("10", "30", "70"), shares.stdout


def test_a_deletion_names_the_running_job_and_is_refused(accounted: tuple[Cluster, Path]) -> None:
    cluster, path = accounted
    job = sbatch(cluster, "bob", "--wrap=sleep 300")
    wait_for("bob's job running", lambda: squeue(cluster, job, "%T") == "RUNNING")
    shrunk = path.with_name("shrunk.yaml")
    shrunk.write_text(cluster.blueprint.read_text() + SHRUNK)
    # what `hpckit plan` prints under "accounting:" too, without its check run of the playbook
    diff = hpckit("accounts", "diff", str(shrunk), "--cluster", cluster.name, state=cluster.state)
    assert diff.rc == 1, diff.stdout[-3000:] + diff.stderr[-3000:]
    lines = diff.stdout.splitlines()
    at = lines.index("delete account nlp  (may hold or stop jobs)")
    assert lines[at + 2] == f"    affects 1 job(s): {job} (bob, running)", lines[at:]
    records = ClusterDir.of(cluster.name, cluster.state).deployments
    before = sorted(records.iterdir())
    done = hpckit("deploy", str(shrunk), "-q", state=cluster.state)
    assert done.rc == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert "deletions refused while jobs run or wait" in done.stderr, done.stderr
    assert f"delete account nlp (jobs {job})" in done.stderr
    assert sorted(records.iterdir()) == before  # refused before the playbook: no run started
    assert cluster.on("login", "sacctmgr", "--noheader", "--parsable2", "show", "account", "nlp").stdout.strip()
    cluster.on("login", "scancel", job)


def test_the_exported_tree_deploys_as_no_change(accounted: tuple[Cluster, Path]) -> None:
    cluster, path = accounted
    exported = hpckit("accounts", "export", "--cluster", cluster.name, state=cluster.state)
    assert exported.rc == 0 and not exported.stderr, exported.stderr
    section = yaml.safe_load(exported.stdout)["accounting"]
    assert set(section["accounts"]) == {"research", "vision", "nlp"} and set(section["users"]) == {"alice", "bob"}
    adopted = path.with_name("adopted.yaml")
    adopted.write_text(cluster.blueprint.read_text() + exported.stdout)
    done = hpckit("deploy", str(adopted), "--json", "-q", "--join-timeout", "90", state=cluster.state)
    assert_no_change(done)
    assert done.json()["accounting"] == {"changes": [], "unmanaged": [], "cancelled_jobs": [], "error": ""}
