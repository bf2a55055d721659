"""`hpckit expand`: a blueprint's inventory, variables and every config the roles would write, into a folder,
without contacting a host (for review, and for GitOps: commit the folder, diff it in review).

Layout of the folder:
  inventory.yml, extravars.yml   what deploy hands to ansible/site.yml (no secrets; none are in them)
  files/all/...                  files every Slurm host gets the same (slurm.conf, topology.conf)
  files/<host>/...               the controller's and each login host's own files
  files/partition_<name>/...     the files of the nodes of a partition that declares hardware
  files.yml                      for each file: where it lands, on which hosts, from which template, and what
                                 was assumed where only a run on the host can tell
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hpckit.blueprint.models import Blueprint, StaticProvider
from hpckit.clusters import INVENTORY, SshAccess
from hpckit.deploy import yaml_text
from hpckit.deploy.playvars import build_vars
from hpckit.deploy.render import Rendered, render_all
from hpckit.errors import InputError

MANIFEST = "files.yml"
# An earlier expand's manifest of 10,000 nodes took Python's YAML parser 2.5 s; libyaml's reads it in a tenth.
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Expanded:
    folder: Path
    files: list[Rendered]
    hosts: int
    timings_s: dict[str, float]


def offline_access(bp: Blueprint) -> SshAccess:
    """How Ansible would reach the hosts, as far as the blueprint says (a lab's identity is made by deploy)."""
    if isinstance(bp.provider, StaticProvider):
        ssh = bp.provider.ssh
        return SshAccess(ssh.user, ssh.port, ssh.key)
    return SshAccess("root")


def expand(bp: Blueprint, folder: Path, *, fabric: str | None = None, configs: bool = True) -> Expanded:
    """Write the inventory, the variables and (``configs``) every rendered config into ``folder``."""
    timings: dict[str, float] = {}
    start = time.perf_counter()
    inventory, extravars = build_vars(bp, offline_access(bp))
    timings["vars"] = time.perf_counter() - start
    files: list[Rendered] = []
    if configs:
        start = time.perf_counter()
        declared = [(f"partition_{p.name}", p.hostnames()) for p in bp.partitions if p.hardware is not None]
        files = render_all(inventory, extravars, declared, fabric)
        timings["configs"] = time.perf_counter() - start
    start = time.perf_counter()
    earlier = _earlier(folder)
    _write_yaml(folder / INVENTORY, inventory)
    _write_yaml(folder / "extravars.yml", extravars)
    _write_files(folder, files, earlier)
    _remove(folder, earlier - {f"files/{item.path}" for item in files})
    _write_yaml(folder / MANIFEST, {"files": [_entry(item) for item in files]})
    timings["write"] = time.perf_counter() - start
    return Expanded(folder, files, len(bp.compute_hosts()), timings)


def _entry(item: Rendered) -> dict[str, Any]:
    entry = {"path": f"files/{item.path}", "dest": item.dest, "hosts": item.hosts, "role": item.role}
    entry["template"] = item.template
    return {**entry, **({"assumes": item.assumes} if item.assumes else {})}


def _write_yaml(path: Path, data: Any) -> None:
    path.write_text(yaml_text.dump(data))


def _earlier(folder: Path) -> set[str]:
    """Make ``folder`` ready: new, empty, or an earlier expand's; the files that expand wrote (``files/...``)."""
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{folder} is not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    manifest = folder / MANIFEST
    if not manifest.is_file():
        if any(folder.iterdir()):
            raise InputError(f"{folder} is neither empty nor an earlier `hpckit expand` ({MANIFEST}): left alone")
        return set()
    try:
        earlier = yaml.load(manifest.read_text(), Loader=_Loader) or {}
        return {str(e["path"]) for e in earlier.get("files", [])}
    except (yaml.YAMLError, AttributeError, KeyError, TypeError) as exc:
        raise InputError(f"{manifest} is not an `hpckit expand` manifest ({exc}); {folder} not touched") from None


def _write_files(folder: Path, files: list[Rendered], earlier: set[str]) -> None:
    """Write each file, but leave one an earlier expand wrote with the same text as it is: creating and removing
    5,006 files (10,000 nodes) is seconds of the kernel's time, and an unchanged file keeps its mtime."""
    made: set[Path] = set()
    for item in files:
        target = folder / "files" / item.path
        if f"files/{item.path}" in earlier and target.is_file() and target.read_text() == item.text:
            continue
        if target.parent not in made:  # a partition's folders once, not once per file
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(target.parent)
        target.write_text(item.text)


def _remove(folder: Path, stale: set[str]) -> None:
    """Remove the files an earlier expand wrote that this one did not (only inside ``files/``), and the folders
    that leaves empty (``files/`` too), nothing else."""
    root = folder.resolve() / "files"
    for rel in stale:
        path = (folder / rel).resolve()
        if root in path.parents:
            path.unlink(missing_ok=True)
            _prune(path.parent, root.parent)


def _prune(empty: Path, top: Path) -> None:
    while empty != top and top in empty.parents:
        try:
            empty.rmdir()
        except OSError:  # not empty (or gone): the folders above it are not empty either
            return
        empty = empty.parent
