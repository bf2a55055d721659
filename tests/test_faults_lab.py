"""Faults the way they happen, on a lab of its own (net 10.77.140, bridge hf140): faults that stop jobs
(munge stopped, slurmd killed, a node's network cut), then deploy against a drained node and a dead sshd,
`--cluster` from this machine, and what destroy leaves behind.

For each fault, counted in sweeps (`hpckit health sweep`, run on the login node as its schedule would):
the node is never reported OK, is out of service with an hpckit reason within SWEEPS_OUT sweeps, and is
back in service within SWEEPS_BACK sweeps of the fix; an admin-drained node keeps its reason throughout.
Slurm's own timers are shortened (SlurmdTimeout 30 s), so that Slurm marking the node DOWN meanwhile,
as it does on a real cluster, happens inside the test too.

Every hpckit command here runs with a HOME and TMPDIR of the test's own, so that the last test can see
that nothing was left outside hpckit's state folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hpckit.clusters import ClusterDir
from hpckit.lab import provider
from tests.labutil import CliRun, Cluster, lab_blueprint, needs_lab

pytestmark = [pytest.mark.lab, needs_lab()]

NAME, NET, BRIDGE = "faultsci", "10.77.140", "hf140"
SWEEPS_OUT = 4  # sweeps from the fault to the node out of service with an hpckit reason
SWEEPS_BACK = 4  # sweeps from the fix to the node back in service
# Sweeps follow each other at once while a fault lasts (they count, not the time between them); after the
# fix a short pause lets the restarted daemon settle (the sweep itself has slurmctld contact a node it
# stopped hearing, so no wait for Slurm's own ping cycle).
PAUSE_S = 3.0
HEALTH = "/etc/hpckit/hpckit-health"
ADMIN = "admin: fan replacement, ticket 99"
FAULTY, DRAINED, HEALTHY = "node1", "node2", "node3"
BIN = Path("/usr/local/bin")


def _hpckit(home: Path, state: Path, *args: str, timeout: float = 600) -> CliRun:
    tmp = home.parent / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "HPCKIT_STATE": str(state), "TMPDIR": str(tmp), "HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "hpckit", *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    return CliRun(done.returncode, done.stdout, done.stderr)


class FaultLab(Cluster):
    def __init__(self, blueprint: Path, base: Path) -> None:
        super().__init__(NAME, blueprint, base / "state")
        self.home = base / "home"
        self.home.mkdir()
        self.store = Path()

    def run(self, *args: str, timeout: float = 600) -> CliRun:
        return _hpckit(self.home, self.state, *args, timeout=timeout)

    def deploy(self, *extra: str) -> CliRun:
        return self.run("deploy", str(self.blueprint), "--json", "-q", "--join-timeout", "90", *extra)

    def destroy(self) -> CliRun:
        return self.run("destroy", str(self.blueprint))

    def lx(self, node: str, script: str) -> None:
        done = provider.lab_exec(NAME, node, ["sh", "-c", script], timeout=60)
        assert done.rc == 0, f"{script} on {node}: {done.stdout}{done.stderr}"

    def states(self) -> dict[str, tuple[str, str]]:
        out = self.on("login", "sinfo", "-h", "-N", "-o", "%N|%T|%E").stdout
        return {n: (s, r) for n, s, r in (line.split("|", 2) for line in out.splitlines() if line)}

    def sweep(self) -> dict[str, Any]:
        done = self.on("login", HEALTH, "sweep", "--json", "--time-limit", "2", check=False, timeout=300)
        assert done.rc == 0, done.describe()
        data: dict[str, Any] = json.loads(done.stdout)
        return data

    def worst(self, run_id: str, node: str) -> str:
        import pandas as pd

        rows = pd.read_parquet(self.store / "history" / f"{run_id}.parquet")
        mine = rows[(rows["node"] == node) & ~((rows["status"] == "UNKNOWN") & (rows["fault"] == "absent"))]
        order = ["OK", "WARN", "UNKNOWN", "FAIL"]
        return max(mine["status"], key=order.index) if not mine.empty else "none"


def _blueprint(tmp: Path) -> Path:
    path = lab_blueprint(tmp, NAME, NET, BRIDGE)
    text = path.read_text().replace("  accounting: true\n", "  accounting: false\n")
    text = text.replace("nodes: node[1-4]", "nodes: node[1-3]").replace(".[21-24]", ".[21-23]")
    text = text.replace(
        '    SchedulerParameters: "batch_sched_delay=0,sched_min_interval=100000"\n',
        '    SchedulerParameters: "batch_sched_delay=0,sched_min_interval=100000"\n'
        "    SlurmdTimeout: 30\n    MessageTimeout: 10\n",
    )
    assert "node[1-3]" in text and "SlurmdTimeout: 30" in text and "ssh_probe" in text
    path.write_text(text)
    return path


def _bin_listing() -> dict[str, tuple[int, int]]:
    return {p.name: (p.lstat().st_ino, p.lstat().st_mtime_ns) for p in BIN.iterdir()} if BIN.is_dir() else {}


@pytest.fixture(scope="module")
def flab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultLab]:
    base = tmp_path_factory.mktemp("faults")
    lab = FaultLab(_blueprint(base), base)
    bin_before = _bin_listing()
    try:
        done = lab.deploy()
        assert done.rc == 0, f"deploy failed:\n{done.stdout}\n{done.stderr}"
        assert _bin_listing() == bin_before, "the lab wrote into this machine's /usr/local/bin"
        lab.store = provider.shared_dir_source(NAME, "/shared") / "hpckit" / "health"
        lab.on("login", "scontrol", "update", f"nodename={DRAINED}", "state=drain", f"reason={ADMIN}")
        yield lab
    finally:
        lab.destroy()


def _in_service(state: tuple[str, str]) -> bool:
    """Taking jobs (completing: Slurm still cleaning up the sweep job that failed during the fault)."""
    base = state[0].rstrip("*~#!%$@^-+")
    return base in ("idle", "mixed", "allocated", "completing") and not state[0].endswith("*")


def _out_with_hpckit_reason(state: tuple[str, str]) -> bool:
    return state[0].rstrip("*~#!%$@^-+") in ("drained", "draining", "down") and state[1].startswith("hpckit:")


def _sweeps_until(lab: FaultLab, most: int, done: Callable[[tuple[str, str]], bool], *, fixed: bool) -> tuple[int, str]:
    """Sweep until FAULTY's Slurm state passes ``done`` (at most ``most`` sweeps): how many it took, and
    its reason then. Meanwhile the admin-drained node keeps its reason and is never touched; while the
    fault lasts (not ``fixed``) FAULTY is never reported OK."""
    for count in range(1, most + 1):
        if fixed:
            time.sleep(PAUSE_S)
        summary = lab.sweep()
        if not fixed:
            assert lab.worst(summary["run_id"], FAULTY) not in ("OK", "WARN", "none"), summary
        states = lab.states()
        assert states[DRAINED][1] == ADMIN and DRAINED in summary["skipped"]
        if done(states[FAULTY]):
            return count, states[FAULTY][1]
    pytest.fail(f"{FAULTY} still {lab.states()[FAULTY]} after {most} sweeps")


def _fault_round(lab: FaultLab, plant: str, fix: str) -> tuple[int, int, str]:
    """Plant a fault on FAULTY, sweep until hpckit takes it out, fix it, sweep until it is back: the
    sweeps each took, and the reason it was taken out with."""
    assert _in_service(lab.states()[FAULTY]), lab.states()
    lab.lx(FAULTY, plant)
    try:
        out, reason = _sweeps_until(lab, SWEEPS_OUT, _out_with_hpckit_reason, fixed=False)
    finally:
        lab.lx(FAULTY, fix)
    back, _ = _sweeps_until(lab, SWEEPS_BACK, _in_service, fixed=True)
    return out, back, reason


def test_munge_stopped(flab: FaultLab) -> None:
    out, back, reason = _fault_round(flab, "kill $(cat /run/munge/munged.pid)", "/etc/init.d/munge start")
    assert reason == "hpckit:munge-down:host.munge", reason
    print(f"munge stopped: out after {out} sweep(s), back after {back}")


def test_slurmd_killed(flab: FaultLab) -> None:
    out, back, reason = _fault_round(flab, "kill -9 $(cat /run/slurmd.pid)", "/etc/init.d/slurmd start")
    assert reason == "hpckit:slurmd-down:host.slurmd", reason
    print(f"slurmd killed: out after {out} sweep(s), back after {back}")


def test_network_cut(flab: FaultLab) -> None:
    out, back, reason = _fault_round(flab, "ip link set eth0 down", "ip link set eth0 up")
    assert reason.startswith("hpckit:unreachable:"), reason
    print(f"network cut: out after {out} sweep(s) ({reason}), back after {back}")


def test_health_sweep_with_cluster_from_this_machine(flab: FaultLab) -> None:
    done = flab.run("health", "sweep", "--cluster", NAME, "--json", timeout=300)
    assert done.rc == 0, done.stdout + done.stderr
    summary = done.json()
    assert sorted(summary["sources"]) == [FAULTY, HEALTHY] and DRAINED in summary["skipped"]
    report = flab.run("health", "report", "--cluster", NAME)
    assert report.rc == 0 and summary["run_id"] in report.stdout, report.stdout + report.stderr


def test_deploy_reports_an_admin_drained_node_without_waiting(flab: FaultLab) -> None:
    start = time.monotonic()
    done = flab.deploy("--join-timeout", "120")
    took = time.monotonic() - start
    assert done.rc == 0, done.stdout + done.stderr
    join = done.json()["join"]
    assert isinstance(join, dict) and join["held"] == {DRAINED: f"drained ({ADMIN})"}
    assert join["missing"] == {} and float(str(join["seconds"])) < 30, (join, took)
    human = flab.run("deploy", str(flab.blueprint), "-q")
    assert human.rc == 0 and f"HELD {DRAINED}: drained ({ADMIN})" in " ".join(human.stdout.split()), human.stdout


def test_login_node_runs_hpckit_from_its_own_etc(flab: FaultLab) -> None:
    where = flab.on("login", "sh", "-c", "command -v hpckit").stdout.strip()
    assert where == "/etc/hpckit/bin/hpckit"
    assert flab.on("login", "hpckit", "templates", "list").ok


def test_lab_up_mounts_a_missing_shared_folder_again(flab: FaultLab) -> None:
    flab.lx(HEALTHY, "umount /shared")
    done = flab.run("lab", "up", str(flab.blueprint))
    assert done.rc == 0, done.stdout + done.stderr
    flab.lx(HEALTHY, "mountpoint -q /shared")


def test_deploy_with_a_dead_sshd_names_the_node_and_the_cause(flab: FaultLab) -> None:
    """Only the listener stops: a connection cached by the last deploy would still get through."""
    provider.node_stop_sshd(NAME, HEALTHY)
    try:
        done = flab.deploy()
    finally:
        provider.node_start_sshd(NAME, HEALTHY)
    assert done.rc == 1
    failures = done.json()["failures"]
    assert isinstance(failures, list) and failures, done.stdout
    assert all(f.startswith(f"{HEALTHY}: unreachable") for f in failures), failures
    assert "connection refused" in failures[0].lower(), failures


def test_a_node_removed_from_the_blueprint_stops_and_the_record_says_what_was_done(flab: FaultLab) -> None:
    node_pid = provider.lab_status(NAME).node(HEALTHY).pid
    assert node_pid is not None
    smaller = flab.blueprint.with_name("smaller.yaml")
    text = flab.blueprint.read_text().replace("nodes: node[1-3]", "nodes: node[1-2]").replace(".[21-23]", ".[21-22]")
    smaller.write_text(text)
    plan = flab.run("plan", str(smaller), "--json")
    assert plan.rc == 0, plan.stdout + plan.stderr
    done = flab.run("deploy", str(smaller), "--json", "-q", "--join-timeout", "90")
    assert done.rc == 0, done.stdout + done.stderr
    assert not Path(f"/proc/{node_pid}").exists()  # the machine, its slurmd with it
    assert HEALTHY not in flab.states()
    record = ClusterDir.of(NAME, flab.state).current
    run = json.loads((record / "run.json").read_text())
    assert run["command"].startswith("hpckit deploy ") and run["command"].endswith("--join-timeout 90")
    assert run["user"] == "root" and len(run["blueprint_sha256"]) == 64
    restarts = done.json()["restarts"]
    assert {"host": "ctl", "what": "slurmctld restarted"} in restarts, restarts  # a node left slurm.conf
    flab.blueprint = smaller


def test_destroy_leaves_nothing_outside_the_state_folder(flab: FaultLab) -> None:
    bin_before = _bin_listing()
    done = flab.destroy()
    assert done.rc == 0, done.stderr
    assert _bin_listing() == bin_before
    assert list(flab.home.iterdir()) == [], "hpckit wrote into HOME"
    assert list((flab.home.parent / "tmp").iterdir()) == [], "hpckit left files in TMPDIR"
    later = flab.run("health", "report", "--cluster", NAME)
    assert later.rc == 2 and f"cluster {NAME!r} was destroyed" in later.stderr, later.stderr
    assert "known_hosts" not in later.stderr
