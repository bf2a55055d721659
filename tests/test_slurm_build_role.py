"""The slurm_build role, run for real on this machine (plain ansible-playbook, local connection) on a stand-in for
SchedMD's tarball: a tiny source with a debian/ folder of the same shape that dpkg-buildpackage turns into one
package in a second. Cold, it builds and caches by version + features + system; again, it builds nothing; other
features build apart; features left out reach configure's line; a feature SchedMD's packaging always builds cannot
be left out. The packages are never installed. The real 24.11.5 build is benchmarks/bench_slurm_build.py (minutes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from hpckit.paths import ansible_dir

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("dpkg-buildpackage"), reason="needs root and dpkg-buildpackage"
)

CONTROL = """Source: slurm-smd
Section: admin
Priority: optional
Maintainer: hpckit tests <root@localhost>

Package: slurm-smd-standin
Architecture: all
Description: stand-in for SchedMD's packages
 Built by hpckit's tests of the slurm_build role.
"""
CHANGELOG = """slurm-smd (24.11.99-1) unstable; urgency=medium

  * A stand-in release.

 -- hpckit tests <root@localhost>  Fri, 27 Nov 2026 00:00:00 +0000
"""
# The configure line as SchedMD's rules has it; the package carries the rules' line as built.
RULES = """#!/usr/bin/make -f
configure:
\tdh_auto_configure -- --sysconfdir=/etc/slurm --with-pmix
clean:
\trm -rf debian/tmp debian/files
build build-arch build-indep:
binary binary-arch binary-indep:
\tmkdir -p debian/tmp/DEBIAN debian/tmp/usr/share/doc/slurm-smd-standin
\tgrep dh_auto_configure debian/rules > debian/tmp/usr/share/doc/slurm-smd-standin/configure
\tdpkg-gencontrol -pslurm-smd-standin -Pdebian/tmp
\tdpkg-deb --build debian/tmp ..
"""


def _tarball(tmp_path: Path) -> Path:
    top = tmp_path / "slurm-slurm-24-11-99-1"
    (top / "debian").mkdir(parents=True, exist_ok=True)
    for name, text in {"control": CONTROL, "changelog": CHANGELOG, "rules": RULES}.items():
        (top / "debian" / name).write_text(text)
    (top / "debian" / "rules").chmod(0o755)
    tarball = tmp_path / "slurm-wlm_24.11.99.orig.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(top, arcname=top.name)
    return tarball


def run_role(
    tmp_path: Path, tarball: Path, features: list[str], version: str = "24.11.99"
) -> tuple[subprocess.CompletedProcess[str], Any]:
    """One run of the role on this machine, building into tmp_path/cache; its process and the facts it set."""
    facts = tmp_path / "facts.json"
    facts.unlink(missing_ok=True)
    play = tmp_path / "play.yml"
    keep = "{{ {'built': slurm_build_built, 'packages': slurm_build_packages, 'nvml': slurm_build_nvml} | to_json }}"
    play.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n  roles: [slurm_build]\n"
        f'  post_tasks:\n    - ansible.builtin.copy: {{content: "{keep}", dest: {facts}, mode: "0644"}}\n'
    )
    extra = {
        "slurm_build_version": version,
        "slurm_build_features": features,
        "slurm_build_source": str(tarball),
        "slurm_build_cache_dir": str(tmp_path / "cache"),
        "slurm_build_work_dir": str(tmp_path / "work"),
        "ansible_python_interpreter": sys.executable,
    }
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ansible_dir() / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(ansible_dir() / "roles"),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "fact-cache"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
    }
    playbook = str(Path(sys.executable).parent / "ansible-playbook")
    cmd = [playbook, "-i", "localhost,", "-e", json.dumps(extra), str(play)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    return done, json.loads(facts.read_text()) if facts.exists() else None


@pytest.mark.slow  # two playbook runs of the build role: ~40 s
def test_a_build_is_cached_and_not_built_again(tmp_path: Path) -> None:
    tarball = _tarball(tmp_path)
    done, first = run_role(tmp_path, tarball, ["pmix", "json", "restd", "yaml"])
    assert done.returncode == 0, done.stdout[-4000:]
    assert first["built"] is True and first["nvml"] is False
    (deb,) = (Path(p) for p in first["packages"])
    assert deb.name == "slurm-smd-standin_24.11.99-1_all.deb" and deb.is_file()
    key = deb.parent
    assert key.parent == tmp_path / "cache" / "packages" and key.name.startswith("24.11.99_")
    manifest = json.loads((key / "manifest.json").read_text())
    assert manifest["features"] == ["json", "pmix", "restd", "yaml"] and manifest["packages"] == [deb.name]
    assert not (tmp_path / "work").exists()
    line = subprocess.run(
        ["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True
    ).stdout  # the rules' configure line as it was built
    assert b"--with-pmix --without-hwloc --without-jwt --without-nvml --without-lz4" in line
    assert b"--without-pmix" not in line and b"--without-yaml" not in line

    tarball.unlink()  # the second run must not need the source
    again, second = run_role(tmp_path, tarball, ["yaml", "restd", "pmix", "json"])
    assert again.returncode == 0, again.stdout[-4000:]
    assert second == {**first, "built": False}
    assert "dpkg-buildpackage" not in again.stdout and "Unpack the source" not in again.stdout
    assert again.stdout.count("changed: [localhost]") == 1  # the facts file of this test's play, nothing else

    _tarball(tmp_path)  # the source back; other features: another build, beside the first
    other, third = run_role(tmp_path, tarball, ["json", "restd"])
    assert other.returncode == 0, other.stdout[-4000:]
    assert third["built"] is True and Path(third["packages"][0]).parent not in (key, key.parent)
    assert (key / "manifest.json").is_file()


def test_restd_cannot_be_left_out(tmp_path: Path) -> None:
    done, _ = run_role(tmp_path, _tarball(tmp_path), ["pmix", "json"])
    assert done.returncode != 0
    assert "SchedMD's Debian packaging always builds restd and json" in done.stdout


@pytest.mark.slow  # playbook runs racing a held lock: ~25 s
def test_a_build_running_here_is_waited_for_not_repeated(tmp_path: Path) -> None:
    """scripts/build-slurm.sh holds packages/.build.lock while it builds: a run that finds no build waits for the
    lock, then takes the packages that build left, with no source to build from."""
    tarball = _tarball(tmp_path)
    done, first = run_role(tmp_path, tarball, ["json", "restd"])
    assert done.returncode == 0, done.stdout[-4000:]
    key = Path(first["packages"][0]).parent
    aside = tmp_path / "aside"
    key.rename(aside)
    tarball.unlink()
    lock, go = tmp_path / "cache" / "packages" / ".build.lock", tmp_path / "go"
    # The "build in progress": holds the lock, and puts the packages in place once the role waits for it.
    holder = subprocess.Popen(
        ["flock", str(lock), "sh", "-c", f"while [ ! -e {go} ]; do sleep 0.1; done; mv {aside} {key}"]
    )
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            run = pool.submit(run_role, tmp_path, tarball, ["json", "restd"])
            _until_waiting_on(lock, deadline=time.monotonic() + 300)
            go.touch()
            again, second = run.result()
    finally:
        go.touch()
        holder.wait(timeout=30)
    assert again.returncode == 0, again.stdout[-4000:]
    assert second == {**first, "built": False}
    assert "Wait for a build of the same release already running here" in again.stdout


def _until_waiting_on(lock: Path, deadline: float) -> None:
    """Until a process here waits on ``lock`` with flock --wait (the role's), or the deadline."""
    while time.monotonic() < deadline:
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                argv = cmdline.read_bytes().split(b"\0")
            except OSError:
                continue
            if b"--wait" in argv and str(lock).encode() in argv:
                return
        time.sleep(0.2)
