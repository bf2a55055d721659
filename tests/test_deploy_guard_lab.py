"""A live cluster's blueprint edited to another Slurm release: `hpckit deploy` refuses before any host changes
(the shared lab cluster runs Debian's 22.05; its blueprint is turned into one for SchedMD's 24.11.5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpckit.clusters import ClusterDir
from tests.labutil import Cluster, hpckit, needs_lab

pytestmark = [pytest.mark.lab, needs_lab()]


def test_a_new_release_in_the_blueprint_is_refused_before_any_host_changes(cluster: Cluster, tmp_path: Path) -> None:
    text = cluster.blueprint.read_text()
    assert "slurm:\n  accounting: true\n" in text
    newer = tmp_path / f"{cluster.name}.yaml"
    newer.write_text(text.replace("slurm:\n", 'slurm:\n  version: "24.11.5"\n  install: build\n', 1))
    records = ClusterDir.of(cluster.name, cluster.state).deployments
    before = sorted(records.iterdir())
    running = cluster.on("ctl", "scontrol", "--version").stdout.split()[-1]  # "slurm-wlm 22.05.8": Debian's
    assert running.startswith("22.05.")
    for command in ("deploy", "plan"):
        done = hpckit(command, str(newer), state=cluster.state)
        assert done.rc == 2, done.stdout[-2000:] + done.stderr[-2000:]
        assert f"{cluster.name} runs Slurm {running} (the distribution's packages)" in done.stderr
        assert "`hpckit deploy` never changes the Slurm release" in done.stderr and "22.05 -> 23.02" in done.stderr
    assert sorted(records.iterdir()) == before  # no run was recorded: none started
    # every daemon still answers at the running release, accounting included
    nodes = cluster.on("ctl", "scontrol", "show", "node", "--oneliner").stdout.splitlines()
    assert len(nodes) == 4 and all(f"Version={running}" in line for line in nodes), nodes
    assert cluster.on("ctl", "scontrol", "ping").stdout.count("UP") >= 1
    assert cluster.on("login", "sacctmgr", "--noheader", "show", "cluster", "format=Cluster").stdout.split() == [
        cluster.name
    ]
