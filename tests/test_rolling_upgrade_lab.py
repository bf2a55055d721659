"""A real rolling upgrade on the lab: blueprints/lab-built.yaml (controller with slurmdbd, login, node[1-4]) on
SchedMD's 24.11.5 built from source, taken by `hpckit upgrade --batch 50%` (two
batches of slurmd restarts, whatever the node count) to 24.11.99, the test release
(scripts/build-slurm-test-release.sh: 24.11.5 with only its version changed, built into hpckit's package cache),
while a four-node job writes a heartbeat line every second from each node to the shared filesystem and a second
job waits behind it. Both jobs complete, accounting still has the jobs from before, every daemon reports
24.11.99, the heartbeat's largest gap is printed (the goal: no missed beat), and a second upgrade changes nothing.

On a fresh machine the release script first builds 24.11.99 (930 s on a loaded 2-core box; scripts/test.sh
starts it in the background early, and the test waits for it); with the packages cached it takes 4 s, and the
whole test ~4 min (225 s, of which the upgrade 54 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from itertools import pairwise
from pathlib import Path

import pytest

from hpckit.paths import source_cache
from tests.labutil import REPO, Cluster, deployed, hpckit, needs_built_slurm, needs_lab

pytestmark = [pytest.mark.lab, needs_lab(), needs_built_slurm("24.11.5", "24.11.99"), pytest.mark.built_slurm]
NAME, NET, BRIDGE = "hroll", "10.77.211", "hroll0"
# benchmarks/bench_upgrade.py runs this test on more nodes, and reads what it measured from RESULTS_ENV's file.
NODES = int(os.environ.get("HPCKIT_ROLL_NODES", "4"))
RESULTS_ENV = "HPCKIT_ROLL_RESULTS"
COMPUTE = [f"node{i}" for i in range(1, NODES + 1)]
TARGET = "24.11.99"
# Half the nodes at a time: two batches on 4 nodes as on 16, so the node count costs parallel work only.
BATCH = "50%"
FIXTURE = source_cache() / f"slurm-{TARGET}-hpckit-test.tar.bz2"
BUILD_TIMEOUT_S = 3600
SHARED = "/shared/heartbeat"
FILESYSTEMS = """filesystems:
  - type: nfs
    name: shared
    server: ctl
    export: /srv/shared
    mount: /shared
"""
# One line per node per second, until the test has finished the upgrade and at least two minutes have passed.
HEARTBEAT = f"""#!/bin/bash
srun --ntasks-per-node=1 bash -c '
  start=$(date +%s)
  while [ ! -e {SHARED}/stop ] || [ $(( $(date +%s) - start )) -lt 120 ]; do
    echo "$(date +%s.%N)" >>{SHARED}/beat.$(hostname)
    sleep 1
  done'
"""


def blueprint(tmp: Path, version: str, source: Path | None = None) -> Path:
    text = (REPO / "blueprints" / "lab-built.yaml").read_text()
    text = text.replace("name: labbuilt\n", f"name: {NAME}\n", 1).replace('net: "10.77.1"', f'net: "{NET}"')
    text = text.replace("bridge: hpck1", f"bridge: {BRIDGE}").replace('"24.11.5"', f'"{version}"')
    text = text.replace("node[1-4]", f"node[1-{NODES}]").replace(
        "$(vars.net).[21-24]", f"$(vars.net).[21-{20 + NODES}]"
    )
    if source is not None:
        text = text.replace("  install: build\n", f"  install: build\n  source: {source}\n", 1)
    path = tmp / f"{NAME}-{version}.yaml"
    path.write_text(text.replace("containers:\n", FILESYSTEMS + "containers:\n", 1))
    return path


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("roll")
    with deployed(Cluster(NAME, blueprint(tmp, "24.11.5"), tmp / "state")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def release() -> Path:
    """The test release's tarball, its packages in the cache (built here where absent, or waited for)."""
    started = time.monotonic()
    script = REPO / "scripts" / "build-slurm-test-release.sh"
    done = subprocess.run([script], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    print(f"\n24.11.99's packages ready in {time.monotonic() - started:.0f} s")
    return FIXTURE


def _largest_gaps(cluster: Cluster) -> dict[str, float]:
    gaps = {}
    for node in COMPUTE:
        beats = [float(b) for b in cluster.on("ctl", "cat", f"{SHARED}/beat.{node}").stdout.split()]
        # At least two minutes of beats (a beat takes a little over a second, so 120 s give ~119 lines).
        assert beats[-1] - beats[0] >= 115, (node, len(beats))
        gaps[node] = max(b - a for a, b in pairwise(beats))
    return gaps


def _busy_s() -> float:
    """CPU seconds this box has spent busy since boot, all cores (for the benchmark: the lab's nodes share them)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _slurmd_batches_s(cluster: Cluster) -> float:
    """Seconds the upgrade spent in its slurmd batches, from the record's events (each play's start to the next)."""
    lines = (cluster.state / "clusters" / NAME / "current" / "events.jsonl").read_text().splitlines()
    starts = [json.loads(line) for line in lines]
    starts = [e for e in starts if e["event"] in ("playbook_on_play_start", "playbook_on_stats")]
    stamps = [(e.get("play", ""), datetime.fromisoformat(e["created"])) for e in starts]
    return sum((b - a).total_seconds() for (play, a), (_, b) in pairwise(stamps) if play.startswith("Upgrade slurmd"))


def _state(cluster: Cluster, job: str) -> str:
    out: str = cluster.on("login", "sacct", "-X", "-n", "-P", "-j", job, "-o", "State").stdout
    return out.strip()


def _wait_done(cluster: Cluster, job: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = _state(cluster, job)
        if state and state not in ("PENDING", "RUNNING", "COMPLETING"):
            return state
        time.sleep(2)
    return _state(cluster, job)


def _submit(cluster: Cluster, *argv: str) -> str:
    return str(cluster.on("login", "sbatch", "--parsable", *argv).stdout.strip())


def _running(cluster: Cluster, job: str) -> None:
    for _ in range(60):
        if cluster.on("login", "squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "RUNNING":
            return
        time.sleep(1)
    raise AssertionError(f"job {job} did not start")


def _versions(cluster: Cluster) -> dict[str, str]:
    """What each daemon reports: the controller's binaries, slurmctld live, every slurmd as slurmctld sees it."""
    found = {d: cluster.on("ctl", d, "-V").stdout.split()[1] for d in ("slurmctld", "slurmdbd")}
    for daemon in ("slurmctld", "slurmdbd"):
        exe = cluster.on("ctl", "bash", "-c", f"readlink /proc/$(cat /run/{daemon}.pid)/exe").stdout
        assert "(deleted)" not in exe, (daemon, exe)  # running the new binary, not the one it replaced
    config = cluster.on("login", "scontrol", "show", "config").stdout
    found["slurmctld live"] = next(ln.split()[-1] for ln in config.splitlines() if ln.startswith("SLURM_VERSION"))
    for line in cluster.on("login", "sinfo", "-h", "-N", "-o", "%N %v").stdout.splitlines():
        node, version = line.split()
        found[f"{node} sinfo"] = version
    for node in COMPUTE:
        shown = cluster.on("login", "scontrol", "-o", "show", "node", node).stdout
        found[f"{node} scontrol"] = next(w for w in shown.split() if w.startswith("Version=")).split("=")[1]
    return found


def test_a_rolling_upgrade_keeps_the_jobs_running(lab: Cluster, release: Path) -> None:
    lab.on("ctl", "bash", "-c", f"rm -rf {SHARED} && mkdir -p {SHARED} && chmod 1777 {SHARED}")
    before = lab.on("login", "srun", f"-N{NODES}", "-J", "before", "-t", "1", "hostname", timeout=120)
    assert sorted(before.stdout.split()) == sorted(COMPUTE), before.describe()
    lab.on("login", "bash", "-c", f"cat >{SHARED}/heartbeat.sh <<'EOF'\n{HEARTBEAT}EOF")
    job = ("--exclusive", "-t", "60", "-J", "heartbeat", "-o", f"{SHARED}/hb.out", "-D", SHARED)
    beat = _submit(lab, f"-N{NODES}", *job, f"{SHARED}/heartbeat.sh")
    _running(lab, beat)
    behind = _submit(lab, f"-N{NODES}", "--exclusive", "-t", "5", "-J", "behind", "--wrap", "srun hostname")
    assert lab.on("login", "squeue", "-h", "-j", behind, "-o", "%T").stdout.strip() == "PENDING"

    target = blueprint(lab.blueprint.parent, TARGET, release)
    started, busy = time.monotonic(), _busy_s()
    done = hpckit("upgrade", str(target), "--batch", BATCH, "--yes", "-q", state=lab.state, timeout=BUILD_TIMEOUT_S)
    upgrade_s, busy = time.monotonic() - started, _busy_s() - busy
    assert done.rc == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"Slurm {TARGET} on every host" in done.stdout, done.stdout
    lab.on("ctl", "touch", f"{SHARED}/stop")

    assert _wait_done(lab, beat, 400) == "COMPLETED", lab.on("ctl", "cat", f"{SHARED}/hb.out").stdout
    assert _wait_done(lab, behind, 120) == "COMPLETED"
    gaps = _largest_gaps(lab)
    print(f"\nupgrade to {TARGET} ({NODES} nodes, batch {BATCH}): {upgrade_s:.0f} s; largest heartbeat gap: {gaps}")
    if os.environ.get(RESULTS_ENV):
        measured = {
            "nodes": NODES,
            "upgrade_s": upgrade_s,
            "largest_gap_s": gaps,
            "load": os.getloadavg(),
            "box_busy_s": busy,
            "cores": os.cpu_count(),
            "slurmd_batches_s": _slurmd_batches_s(lab),
        }
        Path(os.environ[RESULTS_ENV]).write_text(json.dumps(measured))
    jobs = lab.on("login", "sacct", "-X", "-n", "-P", "-S", "2020-01-01", "-o", "JobName,State").stdout.splitlines()
    assert "before|COMPLETED" in jobs, jobs
    versions = _versions(lab)
    assert set(versions.values()) == {TARGET}, versions
    record = json.loads((lab.state / "clusters" / NAME / "current" / "versions.json").read_text())
    assert record["slurm"] == TARGET

    again = hpckit("upgrade", str(target), "--batch", BATCH, "--yes", state=lab.state)
    assert again.rc == 0 and "nothing to upgrade" in again.stdout, again.stdout + again.stderr
