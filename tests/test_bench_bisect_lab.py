"""The slow-node search and the post-deploy proof on real labs: 4 nodes (the shared session cluster, `bench
bisect`) and 8 (a lab of this file's own, `deploy --verify` then `verify`), with one node's link throttled by tc's
token bucket filter (netem is absent on this kernel) to 20 Mbit/s both ways: 1/20-1/100 of what a lab link carries
with these 1 MiB probes (an 8-node ring on lab nodes that share 2 busy cores was seen as low as 0.05 GB/s, a
50 Mbit/s link gives 0.006).

Each test puts every link back as it was, even when it fails.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.labutil import CliRun, Cluster, hpckit, lab_blueprint, needs_lab

pytestmark = [pytest.mark.lab, needs_lab()]

RATE = "20mbit"
# the 8-node lab: this file's own subnet and bridge
NAME, NET, BRIDGE = "hbis8", "10.77.171", "hb171"


def bisect(cluster: Cluster, *args: str) -> tuple[CliRun, dict[str, Any]]:
    done = hpckit("bench", "bisect", "--cluster", cluster.name, "--json", "-q", *args, state=cluster.state, timeout=600)
    assert done.stdout.strip(), done.stderr
    return done, json.loads(done.stdout)


def slow_nodes(report: dict[str, Any]) -> list[str]:
    return [s["node"] for s in report["slow_nodes"]]


def throttled(cluster: Cluster, node: str) -> Any:
    from contextlib import contextmanager

    from hpckit.lab.throttle import throttle, unthrottle

    @contextmanager
    def scope() -> Iterator[None]:
        throttle(cluster.name, node, RATE)
        try:
            yield
        finally:
            unthrottle(cluster.name, node)

    return scope()


def test_four_nodes_bisect_names_the_throttled_node_and_none_without(cluster: Cluster) -> None:
    with throttled(cluster, "node3"):
        done, report = bisect(cluster, "-N", "4")
    assert done.rc == 1 and slow_nodes(report) == ["node3"], done.stdout + done.stderr
    assert report["slow_nodes"][0]["why"].startswith("fabric: ") and report["complete"]
    kinds = [r["kind"] for r in report["rounds"]]
    assert kinds == ["single", "halves", "pairs"] and report["jobs"] == 8
    # the single-node round ran above, throttled (it is unaffected: loopback); here, the fabric search alone
    healthy, report = bisect(cluster, "-N", "4", "--skip-single")
    assert healthy.rc == 0 and slow_nodes(report) == [] and report["complete"], healthy.stdout + healthy.stderr


@pytest.fixture(scope="module")
def lab8(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, CliRun]]:
    """An 8-node lab, deployed with --verify while healthy: the deploy's own result comes along."""
    tmp = tmp_path_factory.mktemp("lab8")
    path = lab_blueprint(tmp, NAME, NET, BRIDGE)
    path.write_text(path.read_text().replace("node[1-4]", "node[1-8]").replace(".[21-24]", ".[21-28]"))
    c = Cluster(NAME, path, tmp / "state")
    try:
        yield c, c.deploy("--verify")
    finally:
        c.destroy()


def test_eight_nodes_verify_passes_healthy_then_names_the_throttled_node_by_halving(
    lab8: tuple[Cluster, CliRun],
) -> None:
    cluster, first = lab8
    assert first.rc == 0, first.stdout + first.stderr
    # healthy: the deploy's own verify passed (a bisect of healthy nodes naming none is the 4-node test's)
    assert json.loads(first.stdout)["verify"]["status"] == "passed"
    record = Path(cluster.state) / "clusters" / NAME / "current" / "verify.json"
    assert json.loads(record.read_text())["status"] == "passed"  # deploy --verify keeps it in the record
    with throttled(cluster, "node6"):
        # `hpckit verify` is what `deploy --verify` runs after its playbook (the first deploy above ran it):
        # every node alone, the eight together (slow against the healthy run's history), then the same halving
        # search `bench bisect` runs (its CLI is the 4-node test's), without a second pass of the playbook
        again = hpckit("verify", str(cluster.blueprint), "--json", "-q", state=cluster.state, timeout=900)
    assert again.rc == 1, again.stdout + again.stderr
    verified = json.loads(again.stdout)
    assert verified["status"] == "failed" and slow_nodes(verified) == ["node6"]
    assert verified["slow_nodes"][0]["why"].startswith("fabric: ")
    assert "node6: fabric: " in again.stderr  # named, with its figure
    rounds = verified["rounds"]
    assert [r["kind"] for r in rounds] == ["single", "all", "halves", "halves", "pairs"], rounds
    searched = sum(len(r["jobs"]) for r in rounds if r["kind"] in ("halves", "pairs"))
    assert searched == 6 and verified["all_pairs_jobs"] == 28  # log2(8) rounds of two jobs, not the 28 pairs


def test_a_benchmark_that_cannot_run_names_no_node_and_drains_nothing(cluster: Cluster) -> None:
    """The nodes' own python has no torch: every job fails the same way. bench and bisect say they could
    not measure, with the job's own error line; no node is named, none drained, and both exit 1."""
    python = "/usr/bin/python3"  # Debian's, without torch (the lab's hpckit runs from a virtualenv)
    bench = hpckit(
        "bench", "allreduce", "-N", "4", "--cluster", cluster.name, "--python", python, "-q",
        state=cluster.state, timeout=600,
    )  # fmt: skip
    assert bench.rc == 1, bench.stdout + bench.stderr
    assert "could not measure: benchmark job" in bench.stderr and "no node to blame" in bench.stderr
    assert "ModuleNotFoundError: No module named 'torch'" in bench.stderr
    done, report = bisect(cluster, "-N", "4", "--python", python, "--drain")
    assert done.rc == 1 and report["slow_nodes"] == [] and not report["complete"], done.stdout + done.stderr
    accounts = report["could_not_measure"]
    assert len(accounts) == 4 and all("ModuleNotFoundError: No module named 'torch'" in a for a in accounts)
    assert [r["kind"] for r in report["rounds"]] == ["single"]  # nothing measured: no halves
    assert report["drain"]["applied"] == [] and report["drain"]["held"] == []
    states = cluster.on("login", "sinfo", "-h", "-N", "-o", "%N %T").stdout.split("\n")
    assert not [s for s in states if "drain" in s], states
