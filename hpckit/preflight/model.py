"""What preflight reports: one row per (host, check), with the command an admin runs to see it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

import hostlist


class Severity(StrEnum):
    """BLOCK stops a deploy; WARN is worth a look; ABSENT says plainly that a thing is not there (the lab's
    GPUs and fabric are emulated, or nothing is declared and nothing found); OK matches the blueprint."""

    BLOCK = "BLOCK"
    WARN = "WARN"
    ABSENT = "ABSENT"
    OK = "OK"

    @property
    def rank(self) -> int:
        return list(Severity).index(self)


@dataclass(frozen=True)
class Row:
    host: str
    check: str
    expected: str
    found: str
    severity: Severity
    command: str

    def as_dict(self) -> dict[str, str]:
        return {**asdict(self), "severity": self.severity.value}


@dataclass(frozen=True)
class GroupedRow:
    """Rows that say the same thing about several hosts, the hosts written as a hostlist."""

    hosts: str
    count: int
    check: str
    expected: str
    found: str
    severity: Severity
    command: str


@dataclass
class Report:
    hosts: list[str]
    rows: list[Row] = field(default_factory=list)

    @property
    def blocking(self) -> list[Row]:
        return [r for r in self.rows if r.severity is Severity.BLOCK]

    @property
    def ok(self) -> bool:
        return not self.blocking

    def counts(self) -> dict[str, int]:
        return {s.value: sum(1 for r in self.rows if r.severity is s) for s in Severity}

    def grouped(self, *, include_ok: bool = False) -> list[GroupedRow]:
        """Identical findings merged across hosts, worst first, then by check and host."""
        groups: dict[tuple[str, str, str, Severity, str], list[str]] = {}
        for row in self.rows:
            if row.severity is Severity.OK and not include_ok:
                continue
            key = (row.check, row.expected, row.found, row.severity, row.command)
            groups.setdefault(key, []).append(row.host)
        merged = [
            GroupedRow(hostlist.collect_hostlist(hosts), len(hosts), check, expected, found, severity, command)
            for (check, expected, found, severity, command), hosts in groups.items()
        ]
        order = {host: i for i, host in enumerate(self.hosts)}
        return sorted(merged, key=lambda g: (g.severity.rank, g.check, order.get(g.hosts, len(order)), g.hosts))

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "counts": self.counts(),
            "hosts": self.hosts,
            "rows": [r.as_dict() for r in self.rows],
        }
