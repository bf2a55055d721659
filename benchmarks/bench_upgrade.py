"""The rolling upgrade's wall time and the running job's largest heartbeat gap, on 4 nodes and on more:
tests/test_rolling_upgrade_lab.py (a lab on SchedMD's 24.11.5 built from source, `hpckit upgrade --batch 50%` to
the test release 24.11.99 while a job on every node writes a line a second to the shared filesystem) run once
per node count; the test hands what it measured to this script through a file. The target: 16 nodes take at
most 1.5x the time of 4, and the heartbeat misses no beat (largest gap near 1 s).

Needs root, the lab packages and the 24.11.5 tarball in hpckit's source cache; the test builds 24.11.99 first
where its packages are not cached (~20-25 min on 2 cores). One lab at a time: run it under
`flock /tmp/hpckit-lab.lock`.

Run: python benchmarks/bench_upgrade.py [--nodes 4,16] [--no-record]; or record what a run of the test measured
(HPCKIT_ROLL_RESULTS=FILE): python benchmarks/bench_upgrade.py --measured FILE...
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._record import record

REPO = Path(__file__).resolve().parent.parent
TEST = "tests/test_rolling_upgrade_lab.py"


def measure(nodes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hpckit-bench-upgrade-") as tmp:
        results = Path(tmp) / "measured.json"
        env = {**os.environ, "HPCKIT_ROLL_NODES": str(nodes), "HPCKIT_ROLL_RESULTS": str(results)}
        done = subprocess.run([sys.executable, "-m", "pytest", TEST, "-x", "-q", "-s"], cwd=REPO, env=env, check=False)
        if done.returncode != 0 or not results.is_file():
            sys.exit(f"{TEST} on {nodes} nodes failed (rc {done.returncode})")
        measured: dict[str, Any] = json.loads(results.read_text())
        return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="4,16")
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--measured", nargs="+", type=Path, help="the test's measurement files, instead of runs")
    args = parser.parse_args()
    if args.measured:
        rows = [json.loads(path.read_text()) for path in args.measured]
    else:
        rows = [measure(int(n)) for n in args.nodes.split(",")]
    lines = [
        f"| {r['nodes']} | {r['upgrade_s']:.0f} s | {r['slurmd_batches_s']:.0f} s | "
        f"{r['box_busy_s']:.0f} s ({r['box_busy_s'] / r['upgrade_s'] / r['cores']:.0%}) | "
        f"{max(r['largest_gap_s'].values()):.2f} s | {r['load'][0]:.1f} |"
        for r in rows
    ]
    body = (
        "## Rolling Slurm upgrade, 24.11.5 -> 24.11.99 (`benchmarks/bench_upgrade.py`)\n\n"
        "`hpckit upgrade --batch 50%` on a lab built from source (controller with slurmdbd, login, N nodes), packages "
        "cached, while a job on every node writes a heartbeat line a second to the shared filesystem. Target: 16 "
        "nodes within 1.5x the time of 4, no missed beat. Every lab node shares this box's cores: the CPU column is "
        "the box's busy time during the upgrade (and its share of all cores' time), the slurmd column the two "
        "batches' part of the wall time.\n\n"
        "| nodes | upgrade wall | slurmd batches | box CPU busy | largest heartbeat gap (any node) "
        "| load (1 min) after |\n"
        "| --- | --- | --- | --- | --- | --- |\n" + "\n".join(lines)
    )
    print(body)
    if not args.no_record:
        record("rolling_upgrade", body)


if __name__ == "__main__":
    main()
