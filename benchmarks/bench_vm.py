"""VM labs: the image build (cold and cached) and boot to SSH for one and for four machines (needs root
and the VM host packages; software emulation on this box's cores).

1. image: `ensure_image` with the cache emptied of this recipe's image (cold: debootstrap, packages,
   /opt/hpckit, disk) and again with it there (cached: a lookup); --no-cold skips the cold build;
2. boot to SSH: `vm_up` of 1 machine, then of 4, from nothing to every sshd answering (the image cached),
   each taken down again; the machine's load average is recorded beside, the box being shared.

Run: python benchmarks/bench_vm.py [--no-record] [--no-cold] [--net 10.78.131]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._record import record  # noqa: E402
from hpckit.lab import LabNode, LabSpec, VmSpec, ensure_image, lab_down, vm_up  # noqa: E402
from hpckit.lab.vm import image  # noqa: E402

STATE_ROOT = Path("/var/lib/hpckit/lab-bench-vm")


def timed_image(cold: bool) -> float:
    recipe = image.default_recipe()
    if cold:
        shutil.rmtree(image.images_root() / recipe.key, ignore_errors=True)
    start = time.monotonic()
    ensure_image(recipe, log=lambda line: print(f"  {line}", flush=True))
    return time.monotonic() - start


def timed_boot(count: int, net: str) -> float:
    nodes = tuple(LabNode(f"vm{i}", f"{net}.{10 + i}") for i in range(1, count + 1))
    lab = LabSpec("bench-vm", nodes, subnet=f"{net}.0/24", bridge="hpkvbench", state_root=STATE_ROOT)
    spec = VmSpec(lab, memory_mib={"vm1": 1536})
    lab_down(lab.cluster, STATE_ROOT)
    start = time.monotonic()
    try:
        status = vm_up(spec)
        took = time.monotonic() - start
        if not status.all_up:
            raise SystemExit(f"not every machine answers: {status}")
        return took
    finally:
        lab_down(lab.cluster, STATE_ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-record", action="store_true", help="print only, leave RESULTS.md alone")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold image build")
    parser.add_argument("--net", default="10.78.131", help="the /24 the machines use (first three octets)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("VM labs need root")
    rows = []
    if not args.no_cold:
        rows.append(("image build, cold", timed_image(cold=True), os.getloadavg()[0]))
    rows.append(("image build, cached", timed_image(cold=False), os.getloadavg()[0]))
    for count in (1, 4):
        load = os.getloadavg()[0]
        rows.append((f"boot to SSH, {count} machine{'s' if count > 1 else ''}", timed_boot(count, args.net), load))
    lines = [f"| {what} | {took:.1f} s | {load:.1f} |" for what, took, load in rows]
    body = "\n".join(
        [
            "## VM labs: image and boot (`benchmarks/bench_vm.py`)",
            "",
            "Debian 13 image (debootstrap, every package the roles install, /opt/hpckit) and `vm_up` from",
            "nothing to every sshd answering; qemu software emulation (tcg, tb-size=64), 1 vCPU per machine.",
            "The box is shared: the load average (1 min) at the start of each step is beside it.",
            "",
            "| step | time | load |",
            "| --- | --- | --- |",
            *lines,
        ]
    )
    print(body)
    if not args.no_record:
        record("vm", body)


if __name__ == "__main__":
    main()
