"""Container start time under Slurm on the lab (needs root, the lab packages and ../shared/sources).

A 2-node lab with enroot and pyxis from the shared files and a registry-free minbase image on its shared
filesystem; on one node, as an ordinary user, alternating in one run: a plain `srun true`, and
`srun --container-image=IMAGE true` (pyxis: enroot unpacks the squashfs into the user's data folder, starts,
removes it). The first container run on the node is reported apart (nothing of the image is on the node yet);
a squashfs image is unpacked again for every step, so later runs show what each job pays.

Run: python benchmarks/bench_containers.py [--runs N] [--no-record] [--lab NAME,NET,BRIDGE]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._record import record  # noqa: E402
from hpckit.lab.container_image import container_image  # noqa: E402
from hpckit.lab.provider import shared_dir_source  # noqa: E402
from hpckit.lab.vm.mirror import host_codename  # noqa: E402
from tests.labutil import Cluster, lab_blueprint, lab_containers, two_nodes  # noqa: E402

USERS = "users:\n  alice: {uid: 4101}\n"


def timed(cluster: Cluster, *argv: str) -> float:
    started = time.monotonic()
    cluster.on(
        "login", "runuser", "-u", "alice", "--", "srun", "-N1", "-w", "node1", "--chdir=/tmp", *argv, timeout=300
    )
    return time.monotonic() - started


def measure(cluster: Cluster, runs: int) -> dict[str, float]:
    folder = shared_dir_source(cluster.name, "/shared") / "images"
    folder.mkdir(exist_ok=True)
    image = container_image(host_codename())
    shutil.copyfile(image, folder / "minbase.sqsh")
    with_image = ("--container-image=/shared/images/minbase.sqsh", "true")
    first = timed(cluster, *with_image)
    plain, contained = [], []
    for _ in range(runs):
        plain.append(timed(cluster, "true"))
        contained.append(timed(cluster, *with_image))
    return {
        "image_mb": image.stat().st_size / 2**20,
        "first": first,
        "plain": statistics.median(plain),
        "contained": statistics.median(contained),
        "load": os.getloadavg()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--lab", default="labbench,10.77.231,hpckb31")
    args = ap.parse_args()
    containers = lab_containers()
    if containers is None:
        sys.exit("enroot's and pyxis' files are not in ../shared/sources")
    name, net, bridge = args.lab.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        path = lab_blueprint(Path(tmp), name, net, bridge, extra=USERS, containers=containers)
        path.write_text(two_nodes(path.read_text()))
        cluster = Cluster(name, path, Path(tmp) / "state")
        try:
            done = cluster.deploy()
            if done.rc != 0:
                sys.exit(f"deploy failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
            got = measure(cluster, args.runs)
        finally:
            cluster.destroy()
    body = (
        "## Container start (bench_containers.py)\n\n"
        f"One lab node, an ordinary user, a {got['image_mb']:.0f} MiB squashfs minbase image, medians of "
        f"{args.runs} alternating runs (load average {got['load']:.1f} at the end):\n\n"
        "| srun | seconds |\n|---|---|\n"
        f"| plain `srun true` | {got['plain']:.2f} |\n"
        f"| `--container-image` first run on the node | {got['first']:.2f} |\n"
        f"| `--container-image` later runs | {got['contained']:.2f} |\n\n"
        f"The container costs {got['contained'] - got['plain']:.2f} s over a plain step "
        "(enroot unpacks a squashfs image for every step: no layer cache is involved)."
    )
    print(body)
    if not args.no_record:
        record("containers", body)


if __name__ == "__main__":
    main()
