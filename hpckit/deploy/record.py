"""Writing the deployment record: what was deployed, how, with which versions, and how to reach it again.

One directory per deploy under STATE/clusters/NAME/deployments/, plus a `current` link; the layout and every
read of the record live in `hpckit.clusters`. It never holds a secret: the cluster key (munge or auth/slurm)
and DB password stay on the cluster (runner events of no_log tasks arrive censored, and slurmdbd.conf is never fetched).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from hpckit.clusters import ACCESS, CONFIGS, ClusterAccess, ClusterDir

# Rendered files fetched from the cluster into the record; each is free of secrets by construction.
RECORDED_CONFIGS = ("/etc/slurm/slurm.conf", "/etc/slurm/gres.conf", "/etc/slurm/cgroup.conf")


class DeploymentRecord:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, cluster: str, root: Path | None = None) -> DeploymentRecord:
        base = ClusterDir.of(cluster, root).deployments
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
        target = self.path / CONFIGS / host / remote_path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    def write_access(self, access: ClusterAccess) -> None:
        self.write_json(ACCESS, asdict(access))

    @property
    def events_file(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def cluster_dir(self) -> ClusterDir:
        return ClusterDir(self.path.parent.parent.name, self.path.parent.parent)

    def mark_current(self) -> None:
        self.cluster_dir.destroyed_marker.unlink(missing_ok=True)
        link = self.cluster_dir.current
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
    before = ClusterDir.of(bp.cluster_name, root).compute_hosts() or {}
    now = {bp.controller.host, *(h.host for h in bp.login), *(host for _, host, _ in bp.compute_hosts())}
    return {h: v for h, v in before.items() if h not in now}


def mark_destroyed(cluster: str, root: Path | None = None) -> None:
    """`hpckit destroy` took the cluster down: later commands say so instead of failing on what is gone."""
    where = ClusterDir.of(cluster, root)
    if not where.path.is_dir():
        return
    info = run_info({})
    data = {"time": info["started"], "user": info["user"], "host": info["host"], "command": info["command"]}
    where.destroyed_marker.write_text(json.dumps(data, indent=2) + "\n")
