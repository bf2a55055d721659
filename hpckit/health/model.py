"""What a health check says: one :class:`Row` per node x check x metric, judged against :class:`Bounds`.

Pure and import-light (the quick tier runs as Slurm's HealthCheckProgram, where startup time counts).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any


class Status(enum.IntEnum):
    """Ordered by how much it matters, so ``max()`` of a check's rows is its verdict.

    UNKNOWN ranks below FAIL: a check whose tool could not run must never hide a real failure of the same
    check, and it never drains a node by itself.
    """

    OK = 0
    WARN = 1
    UNKNOWN = 2
    FAIL = 3

    def __str__(self) -> str:
        return self.name


# The fault code a check gives when what it would look at does not exist here (no NVIDIA driver, no torch,
# no time-sync daemon): UNKNOWN, but not "a tool that failed", so it never escalates.
ABSENT = "absent"


@dataclass(frozen=True)
class Bounds:
    """An expected value with a relative and an absolute tolerance; ``side`` says which way is bad.

    ``low``: only values below ``expected - tol`` fail (throughput); ``high``: only values above
    ``expected + tol`` fail (latency, error counts); ``both``: either way. ``tol`` is the larger of
    ``rel * |expected|`` and ``abs``.
    """

    expected: float
    rel: float = 0.0
    abs: float = 0.0
    side: str = "both"

    @property
    def tolerance(self) -> float:
        return max(self.rel * abs(self.expected), self.abs)

    @property
    def lower(self) -> float | None:
        return None if self.side == "high" else self.expected - self.tolerance

    @property
    def upper(self) -> float | None:
        return None if self.side == "low" else self.expected + self.tolerance

    def contains(self, value: float) -> bool:
        if math.isnan(value):
            return False
        lower, upper = self.lower, self.upper
        return (lower is None or value >= lower) and (upper is None or value <= upper)


@dataclass(frozen=True)
class Row:
    """One measurement of one metric of one check on one node, with its verdict."""

    node: str
    check: str
    metric: str
    status: Status
    value: float | None = None
    unit: str = ""
    expected: float | None = None
    lower: float | None = None
    upper: float | None = None
    fault: str | None = None  # short code for the drain reason (hpckit:<fault>:<check>); None when OK
    evidence: str = ""  # what an admin reads to act: the number, the device, the log line
    tier: str = ""
    time: float = 0.0  # seconds since the epoch, when the check ran

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.name
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Row:
        """The inverse of :meth:`to_dict`; a wrong shape raises ValueError naming the field."""
        if "status" not in data:
            raise ValueError("health row lacks field 'status'")
        if str(data["status"]) not in Status.__members__:
            raise ValueError(f"bad health row: status {data['status']!r} is not one of {', '.join(Status.__members__)}")
        try:
            status = Status[str(data["status"])]
            return cls(
                node=str(data["node"]),
                check=str(data["check"]),
                metric=str(data["metric"]),
                status=status,
                value=_float(data.get("value")),
                unit=str(data.get("unit") or ""),
                expected=_float(data.get("expected")),
                lower=_float(data.get("lower")),
                upper=_float(data.get("upper")),
                fault=None if data.get("fault") in (None, "") else str(data["fault"]),
                evidence=str(data.get("evidence") or ""),
                tier=str(data.get("tier") or ""),
                time=float(data.get("time") or 0.0),
            )
        except KeyError as exc:
            raise ValueError(f"health row lacks field {exc}") from None
        except (TypeError, ValueError) as exc:
            raise ValueError(f"bad health row {dict(data)!r}: {exc}") from None


def _float(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float, str)):
        result = float(value)
        return None if math.isnan(result) else result
    raise TypeError(f"not a number: {value!r}")


@dataclass(frozen=True)
class Measure:
    """What a check function yields before the runner stamps node, check, tier and time on it."""

    metric: str
    status: Status
    value: float | None = None
    unit: str = ""
    bounds: Bounds | None = None
    fault: str | None = None
    evidence: str = ""

    def row(self, node: str, check: str, tier: str, when: float) -> Row:
        b = self.bounds
        return Row(
            node=node,
            check=check,
            metric=self.metric,
            status=self.status,
            value=self.value,
            unit=self.unit,
            expected=b.expected if b else None,
            lower=b.lower if b else None,
            upper=b.upper if b else None,
            fault=self.fault if self.status != Status.OK else None,
            evidence=self.evidence,
            tier=tier,
            time=when,
        )


def ok(
    metric: str, value: float | None = None, unit: str = "", evidence: str = "", bounds: Bounds | None = None
) -> Measure:
    return Measure(metric, Status.OK, value, unit, bounds, None, evidence)


def warn(metric: str, fault: str, evidence: str, value: float | None = None, unit: str = "") -> Measure:
    return Measure(metric, Status.WARN, value, unit, None, fault, evidence)


def fail(metric: str, fault: str, evidence: str, value: float | None = None, unit: str = "") -> Measure:
    return Measure(metric, Status.FAIL, value, unit, None, fault, evidence)


def unknown(metric: str, fault: str, evidence: str) -> Measure:
    return Measure(metric, Status.UNKNOWN, None, "", None, fault, evidence)


def absent(metric: str, evidence: str) -> Measure:
    return Measure(metric, Status.UNKNOWN, None, "", None, ABSENT, evidence)


def judge(
    metric: str,
    value: float,
    unit: str,
    bounds: Bounds,
    fault: str,
    *,
    status_out: Status = Status.FAIL,
    what: str = "",
) -> Measure:
    """OK inside the bounds, else ``status_out`` (FAIL, or WARN for metrics that only warn)."""
    inside = bounds.contains(value)
    limits = _limits_text(bounds, unit)
    text = f"{what + ' ' if what else ''}{value:g} {unit} ({limits})".replace("  ", " ").strip()
    return Measure(metric, Status.OK if inside else status_out, value, unit, bounds, None if inside else fault, text)


def _limits_text(bounds: Bounds, unit: str) -> str:
    lower, upper = bounds.lower, bounds.upper
    if lower is not None and upper is not None:
        return f"expected {bounds.expected:g}, allowed {lower:g}..{upper:g} {unit}".strip()
    if lower is not None:
        return f"expected {bounds.expected:g}, at least {lower:g} {unit}".strip()
    return f"expected {bounds.expected:g}, at most {upper:g} {unit}".strip()


def worst(rows: Iterable[Row]) -> Row | None:
    """The row that decides a check's verdict: the highest status, the first such row on ties."""
    best: Row | None = None
    for row in rows:
        if best is None or row.status > best.status:
            best = row
    return best


def with_status(row: Row, status: Status, fault: str | None, evidence: str) -> Row:
    return replace(row, status=status, fault=fault, evidence=evidence)
