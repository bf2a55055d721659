"""Log lines cut into pieces by Arrow's CSV reader (threaded C++), with their `label<sep>value`
pieces cut at the separator too, so that the reader itself parses the numbers.

The lines are cut on a delimiter (`|` for NeMo 2 step lines, `,` for tqdm postfixes), after
read_labelled first writes the delimiter after every ``sep`` of the text,
so that `h | lr: 1e-4 | loss: 2.5` reads as `h`, ` lr:`, ` 1e-4 `, ` loss:`, ` 2.5`.  That is the
line's own `label<sep>value` cut, exactly what `piece.partition(sep)` gives, when every line has
the first line's count of fields, each label column holds the first line's `label<sep>` on every
line and ``sep`` occurs nowhere else (its count in the text is one per label and line): each
line then has its `sep`s at the ends of its label fields only, so the delimiters that were
written are the ones right after them, and the line's own pieces are the fields put back
together there (a head before the labelled pieces may hold ``sep`` too, the same number of times
on every line: its pieces are joined back).  The reader converts the value columns to float64 as it cuts them: Arrow's
cast (correctly rounded like Python's float) after trimming spaces and tabs, which str.strip
removes too; where it cannot read a value the columns are read as strings instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv


def _read(body: pa.Buffer, delimiter: str, names: list[str], floats: dict[str, bool]) -> pa.Table | None:
    """Read ``body`` into the named columns: float64 where ``floats`` says so (only the columns it
    names, when it names any), large strings elsewhere; None when a line has another count of
    the delimiter or a float column holds what Arrow does not read as a number."""
    wanted = list(floats) or names
    types = {n: pa.float64() if floats.get(n) else pa.large_string() for n in wanted}
    try:
        return pacsv.read_csv(
            pa.BufferReader(body),
            read_options=pacsv.ReadOptions(column_names=names),
            parse_options=pacsv.ParseOptions(delimiter=delimiter, quote_char=False, ignore_empty_lines=False),
            convert_options=pacsv.ConvertOptions(
                column_types=types,
                include_columns=wanted,
                null_values=[],  # "N/A", "NULL" ... are not numbers to Python either: no nulls at all
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except pa.ArrowInvalid:
        return None


@dataclass
class Labelled:
    """The head columns (before ``start``) as strings, and (label, values) per labelled piece,
    the label stripped, the values float64 or raw strings."""

    heads: list[pa.ChunkedArray]
    values: list[tuple[str, pa.ChunkedArray]]


def read_labelled(
    lines: pa.Array, delimiter: str, sep: str, start: int, floats: Callable[[str], bool]
) -> Labelled | None:
    """The lines' head columns and `label<sep>value` pieces in one read (module docstring), values
    float64 where ``floats(label)`` says so; None when the lines are not all of the first line's
    shape (the same count of ``sep`` in every piece, the same labels)."""
    first = str(lines[0].as_py())
    if first.startswith("\ufeff") or sep == delimiter:
        return None
    pieces = first.split(delimiter)
    labels = [p.partition(sep)[0] if sep in p else None for p in pieces[start:]]
    if not any(label is not None for label in labels):
        return None
    # a head or a value may hold the separator too (a Megatron timestamp, an "eta: 0:00:00"):
    # the fields it cuts them into are put back together after the read
    seps = [p.count(sep) for p in pieces]
    names = [f"h{i}_{m}" for i in range(start) for m in range(seps[i] + 1)]
    for j, label in enumerate(labels):
        names += [f"u{j}_0"] if label is None else [f"l{j}", *(f"v{j}_{m}" for m in range(seps[start + j]))]
    as_float = {f"v{j}_0": floats(label.strip()) and seps[start + j] == 1 for j, label in enumerate(labels) if label}
    wanted = [n for n in names if n[0] != "u"]
    cut = _Cut(sep, delimiter, sum(seps), names)
    table = cut.read_all(lines, {n: as_float.get(n, False) for n in wanted})
    if table is None and not cut.misplaced and any(as_float.values()):
        table = cut.read_all(lines, dict.fromkeys(wanted, False))  # a value that is no float
    if table is None or table.num_rows != len(lines):
        return None
    for j, label in enumerate(labels):
        if label is not None and not pc.all(pc.equal(table.column(f"l{j}"), label + sep)).as_py():
            return None
    values = [
        (label.strip(), _joined([table.column(f"v{j}_{m}") for m in range(seps[start + j])]))
        for j, label in enumerate(labels)
        if label is not None
    ]
    heads = [_joined([table.column(f"h{i}_{m}") for m in range(seps[i] + 1)]) for i in range(start)]
    return Labelled(heads, values)


def _joined(parts: list[pa.ChunkedArray]) -> pa.ChunkedArray:
    """Fields that were one piece of the line before the read cut it at its separators."""
    if len(parts) == 1:
        return parts[0]
    joined: pa.ChunkedArray = pc.binary_join_element_wise(*parts, pa.scalar("", pa.large_string()))
    return joined


# Lines per text handed to the reader: a few MB, which Arrow's pool keeps between calls, where a
# text of a whole long log is a fresh allocation (page faults) every time.
BLOCK_LINES = 32768


@dataclass
class _Cut:
    """How the lines are cut: the delimiter written after every ``sep``, then read, block by block
    (each block's text is freed before the next is made, so that the pool reuses its pages)."""

    sep: str
    delimiter: str
    labels: int  # seps per line
    names: list[str]
    misplaced: bool = False  # a sep elsewhere than right after a label: no read can do

    def read_all(self, lines: pa.Array, floats: dict[str, bool]) -> pa.Table | None:
        tables = []
        for at in range(0, len(lines), BLOCK_LINES):
            body = self._body(lines.slice(at, BLOCK_LINES))
            table = None if body is None else _read(body, self.delimiter, self.names, floats)
            if table is None:
                return None
            tables.append(table)
        return pa.concat_tables(tables)

    def _body(self, lines: pa.Array) -> pa.Buffer | None:
        """The lines as one text, the delimiter written after every sep; None unless that makes
        exactly one per label of each line (module docstring)."""
        rows = pa.LargeListArray.from_arrays(pa.array([0, len(lines)], type=pa.int64()), lines)
        text = pc.binary_join(rows, pa.scalar("\n", pa.large_string()))  # one string
        body = pc.replace_substring(text, self.sep, self.sep + self.delimiter)
        # each sep grew by the delimiter: the growth counts them (Arrow's own count is a slow search)
        grown = pc.binary_length(body)[0].as_py() - pc.binary_length(text)[0].as_py()
        if grown != len(lines) * self.labels * len(self.delimiter):
            self.misplaced = True  # a sep in a value or a head, or twice in a piece: fields would shift
            return None
        buffer: pa.Buffer = body[0].as_buffer()
        return buffer
