"""VM labs: the image build (cold and cached) and boot to SSH for one and for four machines (needs root
and the VM host packages; software emulation on this box's cores).

1. image: `ensure_image` with nothing cached (cold: debootstrap, packages, /opt/hpckit, disk), with the
   debootstrapped system cached (what a change to hpckit's files in the image costs), and with the image
   cached (a lookup);
2. boot to SSH: `vm_up` of 1 machine, then of 4, from nothing to every sshd answering (the image cached),
   each taken down again; the machine's load average is recorded beside, the box being shared.

Run: python benchmarks/bench_vm.py [--no-record] [--part image|boot|all] [--net 10.78.131]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._record import record  # noqa: E402
from hpckit.lab import LabNode, LabSpec, VmSpec, ensure_image, lab_down, vm_up  # noqa: E402
from hpckit.lab.vm import image  # noqa: E402

STATE_ROOT = Path("/var/lib/hpckit/lab-bench-vm")


def timed_image(drop: tuple[str, ...]) -> float:
    """`ensure_image` with ``drop`` ("system": the debootstrapped system, "image": the image) taken from the cache."""
    recipe = image.default_recipe()
    if "system" in drop:
        shutil.rmtree(image.images_root() / "debootstrap" / recipe.system_key, ignore_errors=True)
    if "image" in drop:
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
    parser.add_argument("--part", choices=("image", "boot", "all"), default="all", help="which half to run")
    parser.add_argument("--net", default="10.78.131", help="the /24 the machines use (first three octets)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("VM labs need root")
    if args.part in ("image", "all"):
        image_steps: list[tuple[str, Callable[[], float]]] = [
            ("cold: debootstrap, packages, /opt/hpckit, disk", lambda: timed_image(("system", "image"))),
            ("on the cached system (hpckit's files in the image changed)", lambda: timed_image(("image",))),
            ("cached", lambda: timed_image(())),
        ]
        intro = "`ensure_image`: Debian 13 by debootstrap with every package the roles install and /opt/hpckit."
        report("vm-image", "VM labs: the image", intro, image_steps, not args.no_record)
    if args.part in ("boot", "all"):
        boot_steps = [(f"{n} machine{'s' if n > 1 else ''}", partial(timed_boot, n, args.net)) for n in (1, 4)]
        intro = (
            "`vm_up` from nothing to every sshd answering (image cached); qemu software emulation "
            "(tcg, tb-size=64), 1 vCPU per machine; then `lab_down`."
        )
        report("vm-boot", "VM labs: boot to SSH", intro, boot_steps, not args.no_record)


def report(name: str, title: str, intro: str, steps: Sequence[tuple[str, Callable[[], float]]], keep: bool) -> None:
    rows = []
    for what, run in steps:
        load = os.getloadavg()[0]  # before the step: what the box was doing besides
        took = run()
        rows.append(f"| {what} | {took:.1f} s | {load:.1f} |")
    body = "\n".join(
        [
            f"## {title} (`benchmarks/bench_vm.py --part {name.removeprefix('vm-')}`)",
            "",
            intro,
            "The box is shared: the load average (1 min) at the start of each step is beside it.",
            "",
            "| step | time | load |",
            "| --- | --- | --- |",
            *rows,
        ]
    )
    print(body, flush=True)
    if keep:
        record(name, body)


if __name__ == "__main__":
    main()
