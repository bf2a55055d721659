"""Jobs and wall time for `hpckit bench bisect` to name a throttled node, on 4, 8 and 16 lab nodes (needs root
and the lab packages; brings up one lab at a time on 10.77.172-174, bridges hb172-hb174, and takes it down).

For each size: deploy the lab, throttle one node's link to 50 Mbit/s both ways (tc tbf), run
`hpckit bench bisect -N N --json` and time it from the command's start to its exit; then the same with
nothing throttled. Beside it, what an all-pairs test costs: N(N-1)/2 jobs, at best N-1 rounds of N/2
disjoint pairs at once, timed here as N-1 times the median pair round the bisect itself ran.

Run: python benchmarks/bench_bisect.py [--sizes 4,8,16] [--no-record]
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
from tests.labutil import hpckit, lab_blueprint  # noqa: E402

RATE = "50mbit"


def lab(n: int, tmp: Path) -> tuple[str, Path, Path]:
    name, net, bridge = f"hbb{n}", f"10.77.{172 + (4, 8, 16).index(n)}", f"hb{172 + (4, 8, 16).index(n)}"
    tmp.mkdir(parents=True, exist_ok=True)
    path = lab_blueprint(tmp, name, net, bridge)
    path.write_text(path.read_text().replace("node[1-4]", f"node[1-{n}]").replace(".[21-24]", f".[21-{20 + n}]"))
    return name, path, tmp / "state"


def bisect(name: str, n: int, state: Path) -> tuple[float, dict[str, Any]]:
    start = time.monotonic()
    done = hpckit("bench", "bisect", "--cluster", name, "-N", str(n), "--json", "-q", state=state, timeout=1800)
    took = time.monotonic() - start
    if not done.stdout.strip():
        raise SystemExit(f"bisect failed:\n{done.stderr}")
    report: dict[str, Any] = json.loads(done.stdout)
    print(json.dumps(report), flush=True)  # the evidence, round by round, for the log
    return took, report


def one_size(n: int, victim: str, tmp: Path) -> dict[str, Any]:
    from hpckit.lab.throttle import throttle, unthrottle

    name, path, state = lab(n, tmp)
    deployed = hpckit("deploy", str(path), "-q", "--json", state=state, timeout=1800)
    if deployed.rc != 0:
        raise SystemExit(f"deploy of {n} nodes failed:\n{deployed.stdout}\n{deployed.stderr}")
    try:
        throttle(name, victim, RATE)
        try:
            took, report = bisect(name, n, state)
        finally:
            unthrottle(name, victim)
        healthy_took, healthy = bisect(name, n, state)
    finally:
        hpckit("destroy", str(path), state=state)
    pair_rounds = [r["seconds"] for r in report["rounds"] if r["kind"] == "pairs"]
    return {
        "n": n,
        "victim": victim,
        "named": [s["node"] for s in report["slow_nodes"]],
        "jobs": report["jobs"],
        "rounds": len(report["rounds"]),
        "fabric_jobs": sum(len(r["jobs"]) for r in report["rounds"] if r["kind"] != "single"),
        "seconds": took,
        "healthy_named": [s["node"] for s in healthy["slow_nodes"]],
        "healthy_jobs": healthy["jobs"],
        "healthy_seconds": healthy_took,
        "all_pairs_jobs": n * (n - 1) // 2,
        "all_pairs_s": (n - 1) * statistics.median(pair_rounds) if pair_rounds else float("nan"),
        "pair_round_s": statistics.median(pair_rounds) if pair_rounds else float("nan"),
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| nodes | throttled | named | jobs (rounds) | of which fabric | wall time | all-pairs jobs | all-pairs, est. "
        "| "
        "nothing throttled: named, jobs, time |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']} | {r['victim']} | {', '.join(r['named']) or 'none'} | {r['jobs']} ({r['rounds']}) | "
            f"{r['fabric_jobs']} | {r['seconds']:.0f} s | {r['all_pairs_jobs']} | {r['all_pairs_s']:.0f} s | "
            f"{', '.join(r['healthy_named']) or 'none'}, {r['healthy_jobs']}, {r['healthy_seconds']:.0f} s |"
        )
    return "\n".join(lines)


def simulated(sizes: tuple[int, ...] = (16, 64, 256, 1024, 4096)) -> str:
    """Jobs and rounds on larger fleets, from the search itself on a simulated fabric (one slow node)."""
    from hpckit.bench.bisect import bisect as search
    from tests.test_bench_bisect import fabric, nodes

    lines = ["| nodes | jobs (single-node + fabric) | rounds | all-pairs jobs |", "| --- | --- | --- | --- |"]
    for n in sizes:
        report = search(nodes(n), fabric(n, [f"node{n // 2 + 1}"]))
        fabric_jobs = report.jobs - n
        lines.append(f"| {n} | {n} + {fabric_jobs} | {len(report.rounds)} | {n * (n - 1) // 2} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4,8,16")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-bisect-") as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            victim = f"node{n // 2 + 1}"  # in the second half: the search goes as deep as for any other
            rows.append(one_size(n, victim, Path(tmp) / str(n)))
            print(json.dumps(rows[-1]), flush=True)
    body = "\n".join(
        [
            "## Naming a slow node (`benchmarks/bench_bisect.py`)",
            "",
            f"`hpckit bench bisect -N N` on the lab, one node's link throttled to {RATE} both ways (tc tbf), the",
            "torch backend over gloo (1 MiB probes; single-node probes 2 ranks). Wall time is the command's, start",
            "to exit. All-pairs: N(N-1)/2 jobs; its time is estimated as N-1 rounds of disjoint pairs, each as",
            "long as the median pair round of the same bisect. Lab nodes share this machine's 2 cores.",
            "",
            table(rows),
            "",
            "The same search on a simulated fabric (no jobs run; one slow node in the second half):",
            "",
            simulated(),
        ]
    )
    print(body)
    if not args.no_record:
        record("bisect", body)


if __name__ == "__main__":
    main()
