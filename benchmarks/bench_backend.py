"""The torch backend's bus bandwidth against a minimal raw gloo all_reduce script, on the same lab nodes.

One 4-node job (one task per node, 2 CPUs each, gloo over the lab's bridge) runs, in turns, the
raw script and hpckit's torch_sweep (the `hpckit bench --backend torch` program) over the same sizes
(1 KiB..16 MiB, x2), warmup and iterations, so both see the same load. The raw script is what anyone
would write: one tensor, warmup, barrier, time `iters` in-place all_reduce calls on rank 0.
torch_sweep's in-place column is the same operation; its peak is what `hpckit bench` reports.

Target: torch backend busbw >= 0.95x the raw script's (median over the turns, at the peak size).

Run: python benchmarks/bench_backend.py [--turns 5] [--cluster NAME --state DIR] [--no-record]
(without --cluster it deploys a lab of its own and takes it down afterwards; needs root).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._record import record  # noqa: E402
from hpckit.bench.files import ClusterFiles  # noqa: E402
from hpckit.bench.run import stage_program  # noqa: E402
from hpckit.results import parse_text, peak_busbw  # noqa: E402
from hpckit.results.report import human_bytes  # noqa: E402
from hpckit.slurm.connect import login_transport  # noqa: E402
from hpckit.slurm.jobs import Jobs  # noqa: E402
from tests.labutil import Cluster, lab_blueprint  # noqa: E402

BENCH_DIR = "/shared/hpckit-bench-backend"
MIN_BYTES, MAX_BYTES, WARMUP, ITERS = 1024, 16 << 20, 5, 20
TARGET = 0.95

RAW = f"""
import os, time, torch, torch.distributed as dist
os.environ.setdefault("RANK", os.environ["SLURM_PROCID"])
os.environ.setdefault("WORLD_SIZE", os.environ["SLURM_NTASKS"])
dist.init_process_group("gloo")
rank, n = dist.get_rank(), dist.get_world_size()
size = {MIN_BYTES}
while size <= {MAX_BYTES}:
    t = torch.ones(size // 4)
    for _ in range({WARMUP}):
        dist.all_reduce(t)
    dist.barrier()
    start = time.perf_counter()
    for _ in range({ITERS}):
        dist.all_reduce(t)
    took = (time.perf_counter() - start) / {ITERS}
    if rank == 0:
        print(f"RAW {{size}} {{took * 1e6:.2f}} {{size / took / 1e9 * 2 * (n - 1) / n:.6f}}", flush=True)
    size *= 2
dist.destroy_process_group()
"""

SCRIPT = """#!/bin/bash
#SBATCH --job-name=bench-backend
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --time=30:00
#SBATCH --output={bench_dir}/bench-backend-%j.out
set -euo pipefail
export SRUN_CPUS_PER_TASK=2 OMP_NUM_THREADS=1
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=$((15000 + SLURM_JOB_ID % 17000))
for turn in $(seq 1 {turns}); do
  echo "=== raw $turn"
  srun --kill-on-bad-exit=1 {python} {raw}
  echo "=== torch $turn"
  srun --kill-on-bad-exit=1 {python} {program} --op all_reduce -b {min} -e {max} -f 2 -w {warmup} -n {iters} -c 1
done
"""

_TURN = re.compile(r"^=== (raw|torch) (\d+)$", re.M)
_RAW = re.compile(r"^RAW (\d+) (\S+) (\S+)$", re.M)


def run_job(cluster: str, state: Path | None, turns: int) -> str:
    login = login_transport(cluster, state)
    files = ClusterFiles(login)
    program = stage_program(files, BENCH_DIR)
    raw = f"{BENCH_DIR}/raw_gloo_allreduce.py"
    files.write(raw, RAW.encode())
    values = {"bench_dir": BENCH_DIR, "turns": turns, "python": sys.executable, "raw": raw, "program": program}
    script = SCRIPT.format(**values, min=MIN_BYTES, max=MAX_BYTES, warmup=WARMUP, iters=ITERS)
    outcome = Jobs.on(login, "cli").run(script, timeout=1800)
    return outcome.output or ""


def busbw(size: int, time_us: float, ranks: int = 4) -> float:
    """From the time rather than the printed GB/s, which has too few digits for the lab's small figures."""
    return size / (time_us * 1e-6) / 1e9 * 2 * (ranks - 1) / ranks


Turns = list[dict[int, float]]


def split(output: str) -> tuple[Turns, Turns, list[float]]:
    """Per turn, size -> busbw of the raw script and of torch_sweep's in-place column; and per turn the
    peak busbw `hpckit bench` reports for torch_sweep's table (hpckit.results.peak_busbw)."""
    raw: Turns = []
    torch: Turns = []
    reported: list[float] = []
    marks = list(_TURN.finditer(output))
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(output)
        part = output[mark.end() : end]
        if mark.group(1) == "raw":
            raw.append({int(m.group(1)): busbw(int(m.group(1)), float(m.group(2))) for m in _RAW.finditer(part)})
            continue
        frame = parse_text(part, "nccl-tests", f"torch turn {mark.group(2)}").frame
        inplace = frame[frame["placement"] == "in"]
        sizes, times = inplace["size_bytes"].astype(int), inplace["time_us"].astype(float)
        torch.append({s: busbw(s, t) for s, t in zip(sizes, times, strict=True)})
        reported.append(peak_busbw(frame))
    return raw, torch, reported


def median_at(turns: Turns, size: int) -> float:
    return statistics.median(t[size] for t in turns)


def report(raw: Turns, torch: Turns, reported: list[float], load: str) -> str:
    sizes = sorted(raw[0])
    rows = []
    for size in sizes:
        r, t = median_at(raw, size), median_at(torch, size)
        rows.append(f"| {human_bytes(size)} | {r:.4f} | {t:.4f} | {t / r:.2f} |")
    peak = sizes[-1]
    ratio = median_at(torch, peak) / median_at(raw, peak)
    as_reported = statistics.median(reported) / median_at(raw, peak)
    big = [s for s in sizes if s >= 1 << 20]
    geo = statistics.geometric_mean(median_at(torch, s) / median_at(raw, s) for s in big)
    verdict = "ok" if ratio >= TARGET else "MISSED"
    return (
        "## torch backend vs a raw gloo all_reduce script (`benchmarks/bench_backend.py`)\n\n"
        f"One 4-node lab job (1 task per node, gloo, torch 2.13.0 CPU), {len(raw)} turns of each in alternation,\n"
        f"{human_bytes(MIN_BYTES)}..{human_bytes(MAX_BYTES)} x2, {WARMUP} warmup + {ITERS} timed iterations per size.\n"
        "Bus bandwidth in GB/s (from the times), median over the turns; torch_sweep's in-place column, the same\n"
        "operation as the raw script's. The lab's 4 nodes share this machine's 2 cores with other work (load\n"
        f"average {load} at the end), so single turns vary by 2x; only the medians mean anything.\n\n"
        "| size | raw gloo | torch backend | ratio |\n| --- | --- | --- | --- |\n"
        + "\n".join(rows)
        + f"\n\n- at the peak size ({human_bytes(peak)}), like for like: torch backend / raw = **{ratio:.2f}** "
        f"(target >= {TARGET}: {verdict})\n"
        f"- the peak `hpckit bench` reports (best of out-of-place and in-place at {human_bytes(peak)}) / raw: "
        f"{as_reported:.2f}\n"
        f"- geometric mean of the ratios over sizes >= 1 MiB: {geo:.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--cluster", help="an already deployed lab cluster (default: deploy one)")
    ap.add_argument("--state", type=Path, help="its HPCKIT_STATE folder")
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    lab: Cluster | None = None
    if args.cluster is None:
        tmp = Path(tempfile.mkdtemp(prefix="hpckit-bench-"))
        lab = Cluster("benchbe", lab_blueprint(tmp, "benchbe", "10.77.13", "hpckb13"), tmp / "state")
        if lab.deploy().rc != 0:
            lab.destroy()
            raise SystemExit("deploying the benchmark lab failed")
    cluster, state = (lab.name, lab.state) if lab else (args.cluster, args.state)
    try:
        output = run_job(cluster, state, args.turns)
    finally:
        if lab is not None:
            lab.destroy()
    raw, torch, reported = split(output)
    if not raw or len(raw) != len(torch):
        raise SystemExit(f"the job's output is incomplete:\n{output[-3000:]}")
    body = report(raw, torch, reported, Path("/proc/loadavg").read_text().split()[0])
    print(body)
    if not args.no_record:
        record("backend", body)


if __name__ == "__main__":
    main()
