"""The sweep on a faked Slurm: the lab's acceptance scenarios without the lab (jobs answered by recorded
nodes), then history, drift, the report and the Prometheus textfile."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from hpckit.health import history, report
from hpckit.health.config import GpuExpect, Mount, NodeConfig
from hpckit.health.job import main as job_main
from hpckit.health.job import node_job
from hpckit.health.model import Row, Status
from hpckit.health.node import NodeRunOptions, check_node
from hpckit.health.oob import ProbeResult
from hpckit.health.policy import Action
from hpckit.health.probe import ProbeError
from hpckit.health.recorded import RecordedProbe, healthy_node
from hpckit.health.store import Store
from hpckit.health.sweep import (
    JobResult,
    SweepOptions,
    SweepResult,
    node_job_command,
    parse_job_output,
    sweep,
)
from tests.health_fakes import FakeNode, FakeSlurm

NODES = ("node1", "node2", "node3", "node4")


@pytest.fixture
def config(tmp_path: Path) -> NodeConfig:
    return NodeConfig(
        store=str(tmp_path / "store"),
        state_dir=str(tmp_path / "local"),
        gpus=GpuExpect("lab", 4),
        mounts=(Mount("/shared", "/shared"),),
        command=("/etc/hpckit/hpckit-health",),
    )


class Lab:
    """Four recorded nodes behind a faked Slurm; jobs run the nightly tier on the recorded node."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.probes: dict[str, RecordedProbe] = {n: healthy_node(n) for n in NODES}
        self.slurm = FakeSlurm.of(*NODES)
        self.jobs: list[str] = []
        self.probed: list[str] = []
        self.clock = 1_800_000_000.0
        self.cut: set[str] = set()  # nodes whose network is cut: no job, no SSH
        self.no_job: set[str] = set()  # nodes where srun fails (munge or slurmd down)

    def runner(self, node: str, partition: str | None) -> JobResult:
        self.jobs.append(node)
        probe = self.probes[node]
        if node in self.no_job or node in self.cut:
            return JobResult(node, [], "srun: error: Unable to create step for job: Zero Bytes were transmitted")
        local = dataclasses.replace(self.config, state_dir=f"{self.config.state_dir}/{node}")
        doc = node_job(local, (), probe)
        rows = parse_job_output("some login banner\n" + json.dumps(doc) + "\n", node)
        return JobResult(node, rows, None, 0.5)

    def prober(self, node: str) -> ProbeResult:
        """`hpckit health check --tier quick --json` over SSH: the recorded node's quick tier."""
        self.probed.append(node)
        if node in self.cut:
            return ProbeResult(node, [], f"cannot reach {node} over SSH: timed out")
        local = dataclasses.replace(self.config, state_dir=f"{self.config.state_dir}/{node}")
        report = check_node(local, NodeRunOptions(tier="quick", store=False), self.probes[node])
        return ProbeResult(node, report.rows, None, 0.3)

    def quick(self, node: str, act: bool = False) -> None:
        """The node's HealthCheckProgram run; without ``act`` it cannot reach Slurm (munge down)."""
        self.clock += 1
        local = dataclasses.replace(self.config, state_dir=f"{self.config.state_dir}/{node}")
        self.probes[node].clock = self.clock
        check_node(local, NodeRunOptions(tier="quick", act=act), self.probes[node], self.slurm)

    def sweep(self, ssh: bool = False, **opts: object) -> SweepResult:
        self.clock += 60  # quick verdicts of a minute ago are fresh
        for probe in self.probes.values():
            probe.clock = self.clock
        options = SweepOptions(**opts)  # type: ignore[arg-type]
        prober = self.prober if ssh else None
        return sweep(self.config, options, self.slurm, self.runner, now=lambda: self.clock, prober=prober)

    def reasons(self) -> dict[str, str]:
        return {n: s.reason for n, s in self.slurm.nodes.items() if s.state in ("drained", "draining")}


@pytest.fixture
def lab(config: NodeConfig) -> Lab:
    return Lab(config)


def plant(lab: Lab, node: str, fault: str) -> None:
    probe = lab.probes[node]
    if fault == "munge":
        probe.procs = [p for p in probe.procs if p.comm != "munged"]
    elif fault == "shared-ro":
        probe.writes["/shared"] = ProbeError("write test in /shared: Read-only file system")
    elif fault == "gpu":
        probe.char_devices.discard("/dev/nvidia2")
        probe.dirs["/dev"].remove("nvidia2")


def fix(lab: Lab, node: str) -> None:
    lab.probes[node] = healthy_node(node)


def test_clean_sweep_all_ok_nothing_drained_history_grows(lab: Lab, config: NodeConfig) -> None:
    result = lab.sweep()
    assert sorted(lab.jobs) == list(NODES) and lab.slurm.updates == []
    problems = [r for r in result.rows if r.status != Status.OK and r.fault != "absent"]
    assert problems == []
    assert {d.action for d in result.outcome.decisions} == {Action.NONE}
    store = Store(config.store)
    assert len(history.run_ids(store)) == 1
    lab.sweep()
    assert len(history.run_ids(store)) == 2
    assert store.read_verdict("latest", "node3") is not None and store.read_verdict("nightly", "node3") is not None
    prom = store.path("metrics", "hpckit_health.prom").read_text()
    assert 'hpckit_health_status{node="node1",check="host.munge",metric="running"} 0' in prom
    assert "hpckit_health_last_sweep_timestamp_seconds" in prom


def test_planted_faults_drain_exactly_those_nodes_with_the_right_reasons(lab: Lab) -> None:
    lab.slurm.nodes["node4"] = FakeNode("drained", "admin: BIOS update")
    plant(lab, "node1", "munge")
    plant(lab, "node2", "shared-ro")
    plant(lab, "node3", "gpu")
    lab.quick("node1")  # its HealthCheckProgram saw munge down (and could not drain itself)
    result = lab.sweep()
    assert lab.reasons() == {
        "node1": "hpckit:munge-down:host.munge",
        "node2": "hpckit:mount-unwritable:host.mounts",
        "node3": "hpckit:gpu-missing:gpu.count",
        "node4": "admin: BIOS update",
    }
    assert "node1" not in lab.jobs  # no job is sent to a node whose munge is down
    assert "node4" in result.skipped and "admin: BIOS update" in result.skipped["node4"]
    assert all(a.done for a in result.applied) and len(result.applied) == 3
    text = report.render_sweep(result, history.load_history(Store(lab.config.store)))
    table = text.split("\n\n")[1].splitlines()
    assert [line.split()[:2] for line in table[1:]] == [
        ["FAIL", "node1"],
        ["FAIL", "node2"],
        ["FAIL", "node3"],
    ]  # failing nodes first; node4 (admin-drained) was not checked at all
    assert "hpckit:gpu-missing:gpu.count" in text and "/dev/nvidia2" in text


def test_fixed_nodes_resume_after_n_passes(lab: Lab) -> None:
    plant(lab, "node2", "shared-ro")
    plant(lab, "node3", "gpu")
    lab.sweep()
    assert set(lab.reasons()) == {"node2", "node3"}
    fix(lab, "node2")
    fix(lab, "node3")
    # Drained nodes get no job, and the sweep does not resume on stored verdicts: each node's own quick
    # tier (slurmd runs it on drained nodes too) resumes it after resume_after clean runs.
    lab.quick("node2", act=True)
    lab.quick("node3", act=True)
    result = lab.sweep()
    assert set(lab.reasons()) == {"node2", "node3"}
    assert {d.action for d in result.outcome.decisions if d.node in ("node2", "node3")} == {Action.KEEP}
    lab.quick("node2", act=True)
    lab.quick("node3", act=True)
    assert lab.reasons() == {}
    assert [u[-1] for u in lab.slurm.updates[-2:]] == ["state=resume", "state=resume"]


def test_same_fault_on_three_of_four_trips_the_breaker(lab: Lab) -> None:
    for node in ("node1", "node2", "node3"):
        plant(lab, node, "shared-ro")
    result = lab.sweep()
    assert lab.slurm.updates == [] and lab.reasons() == {}
    (trip,) = result.outcome.trips
    assert trip.check == "host.mounts" and trip.failing == ("node1", "node2", "node3")
    text = report.render_sweep(result)
    assert "circuit breaker: 3 of 4 checked nodes (75%) fail host.mounts" in text
    assert "configuration regression" in text
    assert 'hpckit_health_circuit_breaker_tripped{check="host.mounts"} 3' in report.prometheus_text(result)


def test_a_job_that_cannot_run_escalates_to_an_owned_drain(lab: Lab) -> None:
    """Without an out-of-band probe: every failed job counts, and M of them in a row drain the node."""
    lab.no_job.add("node2")
    results = [lab.sweep() for _ in range(lab.config.policy.escalate_unknown_after)]
    rows = {(r.check, r.status, r.fault) for r in results[0].rows if r.node == "node2"}
    assert rows == {("health.reach", Status.UNKNOWN, "job")}
    assert [len(r.outcome.escalations) for r in results] == [0, 0, 1]
    assert [r.outcome.decision("node2").action for r in results] == [Action.NONE, Action.NONE, Action.DRAIN]
    assert lab.reasons() == {"node2": "hpckit:unreachable:job"}
    assert "ESCALATED node2 health.reach" in report.render_sweep(results[-1])
    assert "UNKNOWN  node2" in report.render_sweep(results[0])  # never shown as OK meanwhile


def test_every_failed_job_counts_even_when_slurm_stops_hearing_the_node(lab: Lab) -> None:
    """The user's case: munge stopped after a clean quick run. The stored OK verdict predates the failed
    job, so it never stands in; the node is never reported OK, and it is taken out within M sweeps."""
    lab.quick("node1")  # a clean verdict from before the fault
    plant(lab, "node1", "munge")
    lab.no_job.add("node1")
    first = lab.sweep()
    lab.slurm.nodes["node1"].flags = "*"  # slurmctld stops hearing it
    later = [lab.sweep() for _ in range(2)]
    for result in (first, *later):
        node_rows = [r for r in result.rows if r.node == "node1"]
        assert max(r.status for r in node_rows) >= Status.UNKNOWN
        assert not result.sources["node1"].startswith("quick verdict")
    assert lab.reasons() == {"node1": "hpckit:unreachable:slurmctld"}


def test_munge_down_seen_over_ssh_drains_at_once_and_the_fixed_node_comes_back(lab: Lab) -> None:
    lab.slurm.nodes["node4"] = FakeNode("drained", "admin: fan")
    plant(lab, "node1", "munge")
    lab.no_job.add("node1")
    result = lab.sweep(ssh=True)
    assert lab.probed == ["node1"] and "node4" not in lab.probed
    assert lab.reasons() == {"node1": "hpckit:munge-down:host.munge", "node4": "admin: fan"}
    reach = next(r for r in result.rows if r.node == "node1" and r.check == "health.reach")
    assert (reach.status, reach.fault) == (Status.UNKNOWN, "munge") and "munged" in reach.evidence
    # Slurm marks it down later, keeping hpckit's reason; hpckit still owns it.
    lab.slurm.nodes["node1"] = FakeNode("down", "hpckit:munge-down:host.munge", "*")
    assert lab.sweep(ssh=True).outcome.decision("node1").action is Action.KEEP
    fix(lab, "node1")
    lab.no_job.discard("node1")
    lab.slurm.nodes["node1"] = FakeNode("drained", "hpckit:munge-down:host.munge")  # registered again
    actions = [lab.sweep(ssh=True).outcome.decision("node1").action for _ in range(2)]
    assert actions == [Action.KEEP, Action.RESUME]
    assert lab.reasons() == {"node4": "admin: fan"}


def test_a_node_slurm_set_down_while_hpckit_saw_it_failing_comes_back(lab: Lab) -> None:
    plant(lab, "node2", "munge")
    lab.no_job.add("node2")
    lab.config = dataclasses.replace(lab.config, policy=dataclasses.replace(lab.config.policy, drain=False))
    lab.sweep(ssh=True)  # report-only: hpckit sees it failing but does not drain
    assert lab.reasons() == {}
    lab.config = dataclasses.replace(lab.config, policy=dataclasses.replace(lab.config.policy, drain=True))
    lab.slurm.nodes["node2"] = FakeNode("down", "Not responding", "*")
    result = lab.sweep(ssh=True)
    assert result.outcome.decision("node2").action is Action.REDRAIN  # claimed: hpckit's reason replaces Slurm's
    assert lab.reasons() == {"node2": "hpckit:munge-down:host.munge"}
    lab.slurm.nodes["node3"] = FakeNode("down", "Not responding", "*")  # never seen failing: not hpckit's
    assert "node3" in lab.sweep(ssh=True).skipped


def test_network_cut_drains_unreachable_after_m_sweeps_and_resumes_after_n(lab: Lab) -> None:
    lab.cut.add("node3")
    results = [lab.sweep(ssh=True)]
    lab.slurm.nodes["node3"].flags = "*"
    results += [lab.sweep(ssh=True) for _ in range(2)]
    assert [r.outcome.decision("node3").action for r in results] == [Action.NONE, Action.NONE, Action.DRAIN]
    assert lab.reasons() == {"node3": "hpckit:unreachable:ssh"}
    lab.cut.clear()
    lab.slurm.nodes["node3"].flags = ""
    actions = [lab.sweep(ssh=True).outcome.decision("node3").action for _ in range(2)]
    assert actions == [Action.KEEP, Action.RESUME] and lab.reasons() == {}


def test_a_fixed_node_slurm_stopped_hearing_is_recontacted_and_kept_drained(lab: Lab) -> None:
    """slurmctld does not ping a node it set DOWN; hpckit sees it fine over SSH and has Slurm contact it
    again (resume, then its drain straight back), so that it can come back after its clean sweeps."""
    lab.slurm.nodes["node1"] = FakeNode("drained", "hpckit:munge-down:host.munge", "*")  # DOWN+DRAIN
    lab.slurm.nodes["node2"] = FakeNode("down", "admin: PSU", "*")
    result = lab.sweep(ssh=True)
    assert result.outcome.decision("node1").action is Action.KEEP
    assert lab.slurm.updates == [
        ("scontrol", "update", "nodename=node1", "state=resume"),
        ("scontrol", "update", "nodename=node1", "state=drain", "reason=hpckit:munge-down:host.munge"),
    ]
    assert lab.reasons() == {"node1": "hpckit:munge-down:host.munge"}
    assert "asked slurmctld to contact it again" in report.render_sweep(result)
    assert "node2" not in lab.probed  # an admin's down node is not even looked at
    lab.slurm.nodes["node1"].flags = ""  # it answered
    actions = [lab.sweep(ssh=True).outcome.decision("node1").action for _ in range(2)]
    assert actions == [Action.KEEP, Action.RESUME] and lab.reasons() == {}
    assert len(lab.slurm.updates) == 3  # no more recontacts once Slurm hears it


def test_busy_and_unreachable_nodes(lab: Lab) -> None:
    lab.slurm.nodes["node1"].state = "mixed"  # running a job: its fresh quick verdict stands in
    lab.slurm.nodes["node2"].state = "allocated"  # busy, no fresh verdict: skipped
    lab.slurm.nodes["node3"] = FakeNode("down", "Not responding", "*")
    lab.quick("node1")
    result = lab.sweep()
    assert lab.jobs == ["node4"]
    assert result.sources["node1"].startswith("quick verdict")
    assert set(result.skipped) == {"node2", "node3"} and "Not responding" in result.skipped["node3"]


def test_a_stored_verdict_older_than_a_state_change_does_not_stand_in(lab: Lab) -> None:
    lab.quick("node1")
    lab.slurm.nodes["node1"].state = "mixed"
    assert lab.sweep().sources["node1"].startswith("quick verdict")
    lab.slurm.nodes["node1"].reason = "Reboot ASAP"  # a state change after the verdict
    assert "node1" in lab.sweep().skipped
    lab.quick("node1")
    assert lab.sweep().sources["node1"].startswith("quick verdict")


def test_dry_run_stores_and_drains_nothing(lab: Lab, config: NodeConfig) -> None:
    plant(lab, "node3", "gpu")
    result = lab.sweep(dry_run=True)
    assert lab.slurm.updates == [] and not Path(config.store).exists()
    decision = result.outcome.decision("node3")
    assert decision.action is Action.DRAIN and not decision.enforce
    assert "would drain" in report.render_sweep(result)


def test_sweep_of_some_nodes_and_unknown_names(lab: Lab) -> None:
    lab.sweep(nodes=["node2", "node3"])
    assert sorted(lab.jobs) == ["node2", "node3"]
    from hpckit.errors import InputError

    with pytest.raises(InputError, match="no node node9"):
        lab.sweep(nodes=["node9"])


def test_disabled_check_in_a_sweep(lab: Lab) -> None:
    plant(lab, "node3", "gpu")
    lab.sweep(disabled=["gpu.count"])
    assert lab.reasons() == {}


def test_stored_run_reads_back_for_the_report(lab: Lab, config: NodeConfig) -> None:
    plant(lab, "node3", "gpu")
    result = lab.sweep()
    loaded = report.load_result(Store(config.store))
    assert loaded.run_id == result.run_id and len(loaded.rows) == len(result.rows)
    assert loaded.outcome.decision("node3").reason == "hpckit:gpu-missing:gpu.count"
    assert {(r.node, r.check, r.metric, r.status) for r in loaded.rows} == {
        (r.node, r.check, r.metric, r.status) for r in result.rows
    }
    assert "node3" in report.render_sweep(loaded)


def test_textfile_option(lab: Lab, tmp_path: Path) -> None:
    target = tmp_path / "node_exporter" / "hpckit_health.prom"
    lab.sweep(textfile=str(target))
    assert target.read_text().startswith("# HELP hpckit_health_status")


# --- history: fleet medians and drift -------------------------------------------------------------------


def _rows(run: int, write_s: dict[str, float]) -> list[Row]:
    return [Row(n, "host.mounts", "/shared", Status.OK, s, "s", time=1.7e9 + run) for n, s in write_s.items()] + [
        Row(n, "gpu.gemm", f"gpu{g}.tflops", Status.OK, 700.0 + g, "TFLOP/s") for n in write_s for g in range(2)
    ]


def test_fleet_medians_pool_per_gpu_metrics() -> None:
    frame = history.rows_frame(_rows(0, {"a": 0.001, "b": 0.003, "c": 0.002}), "r0", 1.7e9)
    medians = history.fleet_medians(frame).set_index(["check", "metric"])
    assert medians.loc[("host.mounts", "/shared"), "median"] == pytest.approx(0.002)
    assert medians.loc[("gpu.gemm", "gpu*.tflops"), "nodes"] == 3


def test_drift_flags_a_node_moving_away_from_its_own_history(tmp_path: Path) -> None:
    store = Store(tmp_path)
    for run in range(5):
        history.append_run(
            store, f"2026110{run}T000000Z", 1.7e9 + run, _rows(run, {"a": 0.002, "b": 0.0021 + run * 1e-5})
        )
    past = history.load_history(store)
    assert past["run_id"].nunique() == 5 and str(past["time"].dt.tz) == "UTC"
    now = history.rows_frame(_rows(9, {"a": 0.0021, "b": 0.09}), "r9", 1.7e9 + 9)
    drifting = history.drift(now, past)
    assert list(drifting["node"]) == ["b"] and drifting.loc[0, "change"] > 2
    assert history.drift(now, past.iloc[0:0]).empty


def test_drift_has_an_absolute_floor_as_well_as_a_relative_one(tmp_path: Path) -> None:
    """Millisecond noise (a munge round trip of 3 ms, now 10 ms: +234 %) is not drift."""
    store = Store(tmp_path)
    for run in range(5):
        history.append_run(store, f"2026110{run}T000000Z", 1.7e9 + run, _rows(run, {"a": 0.003 + run * 1e-6}))
    past = history.load_history(store)
    noisy = history.rows_frame(_rows(9, {"a": 0.010}), "r9", 1.7e9 + 9)
    assert history.drift(noisy, past).empty
    assert list(history.drift(noisy, past, floor={})["node"]) == ["a"]  # the floor is what holds it
    slow = history.rows_frame(_rows(9, {"a": 0.2}), "r9", 1.7e9 + 9)
    assert list(history.drift(slow, past)["node"]) == ["a"]


def test_drift_needs_enough_history() -> None:
    past = history.rows_frame(_rows(0, {"a": 0.002}), "r0", 1.7e9)
    now = history.rows_frame(_rows(1, {"a": 0.2}), "r1", 1.7e9)
    assert history.drift(now, past).empty


def test_report_shows_drift(tmp_path: Path, lab: Lab, config: NodeConfig) -> None:
    for _ in range(4):
        lab.sweep()
    lab.probes["node2"].writes["/shared"] = 0.8  # slower than its own past, still under the warn limit
    result = lab.sweep()
    text = report.render_sweep(result, history.load_history(Store(config.store)))
    assert "drifting from their own history" in text
    line = next(x for x in text.splitlines() if x.startswith("node2"))
    assert "host.mounts" in line


def test_history_frame_types() -> None:
    frame = history.rows_frame([Row("a", "c", "m", Status.FAIL, None, fault="f")], "r", 1.7e9)
    assert frame.loc[0, "status"] == "FAIL" and pd.isna(frame.loc[0, "value"])
    assert list(frame.columns) == history.COLUMNS


def test_node_job_command_is_the_lean_entry(tmp_path: Path) -> None:
    config = NodeConfig(command=("/etc/hpckit/hpckit-health",))
    assert node_job_command(config, ["gpu.count"]) == ["/etc/hpckit/hpckit-health", "job", "--disable", "gpu.count"]


def test_node_job_bad_option_or_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as bad_option:
        job_main(["--bogus"])
    assert bad_option.value.code == 2
    assert job_main(["--config", str(tmp_path / "missing.json")]) == 2
    assert "missing.json does not exist" in capsys.readouterr().err


def test_node_job_loads_no_cli_or_dataframe_libraries() -> None:
    """The sweep starts one per node at once, so its imports are its start-up time."""
    heavy = ("click", "pandas", "pyarrow", "pydantic", "hostlist")
    code = f"import sys, hpckit.health.job; print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
