"""The deployment record as every later command reads it: where it lies and what it says.

`deploy/record.py` writes the record; everything else (reaching the login node, the bench's partition facts,
deploy's own look at the last deploy) reads it here and nowhere else. This module sits on the ground floor: it
imports no room of hpckit, so any room may read the record without an import cycle.

Layout under STATE (``$HPCKIT_STATE``; /var/lib/hpckit for root; ~/.local/state/hpckit otherwise)::

    clusters/NAME/
        deployments/STAMP/     one folder per deploy (blueprint.json, run.json, inventory.yml, extravars.yml,
                               events.jsonl, versions.json, summary.json, access.json, configs/)
        current -> deployments/STAMP    the last deploy that succeeded
        destroyed.json         `hpckit destroy` took the cluster down (removed by the next good deploy)
        facts/                 Ansible's fact cache for the cluster (deploy and plan share it)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hpckit.errors import HpckitError

DESTROYED = "destroyed.json"
ACCESS = "access.json"
BLUEPRINT = "blueprint.json"
INVENTORY = "inventory.yml"
VERSIONS = "versions.json"
CONFIGS = "configs"
TOOLCHAIN = "toolchain.json"


def state_root() -> Path:
    if env := os.environ.get("HPCKIT_STATE"):
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/hpckit")
    return Path.home() / ".local" / "state" / "hpckit"


class RecordError(HpckitError):
    exit_code = 2


@dataclass(frozen=True)
class SshAccess:
    """How Ansible and fabric reach every host."""

    user: str
    port: int = 22
    key_file: str | None = None
    known_hosts: str | None = None
    python: str = "/usr/bin/python3"


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


@dataclass(frozen=True)
class ClusterDir:
    """One cluster's folder in the state root: its paths, and the reads of what its last deploy left."""

    cluster: str
    path: Path

    @classmethod
    def of(cls, cluster: str, root: Path | None = None) -> ClusterDir:
        return cls(cluster, (root or state_root()) / "clusters" / cluster)

    @property
    def deployments(self) -> Path:
        return self.path / "deployments"

    @property
    def current(self) -> Path:
        return self.path / "current"

    @property
    def facts(self) -> Path:
        return self.path / "facts"

    @property
    def destroyed_marker(self) -> Path:
        return self.path / DESTROYED

    def destroyed(self) -> str | None:
        """None while the cluster stands; else when and by whom it was destroyed (empty if unreadable)."""
        if not self.destroyed_marker.exists():
            return None
        try:
            info = json.loads(self.destroyed_marker.read_text())
            return f" at {info['time']} by {info['user']}@{info['host']}"
        except (OSError, ValueError, KeyError, TypeError):
            return ""

    def access(self) -> ClusterAccess:
        """How to reach the cluster; a clear error when it was destroyed or never deployed."""
        when = self.destroyed()
        if when is not None:
            raise RecordError(
                f"cluster {self.cluster!r} was destroyed{when} (`hpckit destroy`); deploy it again to use it"
            )
        path = self.current / ACCESS
        try:
            data = json.loads(path.read_text())
            data["access"] = SshAccess(**data["access"])
            return ClusterAccess(**data)
        except FileNotFoundError:
            raise RecordError(f"no deployment recorded for cluster {self.cluster!r} (looked for {path})") from None
        except (ValueError, TypeError, KeyError) as exc:
            raise RecordError(f"deployment record {path} is unreadable: {exc}") from None

    def blueprint(self) -> tuple[Path, Any]:
        """The expanded blueprint the cluster was last deployed with, as JSON data, and the file it came from
        (the caller validates it into its model and names this file when that fails)."""
        path = self.current / BLUEPRINT
        try:
            return path, json.loads(path.read_text())
        except FileNotFoundError:
            raise RecordError(f"no deployment recorded for cluster {self.cluster!r} (looked for {path})") from None
        except ValueError as exc:
            raise RecordError(f"deployment record {path} is unreadable: {exc}") from None

    def slurm_version(self) -> str | None:
        """The Slurm version the last good deploy found running (`sinfo --version`); None when the record
        does not say (no record, or the controller did not answer then)."""
        try:
            found = json.loads((self.current / VERSIONS).read_text()).get("slurm")
        except (OSError, ValueError, AttributeError):
            return None
        return found if isinstance(found, str) and found[:1].isdigit() else None

    def slurm_install_mode(self) -> str | None:
        """Where the running Slurm came from as the last good deploy recorded it: "distro" or "build"."""
        try:
            found = json.loads((self.current / VERSIONS).read_text()).get("slurm_install", {}).get("mode")
        except (OSError, ValueError, AttributeError):
            return None
        return found if isinstance(found, str) else None

    def toolchain(self, partition: str) -> dict[str, Any] | None:
        """What the last good deploy installed for a partition's benchmarks (toolchain.json: backend, python,
        nccl_tests_dir, container); None when the record does not say (no record, or one from before it)."""
        try:
            found = json.loads((self.current / TOOLCHAIN).read_text())["partitions"][partition]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return found if isinstance(found, dict) else None

    def config(self, host: str, remote_path: str) -> str | None:
        """A config file as the last good deploy fetched it from ``host`` (e.g. /etc/slurm/slurm.conf); None
        when the record has no copy."""
        try:
            return (self.current / CONFIGS / host / remote_path.lstrip("/")).read_text()
        except OSError:
            return None

    def compute_hosts(self) -> dict[str, Any] | None:
        """The compute hosts of the last good deploy's inventory (name -> their inventory vars then); None
        when there is no readable one."""
        try:
            inventory = yaml.safe_load((self.current / INVENTORY).read_text())
            partitions = inventory["all"]["children"]["slurm_compute"]["children"]
            return {h: v for part in partitions.values() for h, v in (part.get("hosts") or {}).items()}
        except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError):
            return None


def load_access(cluster: str, root: Path | None = None) -> ClusterAccess:
    return ClusterDir.of(cluster, root).access()


def recorded_clusters(root: Path | None = None) -> list[str]:
    """The clusters with a good deploy recorded under the state root (destroyed ones included), sorted."""
    base = (root or state_root()) / "clusters"
    return sorted(p.parent.parent.name for p in base.glob(f"*/current/{ACCESS}"))
