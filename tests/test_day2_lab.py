"""Day 2 on the real lab: two nodes added to a running cluster while a job runs.

`hpckit plan` labels the change before it runs (new NodeName lines: slurmctld and every slurmd restart,
as Slurm 22.05 requires) and changes nothing; `hpckit deploy` then starts only the new machines,
restarts the daemons, and the job, which spans the whole deploy, finishes with its output intact.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hpckit.lab import provider
from tests.labutil import Cluster, hpckit, lab_blueprint, needs_lab

pytestmark = [pytest.mark.lab, needs_lab()]
NAME, NET, BRIDGE = "day2ci", "10.77.12", "hpckd12"
CONF = "/etc/slurm/slurm.conf"
# The job waits for this file (at least a minute), so it is surely running through the whole extension.
JOB = """\
#!/bin/sh
#SBATCH -N2 -o /shared/day2/job-%j.out
srun -N2 sh -c 't=0; echo "start $(hostname)"
  while [ $t -lt 60 ] || [ ! -e /shared/day2/go ]; do [ $t -lt 420 ] || exit 3; sleep 1; t=$((t+1)); done
  echo "end $(hostname)"'
echo batch-done
"""


def _blueprint(tmp: Path, compute: int) -> Path:
    """The lab blueprint without accounting (a shorter deploy) and with node[1-N]."""
    text = lab_blueprint(tmp, NAME, NET, BRIDGE).read_text()
    text = text.replace("accounting: true", "accounting: false")
    text = text.replace("nodes: node[1-4]", f"nodes: node[1-{compute}]").replace(".[21-24]", f".[21-{20 + compute}]")
    path = tmp / f"{NAME}-{compute}.yaml"
    path.write_text(text)
    return path


def _pid(lab: Cluster, host: str, daemon: str) -> str:
    pid = lab.on(host, "pidof", daemon).stdout.strip()
    assert pid, f"{daemon} does not run on {host}"
    return str(pid)


def _daemon_pids(lab: Cluster) -> dict[str, str]:
    return {"ctl": _pid(lab, "ctl", "slurmctld"), "node1": _pid(lab, "node1", "slurmd")}


def _job_state(lab: Cluster, job_id: str) -> dict[str, str]:
    text = lab.on("login", "scontrol", "-o", "show", "job", job_id).stdout
    return dict(re.findall(r"(\w+)=(\S*)", text))


def _wait_for(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)


def _start_job(lab: Cluster, shared: Path) -> tuple[str, Path]:
    (shared / "day2").mkdir(parents=True, exist_ok=True)
    (shared / "day2" / "job.sh").write_text(JOB)
    job_id = lab.on("login", "sbatch", "--parsable", "/shared/day2/job.sh").stdout.strip().split(";")[0]
    out = shared / "day2" / f"job-{job_id}.out"
    _wait_for("both job steps to start", lambda: out.exists() and out.read_text().count("start node") == 2, 90)
    return job_id, out


def _check_plan(lab: Cluster, extended: Path) -> None:
    conf = lab.on("ctl", "cat", CONF).stdout
    plan = hpckit("plan", str(extended), "--json", state=lab.state)
    assert plan.rc == 0, plan.stdout + plan.stderr
    report = plan.json()
    assert report["new_hosts"] == ["node3", "node4"]
    assert report["action"] == "slurmctld restart"
    assert report["changes"] == [
        {"file": CONF, "what": "NodeName=node[3-4] added", "action": "slurmctld restart"},
        {"file": CONF, "what": "PartitionName=gpu changed", "action": "live scontrol reconfigure"},
    ]
    # The plan changed nothing: same config, no machine started.
    assert lab.on("ctl", "cat", CONF).stdout == conf
    assert [n.name for n in provider.lab_status(NAME).nodes] == ["ctl", "login", "node1", "node2"]


def _machine_pids() -> dict[str, int | None]:
    return {n.name: n.pid for n in provider.lab_status(NAME).nodes}


def _check_extension(lab: Cluster, job_id: str, before: dict[str, str]) -> None:
    machines = _machine_pids()
    result = lab.deploy()
    assert result.rc == 0, result.stdout + result.stderr
    join = result.json()["join"]
    assert isinstance(join, dict) and sorted(join["joined"]) == ["node1", "node2", "node3", "node4"]
    # The daemons really restarted, and the job lived through it.
    after = _daemon_pids(lab)
    assert all(after[h] != before[h] for h in before), (before, after)
    assert _job_state(lab, job_id)["JobState"] == "RUNNING"
    status = provider.lab_status(NAME)
    assert status.all_up and [n.name for n in status.nodes] == ["ctl", "login", "node1", "node2", "node3", "node4"]
    assert {n: p for n, p in _machine_pids().items() if n in machines} == machines  # the old machines kept running
    for host in ("node1", "login"):  # names resolve on the old machines too
        assert lab.on(host, "getent", "ahostsv4", "node4").stdout.split()[0] == f"{NET}.24"


def test_two_nodes_join_a_running_cluster_while_a_job_runs(tmp_path: Path) -> None:
    small, extended = _blueprint(tmp_path, 2), _blueprint(tmp_path, 4)
    lab = Cluster(NAME, small, tmp_path / "state")
    try:
        first = lab.deploy()
        assert first.rc == 0, first.stdout + first.stderr
        shared = provider.shared_dir_source(NAME, "/shared")
        job_id, out = _start_job(lab, shared)
        _check_plan(lab, extended)
        before = _daemon_pids(lab)
        lab = Cluster(NAME, extended, lab.state)
        _check_extension(lab, job_id, before)
        (shared / "day2" / "go").touch()
        _wait_for("the job to end", lambda: _job_state(lab, job_id)["JobState"] not in ("RUNNING", "COMPLETING"), 120)
        state = _job_state(lab, job_id)
        assert (state["JobState"], state["ExitCode"]) == ("COMPLETED", "0:0"), state
        lines = out.read_text().splitlines()
        assert sorted(lines) == ["batch-done", "end node1", "end node2", "start node1", "start node2"], lines
        idle = lab.on("login", "sinfo", "-h", "-N", "-n", "node[3-4]", "-o", "%N %t").stdout.split("\n")
        assert sorted(line.strip() for line in idle if line.strip()) == ["node3 idle", "node4 idle"]
        names = lab.on("login", "srun", "-N4", "hostname", timeout=90).stdout.split()
        assert sorted(names) == ["node1", "node2", "node3", "node4"]
    finally:
        lab.destroy()
    assert NAME not in provider.list_labs()
    assert not re.search(rf"\b{BRIDGE}", Path("/proc/net/dev").read_text())
