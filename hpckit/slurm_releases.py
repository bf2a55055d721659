"""Per-release Slurm knowledge (hpckit/data/slurm-releases.yaml): versions, upgrade paths.

One table that slurm.conf rendering, blueprint validation, `hpckit plan` and `hpckit upgrade` share, so
that what one of them knows of a release the others know too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache, total_ordering

import yaml

from hpckit.paths import DATA_DIR

RELEASES_FILE = DATA_DIR / "slurm-releases.yaml"
_VERSION_RE = re.compile(r"^(\d{2})\.(\d{2})(?:\.(\d+))?$")


class ReleaseError(ValueError):
    """A version hpckit cannot read, or an upgrade Slurm does not support."""


@total_ordering
@dataclass(frozen=True)
class Version:
    """A Slurm version: series (year.month) and, when given, the micro release."""

    major: int
    minor: int
    micro: int | None = None

    @classmethod
    def parse(cls, text: str) -> Version:
        match = _VERSION_RE.match(text.strip())
        if match is None:
            raise ReleaseError(f"{text!r} is not a Slurm version (YY.MM or YY.MM.N, e.g. 24.11.5)")
        micro = match.group(3)
        return cls(int(match.group(1)), int(match.group(2)), int(micro) if micro is not None else None)

    @property
    def series(self) -> str:
        return f"{self.major:02d}.{self.minor:02d}"

    def _key(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.micro if self.micro is not None else -1)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    def __str__(self) -> str:
        return self.series if self.micro is None else f"{self.series}.{self.micro}"


@dataclass(frozen=True)
class Release:
    series: str
    upgrades_from: tuple[str, ...]
    supported: bool
    debian_packaging: bool


@cache
def releases() -> dict[str, Release]:
    """Every release series hpckit knows, oldest first."""
    data = yaml.safe_load(RELEASES_FILE.read_text(encoding="utf-8"))
    return {
        series: Release(series, tuple(e["upgrades_from"]), bool(e["supported"]), bool(e["debian_packaging"]))
        for series, e in data["releases"].items()
    }


def release(version: str | Version) -> Release:
    """The release series of ``version``; ReleaseError naming the known ones when hpckit does not know it."""
    series = (version if isinstance(version, Version) else Version.parse(version)).series
    known = releases()
    if series not in known:
        raise ReleaseError(f"Slurm {series} is not a release hpckit knows (known: {', '.join(known)})")
    return known[series]


def upgrade_problem(current: str | Version, target: str | Version) -> str | None:
    """Why Slurm cannot go from ``current`` to ``target`` in one rolling upgrade; None when it can.

    A downgrade is refused; a jump over more releases than the target accepts names a path through
    releases each step of which Slurm supports.
    """
    cur = current if isinstance(current, Version) else Version.parse(current)
    tgt = target if isinstance(target, Version) else Version.parse(target)
    if tgt < cur:
        return f"{cur} -> {tgt} is a downgrade; Slurm's state and database cannot go back"
    if cur.series == tgt.series:
        return None
    target_release = release(tgt)
    if cur.series in target_release.upgrades_from:
        return None
    path = upgrade_path(cur.series, tgt.series)
    accepted = ", ".join(target_release.upgrades_from)
    via = f"; upgrade through {' -> '.join(path)}" if path else ""
    return f"Slurm {tgt.series} accepts upgrades from {accepted} only, not from {cur.series}{via}"


def upgrade_path(current: str, target: str) -> list[str]:
    """The shortest chain of release series from ``current`` to ``target`` (both included), each step
    supported; empty when there is none."""
    known = releases()
    frontier: list[list[str]] = [[current]]
    seen = {current}
    while frontier:
        next_frontier: list[list[str]] = []
        for chain in frontier:
            for series, rel in known.items():
                if series in seen or chain[-1] not in rel.upgrades_from:
                    continue
                if series == target:
                    return [*chain, series]
                seen.add(series)
                next_frontier.append([*chain, series])
        frontier = next_frontier
    return []
