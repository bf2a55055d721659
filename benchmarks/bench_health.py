"""Health check speed on the lab (needs root and the lab packages).

1. quick tier latency per node: the HealthCheckProgram (`hpckit health check --tier quick --act`) run
   inside each node of a 4-node lab, several times; target <= 2 s per run (Slurm kills it at 60 s);
2. nightly sweep wall time (`hpckit health sweep` on the login node: one exclusive job per idle node,
   policy, Parquet history, report) on a 4-node and a 16-node lab; target 16 nodes <= 1.3x 4 nodes.

Deploy installs the checks (HealthCheckProgram, the sweep); the labs space slurmd's own quick-tier runs an
hour apart, so that nothing else runs during the timings.
Run: python benchmarks/bench_health.py [--no-record] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._record import record  # noqa: E402
from tests.labutil import Cluster, lab_blueprint  # noqa: E402

NET, BRIDGE = "10.77.50", "hpckh50"
HEALTH = "/etc/hpckit/hpckit-health"


def blueprint(tmp: Path, name: str, nodes: int) -> Path:
    path = lab_blueprint(tmp, name, NET, BRIDGE)
    text = path.read_text().replace("  accounting: true\n", "  accounting: false\n")
    # Deploy installs the health checks; slurmd's own runs of the quick tier are spaced out of the timings.
    text = text.replace("  quick_interval_s: 300\n", "  quick_interval_s: 3600\n")
    text = text.replace("node[1-4]", f"node[1-{nodes}]").replace(
        "$(vars.net).[21-24]", f"$(vars.net).[21-{20 + nodes}]"
    )
    path.write_text(text)
    return path


def up(tmp: Path, nodes: int) -> Cluster:
    cluster = Cluster(f"hbench{nodes}", blueprint(tmp, f"hbench{nodes}", nodes), tmp / "state")
    done = cluster.deploy()
    if done.rc != 0:
        cluster.destroy()
        raise SystemExit(f"deploy of {nodes} nodes failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return cluster


def quick_latency(cluster: Cluster, nodes: int, repeat: int) -> list[float]:
    from hpckit.lab.provider import lab_exec

    times = []
    for _ in range(repeat):
        for i in range(1, nodes + 1):
            start = time.monotonic()
            done = lab_exec(cluster.name, f"node{i}", [HEALTH, "check", "--tier", "quick", "--act"], timeout=120)
            times.append(time.monotonic() - start)
            if done.rc != 0 or "quick tier" not in done.stdout:
                raise SystemExit(f"quick tier on node{i} failed: {done.stdout}{done.stderr}")
    return times


def sweep_times(cluster: Cluster, repeat: int) -> list[tuple[float, float]]:
    """(wall seconds seen from the login node, the sweep's own seconds) per run."""
    out = []
    for _ in range(repeat):
        start = time.monotonic()
        done = cluster.on("login", HEALTH, "sweep", "--json", timeout=900)
        wall = time.monotonic() - start
        summary: dict[str, Any] = json.loads(done.stdout)
        jobs = [s for s in summary["sources"].values() if s.startswith("job")]
        if len(jobs) != len(summary["sources"]):
            raise SystemExit(f"not every node ran its job: {summary['sources']}")
        out.append((wall, float(summary["seconds"])))
    return out


# N exclusive one-node jobs at once from the login node, as the sweep starts them, each running only
# `python -c pass` with the interpreter the node jobs use: what every sweep pays per node before a check runs.
FLOOR = """
python=$(sed -n 's/^exec \\([^ ]*\\) .*/\\1/p' /etc/hpckit/hpckit-health)
start=$(date +%s%N)
for i in $(seq 1 {nodes}); do
  srun --nodelist=node$i --nodes=1 --ntasks=1 --exclusive --input=none --quiet -- "$python" -c pass &
done
wait
echo $(( ($(date +%s%N) - start) / 1000000 ))
"""


def fanout_floor(cluster: Cluster, nodes: int, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        done = cluster.on("login", "sh", "-c", FLOOR.format(nodes=nodes), timeout=300)
        out.append(int(done.stdout.split()[-1]) / 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hpckit-bench-health-"))
    results: dict[int, list[tuple[float, float]]] = {}
    quick: list[float] = []
    floors: dict[int, list[float]] = {}
    for nodes in (4, 16):
        cluster = up(tmp, nodes)
        try:
            if nodes == 4:
                quick = quick_latency(cluster, nodes, args.repeat)
            cluster.on("login", HEALTH, "sweep", timeout=900)  # warm-up: first job start, pandas import cache
            results[nodes] = sweep_times(cluster, args.repeat)
            floors[nodes] = fanout_floor(cluster, nodes, args.repeat)
        finally:
            cluster.destroy()
    body = report(quick, results, floors, args.repeat)
    print(body)
    if not args.no_record:
        record("health", body)


def report(
    quick: list[float], sweeps: dict[int, list[tuple[float, float]]], floors: dict[int, list[float]], repeat: int
) -> str:
    median = {n: statistics.median(w for w, _ in runs) for n, runs in sweeps.items()}
    inner = {n: statistics.median(s for _, s in runs) for n, runs in sweeps.items()}
    floor = {n: statistics.median(runs) for n, runs in floors.items()}
    ratio = median[16] / median[4]
    budget = 0.3 * median[4]
    q_med, q_max = statistics.median(quick), max(quick)
    return "\n".join(
        [
            "## Health checks on the lab (`benchmarks/bench_health.py`)",
            "",
            f"Quick tier (HealthCheckProgram, `--act`), {len(quick)} runs on 4 nodes ({repeat} each), "
            "timed from outside the node (process start to exit). Target <= 2 s.",
            "",
            "| quick tier | median | max | verdict |",
            "| --- | --- | --- | --- |",
            f"| per node run | {q_med:.2f} s | {q_max:.2f} s | {'ok' if q_max <= 2.0 else 'over'} |",
            "",
            f"Nightly sweep from the login node, median of {repeat} after one warm-up; every node ran its job. "
            "Target 16 nodes <= 1.3x 4 nodes. The floor column: the same fan-out of exclusive one-node jobs "
            "from the login node, each running only `python -c pass` (no hpckit, no check).",
            "",
            "| nodes | sweep wall (login) | sweep's own time | floor: N x srun python -c pass |",
            "| --- | --- | --- | --- |",
            *(f"| {n} | {median[n]:.2f} s | {inner[n]:.2f} s | {floor[n]:.2f} s |" for n in sorted(median)),
            f"| 16 / 4 | {ratio:.2f}x ({'ok' if ratio <= 1.3 else 'over'}) | "
            f"{inner[16] / inner[4]:.2f}x | {floor[16] / floor[4]:.2f}x |",
            "",
            f"- 1.3x allows the 16-node sweep {budget:.2f} s more than the 4-node one; it takes "
            f"{median[16] - median[4]:.2f} s more, of which the floor's own growth is {floor[16] - floor[4]:.2f} s.",
            "- All lab nodes share this machine's cores, so 16 node jobs (srun, slurmstepd, a Python start, the "
            "checks) run on the same cores that 4 share; on a real cluster each node brings its own.",
        ]
    )


if __name__ == "__main__":
    main()
