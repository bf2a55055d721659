"""The developer's test tier, `pytest -m "not lab and not slow"`: its wall and CPU time as a developer runs it.

Target: under 3 minutes of wall time on a 2-core box (no root, no lab, no Slurm build), so that the edit-test loop
stays short; a test of more than a few seconds goes to the full run (`@pytest.mark.slow`). CPU time is the
pytest process's and its children's (the playbooks some tests run): on a shared box it is what the tier costs,
and wall time on an idle 2-core box is close to it (pytest runs one test at a time).

Run: python benchmarks/bench_dev_tier.py [--no-record]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._record import record

REPO = Path(__file__).resolve().parent.parent
TIER = "not lab and not slow"


def run_tier() -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (children's user + system) and pytest's last line."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    argv = [sys.executable, "-m", "pytest", "-q", "-m", TIER, "-p", "no:cacheprovider", "tests"]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [line for line in done.stdout.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    return wall, cpu, lines[-1].strip("= ") if lines else f"pytest exited {done.returncode}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-record", action="store_true", help="print only, leave RESULTS.md alone")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    wall, cpu, summary = run_tier()
    load_after = os.getloadavg()[0]
    body = (
        '## Developer\'s test tier (`benchmarks/bench_dev_tier.py`)\n\n`pytest -m "not lab and not slow"`, '
        "target under 180 s wall on 2 cores.\n\n"
        "| wall | CPU (pytest and children) | tests | load average (1 min) before, after |\n"
        "| --- | --- | --- | --- |\n"
        f"| {wall:.0f} s | {cpu:.0f} s | {summary} | {load_before:.1f}, {load_after:.1f} |\n\n"
        "pytest runs one test at a time: on an idle 2-core box the wall time is close to the CPU time; a load "
        "average above 2 means other work shared the cores and stretched the wall time."
    )
    print(body)
    if not args.no_record:
        record("dev_tier", body)


if __name__ == "__main__":
    main()
