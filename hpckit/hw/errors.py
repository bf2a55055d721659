"""The one error type every hardware-output parser raises, and the small value helpers they share.

The parsers read text that comes from tools on possibly broken machines, so anything unexpected must end
as a :class:`HwParseError` that says which tool output, which line and what was wrong -- never as a stray
``ValueError`` or ``IndexError`` from deep inside a parser.
"""

from __future__ import annotations

import re

__all__ = ["HwParseError"]


class HwParseError(ValueError):
    """Text that a hardware-output parser cannot make sense of.

    ``source`` names the output (``"nvidia-smi -q"``, a file path, ``"node12: ibstat"``), ``line`` is the
    1-based line number where the problem is, or ``None`` when it concerns the text as a whole.
    """

    def __init__(self, source: str, line: int | None, message: str) -> None:
        self.source = source
        self.line = line
        self.message = message
        where = source if line is None else f"{source}, line {line}"
        super().__init__(f"{where}: {message}")


# Markers tools print instead of a value. nvidia-smi wraps them in brackets in CSV mode and prints them
# bare in ``-q`` mode; both spellings mean "no value".
_NO_VALUE = frozenset(
    {
        "",
        "N/A",
        "n/a",
        "Not Supported",
        "Not Available",
        "Not Found",
        "Unknown Error",
        "Insufficient Permissions",
        "Requested functionality has been deprecated",
        "GPU requires reset",
        "GPU is lost",
    }
)

_NUMBER = re.compile(r"^([-+]?\d+(?:\.\d+)?)(?:\s*([A-Za-z%][^\d]*))?$")


def no_value(text: str) -> bool:
    """Whether ``text`` is one of the markers that stand for a missing value."""
    stripped = text.strip()
    if stripped.startswith("[") and stripped.endswith("]"):
        stripped = stripped[1:-1]
    return stripped in _NO_VALUE


def parse_number(text: str, source: str, line: int | None, what: str) -> float | None:
    """``"72.02 W"`` -> 72.02, ``"16x"`` -> 16.0, ``"N/A"`` -> None; anything else is an error."""
    if no_value(text):
        return None
    match = _NUMBER.match(text.strip())
    if match is None:
        raise HwParseError(source, line, f"{what}: expected a number, got {text.strip()!r}")
    return float(match.group(1))


def parse_int(text: str, source: str, line: int | None, what: str) -> int | None:
    """Like :func:`parse_number` but the number must be whole (counters, MiB, percentages)."""
    value = parse_number(text, source, line, what)
    if value is None:
        return None
    if not value.is_integer():
        raise HwParseError(source, line, f"{what}: expected a whole number, got {text.strip()!r}")
    return int(value)


_TRUE_WORDS = frozenset({"yes", "enabled", "active", "on", "true"})
_FALSE_WORDS = frozenset({"no", "disabled", "not active", "off", "false"})


def parse_flag(text: str, source: str, line: int | None, what: str) -> bool | None:
    """Yes/No, Enabled/Disabled, Active/Not Active -> bool; N/A -> None.

    Only the leading words count, because annotated copies of real output carry trailing remarks
    (``Pending : Yes      <===``).
    """
    if no_value(text):
        return None
    words = text.strip().lower().split()
    for size in (2, 1):
        head = " ".join(words[:size])
        if head in _TRUE_WORDS:
            return True
        if head in _FALSE_WORDS:
            return False
    raise HwParseError(source, line, f"{what}: expected Yes/No or Enabled/Disabled, got {text.strip()!r}")


def parse_cpu_list(text: str, source: str, line: int | None) -> tuple[int, ...]:
    """``"0-47,96-143"`` -> (0, 1, ..., 143); an empty string or N/A gives ()."""
    if no_value(text):
        return ()
    cpus: list[int] = []
    for part in text.strip().split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if match is None:
            raise HwParseError(source, line, f"bad CPU list {text.strip()!r}")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first or last - first > 65535:
            raise HwParseError(source, line, f"bad CPU range {part.strip()!r}")
        cpus.extend(range(first, last + 1))
    return tuple(cpus)


def normalise_guid(text: str, source: str, line: int | None) -> str:
    """A GUID as 16 lower-case hex digits (tools drop leading zeros in some places and not in others)."""
    digits = text.strip().lower().removeprefix("0x").replace(":", "")
    if not digits or len(digits) > 16 or re.fullmatch(r"[0-9a-f]+", digits) is None:
        raise HwParseError(source, line, f"bad GUID {text.strip()!r}")
    return digits.rjust(16, "0")
