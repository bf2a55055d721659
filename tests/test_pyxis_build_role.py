"""The enroot_pyxis role's pyxis build, run for real on this machine (hpckit's runner, local connection) against
the Slurm headers installed here (Debian's libslurm-dev, as on the lab's nodes), into a private prefix: a source
that does not compile fails the host with the compiler's own last lines, and leaves no plugin, no stamp and no
plugstack.conf behind. (The real pyxis 0.24.0 is built and loaded by slurmd in tests/test_containers_lab.py.)"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from hpckit.deploy.events import Tracker
from hpckit.deploy.runner import PlaybookRun, run_playbook
from hpckit.paths import ansible_dir


def _installed(package: str) -> str:
    done = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True, check=False)
    return done.stdout.split("-")[0] if done.returncode == 0 else ""


SLURM = _installed("slurm-client") if shutil.which("dpkg-query") else ""
pytestmark = pytest.mark.skipif(
    not SLURM or _installed("libslurm-dev") != SLURM or not shutil.which("gcc"),
    reason="needs Debian's slurm-client, libslurm-dev of the same version and gcc (scripts/install.sh)",
)

BROKEN_C = (
    "#include <slurm/spank.h>\nSPANK_PLUGIN(pyxis, 1)\n"
    "int slurm_spank_init(spank_t sp, int ac, char **av) {\n  return nope\n}\n"
)
MAKEFILE = (
    "install:\n\t$(CC) -shared -fPIC -o spank_pyxis.so pyxis.c\n"
    "\tinstall -D spank_pyxis.so $(prefix)/lib/slurm/spank_pyxis.so\n"
)


def _tarball(path: Path) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in (("pyxis.c", BROKEN_C), ("Makefile", MAKEFILE)):
            info = tarfile.TarInfo(f"pyxis-9.9.9/{name}")
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return path


@pytest.mark.slow  # a playbook run that compiles: ~11 s
def test_a_source_that_does_not_compile_fails_with_the_compilers_lines(tmp_path: Path) -> None:
    playbook = tmp_path / "pyxis.yml"
    role = ansible_dir() / "roles" / "enroot_pyxis"
    playbook.write_text(
        f"- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.include_role: {{name: {role}}}\n"
    )
    inventory = {
        "all": {"hosts": {"here": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    }
    prefix = tmp_path / "prefix"
    extravars = {
        "enroot_pyxis_pyxis": True,  # pyxis alone, as on a login node
        "enroot_pyxis_pyxis_version": "9.9.9",
        "enroot_pyxis_pyxis_source": str(_tarball(tmp_path / "pyxis-9.9.9.tar.gz")),
        "enroot_pyxis_pyxis_prefix": str(prefix),
        "enroot_pyxis_slurm_conf_dir": str(tmp_path / "etc-slurm"),
        "enroot_pyxis_cache_dir": str(tmp_path / "cache"),
        "enroot_pyxis_src_dir": str(tmp_path / "src"),
    }
    tracker = Tracker()
    outcome = run_playbook(inventory, extravars, PlaybookRun(playbook=str(playbook)), tracker.feed)
    assert outcome.status == "failed"
    [failure] = tracker.failures
    assert failure.task == "Compile and install pyxis", failure
    assert "pyxis.c" in failure.message and "error:" in failure.message, failure.message  # gcc's own words
    assert "nope" in failure.message, failure.message
    assert not (prefix / "lib" / "slurm").exists() or not any((prefix / "lib" / "slurm").iterdir())
    assert not (tmp_path / "etc-slurm" / "plugstack.conf").exists()
