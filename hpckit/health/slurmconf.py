"""What slurm.conf declares about nodes: CPUs, RealMemory, Gres (pure; text in, values out).

The health checks compare a node with its own NodeName line; the quick tier counts the fleet from it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field

from hpckit.errors import InputError


class SlurmConfError(InputError):
    pass


@dataclass(frozen=True)
class NodeDecl:
    name: str
    params: dict[str, str] = field(default_factory=dict)  # keys lower-cased

    def integer(self, key: str) -> int | None:
        value = self.params.get(key.lower())
        if value is None:
            return None
        match = re.fullmatch(r"(\d+)[A-Za-z]?", value.strip())
        return int(match.group(1)) if match else None

    @property
    def cpus(self) -> int | None:
        cpus = self.integer("CPUs")
        if cpus is not None:
            return cpus
        parts = [self.integer(k) for k in ("Sockets", "CoresPerSocket", "ThreadsPerCore")]
        if parts[0] is not None and parts[1] is not None:
            return parts[0] * parts[1] * (parts[2] or 1)
        return None

    @property
    def real_memory_mb(self) -> int | None:
        return self.integer("RealMemory")

    def gres_count(self, name: str = "gpu") -> int | None:
        """``Gres=gpu:h100:8,nic:2`` -> 8 for ``gpu``; None when the node declares no such GRES."""
        gres = self.params.get("gres")
        if not gres:
            return None
        total: int | None = None
        for item in _split_gres(gres):
            fields = item.split(":")
            if fields[0] != name:
                continue
            count = fields[-1].split("(")[0] if len(fields) > 1 else "1"
            if count.isdigit():
                total = (total or 0) + int(count)
        return total

    def gres_type(self, name: str = "gpu") -> str | None:
        for item in _split_gres(self.params.get("gres") or ""):
            fields = item.split(":")
            if fields[0] == name and len(fields) == 3:
                return fields[1]
        return None


def _split_gres(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Lines without comments, with backslash continuations joined; yields (first line number, text)."""
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        if full:
            yield start, full


def _pairs(line: str, where: str) -> list[tuple[str, str]]:
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise SlurmConfError(f"{where}: {exc}") from None
    pairs = []
    for word in words:
        key, sep, value = word.partition("=")
        if not sep:
            raise SlurmConfError(f"{where}: expected KEY=VALUE, got {word!r}")
        pairs.append((key.strip().lower(), value.strip()))
    return pairs


def parse_nodes(text: str, source: str = "slurm.conf") -> list[NodeDecl]:
    """Every node of every ``NodeName=`` line, with ``NodeName=DEFAULT`` values applied."""
    import hostlist

    defaults: dict[str, str] = {}
    nodes: dict[str, NodeDecl] = {}
    for number, line in _logical_lines(text):
        if not line.lower().startswith("nodename="):
            continue
        pairs = _pairs(line, f"{source}, line {number}")
        names, params = pairs[0][1], dict(pairs[1:])
        if names.upper() == "DEFAULT":
            defaults.update(params)
            continue
        try:
            expanded: list[str] = hostlist.expand_hostlist(names)
        except hostlist.BadHostlist as exc:
            raise SlurmConfError(f"{source}, line {number}: bad NodeName {names!r}: {exc}") from None
        for name in expanded:
            nodes[name] = NodeDecl(name, {**defaults, **params})
    return list(nodes.values())


def parse_settings(text: str, source: str = "slurm.conf") -> dict[str, str]:
    """Top-level ``Key=Value`` settings (NodeName/PartitionName lines left out), keys lower-cased."""
    out: dict[str, str] = {}
    for number, line in _logical_lines(text):
        head = line.split("=", 1)[0].strip().lower()
        if head in ("nodename", "partitionname", "nodeset", "downnodes", "frontendname", "include"):
            continue
        for key, value in _pairs(line, f"{source}, line {number}"):
            out[key] = value
    return out
