"""Validate a 10,000-node blueprint (625 partitions of 16, or one partition of 10,000). Target: <= 1 s each.

Run: python benchmarks/bench_blueprint.py [--runs 5] [--no-record]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._record import record
from hpckit.blueprint import parse_blueprint

HEAD = """\
name: big
provider: {type: static, ssh: {user: root}}
controller: {host: head01, address: 10.0.0.1}
login:
  - {host: login01, address: 10.0.0.2}
partitions:
"""
PART = """\
  - name: {name}
    nodes: {nodes}
    addresses: {addrs}
    hardware:
      cpus: 224
      sockets: 2
      cores_per_socket: 56
      threads_per_core: 2
      memory_mb: 1900000
      gpus: {{type: h100-sxm, count: 8}}
      infiniband: {{hcas: [mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7], rate: ndr}}
"""


def many_partitions(parts: int = 625, size: int = 16) -> str:
    body = []
    for p in range(parts):
        first = p * size
        a, b = divmod(first, 256)
        nodes = f"g{p:03d}n[{1:02d}-{size:02d}]"
        addrs = f"10.{1 + a // 256}.{a % 256}.[{b}-{b + size - 1}]"
        body.append(PART.format(name=f"p{p:03d}", nodes=nodes, addrs=addrs))
    return HEAD + "".join(body)


def one_partition(count: int = 10_000) -> str:
    addrs = "[" + ", ".join(f"10.{1 + i // 65536}.{(i // 256) % 256}.{i % 256}" for i in range(count)) + "]"
    return HEAD + PART.format(name="gpu", nodes=f"gpu[00001-{count:05d}]", addrs=addrs)


def timed(text: str, runs: int) -> tuple[float, int]:
    times, nodes = [], 0
    for _ in range(runs):
        start = time.perf_counter()
        bp = parse_blueprint(text, "big.yaml")
        times.append(time.perf_counter() - start)
        nodes = len(bp.compute_hosts())
    return statistics.median(times), nodes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    rows = []
    for label, text in (("625 partitions x 16 nodes", many_partitions()), ("1 partition x 10,000", one_partition())):
        secs, nodes = timed(text, args.runs)
        verdict = "ok" if secs <= 1.0 else "OVER TARGET"
        rows.append(f"| {label} | {nodes} | {len(text) / 1e6:.2f} MB | {secs:.3f} s | {verdict} |")
        print(rows[-1])
    body = (
        "## Blueprint validation, 10,000 nodes (`benchmarks/bench_blueprint.py`)\n\n"
        f"Target <= 1 s. Median of {args.runs} runs: YAML parse with positions, vars, model, cross checks.\n\n"
        "| shape | nodes | YAML | median | verdict |\n| --- | --- | --- | --- | --- |\n" + "\n".join(rows)
    )
    if not args.no_record:
        record("blueprint", body)


if __name__ == "__main__":
    main()
