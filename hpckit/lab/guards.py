"""What every lab provider checks before it changes this machine: root, one change at a time, and that
no other lab on this machine uses the same link name or an overlapping subnet."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hpckit.lab.errors import LabError
from hpckit.lab.spec import LabSpec


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (it creates namespaces, a bridge and mounts)")


@contextmanager
def locked(state_root: Path) -> Iterator[None]:
    """Serialise lab changes on this host: flock on the state root directory itself."""
    state_root.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def check_other_labs(spec: LabSpec) -> None:
    """Two labs on one host must not share a bridge or overlapping subnets."""
    if not spec.state_root.is_dir():
        return
    for spec_file in sorted(spec.state_root.glob("*/spec.json")):
        if spec_file.parent.name == spec.cluster:
            continue
        other = LabSpec.from_json(spec_file.read_text(encoding="utf-8"), origin=str(spec_file))
        if other.bridge == spec.bridge or other.network.overlaps(spec.network):
            raise LabError(
                f"lab {other.cluster!r} already uses bridge {other.bridge} / subnet {other.subnet}; "
                f"give lab {spec.cluster!r} its own (or `hpckit lab down --cluster {other.cluster}`)"
            )
