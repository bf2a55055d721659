"""nccl-tests result rows read by Arrow kernels: split on blanks as str.split does, cast per column.

Every row of a layout is cut into its tokens at once (ASCII whitespace: the rows were checked to
hold no other character that str.split would cut at), every row must give the layout's count of
tokens, and the tokens of column j (every width-th one) are cast by Arrow: integers and floats
as int() and float() read them (correctly rounded), the N/A tokens as NaN; text columns become
categoricals.  Anything that does not cast gives None and the caller reads the rows another way.
Arrow's pool keeps its pages between calls: no fresh pages (page faults) per log, unlike the
tokenizer buffers of pandas' C reader.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from hpckit.results.model import NA_TOKENS, Field
from hpckit.results.nccl_fields import NULLABLE

# str.split cuts at these too; Arrow's ASCII split does not
_OTHER_BLANKS = "\x1c\x1d\x1e\x1f"
_NA = pa.array(sorted(NA_TOKENS), pa.large_string())
# N/A tokens that no float cast reads: a column holding one goes to the N/A path at once (a cast
# that fails part way costs several times one that succeeds)
_NOT_FLOATS = pa.array(sorted(t for t in NA_TOKENS if "/" in t), pa.large_string())
Column = object  # numpy array or pandas Categorical


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
