"""`hpckit preflight` over real SSH on a lab shaped like blueprints/lab.yaml (no Slurm deployed).

The lab's nodes declare a small fixed shape (2 CPUs, 1000 MB) on a box that has at least that: CPU and memory
pass ("at least"); the GPUs (device nodes, no driver) and the fabric (none) are reported ABSENT, not passed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from hpckit.blueprint import load_blueprint
from hpckit.cli.preflight import preflight_cmd
from hpckit.deploy.targets import prepare_target
from hpckit.lab import provider
from hpckit.preflight import PreflightOptions
from hpckit.preflight import preflight as run_preflight
from tests.labutil import lab_blueprint, needs_lab

pytestmark = [pytest.mark.lab, needs_lab()]
NAME, NET, BRIDGE = "gpupre", "10.77.11", "hpckg11"
NODES = ["node1", "node2", "node3", "node4"]
HOSTS = ["ctl", "login", *NODES]


@pytest.fixture(scope="module")
def blueprint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = lab_blueprint(tmp_path_factory.mktemp("preflight"), NAME, NET, BRIDGE)
    try:
        prepare_target(load_blueprint(path))  # the lab comes up (the CLI would do it too, idempotently)
        yield path
    finally:
        provider.lab_down(NAME)


def preflight(blueprint: Path, *args: str) -> Result:
    return CliRunner().invoke(preflight_cmd, [str(blueprint), *args], env={"COLUMNS": "200"})


def rows_of(done: Result) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["host"], r["check"]): r for r in json.loads(done.stdout)["rows"]}


def test_preflight_of_the_lab_over_ssh(blueprint: Path) -> None:
    done = preflight(blueprint, "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["ok"] is True and report["counts"]["BLOCK"] == 0 and report["hosts"] == HOSTS
    rows = rows_of(done)
    for node in NODES:
        assert rows[(node, "cpus")]["severity"] == "OK" and rows[(node, "cpus")]["expected"] == "at least 2"
        assert int(rows[(node, "cpus")]["found"]) >= 2
        assert rows[(node, "memory")]["severity"] == "OK"
        gpus = rows[(node, "gpus")]
        assert (gpus["severity"], gpus["command"].split()[0]) == ("ABSENT", "nvidia-smi")
        assert gpus["found"].startswith("absent: nvidia-smi not found")
        assert rows[(node, "infiniband")] | {"command": ""} == {
            "host": node,
            "check": "infiniband",
            "expected": "none declared",
            "found": "absent",
            "severity": "ABSENT",
            "command": "",
        }
        assert (rows[(node, "gpu devices")]["severity"], rows[(node, "gpu devices")]["found"]) == (
            "OK",
            "/dev/nvidia[0-3]",
        )
        assert rows[(node, "disk /var/spool/slurmd")]["severity"] in ("OK", "WARN")
    for host in HOSTS:
        assert rows[(host, "os")]["severity"] == "OK"
        assert rows[(host, "mount shared")]["severity"] == "OK"
        assert rows[(host, "clock")]["severity"] == "OK"  # the same kernel clock
        for check in ("uid slurm", "gid slurm", "uid munge", "gid munge"):
            assert rows[(host, check)]["severity"] == "OK", (host, check)
        assert rows[(host, "time sync")]["severity"] in ("OK", "WARN")
    assert rows[("ctl", "disk /var/spool/slurmctld")]["found"].endswith(")")
    assert ("ctl", "gpus") not in rows and ("login", "cpus") not in rows


def test_table_merges_hosts(blueprint: Path) -> None:
    done = preflight(blueprint, "--all")
    assert done.exit_code == 0, done.output
    assert "node[1-4]" in done.stdout and "ABSENT" in done.stdout and "nothing blocks a deploy" in done.stdout


def test_a_node_ssh_cannot_reach_blocks(blueprint: Path) -> None:
    """Through the API: the CLI would bring the lab up again, sshd included."""
    bp = load_blueprint(blueprint)
    target = prepare_target(bp, bring_up_lab=False)
    provider.node_stop_sshd(NAME, "node3")
    try:
        report = run_preflight(bp, target, PreflightOptions(timeout=10))
    finally:
        provider.node_start_sshd(NAME, "node3")
    assert not report.ok
    assert [(r.host, r.check) for r in report.blocking] == [("node3", "ssh")]
    assert report.blocking[0].found.startswith("unreachable")
    assert not [r for r in report.rows if r.host == "node3" and r.check != "ssh"]
    assert run_preflight(bp, target).ok
