"""``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`` -> one dict per GPU.

Also fits ``--query-compute-apps`` and the other ``--query-*`` modes, which print the same CSV.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence

from hpckit.hw.errors import HwParseError, no_value

SOURCE = "nvidia-smi --query-gpu"

CsvValue = str | float | None

# Newer drivers answer a `clocks_throttle_reasons.*` query with `clocks_event_reasons.*` headers; the old
# spelling is folded into the new one so callers see one name whatever the driver.
_RENAMED_PREFIXES = (("clocks_throttle_reasons", "clocks_event_reasons"),)

# Fields that look numeric but are identifiers or versions ("0000000000000" is a masked serial, "9.0" a
# compute capability, "2.1" an inforom version): they stay strings.
_TEXT_FIELDS = frozenset(
    {"name", "serial", "uuid", "gpu_name", "gpu_serial", "gpu_uuid", "gpu_bus_id", "process_name"}
    | {"driver_version", "vbios_version", "compute_cap", "timestamp", "hostname"}
)
_TEXT_PREFIXES = ("pci.", "inforom.", "platform.chassis", "fabric.cluster")

_HEADER_FIELD = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)(?: \[(?P<unit>[^\]]+)\])?$")
_NUMBER = re.compile(r"^[-+]?\d+(?:\.\d+)?$")


def normalise_field(name: str) -> str:
    """``"memory.total [MiB]"`` -> ``"memory.total"``, and old field names to new ones
    (``clocks_throttle_reasons.X`` -> ``clocks_event_reasons.X``)."""
    match = _HEADER_FIELD.match(name.strip())
    base = match.group("name") if match else name.strip()
    for old, new in _RENAMED_PREFIXES:
        if base == old or base.startswith(old + ".") or base.startswith(old + "_"):
            base = new + base[len(old) :]
    return base


def parse_query_gpu_csv(
    text: str, fields: Sequence[str] | None = None, source: str = SOURCE
) -> list[dict[str, CsvValue]]:
    """Parse ``--format=csv`` output into ``{field: value}`` per row.

    Field names lose their unit suffix (``memory.total [MiB]`` -> ``memory.total``) and the renamed
    throttle/event-reason fields are normalised. Values: ``[N/A]``-style markers -> None; numbers, with or
    without a unit (``81559 MiB``, ``30.39 W``, ``0 %``) -> float, in the header's unit; everything else
    (hex bitmasks, ``Enabled``, bus ids, versions) stays a string. For ``noheader`` output pass ``fields``
    (the names given to ``--query-gpu``).
    """
    rows = _rows(text, source)
    if not rows:
        raise HwParseError(source, None, "empty output")
    first_line, first = rows[0]
    if fields is None:
        names = _header(first, first_line, source)
        rows = rows[1:]
    else:
        names = [normalise_field(f) for f in fields]
        if [normalise_field(c) for c in first] == names:
            rows = rows[1:]  # fields were given but the output has a header anyway
    return [_record(names, cells, number, source) for number, cells in rows]


def _rows(text: str, source: str) -> list[tuple[int, list[str]]]:
    rows: list[tuple[int, list[str]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            cells = next(csv.reader([line], skipinitialspace=True))
        except csv.Error as error:
            raise HwParseError(source, number, f"not CSV: {error}") from None
        rows.append((number, [c.strip() for c in cells]))
    return rows


def _header(cells: list[str], line: int, source: str) -> list[str]:
    bad = [c for c in cells if _HEADER_FIELD.match(c) is None]
    if bad:
        raise HwParseError(
            source,
            line,
            f"first line is not a CSV header (bad field {bad[0]!r}); for --format=csv,noheader pass fields=",
        )
    names = [normalise_field(c) for c in cells]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise HwParseError(source, line, f"duplicate field {duplicates[0]!r} in header")
    return names


def _record(names: list[str], cells: list[str], line: int, source: str) -> dict[str, CsvValue]:
    if len(cells) != len(names):
        raise HwParseError(source, line, f"expected {len(names)} values, got {len(cells)}")
    return {name: _value(name, cell) for name, cell in zip(names, cells, strict=True)}


def _value(name: str, cell: str) -> CsvValue:
    if no_value(cell):
        return None
    if name in _TEXT_FIELDS or name.startswith(_TEXT_PREFIXES):
        return cell
    number, _, unit = cell.partition(" ")
    # A unit is a single word (MiB, W, %, MHz, us); "12 34" or "3 of 4" is text.
    if _NUMBER.match(number) and (not unit or re.fullmatch(r"[A-Za-z%/]+", unit)):
        return float(number)
    return cell
