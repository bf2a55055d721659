"""Where a lab keeps what a later process needs: its spec, node pids, keys and node directories.

Layout under ``<state_root>/<cluster>/``::

    spec.json                 the LabSpec the lab was brought up with
    mountpoints.json          empty host directories the lab created as mount targets (removed by down)
    ssh/                      client key for root, known_hosts for every node
    shared/<path>             host side of each shared directory
    nodes/<name>/node.json    pids of the node's launcher and its PID 1 (with start times, against pid reuse)
    nodes/<name>/boot.sh      what the node's PID 1 runs before it becomes tini
    nodes/<name>/console.log  the node's stdout/stderr
    nodes/<name>/layers/      overlay upper/work dirs of the node's private /etc and /var parts
    nodes/<name>/tmp, var-tmp the node's /tmp and /var/tmp
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from hpckit.lab.errors import LabError
from hpckit.lab.spec import LabSpec


@dataclass(frozen=True)
class LabPaths:
    """Paths of one lab's state; pure path arithmetic, nothing touched."""

    root: Path

    @classmethod
    def of(cls, state_root: Path, cluster: str) -> LabPaths:
        return cls(state_root / cluster)

    @property
    def spec_file(self) -> Path:
        return self.root / "spec.json"

    @property
    def mountpoints_file(self) -> Path:
        return self.root / "mountpoints.json"

    @property
    def ssh_dir(self) -> Path:
        return self.root / "ssh"

    @property
    def client_key(self) -> Path:
        return self.ssh_dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.ssh_dir / "known_hosts"

    def shared_source(self, shared_dir: str) -> Path:
        return self.root / "shared" / shared_dir.lstrip("/")

    def node_dir(self, node: str) -> Path:
        return self.root / "nodes" / node

    def node_record(self, node: str) -> Path:
        return self.node_dir(node) / "node.json"


@dataclass(frozen=True)
class NodeRecord:
    """How to find a running node again: the launcher (unshare) and the node's PID 1, as host pids."""

    launcher_pid: int
    launcher_start: int
    init_pid: int
    init_start: int


def save_spec(paths: LabPaths, spec: LabSpec) -> None:
    write_atomic(paths.spec_file, spec.to_json())


def load_spec(paths: LabPaths) -> LabSpec:
    try:
        text = paths.spec_file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LabError(f"no lab {paths.root.name!r} under {paths.root.parent} (is it up?)") from None
    return LabSpec.from_json(text, origin=str(paths.spec_file))


def save_record(paths: LabPaths, node: str, record: NodeRecord) -> None:
    write_atomic(paths.node_record(node), json.dumps(asdict(record)) + "\n")


def load_record(paths: LabPaths, node: str) -> NodeRecord | None:
    try:
        data = json.loads(paths.node_record(node).read_text(encoding="utf-8"))
        return NodeRecord(**{k: int(data[k]) for k in NodeRecord.__dataclass_fields__})
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise LabError(f"{paths.node_record(node)} is damaged ({exc}); run `hpckit lab down`") from None


def load_mountpoints(paths: LabPaths) -> list[str]:
    try:
        data = json.loads(paths.mountpoints_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except ValueError as exc:
        raise LabError(f"{paths.mountpoints_file} is damaged ({exc})") from None
    return [str(p) for p in data]


def save_mountpoints(paths: LabPaths, mountpoints: list[str]) -> None:
    write_atomic(paths.mountpoints_file, json.dumps(sorted(set(mountpoints))) + "\n")


def write_atomic(path: Path, text: str) -> None:
    """Write via rename so a reader in another process never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
