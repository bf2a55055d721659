"""Submit-to-result latency on the lab: `hpckit submit --wait` against `sbatch --wait`, side by side.

A trivial 4-node job (`srun true` on every node) and a 2-second one (`srun sleep 2`), each submitted
in turns (so both see the same load) and timed from the moment the command starts on the login node to
the moment it returns with the job's exit status:

1. `hpckit submit run --wait` run on the login node (as a user there would);
2. `sbatch --wait` of the same rendered script, on the login node;
3. `hpckit submit run --wait --cluster NAME` from the deploying machine (every Slurm command over SSH).

Each command reaches the login node over one already-open SSH connection, and the time of an SSH
round trip (`true`) is measured and subtracted, so the numbers are the commands' own.
Targets: hpckit median <= 2 s and <= 0.2x sbatch --wait (whose polls come at 2, 10 and 42 s).

Run: python benchmarks/bench_submit.py [--runs 7] [--cluster NAME --state DIR] [--no-record]
(without --cluster it deploys a lab of its own and takes it down afterwards; needs root).
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._record import record  # noqa: E402
from hpckit.jobs.library import Library  # noqa: E402
from hpckit.slurm.connect import login_transport  # noqa: E402
from hpckit.slurm.transport import Transport  # noqa: E402
from tests.jobutil import hpckit_jobs  # noqa: E402
from tests.labutil import Cluster, lab_blueprint  # noqa: E402

JOBS = {"trivial (srun true)": "true", "2 s (srun sleep 2)": "sleep 2"}


def timed(call: Callable[[], bool]) -> float:
    start = time.monotonic()
    if not call():
        raise SystemExit("a benchmark job failed")
    return time.monotonic() - start


def ssh_overhead(login: Transport, runs: int) -> float:
    return statistics.median(timed(lambda: login.run(["true"]).ok) for _ in range(runs))


def measure(
    login: Transport, cluster: str, state: Path, login_hpckit: str, command: str, runs: int
) -> dict[str, list[float]]:
    sets = ["-s", "nodes=4", "-s", f"command={command}", "-s", "time=5"]
    script = Library().get("run").render({"nodes": "4", "command": command, "time": "5"}).script
    on_login = [*shlex.split(login_hpckit), "submit", "run", *sets, "--wait"]
    remote = ("submit", "run", *sets, "--wait", "--cluster", cluster)
    times: dict[str, list[float]] = {"hpckit on the login node": [], "sbatch --wait": [], "hpckit --cluster": []}
    for _ in range(runs):
        times["hpckit on the login node"].append(timed(lambda: login.run(on_login, timeout=120).ok))
        times["sbatch --wait"].append(timed(lambda: login.run(["sbatch", "--wait"], stdin=script, timeout=120).ok))
        times["hpckit --cluster"].append(timed(lambda: hpckit_jobs(*remote, state=state, timeout=120).rc == 0))
    return times


def table(results: dict[str, dict[str, list[float]]], overhead: float) -> tuple[list[str], list[str]]:
    rows, checks = [], []
    for job, times in results.items():
        # The two login-node rows each took one SSH round trip more than the command itself.
        own = {how: [t - (0 if how == "hpckit --cluster" else overhead) for t in ts] for how, ts in times.items()}
        med = {how: statistics.median(ts) for how, ts in own.items()}
        for how, ts in own.items():
            rows.append(f"| {job} | {how} | {med[how]:.2f} s | {min(ts):.2f}-{max(ts):.2f} s | {len(ts)} |")
        ours, theirs = med["hpckit on the login node"], med["sbatch --wait"]
        checks.append(
            f"- {job}: hpckit {ours:.2f} s (target <= 2 s: {'ok' if ours <= 2 else 'MISSED'}), "
            f"{ours / theirs:.2f}x sbatch --wait (target <= 0.2x: {'ok' if ours / theirs <= 0.2 else 'MISSED'})"
        )
    return rows, checks


def run(cluster: str, state: Path, login_hpckit: str, runs: int) -> str:
    login = login_transport(cluster, state)
    overhead = ssh_overhead(login, runs)
    results = {job: measure(login, cluster, state, login_hpckit, cmd, runs) for job, cmd in JOBS.items()}
    rows, checks = table(results, overhead)
    return (
        "## Submit to result (`benchmarks/bench_submit.py`)\n\n"
        "4-node jobs on the lab, each way in turn; the time from the command's start on the login node to its\n"
        f"return (the SSH round trip that carried it, median {overhead:.2f} s, subtracted). `hpckit --cluster`\n"
        "runs on the deploying machine and sends every Slurm command over SSH. The hpckit rows include starting\n"
        "Python.\n\n"
        "| job | how | median | range | runs |\n| --- | --- | --- | --- | --- |\n"
        + "\n".join(rows)
        + "\n\n"
        + "\n".join(checks)
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--cluster", help="an already deployed lab cluster (default: deploy one)")
    ap.add_argument("--state", type=Path, help="its HPCKIT_STATE folder")
    ap.add_argument("--login-hpckit", default="hpckit", help="the hpckit command on the login node")
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    lab: Cluster | None = None
    if args.cluster is None:
        tmp = Path(tempfile.mkdtemp(prefix="hpckit-bench-"))
        lab = Cluster("benchsub", lab_blueprint(tmp, "benchsub", "10.77.5", "hpckb5"), tmp / "state")
        if lab.deploy().rc != 0:
            lab.destroy()
            raise SystemExit("deploying the benchmark lab failed")
    cluster, state = (lab.name, lab.state) if lab else (args.cluster, args.state)
    try:
        body = run(cluster, state, args.login_hpckit, args.runs)
    finally:
        if lab is not None:
            lab.destroy()
    print(body)
    if not args.no_record:
        record("submit", body)


if __name__ == "__main__":
    main()
