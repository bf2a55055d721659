"""Deploy speed on virtual machines beside the namespace lab, one after the other in one run (needs root, the lab
packages and the VM host packages).

1. the 3-machine VM cluster of blueprints/vm.yaml: cold deploy (VMs up + playbook + join), then no-op deploys;
2. the namespace lab of blueprints/lab.yaml (6 hosts): the same.
The VMs emulate their CPUs (no KVM on this box), so every Ansible task costs seconds there: these numbers say
what the VM suite costs CI, and how far the production path is from the lab's.

Run: python benchmarks/bench_vm_deploy.py [--no-record] [--runs N] [--vm NAME,NET,BRIDGE] [--lab NAME,NET,BRIDGE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._record import record  # noqa: E402
from benchmarks.bench_deploy import busy_cpu_s, load, timed_deploy  # noqa: E402
from tests.labutil import hpckit, lab_blueprint  # noqa: E402
from tests.vmutil import vm_blueprint  # noqa: E402


def measure(blueprint: Path, state: Path, runs: int) -> dict[str, float]:
    """Cold deploy, then ``runs`` no-op deploys (each must change nothing), then destroy."""
    try:
        cold, parts = timed_deploy(blueprint, state)
        noops = []
        for _ in range(runs):
            took, again = timed_deploy(blueprint, state)
            if again["changed"]:
                raise SystemExit(f"the no-op deploy of {blueprint.name} changed {again['changed']:.0f} tasks")
            noops.append(took)
    finally:
        hpckit("destroy", str(blueprint), state=state)
    return {
        "cold": cold,
        "cold_playbook": parts.get("playbook", 0.0),
        "cold_target": parts.get("target", 0.0),
        "cold_busy": parts["busy_cpu_s"],
        "noop": statistics.median(noops),
        "noop_min": min(noops),
        "noop_max": max(noops),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2, help="no-op deploys of each cluster")
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--vm", default="benchvm,10.78.139,hpcv139", help="NAME,NET,BRIDGE of the VM cluster")
    ap.add_argument("--lab", default="bench4,10.77.4,hpckb4", help="NAME,NET,BRIDGE of the namespace lab")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hpckit-bench-vm-"))
    loads = [load()]
    start_cpu = busy_cpu_s()
    vm = measure(vm_blueprint(tmp, *args.vm.split(",")), tmp / "state", args.runs)
    loads.append(load())
    lab = measure(lab_blueprint(tmp, *args.lab.split(",")), tmp / "state", args.runs)
    loads.append(load())
    body = report(vm, lab, args.runs, loads, busy_cpu_s() - start_cpu)
    print(body)
    if not args.no_record:
        record("vm-deploy", body)


def report(vm: dict[str, float], lab: dict[str, float], runs: int, loads: list[str], busy: float) -> str:
    def noop(m: dict[str, float]) -> str:
        return f"{m['noop']:.1f} s ({m['noop_min']:.1f}-{m['noop_max']:.1f})"

    rows = [
        ("cold deploy (machines up + playbook + join)", f"{vm['cold']:.0f} s", f"{lab['cold']:.1f} s"),
        ("  of which machines up (deploy's target step)", f"{vm['cold_target']:.0f} s", f"{lab['cold_target']:.1f} s"),
        ("  of which the playbook", f"{vm['cold_playbook']:.0f} s", f"{lab['cold_playbook']:.1f} s"),
        (f"no-op deploy (median of {runs})", noop(vm), noop(lab)),
        ("busy CPU of this machine during the cold deploy", f"{vm['cold_busy']:.0f} s", f"{lab['cold_busy']:.0f} s"),
    ]
    return (
        "## Deploy speed on VMs beside the namespace lab (`benchmarks/bench_vm_deploy.py`)\n\n"
        "Wall time of each whole `hpckit deploy`, one cluster after the other in one run: blueprints/vm.yaml (3 VMs, "
        "Debian 13, Slurm 24.11, systemd, cgroup v2, kernel NFS; CPUs emulated by qemu TCG) and blueprints/lab.yaml "
        "(6 namespace machines). Load average (1 min) at the start, between the two and at the end: "
        f"{', '.join(loads)}; busy CPU over the whole run {busy:.0f} s.\n\n"
        "| run | VMs | namespace lab |\n| --- | --- | --- |\n" + "\n".join(f"| {a} | {b} | {c} |" for a, b, c in rows)
    )


if __name__ == "__main__":
    main()
