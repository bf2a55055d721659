"""Log lines cut into pieces by Arrow's CSV reader (threaded C++), verbatim, or with their
`label<sep>value` pieces cut at the separator too, so that the reader itself parses the numbers.

read_pieces cuts each line on a delimiter (`|` for NeMo 2 step lines, `,` for tqdm postfixes)
into string columns.  read_labelled first writes the delimiter after every ``sep`` of the text,
so that `h | lr: 1e-4 | loss: 2.5` reads as `h`, ` lr:`, ` 1e-4 `, ` loss:`, ` 2.5`.  That is the
line's own `label<sep>value` cut, exactly what `piece.partition(sep)` gives, when every line has
the first line's count of fields, each label column holds the first line's `label<sep>` on every
line and ``sep`` occurs nowhere else (its count in the text is one per label and line): each
line then has its `sep`s at the ends of its label fields only, so the delimiters that were
written are the ones right after them, and the line's own pieces are the fields put back
together there.  The reader converts the value columns to float64 as it cuts them: Arrow's
cast (correctly rounded like Python's float) after trimming spaces and tabs, which str.strip
removes too; where it cannot read a value the columns are read as strings instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv


@dataclass
class Pieces:
    """The lines as one text (rows end with "\\n"), and cut on ``delimiter`` into string columns."""

    body: pa.Buffer
    delimiter: str
    table: pa.Table


def read_pieces(lines: pa.Array, delimiter: str) -> Pieces | None:
    """The lines cut on ``delimiter`` into string columns, verbatim (no quoting, no nulls), as many
    as the first line has; None when another line has another count (the reader fails).

    Needs lines without "\\r" (the reader ends rows there too)."""
    first = str(lines[0].as_py())
    if first.startswith("\ufeff"):
        return None  # the reader would drop it
    rows = pa.LargeListArray.from_arrays(pa.array([0, len(lines)], type=pa.int64()), lines)
    body = pc.binary_join(rows, pa.scalar("\n", pa.large_string()))[0].as_buffer()
    width = first.count(delimiter) + 1
    table = _read(body, delimiter, [f"c{i}" for i in range(width)], {})
    return Pieces(body, delimiter, table) if table is not None and table.num_rows == len(lines) else None


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
    shape, with ``sep`` only right after its labels."""
    first = str(lines[0].as_py())
    if first.startswith("\ufeff") or sep == delimiter:
        return None
    pieces = first.split(delimiter)
    labels = [p.partition(sep)[0] if sep in p else None for p in pieces[start:]]
    named = [label for label in labels if label is not None]
    if not named:
        return None
    names = [f"h{i}" for i in range(start)]
    for j, label in enumerate(labels):
        names += [f"u{j}"] if label is None else [f"l{j}", f"v{j}"]
    wanted = [n for n in names if n[0] != "u"]
    as_float = {f"v{j}": floats(label.strip()) for j, label in enumerate(labels) if label is not None}
    cut = _Cut(sep, delimiter, len(named), names)
    table = cut.read_all(lines, {n: as_float.get(n, False) for n in wanted})
    if table is None and not cut.misplaced and any(as_float.values()):
        table = cut.read_all(lines, dict.fromkeys(wanted, False))  # a value that is no float
    if table is None or table.num_rows != len(lines):
        return None
    for j, label in enumerate(labels):
        if label is not None and not pc.all(pc.equal(table.column(f"l{j}"), label + sep)).as_py():
            return None
    values = [(label.strip(), table.column(f"v{j}")) for j, label in enumerate(labels) if label is not None]
    return Labelled([table.column(f"h{i}") for i in range(start)], values)


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
