"""The deployment record: what was deployed, how, with which versions, and how to reach it again.

One directory per deploy under STATE/clusters/NAME/deployments/, plus a `current` link. It never holds a
secret: the munge key and DB password stay on the cluster (runner events of no_log tasks arrive censored,
and slurmdbd.conf is never fetched).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from hpckit.deploy.inventory import SshAccess
from hpckit.errors import HpckitError

# Rendered files fetched from the cluster into the record; each is free of secrets by construction.
RECORDED_CONFIGS = ("/etc/slurm/slurm.conf", "/etc/slurm/gres.conf", "/etc/slurm/cgroup.conf")


def state_root() -> Path:
    if env := os.environ.get("HPCKIT_STATE"):
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/hpckit")
    return Path.home() / ".local" / "state" / "hpckit"


class RecordError(HpckitError):
    exit_code = 2


@dataclass(frozen=True)
class ClusterAccess:
    """What later commands need to reach the cluster through its login node."""

    cluster: str
    login_host: str
    login_address: str
    controller_host: str
    addresses: dict[str, str]
    access: SshAccess
    lab: bool


class DeploymentRecord:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, cluster: str, root: Path | None = None) -> DeploymentRecord:
        base = (root or state_root()) / "clusters" / cluster / "deployments"
        base.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        path, n = base / stamp, 1
        while path.exists():
            n += 1
            path = base / f"{stamp}-{n}"
        path.mkdir(mode=0o750)
        return cls(path)

    def write_yaml(self, name: str, data: Any) -> None:
        (self.path / name).write_text(yaml.safe_dump(data, sort_keys=False))

    def write_json(self, name: str, data: Any) -> None:
        (self.path / name).write_text(json.dumps(data, indent=2, default=str) + "\n")

    def write_config(self, host: str, remote_path: str, text: str) -> None:
        target = self.path / "configs" / host / remote_path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    def write_access(self, access: ClusterAccess) -> None:
        self.write_json("access.json", asdict(access))

    @property
    def events_file(self) -> Path:
        return self.path / "events.jsonl"

    def mark_current(self) -> None:
        (self.path.parent.parent / DESTROYED).unlink(missing_ok=True)
        link = self.path.parent.parent / "current"
        tmp = link.with_name(".current.tmp")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(self.path.relative_to(link.parent))
        tmp.replace(link)


def run_info(blueprint: Any, argv: list[str] | None = None) -> dict[str, Any]:
    """Who deployed, from where, with which command and which blueprint (a hash of it as expanded: two
    deploys with the same hash built the same cluster description)."""
    import getpass
    import hashlib
    import shlex
    import socket
    import sys

    canonical = json.dumps(blueprint, sort_keys=True, separators=(",", ":"), default=str)
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.geteuid())
    return {
        "user": user,
        "sudo_user": os.environ.get("SUDO_USER"),
        "host": socket.gethostname(),
        "command": shlex.join(["hpckit", *(sys.argv[1:] if argv is None else argv)]),
        "cwd": os.getcwd(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "blueprint_sha256": hashlib.sha256(canonical.encode()).hexdigest(),
    }


def retired_hosts(bp: Any, root: Path | None = None) -> dict[str, Any]:
    """Compute hosts of the last recorded deploy that the blueprint no longer has (name -> their inventory
    vars then): deploy stops their slurmd. A lab stops the whole machine of a removed node itself."""
    path = (root or state_root()) / "clusters" / bp.cluster_name / "current" / "inventory.yml"
    try:
        inventory = yaml.safe_load(path.read_text())
        partitions = inventory["all"]["children"]["slurm_compute"]["children"]
        before = {h: v for part in partitions.values() for h, v in (part.get("hosts") or {}).items()}
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        return {}
    now = {bp.controller.host, *(h.host for h in bp.login), *(host for _, host, _ in bp.compute_hosts())}
    return {h: v for h, v in before.items() if h not in now}


DESTROYED = "destroyed.json"


def mark_destroyed(cluster: str, root: Path | None = None) -> None:
    """`hpckit destroy` took the cluster down: later commands say so instead of failing on what is gone."""
    base = (root or state_root()) / "clusters" / cluster
    if not base.is_dir():
        return
    info = run_info({})
    data = {"time": info["started"], "user": info["user"], "host": info["host"], "command": info["command"]}
    (base / DESTROYED).write_text(json.dumps(data, indent=2) + "\n")


def load_access(cluster: str, root: Path | None = None) -> ClusterAccess:
    base = (root or state_root()) / "clusters" / cluster
    path = base / "current" / "access.json"
    destroyed = base / DESTROYED
    if destroyed.exists():
        try:
            info = json.loads(destroyed.read_text())
            when = f" at {info['time']} by {info['user']}@{info['host']}"
        except (OSError, ValueError, KeyError, TypeError):
            when = ""
        raise RecordError(f"cluster {cluster!r} was destroyed{when} (`hpckit destroy`); deploy it again to use it")
    try:
        data = json.loads(path.read_text())
        data["access"] = SshAccess(**data["access"])
        return ClusterAccess(**data)
    except FileNotFoundError:
        raise RecordError(f"no deployment recorded for cluster {cluster!r} (looked for {path})") from None
    except (ValueError, TypeError, KeyError) as exc:
        raise RecordError(f"deployment record {path} is unreadable: {exc}") from None
