"""`hpckit upgrade` running upgrade.yml on a real lab (controller with slurmdbd, login, node[1-2]) of the
distribution's 22.05: its record is made to claim an older micro release than the one installed, so that the
plan has steps while every host is at the target. A run that finds everything at the target changes nothing;
a run that finds one slurmd stopped backs up, raises the timeouts, starts that slurmd alone and puts the
timeouts back, leaving slurm.conf as it was; both move the record to the installed release. A node that
SSH cannot reach stops the run in the step where it is met, before it starts or in its middle, and the
next run completes it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.labutil import Cluster, Started, deployed, hpckit, lab_blueprint, needs_lab, two_nodes

pytestmark = [pytest.mark.lab, needs_lab()]
NAME, NET, BRIDGE = "hupg", "10.77.200", "hupg0"
GPUS = "      gpus: {type: lab, count: $(vars.gpus_per_node)}\n"


def blueprint(tmp: Path, version: str | None = None) -> Path:
    path = lab_blueprint(tmp, NAME, NET, BRIDGE)
    text = two_nodes(path.read_text())
    assert GPUS in text and "slurm:\n  accounting: true\n" in text
    text = text.replace(GPUS, "")
    if version:
        text = text.replace("slurm:\n", f'slurm:\n  version: "{version}"\n', 1)
        path = path.with_name(f"{NAME}-{version}.yaml")
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("upgrade")
    with deployed(Cluster(NAME, blueprint(tmp), tmp / "state")) as cluster:
        yield cluster


def _current(cluster: Cluster) -> Path:
    return cluster.state / "clusters" / NAME / "current"


def _claim_an_older_micro(cluster: Cluster) -> tuple[str, list[str]]:
    """The installed release, and the arguments of `hpckit upgrade` to it, after the record was made to
    claim the micro release before it."""
    installed = cluster.on("ctl", "slurmctld", "-V").stdout.split()[1]
    major, minor, micro = installed.split(".")
    versions = _current(cluster) / "versions.json"
    data = json.loads(versions.read_text())
    versions.write_text(json.dumps({**data, "slurm": f"{major}.{minor}.{int(micro) - 1}"}))
    return installed, ["upgrade", str(blueprint(cluster.blueprint.parent, installed)), "--yes", "-q"]


def _upgrade_from_an_older_micro(cluster: Cluster) -> tuple[str, Any]:
    installed, args = _claim_an_older_micro(cluster)
    return installed, hpckit(*args, state=cluster.state, timeout=900)


def _changed(cluster: Cluster) -> dict[str, int]:
    hosts = json.loads((_current(cluster) / "summary.json").read_text())["hosts"]
    return {host: tally["changed"] for host, tally in hosts.items() if tally["changed"]}


def _changed_tasks(cluster: Cluster) -> list[tuple[str, str]]:
    lines = (_current(cluster) / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    return [(e["host"], e["task"]) for e in events if e["event"] == "runner_on_ok" and e.get("changed")]


def test_at_the_target_the_upgrade_changes_nothing(lab: Cluster) -> None:
    installed, done = _upgrade_from_an_older_micro(lab)
    assert done.rc == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"Slurm {installed} on every host" in done.stdout
    assert _changed(lab) == {}
    upgrade = json.loads((_current(lab) / "upgrade.json").read_text())
    assert upgrade["to"] == installed and upgrade["backups"] == []  # nothing behind: no backup made
    assert json.loads((_current(lab) / "versions.json").read_text())["slurm"] == installed
    again = hpckit("upgrade", str(blueprint(lab.blueprint.parent, installed)), "--yes", state=lab.state)
    assert again.rc == 0 and "nothing to upgrade" in again.stdout, again.stderr


def test_a_stopped_slurmd_alone_is_started_and_the_timeouts_come_back(lab: Cluster) -> None:
    conf = lab.on("ctl", "cat", "/etc/slurm/slurm.conf").stdout
    lab.on("node2", "service", "slurmd", "stop")
    installed, done = _upgrade_from_an_older_micro(lab)
    assert done.rc == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # Every host holding slurm.conf changed it twice (timeouts raised, restored); only node2 restarted a daemon.
    changed = _changed_tasks(lab)
    timeouts = "Set SlurmctldTimeout and SlurmdTimeout in slurm.conf"
    assert {task for host, task in changed if host in ("node1", "login")} == {timeouts}, changed
    restarts = {(host, task) for host, task in changed if task.startswith("Restart")}
    assert restarts == {("node2", "Restart the daemon on the new release: slurmd")}, changed
    backups = json.loads((_current(lab) / "upgrade.json").read_text())["backups"]
    assert [Path(b).name for b in backups] == ["slurm_acct_db.sql", "statesave.tar.gz"]
    for path in backups:
        lab.on("ctl", "test", "-s", path)
    assert "CREATE TABLE" in lab.on("ctl", "head", "-c", "20000", backups[0]).stdout
    for host in ("ctl", "login", "node1", "node2"):
        assert lab.on(host, "cat", "/etc/slurm/slurm.conf").stdout == conf, host
    live = lab.on("login", "scontrol", "show", "config").stdout
    assert any(line.split() == ["SlurmdTimeout", "=", "300", "sec"] for line in live.splitlines()), live
    nodes = lab.on("login", "sinfo", "--noheader", "--Node", "--format=%N %v %t").stdout.split("\n")
    rows = sorted(line.split() for line in nodes if line)
    assert rows == [["node1", installed, "idle"], ["node2", installed, "idle"]], rows


def _latest_summary(cluster: Cluster) -> dict[str, Any]:
    runs = sorted((cluster.state / "clusters" / NAME / "deployments").iterdir())
    summary: dict[str, Any] = json.loads((runs[-1] / "summary.json").read_text())
    return summary


def test_a_node_ssh_cannot_reach_stops_the_upgrade_at_once_and_a_rerun_completes(lab: Cluster) -> None:
    from hpckit.lab import provider

    lab.on("node1", "service", "slurmd", "stop")
    provider.node_stop_sshd(NAME, "node2")
    try:
        _, lost = _upgrade_from_an_older_micro(lab)
    finally:
        provider.node_start_sshd(NAME, "node2")
    assert lost.rc == 1, lost.stdout[-3000:] + lost.stderr[-3000:]
    assert "upgrade stopped at step 'Survey: where each host stands' on node2: task " in lost.stdout, lost.stdout
    assert "unreachable (SSH): " in lost.stdout
    summary = _latest_summary(lab)
    assert not summary["ok"] and {h: t["changed"] for h, t in summary["hosts"].items() if t["changed"]} == {}
    installed, again = _upgrade_from_an_older_micro(lab)
    assert again.rc == 0, again.stdout[-3000:] + again.stderr[-3000:]
    restarts = {(host, task) for host, task in _changed_tasks(lab) if task.startswith("Restart")}
    assert restarts == {("node1", "Restart the daemon on the new release: slurmd")}
    assert f"Slurm {installed} on every host" in again.stdout


def _slurmd_timeout(conf: str) -> str:
    """SlurmdTimeout's value in a slurm.conf's text."""
    return next(line.split("=", 1)[1].strip() for line in conf.splitlines() if line.startswith("SlurmdTimeout="))


def _wait_for_raised_timeouts(cluster: Cluster, run: Started) -> None:
    """Until the upgrade has raised SlurmdTimeout in ctl's slurm.conf: past the survey and the backups, the
    cluster changed. Read through the lab (nsenter), which puts no SSH connection beside the run's."""
    from hpckit.lab import provider

    deadline = time.monotonic() + 600
    while run.running() and time.monotonic() < deadline:
        conf = provider.lab_exec(NAME, "ctl", ["cat", "/etc/slurm/slurm.conf"], timeout=30).stdout
        if _slurmd_timeout(conf) == "3600":
            return
        time.sleep(0.1)
    done = run.finish(timeout=1)
    pytest.fail(f"the upgrade never raised the timeouts (rc {done.rc}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")


def test_losing_ssh_to_a_node_mid_upgrade_stops_it_there_and_a_rerun_completes(lab: Cluster) -> None:
    from hpckit.lab import provider

    conf = lab.on("ctl", "cat", "/etc/slurm/slurm.conf").stdout
    original = _slurmd_timeout(conf)
    assert original != "3600", original
    lab.on("node1", "service", "slurmd", "stop")  # so that the slurmd step has work before node2's turn
    installed, args = _claim_an_older_micro(lab)
    run = Started(*args, state=lab.state)
    try:
        _wait_for_raised_timeouts(lab, run)
        # Listener and every session, Ansible's ControlPersist master among them: the node drops mid-run.
        provider.node_stop_sshd(NAME, "node2", sessions=True)
        lost = run.finish(timeout=900)
    finally:
        run.finish(timeout=60)
        provider.node_start_sshd(NAME, "node2")
    assert lost.rc == 1, lost.stdout[-3000:] + lost.stderr[-3000:]
    stopped = [line for line in lost.stdout.splitlines() if line.startswith("upgrade stopped at step ")]
    assert len(stopped) == 1 and " on node2: task " in stopped[0], lost.stdout
    assert "unreachable (SSH): " in stopped[0] and "'Survey: " not in stopped[0], stopped
    # Consistent where it stopped: slurmctld answers, at least as new as every slurmd it reports, and
    # takes jobs; node2 runs one (its slurmd is up, only SSH went).
    assert "is UP" in lab.on("login", "scontrol", "ping").stdout
    config = lab.on("login", "scontrol", "show", "config").stdout.splitlines()
    assert ["SLURM_VERSION", "=", installed] in [line.split() for line in config], config
    reported = lab.on("login", "sinfo", "--noheader", "--Node", "--format=%v").stdout.split()
    assert reported and all(version in (installed, "N/A") for version in reported), reported
    ran = lab.on("login", "srun", "-N1", "-w", "node2", "-t", "1", "hostname", timeout=90)
    assert ran.stdout.strip() == "node2", ran.describe()

    installed, again = _upgrade_from_an_older_micro(lab)
    assert again.rc == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"Slurm {installed} on every host" in again.stdout
    for host in ("ctl", "login", "node1", "node2"):
        assert lab.on(host, "cat", "/etc/slurm/slurm.conf").stdout == conf, host
    live = lab.on("login", "scontrol", "show", "config").stdout
    assert any(line.split() == ["SlurmdTimeout", "=", original, "sec"] for line in live.splitlines()), live
    nodes = lab.on("login", "sinfo", "--noheader", "--Node", "--format=%N %v %t").stdout.split("\n")
    rows = sorted(line.split() for line in nodes if line)
    assert rows == [["node1", installed, "idle"], ["node2", installed, "idle"]], rows
