"""The nccl-tests result table: a column schema read from the header, and rows parsed against it.

Long blocks of rows are read by Arrow kernels (the nccl-rows fast path, below: split on runs of
blanks, never fixed columns); when anything looks off (a short row, a token that is not a number) the block is read
row by row in Python, which is the reference behaviour and says which line is wrong.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from hpckit.results import speed
from hpckit.results.model import NA_TOKENS, Field
from hpckit.results.nccl_fields import GROUP_START, KEY_COLUMNS, METRIC_COLUMNS, NULLABLE, PLACEMENTS, TIMESTAMP_TOKEN

FAST_MIN_ROWS = 32  # below this the bulk reader's fixed cost outweighs its speed
# a column as parsed: a numpy array, or a pandas Categorical for text (pandas-stubs cannot type the mix)
Column = Any


@dataclass(frozen=True)
class Schema:
    """Which token of a row is which column: key columns, then one metric group per placement."""

    header: tuple[str, ...]
    keys: tuple[Field, ...]
    groups: tuple[tuple[Field, ...], ...]
    placements: tuple[str, ...]
    timestamp: bool

    @property
    def width(self) -> int:
        return len(self.keys) + sum(len(g) for g in self.groups) + (2 if self.timestamp else 0)

    @property
    def last_group_width(self) -> int:
        """Tokens in a row that has only its last placement (the first one printed blank)."""
        return len(self.keys) + len(self.groups[-1]) + (2 if self.timestamp else 0)

    def token_fields(self) -> list[Field]:
        return [*self.keys, *(f for g in self.groups for f in g)]


def _field_for(token: str, table: Sequence[Field]) -> Field | None:
    return next((f for f in table if f.pattern.fullmatch(token)), None)


def schema_from_header(tokens: Sequence[str]) -> Schema | None:
    """Schema of a `# size count type ...` header; None when the tokens are not such a header."""
    toks = [t for t in tokens if t != "#"]
    timestamp = bool(toks) and toks[-1] == TIMESTAMP_TOKEN
    if timestamp:
        toks = toks[:-1]
    starts = [i for i, t in enumerate(toks) if GROUP_START.fullmatch(t)]
    if not starts or "size" not in toks[: starts[0]]:
        return None
    keys = [_field_for(t, KEY_COLUMNS) or Field(_safe_name(t), "", re.escape(t), "str") for t in toks[: starts[0]]]
    groups: list[tuple[Field, ...]] = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(toks)
        group = tuple(_field_for(t, METRIC_COLUMNS) or Field(_safe_name(t), "", re.escape(t)) for t in toks[start:end])
        groups.append(group)
    if len(groups) > len(PLACEMENTS):
        return None
    return Schema(tuple(tokens), tuple(keys), tuple(groups), PLACEMENTS[: len(groups)], timestamp)


def _safe_name(token: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in token.lower()).strip("_") or "col"


# Header-less tables (an excerpt that starts below the header): known eras by token count.
_DEFAULT_HEADERS: dict[int, str] = {
    13: "size count type redop root time algbw busbw #wrong time algbw busbw #wrong",
    12: "size count type redop time algbw busbw error time algbw busbw error",
    21: "size count type redop root time algbw busbw #wrong i_min i_max i_p99 i_cv% "
    "time algbw busbw #wrong i_min i_max i_p99 i_cv%",
}


def default_schema(width: int) -> Schema | None:
    text = _DEFAULT_HEADERS.get(width) or _DEFAULT_HEADERS.get(width - 2)
    if text is None:
        return None
    tokens = text.split() + ([TIMESTAMP_TOKEN] if width - 2 in _DEFAULT_HEADERS else [])
    return schema_from_header(tokens)


@dataclass
class Block:
    """Table lines of one run, parsed column-wise: key columns per line, metrics per placement."""

    lines: np.ndarray
    index: np.ndarray  # position of each parsed line among the rows given (bad rows are left out)
    keys: dict[str, Column]
    metrics: list[dict[str, np.ndarray]]
    present: np.ndarray  # (n, placements) bool: False where a placement was not printed
    timestamps: list[str] | None = None
    bad: list[tuple[int, str, str]] = field(default_factory=list)  # (line number, line, why)


class RowError(ValueError):
    """A row does not fit the schema (carries the reason; the caller knows the line)."""


def parse_rows(schema: Schema, text: str | list[str], linenos: np.ndarray, plain: bool = False) -> Block:
    """Parse table rows (one per line of ``text``, or of its pieces joined by newlines, line
    numbers alongside): by Arrow kernels when the block is long enough to pay for them and they
    read it exactly, else (or in exact mode) row by row, which says which line is wrong.
    ``plain``: the caller knows the text to be ASCII without the blanks that only str.split cuts
    at (one test of the whole log rather than one per piece)."""
    pieces = [text] if isinstance(text, str) else text
    if speed.worth(len(linenos), FAST_MIN_ROWS) and (plain or not unsplittable(pieces)):
        block = speed.attempt("nccl-rows", lambda: _parse_arrow(schema, pieces, linenos))
        if block is not None:
            return block
    return _parse_slow(schema, _stripped("\n".join(pieces)).split("\n"), linenos.tolist())


def _stripped(text: str) -> str:
    """Every line stripped when any has blanks at its end (CRLF files, padded rows)."""
    if " \n" in text or "\r" in text or "\t" in text or text.endswith(" "):
        return "\n".join(line.strip() for line in text.split("\n"))
    return text


def _parse_arrow(schema: Schema, pieces: list[str], linenos: np.ndarray) -> Block | None:
    """The rows read by Arrow kernels (row_columns below), or None."""
    if schema.timestamp:
        return None
    fields = schema.token_fields()
    try:
        columns = row_columns(pieces, fields, len(linenos))
    except ValueError:  # a lone surrogate (no UTF-8 for it)
        return None
    return None if columns is None else _block_from_columns(schema, fields, columns, linenos)


def _block_from_columns(
    schema: Schema, fields: list[Field], columns: list[Column], linenos: np.ndarray
) -> Block | None:
    n = len(linenos)
    converted: list[Column] = []
    for f, col in zip(fields, columns, strict=False):
        arr = _checked(f, col)
        if arr is None:
            return None
        converted.append(arr)
    keys: dict[str, Column] = {}
    for f, arr in zip(schema.keys, converted, strict=False):
        keys[f.name] = arr
    metrics: list[dict[str, np.ndarray]] = []
    pos = len(schema.keys)
    for group in schema.groups:
        metrics.append({f.name: converted[pos + i] for i, f in enumerate(group)})
        pos += len(group)
    timestamps = None
    if schema.timestamp:
        dates, times = columns[-2], columns[-1]
        if any(not isinstance(v, str) or not v for v in (*dates, *times)):
            return None
        timestamps = [f"{d} {t}" for d, t in zip(dates, times, strict=True)]
    present = np.ones((n, len(schema.groups)), dtype=bool)
    lines = np.asarray(linenos, dtype=np.int64)
    return Block(lines, np.arange(n), keys, metrics, present, timestamps)


def _checked(f: Field, col: Column) -> Column | None:
    """The column in its field's dtype, or None when it holds anything the exact path would reject."""
    if f.kind == "str":
        # vectorised: a short row leaves NaN or "" behind, and then the exact path must decide
        if pd.isna(col).any() or (col == "").any():
            return None
        return col
    if isinstance(col, pd.Categorical) or col.dtype.kind not in "if":
        return None
    if f.kind == "int":
        whole = col.dtype.kind == "i" or (np.all(np.isfinite(col)) and np.all(col == np.floor(col)))
        if not whole:
            return None
        return col.astype(np.int64, copy=False)  # (no copy when already int64)
    values = col.astype(np.float64, copy=False)
    # a NaN in a column that cannot be N/A means a missing token: let the exact path decide
    if f.name not in NULLABLE and np.isnan(values).any():
        return None
    return values


# ---------------------------------------------------------------- exact path (row by row)


def _parse_slow(schema: Schema, rows: list[str], linenos: list[int]) -> Block:
    fields = schema.token_fields()
    key_cols: list[list[object]] = [[] for _ in schema.keys]
    metric_cols: list[list[list[float]]] = [[[] for _ in g] for g in schema.groups]
    present: list[list[bool]] = []
    stamps: list[str] = []
    good: list[int] = []
    index: list[int] = []
    bad: list[tuple[int, str, str]] = []
    for i, (row, lineno) in enumerate(zip(rows, linenos, strict=True)):
        try:
            keys, groups, stamp = _parse_row(schema, fields, row)
        except RowError as exc:
            bad.append((lineno, row, str(exc)))
            continue
        good.append(lineno)
        index.append(i)
        for col, value in zip(key_cols, keys, strict=True):
            col.append(value)
        flags = []
        for g_cols, values in zip(metric_cols, groups, strict=True):
            flags.append(values is not None)
            for i, metric in enumerate(g_cols):
                metric.append(values[i] if values is not None else math.nan)
        present.append(flags)
        stamps.append(stamp)
    block = _block_from_lists(schema, good, key_cols, metric_cols, present, stamps, bad)
    block.index = np.asarray(index, dtype=np.int64)
    return block


def _block_from_lists(
    schema: Schema,
    good: list[int],
    key_cols: list[list[object]],
    metric_cols: list[list[list[float]]],
    present: list[list[bool]],
    stamps: list[str],
    bad: list[tuple[int, str, str]],
) -> Block:
    keys: dict[str, Column] = {}
    for f, values in zip(schema.keys, key_cols, strict=True):
        keys[f.name] = np.asarray(values, dtype=np.int64) if f.kind == "int" else values
    metrics = [
        {f.name: np.asarray(col, dtype=np.float64) for f, col in zip(group, cols, strict=True)}
        for group, cols in zip(schema.groups, metric_cols, strict=True)
    ]
    mask = np.asarray(present, dtype=bool).reshape(len(good), len(schema.groups))
    lines = np.asarray(good, dtype=np.int64)
    return Block(lines, np.arange(len(good)), keys, metrics, mask, stamps if schema.timestamp else None, bad)


def _parse_row(schema: Schema, fields: list[Field], row: str) -> tuple[list[object], list[list[float] | None], str]:
    tokens = row.split()
    stamp = ""
    if schema.timestamp:
        if len(tokens) < 2:
            raise RowError(f"expected {schema.width} fields, found {len(tokens)}")
        stamp = f"{tokens[-2]} {tokens[-1]}"
        tokens = tokens[:-2]
        if not _looks_like_timestamp(stamp):
            raise RowError(f"expected a timestamp at the end, found {stamp!r}")
    nkeys = len(schema.keys)
    tokens = _blank_redop(schema, tokens)
    keys = [_value(f, tok) for f, tok in zip(fields[:nkeys], tokens[:nkeys], strict=False)]
    groups: list[list[float] | None] = []
    for group, toks in zip(schema.groups, _group_tokens(schema, tokens, row), strict=True):
        groups.append(None if toks is None else [_metric(f, t) for f, t in zip(group, toks, strict=True)])
    return keys, groups, stamp


def _blank_redop(schema: Schema, tokens: list[str]) -> list[str]:
    """Legacy builds print an empty redop for collectives without one (alltoall): the row is a
    token short, a number where the redop goes.  It reads as "none", what later builds print."""
    names = [f.name for f in schema.keys]
    stamp = 2 if schema.timestamp else 0
    if "redop" not in names or len(tokens) != schema.width - stamp - 1:
        return tokens
    at = names.index("redop")
    if 0 < at < len(tokens) and tokens[at][:1].isdigit() and not tokens[at - 1][:1].isdigit():
        return [*tokens[:at], "none", *tokens[at:]]
    return tokens


def _group_tokens(schema: Schema, tokens: list[str], row: str) -> list[list[str] | None]:
    """Each placement's tokens; None for a placement printed blank."""
    nkeys = len(schema.keys)
    n = len(tokens)
    stamp = 2 if schema.timestamp else 0
    if n == schema.width - stamp:
        out: list[list[str] | None] = []
        pos = nkeys
        for group in schema.groups:
            out.append(tokens[pos : pos + len(group)])
            pos += len(group)
        return out
    if len(schema.groups) > 1 and n == schema.last_group_width - stamp and _blank_group(row, tokens, nkeys):
        # the first placement printed as blanks (mscclpp-test's alltoall leaves in-place empty)
        return [None] * (len(schema.groups) - 1) + [tokens[nkeys:]]
    if len(schema.groups) > 1 and n == schema.last_group_width - stamp:
        raise RowError(f"the row ends after its first placement's {len(schema.groups[0])} fields (cut?)")
    raise RowError(f"expected {schema.width} fields as the header says, found {n}")


BLANK_GROUP = 20  # blanks where a placement would be: wider than any gap between two printed fields


def _blank_group(row: str, tokens: list[str], nkeys: int) -> bool:
    """Whether the row leaves a placement blank before its metrics (a gap no field width makes),
    rather than stopping after its first placement (a row cut by a crash)."""
    end = 0
    for token in tokens[:nkeys]:
        end = row.index(token, end) + len(token)
    gap = len(row) - end - len(row[end:].lstrip())
    return gap >= BLANK_GROUP


def _value(f: Field, token: str) -> object:
    value = f.convert(token)
    if value is None or (f.kind == "int" and not isinstance(value, int)):
        raise RowError(f"column {f.regex!r}: {token!r} is not a valid {f.kind}")
    return value


def _metric(f: Field, token: str) -> float:
    value = f.convert(token)
    if not isinstance(value, float) or (math.isnan(value) and f.name not in NULLABLE):
        raise RowError(f"column {f.name}: {token!r} is not a number")
    return value


def _looks_like_timestamp(text: str) -> bool:
    return len(text) == 19 and text[4] == "-" and text[13] == ":"


# ---------------------------------------------------------------- fast path nccl-rows
# nccl-tests result rows read by Arrow kernels: split on blanks as str.split does, cast per column.
#
# Every row of a layout is cut into its tokens at once (ASCII whitespace: the rows were checked to
# hold no other character that str.split would cut at), every row must give the layout's count of
# tokens, and the tokens of column j (every width-th one) are cast by Arrow: integers and floats
# as int() and float() read them (correctly rounded), the N/A tokens as NaN; text columns become
# categoricals.  Anything that does not cast gives None and the caller reads the rows another way.
# Arrow's pool keeps its pages between calls: no fresh pages (page faults) per log, unlike the
# tokenizer buffers of pandas' C reader.

# str.split cuts at these too; Arrow's ASCII split does not
_OTHER_BLANKS = "\x1c\x1d\x1e\x1f"
_NA = pa.array(sorted(NA_TOKENS), pa.large_string())
# N/A tokens that no float cast reads: a column holding one goes to the N/A path at once (a cast
# that fails part way costs several times one that succeeds)
_NOT_FLOATS = pa.array(sorted(t for t in NA_TOKENS if "/" in t), pa.large_string())


def unsplittable(pieces: list[str]) -> bool:
    """Whether the rows hold characters that str.split cuts at and Arrow does not (or non-ASCII
    text, whose Unicode blanks the same holds for)."""
    return any(not piece.isascii() or any(c in piece for c in _OTHER_BLANKS) for piece in pieces)


# Text per block of rows: a few MB, which Arrow's pool keeps between blocks and calls, where the
# rows of a whole long log would be fresh pages (page faults) every time.
BLOCK_CHARS = 4_000_000


def plain(text: str) -> bool:
    """Whether the text is ASCII without the blanks above: then so is every row in it."""
    return text.isascii() and not any(c in text for c in _OTHER_BLANKS)


def row_columns(pieces: list[str], fields: list[Field], rows: int) -> list[Column] | None:
    """The token columns of ``rows`` rows of len(fields) tokens each (the lines of the pieces),
    read a block of pieces at a time; None when a row has another count or a token does not
    cast."""
    blocks: list[list[pa.Array]] = []
    at, lines = 0, 0
    # characters before each piece: a block ends at the last piece that still fits (thousands of
    # short runs: found by a search rather than a loop over the pieces)
    before = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces)), out=before[1:])
    while at < len(pieces):
        end = max(at + 1, int(np.searchsorted(before, before[at] + BLOCK_CHARS, side="right")) - 1)
        block = _block_columns(pa.array(pieces[at:end], type=pa.large_string()), fields)
        if block is None:
            return None
        lines += len(block[0])
        blocks.append(block)
        at = end
    if lines != rows or not blocks:
        return None
    return [_joined([b[j] for b in blocks]) for j in range(len(fields))]


def _joined(parts: list[pa.Array]) -> Column:
    """One column from its blocks: text columns become one categorical, numbers a numpy view of
    Arrow's joined array (joined in Arrow's pool, which keeps its pages: a long log's columns
    would be fresh pages, page faults, every time in numpy's)."""
    joined = parts[0] if len(parts) == 1 else pa.concat_arrays(parts)
    if pa.types.is_large_string(joined.type):
        return _categorical(joined)
    numbers: np.ndarray = joined.to_numpy()  # (no nulls: no copy)
    return numbers


def _block_columns(pieces: pa.Array, fields: list[Field]) -> list[pa.Array] | None:
    """The columns of the lines of some pieces, as Arrow arrays (text still as strings)."""
    lines = pc.list_flatten(pc.split_pattern(pieces, pattern="\n"))
    tokens = pc.ascii_split_whitespace(pc.ascii_trim_whitespace(lines))
    lo, hi = (v.as_py() for v in pc.min_max(pc.list_value_length(tokens)).values())
    width = len(fields)
    if lo != width or hi != width:
        return None
    flat = pc.list_flatten(tokens)
    offsets = np.frombuffer(flat.buffers()[1], dtype=np.int64)[flat.offset : flat.offset + len(flat) + 1]
    every_other = pa.array(np.arange(0, 2 * len(lines), 2))
    columns: list[pa.Array] = []
    for j, f in enumerate(fields):
        strings = _strided(flat, offsets, j, width, every_other)
        column = strings if f.kind == "str" else _column(f, strings)
        if column is None:
            return None
        columns.append(column)
    return columns


def _strided(flat: pa.Array, offsets: np.ndarray, j: int, width: int, every_other: pa.Array) -> pa.Array:
    """Token j of every row: string views whose offsets are those tokens' edges (every other
    view is what lies between two of them), then every other one taken."""
    edges = np.empty(2 * len(every_other) + 1, dtype=np.int64)
    edges[0:-1:2] = offsets[j:-1:width]
    edges[1::2] = offsets[j + 1 :: width]
    edges[-1] = edges[-2]
    views = pa.LargeStringArray.from_buffers(len(edges) - 1, pa.py_buffer(edges), flat.buffers()[2])
    return pc.take(views, every_other)


def _column(f: Field, tokens: pa.Array) -> pa.Array | None:
    """A numeric column as int()/float() read its tokens (N/A as NaN), or None."""
    if f.kind == "int":
        try:
            return pc.cast(tokens, pa.int64())
        except pa.ArrowInvalid:
            pass  # "1.2e+05", "66132.0": read as floats, whole ones are ints (the caller checks)
    if f.name not in NULLABLE or not pc.any(pc.is_in(tokens, value_set=_NOT_FLOATS)).as_py():
        try:
            return pc.cast(tokens, pa.float64())
        except pa.ArrowInvalid:
            pass
    missing = pc.is_in(tokens, value_set=_NA)
    try:
        numbers = pc.cast(pc.if_else(missing, pa.scalar(None, pa.large_string()), tokens), pa.float64())
    except pa.ArrowInvalid:
        return None
    return pc.fill_null(numbers, np.nan)  # nulls as NaN


def _categorical(tokens: pa.Array) -> Column:
    """As pd.Categorical(list of the tokens) makes it (categories sorted), from Arrow's encoding."""
    encoded = pc.dictionary_encode(tokens)
    found = encoded.dictionary.to_pylist()
    order = sorted(range(len(found)), key=found.__getitem__)
    code_of = np.empty(len(found), dtype=np.int64)
    code_of[order] = np.arange(len(found))
    codes: np.ndarray = code_of[encoded.indices.to_numpy()]
    return pd.Categorical.from_codes(codes, categories=pd.Index([found[i] for i in order]))
