"""`hpckit lab exec` on the shared lab cluster: a command runs with the environment an SSH login to the node gets,
not the deploying shell's (whose PATH lacks the login node's /etc/hpckit/bin and may hold pyenv shims)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.labutil import Cluster, needs_lab

pytestmark = [pytest.mark.lab, needs_lab()]

SESSION_VARS = ("PATH", "HOME", "USER", "LOGNAME", "SHELL")


def lab_exec(cluster: Cluster, node: str, *argv: str) -> subprocess.CompletedProcess[str]:
    # The caller's shell as a user's would be: a PATH of its own that the node does not use.
    env = {"PATH": "/root/.pyenv/shims:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/tmp"}
    return subprocess.run(
        [sys.executable, "-m", "hpckit", "lab", "exec", "-c", cluster.name, node, "--", *argv],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": ":".join(sys.path)},
        timeout=60,
        check=False,
    )


def session(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {k: v for k, v in pairs if k in SESSION_VARS}


def test_lab_exec_finds_what_ssh_finds(cluster: Cluster) -> None:
    """The login node's hpckit lives in its private /etc/hpckit/bin, on the PATH sshd gives a session."""
    over_ssh = cluster.on("login", "sh", "-c", "command -v hpckit")
    assert over_ssh.stdout.strip() == "/etc/hpckit/bin/hpckit"
    done = lab_exec(cluster, "login", "hpckit", "--version")
    assert done.returncode == 0, done.stderr
    assert "hpckit" in done.stdout


def test_lab_exec_environment_is_the_ssh_sessions(cluster: Cluster) -> None:
    over_ssh = session(cluster.on("login", "env").stdout)
    done = lab_exec(cluster, "login", "env")
    assert done.returncode == 0, done.stderr
    assert session(done.stdout) == over_ssh
    assert "PYTHONPATH" not in done.stdout  # nothing else of the caller's leaks in
