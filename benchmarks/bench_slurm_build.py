"""The slurm_build role on this machine: SchedMD's 24.11.5 built with its own Debian packaging, cold (nothing
cached) and cached (the second run must build nothing), run with plain ansible-playbook over a local connection
(tests/test_slurm_build_role.py's run, on the real tarball).

The role builds packages and never installs them, so this machine's own Slurm stays as it is. It needs root,
the tarball in hpckit's source cache (scripts/fetch-slurm-source.sh) and the build dependencies (the role
installs what is missing with apt). The cache folder is a temporary one, removed afterwards.

Run: python benchmarks/bench_slurm_build.py [--features pmix,hwloc,...] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._record import record
from hpckit.paths import source_cache
from tests.test_slurm_build_role import run_role

TARBALL = "slurm-wlm_24.11.5.orig.tar.gz"


def timed_run(tmp: Path, features: list[str]) -> tuple[float, Any]:
    start = time.perf_counter()
    done, facts = run_role(tmp, source_cache() / TARBALL, features, version="24.11.5")
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"the slurm_build role failed (rc {done.returncode}):\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}")
    return seconds, facts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--features", default="pmix,hwloc,jwt,nvml,lz4,yaml,json,restd")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    if not (source_cache() / TARBALL).is_file():
        sys.exit(f"{source_cache() / TARBALL} is missing: run scripts/fetch-slurm-source.sh")
    features = args.features.split(",")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="hpckit-bench-build-") as tmp:
        cold, first = timed_run(Path(tmp), features)
        cached, second = timed_run(Path(tmp), features)
    assert first["built"] is True and second["built"] is False, (first, second)
    packages = sorted(Path(p).name for p in first["packages"])
    body = (
        "## Building Slurm 24.11.5 with SchedMD's Debian packaging (`benchmarks/bench_slurm_build.py`)\n\n"
        "The slurm_build role over a local connection, build dependencies already installed; the second run "
        "finds the cached packages and builds nothing.\n\n"
        "| run | wall |\n| --- | --- |\n"
        f"| cold (unpack, dpkg-buildpackage -b, cache) | {cold:.0f} s |\n| cached | {cached:.1f} s |\n\n"
        f"Features: {', '.join(features)}; NVML plugin built: {first['nvml']}. {len(packages)} packages: "
        f"{', '.join(packages)}. Load average (1 min) at the start {load_before:.1f}, at the end "
        f"{os.getloadavg()[0]:.1f}."
    )
    print(body)
    if not args.no_record:
        record("slurm_build", body)


if __name__ == "__main__":
    main()
