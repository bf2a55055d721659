"""`hpckit lab up` of the 6-host lab blueprint (controller, login, node[1-4]), alternating two checkouts' code on
one machine in one run: this checkout and another one (--against DIR, e.g. a worktree of main), so that the
noise of a shared box falls on both alike. Each run brings the lab up from nothing and takes it down again.

Measures what each node's boot costs: since the package-managed trees became per-node overlays (/usr,
/var/lib/dpkg, /var/lib/apt, /var/lib/systemd) a node mounts four more overlays and binds hpckit's cache.

Run (root, the lab packages installed): python benchmarks/bench_lab_up.py --against /work/main [--runs N]
     [--lab NAME,NET,BRIDGE] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._record import record

REPO = Path(__file__).resolve().parent.parent


def lab_up_seconds(code: Path, blueprint: Path, name: str) -> float:
    """One `hpckit lab up` with ``code``'s hpckit package (PYTHONPATH), then `lab down`."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    start = time.perf_counter()
    up = subprocess.run([sys.executable, "-m", "hpckit", "lab", "up", str(blueprint)], env=env, capture_output=True)
    seconds = time.perf_counter() - start
    subprocess.run([sys.executable, "-m", "hpckit", "lab", "down", "-c", name], env=env, capture_output=True)
    if up.returncode != 0:
        sys.exit(f"lab up with {code} failed:\n{up.stdout.decode()[-2000:]}{up.stderr.decode()[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", type=Path, required=True, help="the other checkout (its hpckit/ is used)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--lab", default="bnchup,10.77.196,hpkp6", help="NAME,NET,BRIDGE of the benchmark's lab")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    name, net, bridge = args.lab.split(",")
    text = (REPO / "blueprints" / "lab.yaml").read_text()
    text = text.replace("name: lab\n", f"name: {name}\n", 1).replace('net: "10.77.0"', f'net: "{net}"')
    times: dict[str, list[float]] = {"this checkout": [], str(args.against): []}
    with tempfile.TemporaryDirectory() as tmp:
        blueprint = Path(tmp) / "lab.yaml"
        blueprint.write_text(text.replace("bridge: hpck0", f"bridge: {bridge}"))
        for _ in range(args.runs):
            times[str(args.against)].append(lab_up_seconds(args.against, blueprint, name))
            times["this checkout"].append(lab_up_seconds(REPO, blueprint, name))
    rows = "".join(
        f"| {code} | {statistics.median(s):.2f} s | {min(s):.2f}-{max(s):.2f} s |\n" for code, s in times.items()
    )
    body = (
        "## Lab up, per-node package layers (`benchmarks/bench_lab_up.py`)\n\n"
        f"`hpckit lab up` of the 6-host lab blueprint from nothing, {args.runs} runs of each checkout alternating; "
        f"load average (1 min) at the end {os.getloadavg()[0]:.1f}.\n\n"
        "| code | median | range |\n| --- | --- | --- |\n" + rows
    )
    print(body)
    if not args.no_record:
        record("lab_up", body)


if __name__ == "__main__":
    main()
