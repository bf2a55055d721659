"""Contents of the files each node keeps private under /etc (name resolution, hostname, ssh)."""

from __future__ import annotations

from pathlib import Path

from hpckit.lab import ssh
from hpckit.lab.spec import LabNode, LabSpec

EtcFiles = dict[str, tuple[str, int]]  # path relative to /etc -> (content, mode)


def node_files(spec: LabSpec, node: LabNode, client_key: Path) -> EtcFiles:
    """Files that differ per node and never change while it runs."""
    files: EtcFiles = {
        "hostname": (f"{node.name}\n", 0o644),
        "nsswitch.conf": (nsswitch_text(_read(Path("/etc/nsswitch.conf"))), 0o644),
        # Nothing listens there: a lookup that misses /etc/hosts fails at once instead of asking
        # the host's DNS (which stalls torch's store for seconds per peer).
        "resolv.conf": ("# hpckit lab node: names come from /etc/hosts only\nnameserver 127.0.0.1\n", 0o644),
        "ssh/sshd_config": (ssh.sshd_config_text(spec, node), 0o644),
        "ssh/ssh_config": (ssh.ssh_client_config_text(spec), 0o644),
        "ssh/authorized_keys/root": (ssh.public_key(client_key) + "\n", 0o644),
        "ssh/hpckit_lab_id_ed25519": (client_key.read_text(encoding="ascii"), 0o600),
        "default/ssh": (ssh.sshd_defaults_text(), 0o644),
    }
    shadow = unlocked_root_shadow(_read(Path("/etc/shadow")))
    if shadow is not None:
        files["shadow"] = (shadow, 0o640)
    return files


def lab_files(spec: LabSpec, host_keys: dict[str, str]) -> EtcFiles:
    """Files every node shares, rewritten on each `up` (they list the nodes)."""
    return {
        "hosts": (hosts_text(spec), 0o644),
        "ssh/ssh_known_hosts": (ssh.known_hosts_text(spec, host_keys), 0o644),
    }


def hosts_text(spec: LabSpec) -> str:
    lines = [
        f"# hpckit lab {spec.cluster}",
        "127.0.0.1 localhost",
        "::1 localhost ip6-localhost ip6-loopback",
    ]
    lines += [f"{n.address} {n.name}" for n in spec.nodes]
    # IPv4-mapped forms, so a reverse lookup of a peer seen over an IPv6 socket is answered here.
    lines += [f"::ffff:{n.address} {n.name}" for n in spec.nodes]
    return "\n".join(lines) + "\n"


def nsswitch_text(host_nsswitch: str) -> str:
    """The host's nsswitch.conf with hosts looked up in files only."""
    lines = [line for line in host_nsswitch.splitlines() if not line.strip().startswith("hosts:")]
    lines.append("hosts:          files")
    return "\n".join(lines) + "\n"


def unlocked_root_shadow(host_shadow: str) -> str | None:
    """A shadow file whose root entry is not locked, or None when the host's already is not.

    sshd without PAM refuses even key logins to an account whose password starts with '!'.
    """
    lines = host_shadow.splitlines()
    for i, line in enumerate(lines):
        fields = line.split(":")
        if fields[0] == "root" and len(fields) > 1 and fields[1].startswith("!"):
            fields[1] = "*"
            lines[i] = ":".join(fields)
            return "\n".join(lines) + "\n"
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
