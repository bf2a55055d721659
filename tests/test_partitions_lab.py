"""Partition settings on the real Slurm of a small lab: memory defaults from the declared hardware (two 1-CPU
jobs share a 2-CPU node), a node in two partitions, DefaultTime, OverSubscribe and AllowAccounts.

One module-scoped lab of two nodes: `gpu` declares node[1-2] (2 CPUs, 1000 MB, 4 lab GPUs each); `debug`
takes node1 from it, with its own limits.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.labutil import Cluster, deployed, lab_blueprint, needs_lab, two_nodes

pytestmark = [pytest.mark.lab, needs_lab()]
NAME, NET, BRIDGE = "partlab", "10.77.180", "hpbp0"
DEBUG = """\
  - name: debug
    nodes: node1
    max_time: "30"
    default_time: "5"
    oversubscribe: NO
    allow_accounts: [root]
"""


def blueprint(tmp: Path) -> Path:
    path = lab_blueprint(tmp, NAME, NET, BRIDGE)
    text = two_nodes(path.read_text())
    text = text.replace("\nfilesystems:", "\n" + DEBUG + "filesystems:", 1)
    assert DEBUG in text
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("partitions")
    with deployed(Cluster(NAME, blueprint(tmp), tmp / "state")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def login(lab: Cluster) -> Iterator[Any]:
    transport = lab.login()
    yield transport
    close = getattr(transport, "close", None)
    if close is not None:
        close()


def run(login: Any, *argv: str, ok: bool = True) -> Any:
    done = login.run(list(argv), timeout=60)
    if ok:
        assert done.ok, done.describe()
    return done


def fields(text: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+)=(\S*)", text))


def test_two_one_cpu_jobs_run_at_once_on_a_two_cpu_node(login: Any) -> None:
    line = run(login, "scontrol", "show", "partition", "gpu", "-o").stdout
    # 1000 MB over 2 CPUs, over 4 GPUs (scontrol lists DefMemPerGPU among JobDefaults=KEY=value,...)
    assert fields(line)["DefMemPerCPU"] == "500" and re.search(r"\bJobDefaults=\S*DefMemPerGPU=250\b", line), line
    jobs = [
        run(login, "sbatch", "--parsable", "-p", "gpu", "-w", "node1", "-n1", "-c1", "-t", "5", "--wrap", "sleep 120")
        .stdout.strip()
        .split(";")[0]
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 60
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            out = run(login, "squeue", "-h", "-j", ",".join(jobs), "-o", "%i|%T|%N").stdout  # %N: "" while pending
            states = {job: f"{state} {node}" for job, state, node in (line.split("|") for line in out.splitlines())}
            if len(states) == 2 and all(s == "RUNNING node1" for s in states.values()):
                break
            time.sleep(1)
        assert len(states) == 2 and all(s == "RUNNING node1" for s in states.values()), states
        job = fields(run(login, "scontrol", "show", "job", jobs[0], "-o").stdout)
        assert job["MinMemoryCPU"] == "500M", job
    finally:
        run(login, "scancel", *jobs, ok=False)


def test_a_node_is_in_both_partitions(login: Any) -> None:
    out = run(login, "sinfo", "-h", "-N", "-o", "%N %P").stdout
    pairs = sorted(tuple(line.split()) for line in out.splitlines())
    assert pairs == [("node1", "debug"), ("node1", "gpu*"), ("node2", "gpu*")], pairs
    # One NodeName line for node1 (declared once), with the hardware of its declaring partition.
    node = fields(run(login, "scontrol", "show", "node", "node1", "-o").stdout)
    assert (node["CPUTot"], node["RealMemory"], node["Partitions"]) == ("2", "1000", "gpu,debug"), node


def test_the_debug_partition_has_its_own_limits(login: Any) -> None:
    debug = fields(run(login, "scontrol", "show", "partition", "debug", "-o").stdout)
    wanted = {"MaxTime": "00:30:00", "DefaultTime": "00:05:00", "AllowAccounts": "root", "OverSubscribe": "NO"}
    assert {k: debug.get(k) for k in wanted} == wanted, debug
    job = run(login, "sbatch", "--parsable", "-p", "debug", "-H", "--wrap", "true").stdout.strip().split(";")[0]
    try:
        limits = fields(run(login, "scontrol", "show", "job", job, "-o").stdout)
        assert limits["TimeLimit"] == "00:05:00", limits  # DefaultTime: the job set none
    finally:
        run(login, "scancel", job, ok=False)
    # An account the partition does not allow (an unknown one would fall back to root's default account, as
    # accounting does not enforce associations here): refused at submission or left pending, never run.
    run(login, "sacctmgr", "-i", "add", "account", "other")
    run(login, "sacctmgr", "-i", "add", "user", "root", "account=other")
    other = run(login, "sbatch", "--parsable", "-p", "debug", "-A", "other", "-t", "1", "--wrap", "true", ok=False)
    if not other.ok:
        assert "account" in other.stderr.lower(), other.describe()
        return
    job = other.stdout.strip().split(";")[0]
    try:
        time.sleep(3)  # a scheduling pass (the lab's sched_min_interval is 0.1 s)
        state = fields(run(login, "scontrol", "show", "job", job, "-o").stdout)
        assert (state["Account"], state["JobState"]) == ("other", "PENDING"), state
        assert "account_not_permitted" in state["Reason"].lower(), state
    finally:
        run(login, "scancel", job, ok=False)
