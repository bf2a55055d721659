"""A node checking itself (`hpckit health check --act`, Slurm's HealthCheckProgram): verdicts in the store,
its own drain and resume through scontrol, the fleet view, and what happens when the store is gone."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hpckit.health.config import GpuExpect, Mount, NodeConfig
from hpckit.health.model import Row, Status
from hpckit.health.node import NodeReport, NodeRunOptions, check_node
from hpckit.health.policy import Action
from hpckit.health.recorded import RecordedProbe, healthy_node
from hpckit.health.store import Store, Verdict
from tests.health_fakes import FakeNode, FakeSlurm

NODES = ("node1", "node2", "node3", "node4")


@pytest.fixture
def config(tmp_path: Path) -> NodeConfig:
    return NodeConfig(
        store=str(tmp_path / "store"),
        state_dir=str(tmp_path / "local"),
        gpus=GpuExpect("lab", 4),
        mounts=(Mount("/shared", "/shared"),),
    )


def munge_down(name: str = "node1") -> RecordedProbe:
    probe = healthy_node(name)
    probe.procs = [p for p in probe.procs if p.comm != "munged"]
    return probe


def act(config: NodeConfig, probe: RecordedProbe, slurm: FakeSlurm, **opts: bool) -> NodeReport:
    options = NodeRunOptions(act=True, dry_run=opts.get("dry_run", False))
    return check_node(config, options, probe, slurm)


def test_healthy_node_stores_its_verdict_and_does_nothing(config: NodeConfig) -> None:
    slurm = FakeSlurm.of(*NODES)
    report = act(config, healthy_node(), slurm)
    assert report.decision is not None and report.decision.action is Action.NONE
    assert slurm.updates == []
    stored = Store(config.store).read_verdict("latest", "node1")
    assert stored is not None and stored.tier == "quick" and len(stored.rows) == len(report.rows)


def test_quick_tier_drains_itself_on_the_second_fail(config: NodeConfig) -> None:
    slurm = FakeSlurm.of(*NODES)
    first = act(config, munge_down(), slurm)
    assert first.decision is not None and first.decision.action is Action.NONE
    assert "failed 1 of 2 runs" in first.decision.why and slurm.updates == []
    second = act(config, munge_down(), slurm)
    assert second.decision is not None and second.decision.action is Action.DRAIN
    assert slurm.updates == [
        ("scontrol", "update", "nodename=node1", "state=drain", "reason=hpckit:munge-down:host.munge")
    ]
    assert second.applied is not None and second.applied.done


def test_resumes_itself_after_n_passes(config: NodeConfig) -> None:
    slurm = FakeSlurm.of(*NODES)
    act(config, munge_down(), slurm)
    act(config, munge_down(), slurm)
    assert slurm.nodes["node1"].state == "drained"
    actions = [act(config, healthy_node(), slurm).decision for _ in range(2)]
    assert [d.action if d else None for d in actions] == [Action.KEEP, Action.RESUME]
    assert slurm.nodes["node1"].state == "idle"


def test_admin_drain_is_left_alone(config: NodeConfig) -> None:
    slurm = FakeSlurm.of(*NODES)
    slurm.nodes["node1"] = FakeNode("drained", "disk swap, ticket 77")
    for probe in (munge_down(), munge_down(), healthy_node(), healthy_node(), healthy_node()):
        report = act(config, probe, slurm)
        assert report.decision is not None and report.decision.action is Action.SKIP
    assert slurm.updates == [] and slurm.nodes["node1"].reason == "disk swap, ticket 77"


def test_admin_drain_placed_between_look_and_act_is_not_overwritten(config: NodeConfig) -> None:
    class Racing(FakeSlurm):
        """The admin drains the node right after hpckit's first look at it."""

        looks = 0

        def run(self, argv, **kw):  # type: ignore[no-untyped-def]
            if argv[0] == "sinfo":
                self.looks += 1
                if self.looks == 2:
                    self.nodes["node1"] = FakeNode("drained", "admin: hands off")
            return super().run(argv, **kw)

    slurm = Racing.of(*NODES)
    act(config, munge_down(), slurm)
    slurm.looks = 0
    report = act(config, munge_down(), slurm)
    assert report.applied is not None and not report.applied.done
    assert "changed meanwhile" in report.applied.message
    assert slurm.nodes["node1"].reason == "admin: hands off" and slurm.updates == []


def _store_verdict(config: NodeConfig, node: str, rows: list[Row], when: float) -> None:
    Store(config.store).write_verdict("latest", Verdict(node, when, "quick", tuple(rows)))


def test_breaker_holds_when_the_fleet_fails_the_same_check(config: NodeConfig) -> None:
    """Three of four nodes' quick tiers see munge down: none drains itself (a fleet-wide false alarm)."""
    slurm = FakeSlurm.of(*NODES)
    probes = {n: munge_down(n) for n in ("node1", "node2", "node3")}
    for _ in range(3):  # Slurm runs HealthCheckProgram on all nodes at the same moment, each interval
        for probe in probes.values():
            report = act(config, probe, slurm)
        act(config, healthy_node("node4"), slurm)
    assert slurm.updates == []
    assert report.outcome is not None and [t.check for t in report.outcome.trips] == ["host.munge"]


def test_stale_verdicts_are_not_counted(config: NodeConfig) -> None:
    slurm = FakeSlurm.of(*NODES)
    old = munge_down("node2")
    old.clock -= 10 * config.quick_interval_s
    for n in ("node2", "node3"):
        stale = munge_down(n)
        stale.clock = old.clock
        act(config, stale, slurm)
        act(config, stale, slurm)
    slurm.updates.clear()
    for n in ("node2", "node3"):
        slurm.nodes[n] = FakeNode()
    act(config, munge_down(), slurm)
    act(config, munge_down(), slurm)
    assert [u[2] for u in slurm.updates] == ["nodename=node1"]


def test_shared_store_unwritable_still_drains_on_local_memory(config: NodeConfig, tmp_path: Path) -> None:
    (tmp_path / "store").write_text("not a directory")  # every write below it fails, even for root
    slurm = FakeSlurm.of(*NODES)
    act(config, munge_down(), slurm)
    report = act(config, munge_down(), slurm)
    assert report.decision is not None and report.decision.action is Action.DRAIN
    assert any("shared store unusable" in n for n in report.notes)
    assert any("verdict not stored" in n for n in report.notes)


def test_node_that_cannot_reach_slurm_records_its_verdict(config: NodeConfig) -> None:
    """munge down: scontrol/sinfo fail from this node; its verdict in the store is for the sweep to act on."""
    slurm = FakeSlurm.of(*NODES)
    slurm.broken = True
    report = act(config, munge_down(), slurm)
    assert report.decision is not None and report.decision.action is Action.SKIP
    assert any("cannot read this node's Slurm state" in n for n in report.notes)
    stored = Store(config.store).read_verdict("latest", "node1")
    assert stored is not None and any(r.fault == "munge-down" for r in stored.rows)


def test_dry_run_changes_nothing(config: NodeConfig) -> None:
    slurm = FakeSlurm.of(*NODES)
    for _ in range(3):
        report = act(config, munge_down(), slurm, dry_run=True)
    assert slurm.updates == []
    assert not Path(config.store).exists() and not Path(config.state_dir).exists()
    assert report.decision is not None and not report.decision.enforce


def test_report_only_config_never_drains(config: NodeConfig) -> None:
    config = dataclasses.replace(config, policy=dataclasses.replace(config.policy, drain=False))
    slurm = FakeSlurm.of(*NODES)
    for _ in range(3):
        report = act(config, munge_down(), slurm)
    assert slurm.updates == [] and report.decision is not None and report.decision.action is Action.DRAIN


def test_disabled_check_is_not_run(config: NodeConfig) -> None:
    config = dataclasses.replace(
        config, policy=dataclasses.replace(config.policy, disabled_checks=frozenset({"host.munge"}))
    )
    slurm = FakeSlurm.of(*NODES)
    for _ in range(3):
        report = act(config, munge_down(), slurm)
    assert not [r for r in report.rows if r.check == "host.munge"] and slurm.updates == []


def test_quick_tier_reuses_the_nightly_heavy_verdict(config: NodeConfig) -> None:
    slow = Row("node1", "gpu.gemm", "gpu0.tflops", Status.FAIL, 300.0, "TFLOP/s", fault="gemm-slow", evidence="slow")
    Store(config.store).write_verdict("nightly", Verdict("node1", 1.7e9, "nightly", (slow,)))
    slurm = FakeSlurm.of(*NODES)
    act(config, healthy_node(), slurm)
    report = act(config, healthy_node(), slurm)
    (row,) = [r for r in report.rows if r.check == "gpu.gemm"]
    assert row.evidence.startswith("nightly ") and row.status == Status.FAIL
    assert slurm.nodes["node1"].reason == "hpckit:gemm-slow:gpu.gemm"


def test_cached_nightly_rows_of_unknown_checks_are_ignored(config: NodeConfig) -> None:
    gone = Row("node1", "gpu.oldcheck", "x", Status.FAIL, fault="old", evidence="from an older hpckit")
    Store(config.store).write_verdict("nightly", Verdict("node1", 1.7e9, "nightly", (gone,)))
    report = act(config, healthy_node(), FakeSlurm.of(*NODES))
    assert not [r for r in report.rows if r.check == "gpu.oldcheck"]


def test_nightly_run_by_hand_refreshes_the_heavy_rows(config: NodeConfig) -> None:
    slow = Row("node1", "gpu.gemm", "gpu0.tflops", Status.FAIL, 300.0, "TFLOP/s", fault="gemm-slow", evidence="slow")
    Store(config.store).write_verdict("nightly", Verdict("node1", 1.7e9, "nightly", (slow,)))
    check_node(config, NodeRunOptions(tier="nightly"), healthy_node(), FakeSlurm.of(*NODES))
    cached = Store(config.store).read_verdict("nightly", "node1")
    assert cached is not None and [(r.check, r.fault) for r in cached.rows if r.check == "gpu.gemm"] == [
        ("gpu.gemm", "absent")
    ]
