"""SSH for the lab: one client key for root per lab, one host key per node, node-private configs.

Everything lands in the lab's state dir or in a node's private /etc layer; the host's /root/.ssh
and /etc/ssh are never touched.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hpckit import proc
from hpckit.lab.errors import LabError
from hpckit.lab.spec import LabNode, LabSpec

# Paths as a node sees them (inside its private /etc).
NODE_HOST_KEY = "/etc/ssh/ssh_host_ed25519_key"
NODE_CLIENT_KEY = "/etc/ssh/hpckit_lab_id_ed25519"
NODE_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"
NODE_AUTHORIZED_KEYS_DIR = "/etc/ssh/authorized_keys"
NODE_SSHD_LOG = "/var/log/sshd.log"
# The interpreter Ansible should use on nodes: root's shell start-up files are the host's (same /root)
# and may put another python3 first on PATH (pyenv shims, venvs) that interpreter discovery then picks.
NODE_PYTHON = "/usr/bin/python3"


@dataclass(frozen=True)
class SshIdentity:
    """What Ansible or fabric need to reach the lab's nodes as root."""

    user: str
    private_key: Path
    known_hosts: Path

    def ssh_options(self) -> list[str]:
        """Options for the ssh command line (also usable as Ansible's ssh_args)."""
        return [
            "-i",
            str(self.private_key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
        ]

    def ansible_vars(self) -> dict[str, str]:
        """Inventory variables for a lab node (add ``ansible_host``: its address)."""
        return {
            "ansible_user": self.user,
            "ansible_ssh_private_key_file": str(self.private_key),
            "ansible_ssh_common_args": (f"-o UserKnownHostsFile={self.known_hosts} -o GlobalKnownHostsFile=/dev/null"),
            "ansible_python_interpreter": NODE_PYTHON,
        }

    def ssh_command(self, address: str, *argv: str) -> list[str]:
        return ["ssh", *self.ssh_options(), f"{self.user}@{address}", *argv]


def generate_key(path: Path, comment: str) -> None:
    """Create an ed25519 key pair at ``path`` unless one is there (keys persist until `down`)."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    result = proc.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    if result.rc != 0:
        raise LabError(f"ssh-keygen could not write {path}: {result.stderr.strip()}")


def public_key(private_key: Path) -> str:
    """'type base64' of a key pair's public half, without the comment."""
    text = private_key.with_name(private_key.name + ".pub").read_text(encoding="ascii")
    return " ".join(text.split()[:2])


def known_hosts_text(spec: LabSpec, host_keys: dict[str, str]) -> str:
    lines = [f"{n.name},{n.address} {host_keys[n.name]}" for n in spec.nodes if n.name in host_keys]
    return "\n".join(lines) + "\n"


NODE_BIN = "/etc/hpckit/bin"
# The PATH of a session on a node (sshd's SetEnv below, and `lab exec`).
NODE_PATH = f"{NODE_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def session_environment(caller: Mapping[str, str]) -> dict[str, str]:
    """The environment sshd gives root's session on a node: its own PATH, HOME, USER..., and of the caller's
    only what the node's sshd accepts (LANG, LC_*) or a terminal carries (TERM)."""
    env = {"PATH": NODE_PATH, "HOME": "/root", "USER": "root", "LOGNAME": "root", "SHELL": "/bin/bash"}
    env["MAIL"] = "/var/mail/root"
    passed = {k: v for k, v in caller.items() if k in ("LANG", "TERM") or k.startswith("LC_")}
    return {**env, **passed}


def sshd_config_text(spec: LabSpec, node: LabNode) -> str:
    return f"""\
# hpckit lab {spec.cluster}, node {node.name}: this node's private sshd_config.
ListenAddress {node.address}
Port 22
HostKey {NODE_HOST_KEY}
PidFile /run/sshd.pid
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
AuthorizedKeysFile {NODE_AUTHORIZED_KEYS_DIR}/%u
# PAM session modules expect a full system (loginuid, systemd-logind); nodes have neither.
UsePAM no
X11Forwarding no
PrintMotd no
UseDNS no
# Ansible opens many connections at once.
MaxStartups 200:30:400
MaxSessions 64
AcceptEnv LANG LC_*
# Commands installed for this node alone (the login node's hpckit) live in its private /etc, not in the
# /usr/local/bin it shares with this box and every other node.
SetEnv PATH={NODE_PATH}
Subsystem sftp /usr/lib/openssh/sftp-server
"""


def ssh_client_config_text(spec: LabSpec) -> str:
    """Node-wide ssh client config: node-to-node ssh as root works with no options."""
    return f"""\
# hpckit lab {spec.cluster}: ssh client settings on every node.
Host *
    User root
    IdentityFile {NODE_CLIENT_KEY}
    IdentitiesOnly yes
    GlobalKnownHostsFile {NODE_KNOWN_HOSTS}
    UserKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    BatchMode yes
"""


def sshd_defaults_text() -> str:
    """/etc/default/ssh for nodes: the init script passes these options, so sshd logs to a file."""
    return f'SSHD_OPTS="-E {NODE_SSHD_LOG}"\n'


def sshd_answers(address: str, timeout: float) -> bool:
    """True when something on address:22 greets like an SSH server."""
    try:
        with socket.create_connection((address, 22), timeout=timeout) as sock:
            sock.settimeout(timeout)
            return sock.recv(4).startswith(b"SSH-")
    except OSError:
        return False
