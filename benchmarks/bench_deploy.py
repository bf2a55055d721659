"""Deploy speed on the lab, side by side in one run (needs root and the lab packages).

1. cold deploy of the 4-node lab blueprint (lab up + playbook + join), through `hpckit deploy`;
2. no-op re-deploy through `hpckit deploy`;
3. the same no-op with plain `ansible-playbook` at Ansible's defaults, same playbook and inventory;
4. the same as 1-2 with 16 compute nodes.
Targets: no-op <= 15 s and <= 0.5x the plain run; 16 nodes <= 1.5x the 4-node time.

Run: python benchmarks/bench_deploy.py [--no-record]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._record import record  # noqa: E402
from tests.labutil import hpckit, lab_blueprint  # noqa: E402


def timed_deploy(blueprint: Path, state: Path) -> float:
    start = time.monotonic()
    done = hpckit("deploy", str(blueprint), "-q", "--json", state=state, timeout=1800)
    if done.rc != 0:
        raise SystemExit(f"deploy failed:\n{done.stdout}\n{done.stderr}")
    return time.monotonic() - start


def plain_noop(state: Path, cluster: str) -> float:
    """ansible-playbook with an empty config (Ansible's defaults) on the record's inventory and extravars."""
    current = state / "clusters" / cluster / "current"
    empty = Path(tempfile.mkdtemp()) / "ansible.cfg"
    empty.write_text("[defaults]\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(empty), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    argv = [
        "ansible-playbook",
        "-i",
        str(current / "inventory.yml"),
        "-e",
        f"@{current / 'extravars.yml'}",
        str(REPO / "ansible" / "site.yml"),
    ]
    start = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    took = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"plain ansible-playbook failed:\n{done.stdout[-3000:]}")
    if "changed=0" not in done.stdout or "changed=1" in done.stdout:
        print("warning: plain run was not a no-op", file=sys.stderr)
    return took


def sixteen(tmp: Path) -> Path:
    path = lab_blueprint(tmp, "bench16", "10.77.6", "hpckb6")
    text = path.read_text().replace("node[1-4]", "node[1-16]").replace("$(vars.net).[21-24]", "$(vars.net).[21-36]")
    path.write_text(text)
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hpckit-bench-"))
    state = tmp / "state"
    four = lab_blueprint(tmp, "bench4", "10.77.4", "hpckb4")
    big = sixteen(tmp)
    rows: dict[str, float] = {}
    try:
        rows["4 nodes: cold deploy"] = timed_deploy(four, state)
        rows["4 nodes: no-op, hpckit deploy"] = timed_deploy(four, state)
        rows["4 nodes: no-op, plain ansible-playbook (defaults)"] = plain_noop(state, "bench4")
        hpckit("destroy", str(four), state=state)
        rows["16 nodes: cold deploy"] = timed_deploy(big, state)
        rows["16 nodes: no-op, hpckit deploy"] = timed_deploy(big, state)
    finally:
        hpckit("destroy", str(four), state=state)
        hpckit("destroy", str(big), state=state)
    noop, plain = rows["4 nodes: no-op, hpckit deploy"], rows["4 nodes: no-op, plain ansible-playbook (defaults)"]
    cold4, cold16 = rows["4 nodes: cold deploy"], rows["16 nodes: cold deploy"]
    noop16 = rows["16 nodes: no-op, hpckit deploy"]
    lines = [f"| {k} | {v:.1f} s |" for k, v in rows.items()]
    checks = [
        f"- no-op {noop:.1f} s (target <= 15 s): {'ok' if noop <= 15 else 'MISSED'}",
        f"- no-op / plain = {noop / plain:.2f} (target <= 0.5): {'ok' if noop / plain <= 0.5 else 'MISSED'}",
        f"- cold 16 / cold 4 = {cold16 / cold4:.2f} (target <= 1.5): {'ok' if cold16 / cold4 <= 1.5 else 'MISSED'}",
        f"- no-op 16 / no-op 4 = {noop16 / noop:.2f}",
    ]
    body = (
        "## Deploy speed on the lab (`benchmarks/bench_deploy.py`)\n\n"
        "Wall time of the whole command, one run each, side by side (cold = lab up + playbook + join).\n\n"
        "| run | time |\n| --- | --- |\n" + "\n".join(lines) + "\n\n" + "\n".join(checks)
    )
    print(body)
    if not args.no_record:
        record("deploy", body)


if __name__ == "__main__":
    main()
