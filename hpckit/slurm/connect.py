"""Reach a deployed cluster: locally when this machine is its login node, else through the login node over SSH."""

from __future__ import annotations

import socket
from pathlib import Path

from hpckit.clusters import ClusterAccess, SshAccess, load_access
from hpckit.proc import LocalTransport, Transport
from hpckit.proc.ssh import SshTransport


def ssh_transport(access: SshAccess, address: str, where: str) -> SshTransport:
    key = Path(access.key_file).expanduser() if access.key_file else None
    known = Path(access.known_hosts) if access.known_hosts else None
    return SshTransport(address, access.user, access.port, key, known, where=where)


def ssh_to(access: ClusterAccess, host: str) -> SshTransport:
    return ssh_transport(access.access, access.addresses.get(host, host), host)


def login_transport(cluster: str, state: Path | None = None) -> Transport:
    access = load_access(cluster, state)
    if socket.gethostname().split(".")[0] == access.login_host:
        return LocalTransport(where=access.login_host)
    return ssh_to(access, access.login_host)
