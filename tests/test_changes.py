"""Day-2 change labels (what `hpckit plan` says a change will cost the running cluster), and which lab nodes a
plan or deploy finds not started."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpckit.blueprint import load_blueprint
from hpckit.deploy import targets
from hpckit.deploy.changes import Action, file_changes, overall, slurm_conf_changes
from hpckit.lab import LabSpec, LabStatus, NodeStatus, SshIdentity

REPO = Path(__file__).resolve().parent.parent

BASE = """\
# managed by hpckit
ClusterName=lab
SlurmctldHost=ctl(10.77.0.10)
SchedulerParameters=batch_sched_delay=0
NodeName=node[1-4] CPUs=2 RealMemory=1000 Gres=gpu:lab:4 State=UNKNOWN
PartitionName=gpu Nodes=node[1-4] Default=YES MaxTime=INFINITE State=UP
"""


def test_adding_nodes_needs_restart_and_partition_reconfigure() -> None:
    after = BASE.replace("PartitionName=gpu Nodes=node[1-4]", "PartitionName=gpu Nodes=node[1-6]")
    after = after.replace("State=UNKNOWN\n", "State=UNKNOWN\nNodeName=node[5-6] CPUs=2 RealMemory=1000 State=UNKNOWN\n")
    changes = slurm_conf_changes(BASE, after)
    assert [(c.what, c.action) for c in changes] == [
        ("NodeName=node[5-6] added", Action.SLURMCTLD_RESTART),
        ("PartitionName=gpu changed", Action.RECONFIGURE),
    ]
    assert overall(changes).label == "slurmctld restart"


def test_new_partition_and_plain_parameter_are_live() -> None:
    after = BASE.replace("batch_sched_delay=0", "batch_sched_delay=1") + "PartitionName=debug Nodes=node1\n"
    changes = slurm_conf_changes(BASE, after)
    assert {c.action for c in changes} == {Action.RECONFIGURE}
    assert overall(changes).label == "live scontrol reconfigure"


def test_plugin_change_restarts_and_cluster_rename_is_unsupported() -> None:
    changes = slurm_conf_changes(BASE, BASE + "ProctrackType=proctrack/cgroup\n")
    assert overall(changes) == Action.SLURMCTLD_RESTART
    assert (
        overall(slurm_conf_changes(BASE, BASE.replace("ClusterName=lab", "ClusterName=other"))).label == "unsupported"
    )
    assert slurm_conf_changes(BASE, BASE + "# a comment only\n") == []


def test_other_files() -> None:
    assert overall(file_changes("/etc/slurm/gres.conf", "a", "b")).label == "slurmd restart"
    assert file_changes("/etc/slurm/gres.conf", "a", "a") == []
    assert overall(file_changes("/etc/slurm/topology.conf", "", "x")) == Action.RECONFIGURE


GROWN = """\
ClusterName=lab
NodeName=node[1-2] NodeAddr=10.77.0.[21-22] CPUs=2 Gres=gpu:lab:4 State=UNKNOWN
PartitionName=gpu Nodes=node[1-2] Default=YES MaxTime=INFINITE State=UP
"""


def test_a_grown_node_range_reads_as_the_added_nodes() -> None:
    after = GROWN.replace("node[1-2]", "node[1-4]").replace("10.77.0.[21-22]", "10.77.0.[21-24]")
    changes = slurm_conf_changes(GROWN, after)
    assert [(c.what, c.action.label) for c in changes] == [
        ("NodeName=node[3-4] added", "slurmctld restart"),
        ("PartitionName=gpu changed", "live scontrol reconfigure"),
    ]


def test_node_lines_compare_per_node() -> None:
    regrouped = GROWN.replace(
        "NodeName=node[1-2] NodeAddr=10.77.0.[21-22] CPUs=2 Gres=gpu:lab:4 State=UNKNOWN",
        "NodeName=node1 NodeAddr=10.77.0.21 CPUs=2 Gres=gpu:lab:4 State=UNKNOWN\n"
        "nodename=node2 State=UNKNOWN Gres=gpu:lab:4 CPUs=2 NodeAddr=10.77.0.22",
    )
    assert slurm_conf_changes(GROWN, regrouped) == []
    moved = GROWN.replace("10.77.0.[21-22]", "10.77.0.[21,23]")
    assert [c.what for c in slurm_conf_changes(GROWN, moved)] == ["NodeName=node2 changed"]
    shrunk = GROWN.replace("node[1-2]", "node1").replace("10.77.0.[21-22]", "10.77.0.21")
    assert "NodeName=node2 removed" in [c.what for c in slurm_conf_changes(GROWN, shrunk)]
    broken = GROWN.replace("node[1-2]", "node[1-")
    assert overall(slurm_conf_changes(GROWN, broken)) == Action.SLURMCTLD_RESTART


def test_a_new_hosts_first_slurm_conf_is_created_not_a_cluster_rename() -> None:
    changes = file_changes("/etc/slurm/slurm.conf", "", BASE)
    assert [(c.what, c.action.label) for c in changes] == [("created", "slurmd restart")]


def _fake_lab(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, up: list[str]) -> list[LabSpec]:
    """prepare_target against a lab whose running machines are `up`; returns the specs lab_up was given."""
    started: list[LabSpec] = []

    def status(cluster: str, state_root: Path) -> LabStatus:
        nodes = tuple(NodeStatus(n, "10.77.0.9", 0, True, 1, True) for n in up)
        return LabStatus(cluster, "hpck0", "10.77.0.0/24", "10.77.0.1", state_root, nodes)

    monkeypatch.setattr(targets, "lab_status", status)
    monkeypatch.setattr(targets, "lab_up", started.append)
    monkeypatch.setattr(targets, "ssh_identity", lambda *_: SshIdentity("root", tmp_path / "k", tmp_path / "kh"))
    return started


def test_plan_target_lists_the_lab_nodes_not_started_and_starts_none(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bp = load_blueprint(REPO / "blueprints" / "lab.yaml")
    started = _fake_lab(monkeypatch, tmp_path, ["ctl", "login", "node1", "node2"])
    assert targets.prepare_target(bp, bring_up_lab=False).not_started == ("node3", "node4")
    assert started == []
    deployed = targets.prepare_target(bp)
    assert deployed.not_started == () and [n.name for n in started[0].nodes][-2:] == ["node3", "node4"]


def test_deploy_target_leaves_a_complete_lab_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bp = load_blueprint(REPO / "blueprints" / "lab.yaml")
    started = _fake_lab(monkeypatch, tmp_path, ["ctl", "login", "node1", "node2", "node3", "node4"])
    assert targets.prepare_target(bp).not_started == ()
    assert started == []
