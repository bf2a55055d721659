"""slurm.conf read the way slurmctld reads it (pure; text in, values out).

Comments end a line, a trailing backslash joins the next one, and a line holds ``Key=Value`` pairs (white
space around ``=`` allowed, values in quotes may hold spaces). The first key says what the line is: a node
(``NodeName``), a partition (``PartitionName``), another named entity (``NodeSet``, ``DownNodes``,
``FrontendName``), an ``Include``, or settings.

Two readers share it: the health checks (a node's own NodeName line: CPUs, RealMemory, Gres; the fleet's
node names) and ``hpckit plan`` (what changed between two versions of the file, hpckit.deploy.changes).
The checks refuse a line they cannot read; the plan compares the lines it can and passes over the others.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache

from hpckit.errors import InputError

__all__ = [
    "ConfLine",
    "NodeDecl",
    "SlurmConf",
    "SlurmConfError",
    "collect_names",
    "expand_names",
    "parse_nodes",
    "parse_settings",
    "parse_slurm_conf",
]

ENTITIES = ("nodename", "partitionname", "nodeset", "downnodes", "frontendname")


class SlurmConfError(InputError):
    pass


@dataclass(frozen=True)
class ConfLine:
    """One logical line: its first physical line's number, its pairs (keys lower-cased, in order), its text
    with white space folded, and what made it unreadable (``error``; ``pairs`` then holds those before it)."""

    number: int
    head: str  # the first key, lower-cased: "nodename", "clustername", "include"
    pairs: tuple[tuple[str, str], ...]
    text: str
    error: str = ""

    @property
    def value(self) -> str:
        """The first pair's value: the node names of a NodeName line, the name of a PartitionName line."""
        return self.pairs[0][1] if self.pairs else ""

    @property
    def rest(self) -> str:
        """The text after the first ``=``, as written (white space folded)."""
        return self.text.split("=", 1)[1].strip() if "=" in self.text else ""


@dataclass(frozen=True)
class SlurmConf:
    source: str
    lines: tuple[ConfLine, ...]

    def of(self, *heads: str) -> list[ConfLine]:
        return [line for line in self.lines if line.head in heads]

    def settings(self) -> dict[str, str]:
        """Every pair of the lines that name no entity (``Include`` lines left out), keys lower-cased; an
        unreadable one raises SlurmConfError."""
        out: dict[str, str] = {}
        for line in self.lines:
            if line.head not in (*ENTITIES, "include"):
                out.update(self.readable(line).pairs)
        return out

    def readable(self, line: ConfLine) -> ConfLine:
        if line.error:
            raise SlurmConfError(f"{self.source}, line {line.number}: {line.error}")
        return line


_PAIR = re.compile(r"\s*([A-Za-z][A-Za-z0-9_.]*)\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|(\S*))(?=\s|$)")


def parse_slurm_conf(text: str, source: str = "slurm.conf") -> SlurmConf:
    return SlurmConf(source, tuple(_read_line(number, line) for number, line in _logical_lines(text)))


def _read_line(number: int, line: str) -> ConfLine:
    folded = " ".join(line.split())
    head = line.split("=", 1)[0].strip().lower()
    if head.split()[:1] == ["include"] and head != "include":  # `Include /etc/slurm/x.conf`
        return ConfLine(number, "include", (), folded)
    pairs: list[tuple[str, str]] = []
    at = 0
    while at < len(line):
        match = _PAIR.match(line, at)
        if match is None:
            word = line[at:].split()[0]
            return ConfLine(number, head, tuple(pairs), folded, f"expected KEY=VALUE, got {word!r}")
        value = next((v for v in match.group(2, 3, 4) if v is not None), "")
        pairs.append((match.group(1).lower(), value))
        at = match.end()
        while at < len(line) and line[at].isspace():
            at += 1
    return ConfLine(number, head, tuple(pairs), folded)


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


def expand_names(names: str) -> list[str]:
    """A Slurm host list (``node[1-4]``) -> its names; SlurmConfError for one Slurm would not take either."""
    import hostlist  # here: the quick health tier reads slurm.conf without paying for it when it can

    try:
        expanded: list[str] = hostlist.expand_hostlist(names)
    except hostlist.BadHostlist as exc:
        raise SlurmConfError(str(exc)) from None
    return expanded


def collect_names(names: Iterable[str]) -> str:
    """Names -> their Slurm host list (``node[1-4]``), the inverse of expand_names."""
    return _collect(tuple(names))


# Expand asks for each partition's list three times (its NodeName line, its partition, its files' hosts): for
# 625 partitions of 16 nodes that was a tenth of the whole expand.
@lru_cache(maxsize=4096)
def _collect(names: tuple[str, ...]) -> str:
    import hostlist

    return str(hostlist.collect_hostlist(list(names)))


# --- the nodes as the health checks see them -------------------------------------------------------------------


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


def parse_nodes(text: str, source: str = "slurm.conf") -> list[NodeDecl]:
    """Every node of every ``NodeName=`` line, with ``NodeName=DEFAULT`` values applied."""
    conf = parse_slurm_conf(text, source)
    defaults: dict[str, str] = {}
    nodes: dict[str, NodeDecl] = {}
    for line in conf.of("nodename"):
        pairs = conf.readable(line).pairs
        names, params = pairs[0][1], dict(pairs[1:])
        if names.upper() == "DEFAULT":
            defaults.update(params)
            continue
        try:
            expanded = expand_names(names)
        except SlurmConfError as exc:
            raise SlurmConfError(f"{source}, line {line.number}: bad NodeName {names!r}: {exc}") from None
        for name in expanded:
            nodes[name] = NodeDecl(name, {**defaults, **params})
    return list(nodes.values())


def parse_settings(text: str, source: str = "slurm.conf") -> dict[str, str]:
    """Top-level ``Key=Value`` settings (NodeName/PartitionName and other entity lines left out), keys
    lower-cased."""
    return parse_slurm_conf(text, source).settings()
