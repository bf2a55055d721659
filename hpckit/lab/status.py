"""What `status` reports of a lab, whichever provider runs its machines."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hpckit.lab.errors import LabError


@dataclass(frozen=True)
class NodeStatus:
    name: str
    address: str
    gpus: int
    up: bool
    pid: int | None  # host pid of the node's PID 1 (tini)
    sshd: bool  # an SSH server answers on address:22


@dataclass(frozen=True)
class LabStatus:
    cluster: str
    bridge: str
    subnet: str
    host_address: str
    state_dir: Path
    nodes: tuple[NodeStatus, ...]

    @property
    def all_up(self) -> bool:
        """Every node runs and answers SSH."""
        return all(n.up and n.sshd for n in self.nodes)

    def node(self, name: str) -> NodeStatus:
        for status in self.nodes:
            if status.name == name:
                return status
        raise LabError(f"lab {self.cluster!r} has no node {name!r}")
