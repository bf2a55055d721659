"""Health checks on a lab cluster of their own (net 10.77.49, bridge hpckh49): the quick tier as Slurm's
HealthCheckProgram, the nightly schedule, clean and faulty sweeps, self-resume, the circuit breaker; and the
monitoring that watches them: Prometheus on the controller scraping every host and hpckit's Slurm exporter,
its alerts firing on the planted faults and resolving after the fix.

The faults are planted inside the nodes' namespaces and undone at the end of each test; the whole lab
is destroyed at the end of the module. Slurm runs the quick tier every INTERVAL seconds on every node.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.labutil import Cluster, lab_blueprint, needs_lab

pytestmark = [pytest.mark.lab, needs_lab()]

NAME, NET, BRIDGE = "healthci", "10.77.49", "hpckh49"
INTERVAL = 30  # the shortest HealthCheckInterval a blueprint accepts
HEALTH = "/etc/hpckit/hpckit-health"
SCRAPE = 5  # Prometheus' scrape and rule interval here (monitoring.scrape_interval_s)
PROMETHEUS = f"http://{NET}.10:9090"  # on the controller
TEXTFILE = "/var/lib/prometheus/node-exporter/hpckit_health.prom"


class HealthLab:
    def __init__(self, cluster: Cluster, store: Path) -> None:
        self.cluster = cluster
        self.store = store  # the shared store, as this machine sees it

    def lx(self, node: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run as root inside a node's namespaces (what planting a fault needs)."""
        from hpckit.lab.provider import lab_exec

        done = lab_exec(NAME, node, argv, timeout=120)
        if check:
            assert done.rc == 0, f"{argv} on {node}: {done.stdout}{done.stderr}"
        return done

    def login(self, *argv: str, check: bool = True) -> Any:
        return self.cluster.on("login", *argv, check=check, timeout=600)

    def states(self) -> dict[str, tuple[str, str]]:
        out = self.login("sinfo", "-h", "-N", "-o", "%N|%T|%E").stdout
        return {n: (s, r) for n, s, r in (line.split("|", 2) for line in out.splitlines() if line)}

    def drained(self) -> dict[str, str]:
        return {n: r for n, (s, r) in self.states().items() if s.rstrip("*~#!%$@^-+") in ("drained", "draining")}

    def sweep(self, *args: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.login(HEALTH, "sweep", "--json", *args).stdout)
        return data

    def runs(self) -> int:
        return len(list((self.store / "history").glob("*.parquet")))

    def verdict(self, node: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.store / "latest" / f"{node}.json").read_text())
        return data

    def prometheus(self, path: str, **query: str) -> Any:
        url = f"{PROMETHEUS}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return body["data"]

    def firing(self, alert: str) -> dict[str, dict[str, str]]:
        """The alerts of that name Prometheus has firing: node (or host) -> labels."""
        alerts = self.prometheus("/api/v1/alerts")["alerts"]
        return {
            a["labels"].get("node", a["labels"].get("host", "")): a["labels"]
            for a in alerts
            if a["labels"]["alertname"] == alert and a["state"] == "firing"
        }

    def quick(self, node: str) -> None:
        """A run of the node's own quick tier, as slurmd would start it."""
        self.lx(node, "/etc/hpckit/health-check", check=False)


def wait_for(what: str, condition: Callable[[], bool], timeout: float = 6 * INTERVAL) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(2)


def _blueprint(tmp: Path) -> Path:
    """The lab blueprint without accounting, its quick tier every INTERVAL seconds (deploy wires the rest:
    the hpckit_health role and slurm.conf's HealthCheck* lines)."""
    path = lab_blueprint(tmp, NAME, NET, BRIDGE)
    text = path.read_text().replace("  accounting: true\n", "  accounting: false\n")
    text = text.replace("  quick_interval_s: 300\n", f"  quick_interval_s: {INTERVAL}\n")
    monitoring = f"monitoring:\n  enabled: true\n  scrape_interval_s: {SCRAPE}\n"
    text = text.replace("monitoring:\n  enabled: false\n", monitoring)
    assert f"quick_interval_s: {INTERVAL}" in text and "scrape_interval_s" in text
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def hlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HealthLab]:
    tmp = tmp_path_factory.mktemp("healthlab")
    cluster = Cluster(NAME, _blueprint(tmp), tmp / "state")
    try:
        done = cluster.deploy()
        assert done.rc == 0, f"deploy failed:\n{done.stdout}\n{done.stderr}"
        from hpckit.lab.provider import shared_dir_source

        yield HealthLab(cluster, shared_dir_source(NAME, "/shared") / "hpckit" / "health")
    finally:
        cluster.destroy()


def test_prometheus_scrapes_every_host_and_slurm(hlab: HealthLab) -> None:
    def all_up() -> bool:
        targets = hlab.prometheus("/api/v1/targets")["activeTargets"]
        return len(targets) == 8 and all(t["health"] == "up" for t in targets)

    wait_for("every target up (prometheus, 6 node exporters, hpckit's Slurm exporter)", all_up, timeout=60)
    targets = hlab.prometheus("/api/v1/targets")["activeTargets"]
    hosts = sorted(t["labels"]["host"] for t in targets if t["labels"]["job"] == "node")
    assert hosts == ["ctl", "login", "node1", "node2", "node3", "node4"]
    idle = hlab.prometheus("/api/v1/query", query='slurm_nodes{state="idle"}')["result"]
    assert [r["value"][1] for r in idle] == ["4"], idle
    up = hlab.prometheus("/api/v1/query", query="sum(slurm_node_up)")["result"]
    assert [r["value"][1] for r in up] == ["4"], up
    rules = hlab.prometheus("/api/v1/rules")["groups"]
    assert {r["name"] for g in rules for r in g["rules"]} >= {"HpckitNodeDrained", "SlurmNodeDown"}
    assert hlab.prometheus("/api/v1/alerts")["alerts"] == []


def test_second_deploy_changes_nothing(hlab: HealthLab) -> None:
    again = hlab.cluster.deploy()
    assert again.rc == 0, again.stdout + again.stderr
    hosts = again.json()["hosts"]
    assert isinstance(hosts, dict) and {h: t["changed"] for h, t in hosts.items()} == dict.fromkeys(hosts, 0)


def test_quick_tier_runs_as_health_check_program(hlab: HealthLab) -> None:
    conf = hlab.login("cat", "/etc/slurm/slurm.conf").stdout
    assert "HealthCheckProgram=/etc/hpckit/health-check" in conf
    assert f"HealthCheckInterval={INTERVAL}" in conf and "HealthCheckNodeState=ANY" in conf
    start = time.time()
    nodes = [f"node{i}" for i in range(1, 5)]

    def all_checked() -> bool:
        try:
            return all(hlab.verdict(n)["time"] > start for n in nodes)
        except FileNotFoundError:
            return False

    wait_for("every node's HealthCheckProgram run", all_checked)
    for node in nodes:
        verdict = hlab.verdict(node)
        assert verdict["tier"] == "quick"
        bad = [r for r in verdict["rows"] if r["status"] != "OK" and r["fault"] != "absent"]
        assert bad == [], (node, bad)
        assert {r["check"] for r in verdict["rows"]} >= {"host.munge", "host.mounts", "gpu.count", "host.slurmd"}
    assert hlab.drained() == {}


def test_nightly_sweep_is_registered(hlab: HealthLab) -> None:
    has_scrontab = hlab.login("sh", "-c", "command -v scrontab", check=False).rc == 0
    if has_scrontab:
        assert "hpckit-health sweep" in hlab.login("scrontab", "-l").stdout
        return
    # Debian 12's slurm-client has no scrontab: the role queued a job held until the nightly time.
    queue = hlab.login("squeue", "-h", "-n", "hpckit-health-sweep", "-o", "%i|%T|%r|%S").stdout.split()
    assert len(queue) == 1, queue
    job_id, state, reason, begin = queue[0].split("|")
    assert (state, reason) == ("PENDING", "BeginTime") and begin.endswith("T02:00:00")
    again = hlab.login(HEALTH, "schedule").stdout
    assert again.strip() == f"sweep job {job_id} already waits for {begin}"


def test_scheduled_sweep_runs_as_a_job_and_queues_the_next(hlab: HealthLab) -> None:
    """The chained schedule end to end: a sweep job due now runs on a compute node, queues the next one
    at the configured nightly time, then sweeps the other nodes with jobs of their own."""
    before = hlab.runs()
    queued = hlab.login(HEALTH, "schedule", "--cron", "* * * * *").stdout.split()
    job_id = queued[2]

    def done() -> bool:
        state = hlab.login("sacct", "-n", "-X", "-j", job_id, "-o", "State", check=False).stdout.strip()
        if state:
            return state.startswith("COMPLETED")
        return job_id not in hlab.login("squeue", "-h", "-o", "%i").stdout.split()

    wait_for(f"the sweep job {job_id}", done, timeout=240)
    log = (hlab.store / "logs" / f"sweep-{job_id}.out").read_text()
    assert "queued for" in log and "health sweep" in log, log
    assert hlab.runs() == before + 1
    queue = hlab.login("squeue", "-h", "-n", "hpckit-health-sweep", "-o", "%S").stdout.split()
    assert len(queue) == 1 and queue[0].endswith("T02:00:00")


def test_clean_sweep(hlab: HealthLab) -> None:
    before = hlab.runs()
    summary = hlab.sweep()
    assert hlab.runs() == before + 1
    assert {d["action"] for d in summary["decisions"]} == {"none"} and summary["circuit_breaker"] == []
    assert sorted(summary["sources"]) == ["node1", "node2", "node3", "node4"]
    assert hlab.drained() == {}
    import pandas as pd

    rows = pd.read_parquet(hlab.store / "history" / f"{summary['run_id']}.parquet")
    odd = rows[(rows["status"] != "OK") & ~((rows["status"] == "UNKNOWN") & (rows["fault"] == "absent"))]
    assert odd.empty, odd.to_string()
    assert set(rows["check"]) >= {"gpu.gemm", "host.kernel_log"}  # the nightly tier ran in the jobs


def test_planted_faults_drain_exactly_those_nodes_and_they_resume(hlab: HealthLab) -> None:
    admin = "admin: DIMM swap, ticket 4711"
    hlab.login("scontrol", "update", "nodename=node4", "state=drain", f"reason={admin}")
    try:
        hlab.lx("node1", "sh", "-c", "kill $(cat /run/munge/munged.pid)")
        hlab.lx("node2", "mount", "-o", "remount,ro,bind", "/shared")
        hlab.lx("node3", "rm", "/dev/nvidia2")
        # slurmctld can no longer reach node1 to start its health check: its own run records the verdict.
        hlab.quick("node1")
        summary = hlab.sweep()
        expected = {
            "node1": "hpckit:munge-down:host.munge",
            "node2": "hpckit:mount-unwritable:host.mounts",
            "node3": "hpckit:gpu-missing:gpu.count",
            "node4": admin,
        }
        wait_for("the three faulty nodes drained", lambda: hlab.drained() == expected, timeout=3 * INTERVAL)
        assert "node4" in summary["skipped"] and admin in summary["skipped"]["node4"]
        # The rule fires at its first evaluation (no `for:`): within the exporter's 10 s cache, a scrape and a
        # rule round; twice that on a busy machine.
        drained = {n: r for n, r in expected.items() if r.startswith("hpckit:")}
        wait_for("HpckitNodeDrained firing", lambda: set(hlab.firing("HpckitNodeDrained")) == set(drained), 12 * SCRAPE)
        assert {n: a["reason"] for n, a in hlab.firing("HpckitNodeDrained").items()} == drained
    finally:
        hlab.lx("node1", "/etc/init.d/munge", "start", check=False)
        hlab.lx("node2", "mount", "-o", "remount,rw,bind", "/shared", check=False)
        hlab.lx("node3", "sh", "-c", "test -e /dev/nvidia2 || mknod -m 0666 /dev/nvidia2 c 1 3", check=False)
    # Fixed: each node resumes itself after resume_after clean quick runs; the admin's drain stays.
    for _ in range(2):
        hlab.quick("node1")  # node1 may still be "not responding" for slurmctld for a while
    wait_for("the fixed nodes resumed", lambda: hlab.drained() == {"node4": admin}, timeout=15 * INTERVAL)
    wait_for("HpckitNodeDrained resolved", lambda: hlab.firing("HpckitNodeDrained") == {}, 12 * SCRAPE)
    assert hlab.states()["node4"] == ("drained", admin)
    hlab.login("scontrol", "update", "nodename=node4", "state=resume")
    wait_for("node4 back", lambda: hlab.drained() == {})


def test_same_fault_on_three_of_four_trips_the_breaker(hlab: HealthLab) -> None:
    planted = ("node1", "node2", "node3")
    start = time.time()
    try:
        for node in planted:
            hlab.lx(node, "rm", "/dev/nvidia2")

        def seen_twice() -> bool:  # every node's quick tier has run at least twice on the fault
            return all(hlab.verdict(n)["time"] > start + INTERVAL for n in planted)

        wait_for("two quick runs on the faulty nodes", seen_twice)
        assert hlab.drained() == {}  # the quick tiers held back: 3 of 4 nodes fail gpu.count
        summary = hlab.sweep("--textfile", TEXTFILE)  # as the scheduled sweep writes it with monitoring on
        assert [(t["check"], t["failing"], t["checked"]) for t in summary["circuit_breaker"]] == [
            ("gpu.count", list(planted), 4)
        ]
        assert hlab.drained() == {}
        breaker = lambda: hlab.firing("HpckitCircuitBreakerHolding")  # noqa: E731
        wait_for("HpckitCircuitBreakerHolding firing", lambda: "gpu.count" in {a["check"] for a in breaker().values()},
                 12 * SCRAPE)  # fmt: skip
    finally:
        for node in planted:
            hlab.lx(node, "sh", "-c", "test -e /dev/nvidia2 || mknod -m 0666 /dev/nvidia2 c 1 3", check=False)
    wait_for("clean verdicts again", lambda: all(not _fails(hlab.verdict(n)) for n in planted))


def _fails(verdict: dict[str, Any]) -> bool:
    return any(r["status"] == "FAIL" for r in verdict["rows"])
