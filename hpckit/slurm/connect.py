"""Reach a deployed cluster: locally when this machine is its login node, else through the login node over SSH."""

from __future__ import annotations

import socket
from pathlib import Path

from hpckit.deploy.record import ClusterAccess, load_access
from hpckit.deploy.targets import ssh_transport
from hpckit.slurm.transport import LocalTransport, SshTransport, Transport


def ssh_to(access: ClusterAccess, host: str) -> SshTransport:
    return ssh_transport(access.access, access.addresses.get(host, host), host)


def login_transport(cluster: str, state: Path | None = None) -> Transport:
    access = load_access(cluster, state)
    if socket.gethostname().split(".")[0] == access.login_host:
        return LocalTransport(where=access.login_host)
    return ssh_to(access, access.login_host)
