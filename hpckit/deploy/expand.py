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

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hpckit.blueprint.models import Blueprint, StaticProvider
from hpckit.clusters import INVENTORY, SshAccess
from hpckit.deploy.playvars import build_vars
from hpckit.deploy.render import Rendered, render_all
from hpckit.errors import InputError

MANIFEST = "files.yml"
_OWN = (INVENTORY, "extravars.yml", MANIFEST)  # a record's names: the same ansible-playbook line runs both
_Dumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
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
    _clear(folder)
    _write_yaml(folder / INVENTORY, inventory)
    _write_yaml(folder / "extravars.yml", extravars)
    made: set[Path] = set()
    for item in files:
        target = folder / "files" / item.path
        if target.parent not in made:  # a partition's folders once, not once per file
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(target.parent)
        target.write_text(item.text)
    _write_yaml(folder / MANIFEST, {"files": [_entry(item) for item in files]})
    timings["write"] = time.perf_counter() - start
    return Expanded(folder, files, len(bp.compute_hosts()), timings)


def _entry(item: Rendered) -> dict[str, Any]:
    entry = {"path": f"files/{item.path}", "dest": item.dest, "hosts": item.hosts, "role": item.role}
    entry["template"] = item.template
    return {**entry, **({"assumes": item.assumes} if item.assumes else {})}


def _write_yaml(path: Path, data: Any) -> None:
    path.write_text(yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120))


def _clear(folder: Path) -> None:
    """Make ``folder`` ready: new, empty, or an earlier expand's (whose files are removed, nothing else)."""
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{folder} is not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    manifest = folder / MANIFEST
    if not manifest.is_file():
        if any(folder.iterdir()):
            raise InputError(f"{folder} is neither empty nor an earlier `hpckit expand` ({MANIFEST}): left alone")
        return
    try:
        earlier = yaml.load(manifest.read_text(), Loader=_Loader) or {}
        paths = [str(e["path"]) for e in earlier.get("files", [])]
    except (yaml.YAMLError, AttributeError, KeyError, TypeError) as exc:
        raise InputError(f"{manifest} is not an `hpckit expand` manifest ({exc}); {folder} not touched") from None
    root = folder.resolve() / "files"
    for rel in paths:
        path = (folder / rel).resolve()
        if root in path.parents:
            path.unlink(missing_ok=True)
    for name in _OWN:
        (folder / name).unlink(missing_ok=True)
    files = folder / "files"
    if files.is_dir() and not any(p.is_file() for p in files.rglob("*")):
        shutil.rmtree(files)
