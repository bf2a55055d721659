"""The slurm_build role on this machine: SchedMD's 24.11.5 built with its own Debian packaging, cold (nothing
cached) and cached (the second run must build nothing), run with plain ansible-playbook over a local connection.

The role builds packages and never installs them, so this machine's own Slurm stays as it is. It needs root,
the tarball in hpckit's source cache (scripts/fetch-slurm-source.sh) and the build dependencies (the role
installs what is missing with apt). Each run uses a cache folder of its own, removed afterwards, unless
--keep names where to leave it.

Run: python benchmarks/bench_slurm_build.py [--features pmix,hwloc,...] [--keep DIR] [--no-record]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._record import record
from hpckit.paths import ansible_dir, source_cache

TARBALL = "slurm-wlm_24.11.5.orig.tar.gz"


def run_role(cache: Path, features: list[str], work: Path) -> tuple[float, dict[str, object]]:
    """One run of the role; its wall seconds and the facts it set."""
    play = work / "build.yml"
    facts = work / "facts.json"
    play.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n  roles: [slurm_build]\n  post_tasks:\n"
        "    - ansible.builtin.copy:\n"
        '        content: \'{{ {"built": slurm_build_built, "dir": slurm_build_dir, "nvml": slurm_build_nvml,'
        ' "packages": slurm_build_packages} | to_json }}\'\n'
        f"        dest: {facts}\n        mode: '0644'\n"
    )
    extra = {
        "slurm_build_version": "24.11.5",
        "slurm_build_features": features,
        "slurm_build_cache_dir": str(cache),
        "slurm_build_source": str(source_cache() / TARBALL),
        "slurm_build_work_dir": str(work / "build"),
        "ansible_python_interpreter": sys.executable,
    }
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ansible_dir() / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(ansible_dir() / "roles"),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(work / "fact-cache"),
        "ANSIBLE_NOCOLOR": "1",
    }
    playbook = Path(sys.executable).parent / "ansible-playbook"
    start = time.perf_counter()
    done = subprocess.run(
        [str(playbook), "-i", "localhost,", "-e", json.dumps(extra), str(play)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"the slurm_build role failed (rc {done.returncode}):\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}")
    return seconds, json.loads(facts.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--features", default="pmix,hwloc,jwt,nvml,lz4,yaml,json,restd")
    parser.add_argument("--keep", type=Path, help="cache folder to build into and keep")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    if not (source_cache() / TARBALL).is_file():
        sys.exit(f"{source_cache() / TARBALL} is missing: run scripts/fetch-slurm-source.sh")
    features = args.features.split(",")
    with tempfile.TemporaryDirectory(prefix="hpckit-bench-build-") as tmp:
        work = Path(tmp)
        cache = args.keep or work / "cache"
        cold, first = run_role(cache, features, work)
        cached, second = run_role(cache, features, work)
        packages = [Path(str(p)).name for p in cast(list[str], first["packages"])]
        if args.keep is None:
            shutil.rmtree(cache, ignore_errors=True)
    assert first["built"] and not second["built"], (first, second)
    body = (
        "## Building Slurm 24.11.5 with SchedMD's Debian packaging (`benchmarks/bench_slurm_build.py`)\n\n"
        "The slurm_build role over a local connection, build dependencies already installed; the second run "
        "finds the cached packages and builds nothing.\n\n"
        "| run | wall |\n| --- | --- |\n"
        f"| cold (unpack, dpkg-buildpackage -b, cache) | {cold:.0f} s |\n| cached | {cached:.1f} s |\n\n"
        f"Features: {', '.join(features)}; NVML plugin built: {first['nvml']}. {len(packages)} packages: "
        f"{', '.join(sorted(packages))}. Load average at the end: {os.getloadavg()[0]:.1f}."
    )
    print(body)
    if not args.no_record:
        record("slurm_build", body)


if __name__ == "__main__":
    main()
