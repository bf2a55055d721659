"""The shapes every parser shares: the error, the result and the declarative field row."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import pandas as pd

ValueKind = Literal["float", "int", "str", "suffixed", "hms"]
Value = float | int | str | None


class ParseError(ValueError):
    """Input that cannot be read: says which file, which line, what the line was and what is wrong."""

    def __init__(self, source: str, lineno: int, line: str, message: str) -> None:
        super().__init__(f"{source}:{lineno}: {message}")
        self.source = source
        self.lineno = lineno
        self.line = line
        self.message = message


@dataclass
class ParseResult:
    """A parsed log: one frame row per measurement, plus what the log says about itself."""

    kind: str
    frame: pd.DataFrame
    meta: dict[str, object] = field(default_factory=dict)
    partial: bool = False
    warnings: list[str] = field(default_factory=list)
    # the tool said its run failed (nccl-tests' "Test NCCL failure"): whatever rows came before
    failed: bool = False


@dataclass(frozen=True)
class Field:
    """One declarative row: a frame column (or meta key), its unit, and the regex that finds it.

    The regex either has one capture group (the value), or none, in which case it is a *label* to be
    matched whole against a key of a ``key: value`` / ``key=value`` log segment.  ``factor`` turns
    the logged unit into ``unit`` (e.g. ms -> s).
    """

    name: str
    unit: str
    regex: str
    kind: ValueKind = "float"
    factor: float = 1.0
    pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # frozen: compile once, here, so that tables of fields cost nothing per line
        object.__setattr__(self, "pattern", re.compile(self.regex))

    def convert(self, text: str) -> Value:
        """The logged text as a value of this field's kind and unit; None when it is not one."""
        return convert_value(text, self.kind, self.factor)

    def search(self, line: str) -> Value:
        """The value in ``line`` (first capture group), or None when absent or unreadable."""
        m = self.pattern.search(line)
        if m is None:
            return None
        return self.convert(m.group(1) if m.groups() else m.group(0))


class LabelTable:
    """Fields keyed by label regex, for ``label: value`` logs; caches label -> field per distinct label.

    Logs repeat the same few labels on every line, so after the first line each lookup is a dict hit.
    """

    def __init__(self, fields: Iterable[Field]) -> None:
        self.fields = tuple(fields)
        self._cache: dict[str, Field | None] = {}

    def lookup(self, label: str) -> Field | None:
        try:
            return self._cache[label]
        except KeyError:
            found = next((f for f in self.fields if f.pattern.fullmatch(label)), None)
            self._cache[label] = found
            return found

    def units(self) -> dict[str, str]:
        return {f.name: f.unit for f in self.fields}


_SUFFIX = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
NA_TOKENS = frozenset({"N/A", "n/a", "nan", "NaN", "-nan", "-NaN"})


def _to_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return math.nan if text in NA_TOKENS else None


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def _to_int(text: str) -> int | None:
    try:
        value = int(text)
    except ValueError:
        number = _to_float(text)
        # sizes sometimes print as 66132.0 or 1.2e+05; accept them only when they are whole
        if number is None or not math.isfinite(number) or not number.is_integer():
            return None
        value = int(number)
    # frames hold int64: a bigger number is a garbled one, not a measurement
    return value if INT64_MIN <= value <= INT64_MAX else None


def _to_suffixed(text: str) -> float | None:
    if text and text[-1] in _SUFFIX:
        base = _to_float(text[:-1])
        return None if base is None else base * _SUFFIX[text[-1]]
    return _to_float(text)


def _to_hms(text: str) -> float | None:
    """[D-]HH:MM:SS[.fff] or MM:SS -> seconds."""
    days = 0
    if "-" in text:
        head, _, text = text.partition("-")
        if not head.isdigit():
            return None
        days = int(head)
    parts = text.split(":")
    try:
        nums = [float(p) for p in parts]
    except ValueError:
        return None
    if not 1 <= len(nums) <= 3:
        return None
    seconds = 0.0
    for n in nums:
        seconds = seconds * 60 + n
    return days * 86400 + seconds


def convert_value(text: str, kind: ValueKind, factor: float = 1.0) -> Value:
    text = text.strip()
    if kind == "str":
        return text
    if kind == "int":
        return _to_int(text)
    number = {"float": _to_float, "suffixed": _to_suffixed, "hms": _to_hms}[kind](text)
    return None if number is None else number * factor


def extract(fields: Iterable[Field], line: str) -> dict[str, Value]:
    """Every field of ``fields`` found in ``line`` (missing ones are left out)."""
    found: dict[str, Value] = {}
    for f in fields:
        value = f.search(line)
        if value is not None:
            found[f.name] = value
    return found


def units_of(fields: Iterable[Field], present: Iterable[str] | None = None) -> dict[str, str]:
    """name -> unit for the fields (restricted to ``present`` columns when given)."""
    table = {f.name: f.unit for f in fields}
    if present is None:
        return table
    keep = set(present)
    return {k: v for k, v in table.items() if k in keep}


def frame_from_records(records: Sequence[Mapping[str, Value]], columns: list[str]) -> pd.DataFrame:
    """Build the frame once from collected rows; columns first in the declared order, then extras."""
    extra: list[str] = []
    seen = set(columns)
    for rec in records:
        for key in rec:
            if key not in seen:
                seen.add(key)
                extra.append(key)
    ordered = [c for c in columns if any(c in r for r in records)] + extra
    return pd.DataFrame.from_records(records, columns=ordered)
