"""Host packages the lab needs: nodes share the host's root filesystem and have no network,
so every daemon and tool a node runs is installed on the host before any node starts."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from hpckit import proc
from hpckit.lab.errors import LabError
from hpckit.paths import DATA_DIR

PACKAGE_LIST = DATA_DIR / "lab-packages.txt"
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
# Exit status 101 tells invoke-rc.d "action forbidden": the packages' maintainer scripts then
# configure the daemons without starting them on the host.
_POLICY_SCRIPT = "#!/bin/sh\n# written by hpckit lab while it installs packages; removed afterwards\nexit 101\n"


def required_packages(package_list: Path = PACKAGE_LIST) -> list[str]:
    """The Debian packages named in ``lab-packages.txt`` (comments and blank lines skipped)."""
    try:
        text = package_list.read_text(encoding="utf-8")
    except OSError as exc:
        raise LabError(f"cannot read the lab package list {package_list}: {exc.strerror}") from exc
    names = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    return [name for name in names if name]


def missing_packages(packages: Sequence[str] | None = None) -> list[str]:
    """The required packages dpkg does not report as installed, in list order."""
    wanted = list(packages) if packages is not None else required_packages()
    if not wanted:
        return []
    if shutil.which("dpkg-query") is None:
        raise LabError("dpkg-query not found: the lab needs a Debian (12) host")
    result = proc.run(["dpkg-query", "-W", "-f=${Package} ${db:Status-Abbrev}\n", *wanted])
    installed = {
        fields[0].split(":", 1)[0]
        for fields in (line.split() for line in result.stdout.splitlines())
        if len(fields) >= 2 and fields[1] == "ii"
    }
    return [name for name in wanted if name not in installed]


def install_packages(packages: Sequence[str] | None = None) -> list[str]:
    """Install the missing lab packages with apt-get; returns what was installed.

    A temporary policy-rc.d keeps Debian from starting slurmctld, munge, MariaDB or sshd on the
    host: the lab only ever runs them inside nodes.
    """
    missing = missing_packages(packages)
    if not missing:
        return []
    if os.geteuid() != 0:
        raise LabError(f"installing {' '.join(missing)} needs root")
    with _daemons_held_back():
        result = proc.run(
            ["apt-get", "install", "-y", "--no-install-recommends", *missing],
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
    if result.rc != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-15:])
        raise LabError(f"apt-get install {' '.join(missing)} failed (exit {result.rc}):\n{tail}")
    return missing


@contextmanager
def _daemons_held_back() -> Iterator[None]:
    """A deny-all policy-rc.d for the duration; an admin's own one is set aside and put back."""
    saved = POLICY_RC_D.with_name("policy-rc.d.hpckit-saved")
    had_own = POLICY_RC_D.exists()
    if had_own:
        POLICY_RC_D.replace(saved)
    POLICY_RC_D.write_text(_POLICY_SCRIPT, encoding="utf-8")
    POLICY_RC_D.chmod(0o755)
    try:
        yield
    finally:
        if had_own:
            saved.replace(POLICY_RC_D)
        else:
            POLICY_RC_D.unlink(missing_ok=True)
