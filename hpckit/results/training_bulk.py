"""Bulk path for long training logs: the same figures as the line-by-line parser, read in C/C++.

A long log repeats one line layout thousands of times.  NeMo 2 / Megatron: the step lines are
picked by Arrow kernels (split on newlines, substring tests, the marker regex in RE2 when it reads
as Python's does) and cut with Arrow's string kernels (split on "|", then on the first ":").
NeMo 1: redraws repeated char for char are dropped first, then one Python findall per line reads
every refresh; only the `k=v` postfixes go through Arrow.  The declarative field tables still
decide names, units and conversions.  When the lines do not all share the first line's labels in
the same order, a value does not convert, or a refresh might read differently, this returns None
and the exact line-by-line parser runs instead, so the two always agree."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from hpckit.results.arrow_text import bool_mask, text_lines
from hpckit.results.digit_runs import digit_runs, run_index, run_shaped
from hpckit.results.model import NA_TOKENS, Field
from hpckit.results.pieces import Labelled, Pieces, read_labelled, read_pieces
from hpckit.results.re2 import PY_WHITESPACE, re2_ascii
from hpckit.results.training_fields import LABELS, STEP_MARKER, TQDM
from hpckit.results.training_tqdm import Refreshes, tqdm_refreshes

MIN_LINES = 64  # below this the line-by-line parser is as fast
Snake = Callable[[str], str]


@dataclass
class Bulk:
    frame: pd.DataFrame  # one row per step line, in file order (duplicates not yet removed)
    other_lines: list[tuple[int, str]]  # candidate lines that were not step lines (for extras)


class _NoBulk(Exception):
    """Something the bulk path does not handle: the exact parser runs (and says which line)."""


def bulk_pipe(text: str, marker: re.Pattern[str], snake: Snake, others: bool = True) -> Bulk | None:
    """NeMo 2 / Megatron `head | label: value | ...` step lines in bulk, or None.

    ``others``: also collect the candidate lines that are not step lines (Megatron reads extras
    from them)."""
    found = _step_lines_arrow(text, marker, others) or _step_lines_python(text, marker)
    if found is None:
        return None
    step_lines, linenos, other = found
    try:
        cols = None if "\r" in text else _columns_csv(step_lines, snake)
        if cols is None:
            cols = _columns(step_lines, snake)
    except (_NoBulk, pa.ArrowException, ValueError, OverflowError):
        return None
    cols["line"] = linenos
    return Bulk(pd.DataFrame(cols, copy=False), other)  # (no copy into blocks: the dedupe copies)


StepLines = tuple[pa.Array, np.ndarray, list[tuple[int, str]]]  # lines, their numbers, the others


def _step_lines_arrow(text: str, marker: re.Pattern[str], others: bool = True) -> StepLines | None:
    """Step lines picked by Arrow kernels (split, substring and RE2 tests): no Python per line.

    Only for ASCII text and a marker that RE2 reads as Python does (see _re2_ascii)."""
    pattern = re2_ascii(marker.pattern) if text.isascii() else None
    if pattern is None:
        return None
    lines = text_lines(text)
    try:
        marked = pc.match_substring_regex(lines, pattern)
    except pa.ArrowInvalid:
        return None  # RE2 cannot read it after all: Python picks the lines
    if not others:
        return _marked_step_lines(lines, marked, marker.pattern)
    candidate = pc.and_(pc.match_substring(lines, "iteration"), pc.match_substring(lines, "|"))
    step = pc.and_(candidate, marked)
    numbers = np.arange(1, len(lines) + 1, dtype=np.int64)
    if (pc.sum(step).as_py() or 0) < MIN_LINES:
        return None
    rest = pc.and_(candidate, pc.invert(step))
    rest_numbers = numbers[bool_mask(rest)].tolist()
    other = list(zip(rest_numbers, pc.filter(lines, rest).to_pylist(), strict=True))
    return pc.filter(lines, step), numbers[bool_mask(step)], other


def _marked_step_lines(lines: pa.Array, marked: pa.Array, marker: str) -> StepLines | None:
    """The marked lines that are candidates too ("iteration" and "|"): tested on the few marked
    lines rather than on every line of the log, and "iteration" only when the marker does not
    spell it out itself."""
    where = np.flatnonzero(bool_mask(marked))
    picked = pc.filter(lines, marked)
    candidate = pc.match_substring_regex(picked, r"\|")  # (RE2 finds one byte faster than the plain search)
    if not _spells(marker, "iteration"):
        candidate = pc.and_(candidate, pc.match_substring(picked, "iteration"))
    if not pc.all(candidate).as_py():
        where = where[bool_mask(candidate)]
        picked = pc.filter(picked, candidate)
    if len(where) < MIN_LINES:
        return None
    return picked, where + 1, []


def _spells(pattern: str, word: str) -> bool:
    """Whether every match of the regex holds ``word``: the pattern spells it out, with no
    alternation, group or class that could make it optional, and no quantifier on its end."""
    at = pattern.find(word)
    after = pattern[at + len(word) : at + len(word) + 1]
    return at >= 0 and not any(c in pattern for c in "|([") and after not in ("?", "*", "{", "+")


def _step_lines_python(text: str, marker: re.Pattern[str]) -> StepLines | None:
    lines = text.split("\n")
    steps: list[int] = []
    other: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        if "iteration" in line and "|" in line:
            if marker.search(line):
                steps.append(i)
            else:
                other.append((i + 1, line))
    if len(steps) < MIN_LINES:
        return None
    picked = pa.array([lines[i] for i in steps], type=pa.large_string())
    return picked, np.asarray(steps, dtype=np.int64) + 1, other


_re2_ascii = re2_ascii  # the name the tests know


def _columns(step_lines: pa.Array, snake: Snake) -> dict[str, np.ndarray]:
    n = len(step_lines)
    parts = pc.split_pattern(step_lines, pattern="|")
    width = _same_width(parts)
    flat = pc.list_flatten(parts)
    grid = np.arange(n * width).reshape(n, width)
    cols = _head_columns(pc.take(flat, pa.array(grid[:, 0])))
    pieces, starts = _label_value_pieces(pc.take(flat, pa.array(grid[:, 1:].ravel())), n)
    for j in range(starts.shape[1]):
        label = _label(pc.take(pieces, pa.array(starts[:, j])))
        cols.update(_column(label, _strip(pc.take(pieces, pa.array(starts[:, j] + 1))), snake))
    return cols


def _columns_csv(step_lines: pa.Array, snake: Snake) -> dict[str, np.ndarray] | None:
    """NeMo 2 / Megatron columns read with Arrow's CSV reader (see _labelled), or None."""
    fast = read_labelled(step_lines, "|", ":", 1, _read_as_float)
    if fast is not None:
        cols = _head_columns(fast.heads[0])
        cols.update(_value_columns(fast, snake))
        return cols
    pieces = read_pieces(step_lines, "|")  # a ":" in a head or value (a Megatron timestamp)
    if pieces is None:
        return None
    cols = _head_columns(pieces.table.column(0))
    labelled = _labelled(pieces, 1, ":", snake)
    if labelled is None:
        return None
    cols.update(labelled)
    return cols


def _labelled(pieces: Pieces, start: int, sep: str, snake: Snake) -> dict[str, np.ndarray] | None:
    """The `label<sep>value` columns of the pieces from ``start`` on, when every line spells each
    label exactly as the first line does; None otherwise (the general split then decides).

    A piece of column j is then `<label j><sep><value>` on every line (one starts_with test per
    column), so the value is what follows that prefix, which is what partition(sep) gives.  A
    column without ``sep`` on any line is left out, as the exact parsers leave such pieces out."""
    cols: dict[str, np.ndarray] = {}
    table = pieces.table
    for j in range(start, table.num_columns):
        piece = table.column(j)  # chunked as read: the kernels take it as it is
        first = str(piece[0].as_py())
        if sep not in first:
            if pc.any(pc.match_substring(piece, sep)).as_py():
                return None
            continue
        prefix = first.partition(sep)[0] + sep
        if not pc.all(pc.starts_with(piece, prefix)).as_py():
            return None
        value = _strip(pc.utf8_slice_codeunits(piece, len(prefix)))
        cols.update(_column(prefix[: -len(sep)].strip(), value, snake))
    return cols


def _read_as_float(label: str) -> bool:
    """Whether a label's values are read as float64 by the CSV reader: those of a float field or
    an unknown label (an int is read exactly from its digits, `suffixed` and `hms` are text)."""
    f = LABELS.lookup(label)
    return f is None or f.kind == "float"


def _value_columns(labelled: Labelled, snake: Snake) -> dict[str, np.ndarray]:
    cols: dict[str, np.ndarray] = {}
    for label, values in labelled.values:
        if values.type == pa.float64():
            cols.update(_column(label, values, snake, values.to_numpy()))
        else:
            cols.update(_column(label, _strip(values), snake))
    return cols


def _label_value_pieces(pairs: pa.Array, n: int) -> tuple[pa.Array, np.ndarray]:
    """Every `label: value` piece cut at its first ":", flattened (label, value, label, ...), and
    where the label of piece j of line i sits in that array, as an (n, pieces per line) grid."""
    kv = pc.split_pattern(pairs, pattern=":", max_splits=1)
    if pc.min(pc.list_value_length(kv)).as_py() != 2:
        # a Megatron line ends with " |": its last piece is blank, on every line alike
        blank = pc.equal(_strip(pairs), "")
        keep = ~bool_mask(blank)
        per_line = keep.reshape(n, -1).sum(axis=1)
        if (per_line != per_line[0]).any():
            raise _NoBulk("blank pieces on some lines only")
        kv = pc.split_pattern(pc.filter(pairs, pa.array(keep)), pattern=":", max_splits=1)
        if pc.min(pc.list_value_length(kv)).as_py() != 2:
            raise _NoBulk("a piece without a label")
    starts = np.asarray(kv.offsets)[:-1]
    return pc.list_flatten(kv), starts.reshape(n, len(starts) // n)


def _same_width(parts: pa.Array) -> int:
    lo, hi = (v.as_py() for v in pc.min_max(pc.list_value_length(parts)).values())
    if lo != hi or hi < 2:
        raise _NoBulk("lines have different numbers of fields")
    return int(hi)


def _label(labels: pa.Array) -> str:
    """The label of one piece position, the same on every line (as str.strip leaves it)."""
    first = str(labels[0].as_py())
    same = pc.all(pc.equal(labels, first)).as_py()
    # raw labels that differ may still strip alike
    if not same and not pc.all(pc.equal(_strip(labels), first.strip())).as_py():
        raise _NoBulk("labels differ between lines")
    return first.strip()


def _strip(values: pa.Array) -> pa.Array:
    return pc.utf8_trim(values, characters=PY_WHITESPACE)


def _head_columns(heads: pa.Array) -> dict[str, np.ndarray]:
    """Step-marker fields (step, epoch, total, timestamp) of every line's head."""
    cols: dict[str, np.ndarray] = {}
    if not pc.all(pc.string_is_ascii(heads)).as_py():
        raise _NoBulk("non-ASCII heads")  # RE2's \d and \s are ASCII-only, Python's are not
    first = str(heads[0].as_py())
    runs: np.ndarray | None = None
    for f in STEP_MARKER:
        at = run_index(f.pattern, first) if f.kind == "int" and run_shaped(f.regex) else None
        if at is not None and runs is None:
            runs = digit_runs(heads)  # once, for every field that reads a digit run
        if at is not None and runs is not None:
            if at >= 0:
                cols[f.name] = np.ascontiguousarray(runs[:, at])
            continue  # (at < 0: in no head, as in the first one: they all have its shape)
        found = _extracted(f, heads, first)
        if found is not None:
            cols[f.name] = found
    if "step" not in cols:
        raise _NoBulk("no step")
    return cols


def _extracted(f: Field, heads: pa.Array, first: str) -> np.ndarray | None:
    """One step-marker field of every head by RE2 extraction; None when in no head."""
    pattern = re2_ascii(f.regex)
    if pattern is None:
        raise _NoBulk(f"{f.name}: no RE2 spelling")
    if f.pattern.search(first) is None and not pc.any(pc.match_substring_regex(heads, pattern)).as_py():
        return None  # in no head (the test alone is cheaper than an extraction)
    found = pc.struct_field(pc.extract_regex(heads, pattern.replace("(", "(?P<v>", 1)), [0])
    nulls = found.null_count
    if nulls == len(heads):
        return None
    if nulls:
        raise _NoBulk(f"{f.name} on some lines only")
    values: np.ndarray = found.to_numpy(zero_copy_only=False) if f.kind == "str" else _ints(found)
    return values


def _ints(values: pa.Array) -> np.ndarray:
    ints: np.ndarray = pc.cast(values, pa.int64()).to_numpy()
    return ints


def _column(label: str, values: pa.Array, snake: Snake, numbers: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """{name: values} for one label (``numbers``: the values already read as float64); empty for
    an unknown label that is never a number."""
    f = LABELS.lookup(label)
    if f is None and not label:
        return {}  # a figure without a label: the exact parser leaves it out
    if numbers is None:
        numbers = _floats(values)
    if f is None:
        if numbers is not None:
            return {snake(label): numbers}
        series = pd.Series(values.to_pylist(), dtype=object)
        coerced = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64)
        failed = np.isnan(coerced) & ~series.isin(NA_TOKENS).to_numpy()
        if failed.all():
            return {}  # never a number: the exact parser leaves it out too
        if failed.any():
            raise _NoBulk(label)
        return {snake(label): coerced}
    return {f.name: _convert(f, values, numbers)}


def _floats(values: pa.Array) -> np.ndarray | None:
    try:
        floats: np.ndarray = pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:
        return None
    return floats


def _convert(f: Field, values: pa.Array, numbers: np.ndarray | None) -> np.ndarray:
    if f.kind == "str":
        return np.asarray(values.to_pylist(), dtype=object)
    if numbers is not None:
        if f.kind != "int":
            return numbers * f.factor
        if np.all(np.isfinite(numbers)) and np.all(numbers == np.floor(numbers)):
            return (
                _ints(values)
                if pc.all(pc.match_substring_regex(values, r"^-?\d+$")).as_py()
                else (numbers.astype(np.int64))
            )
        raise _NoBulk(f.name)
    if f.kind in ("suffixed", "hms"):  # "1.258B", "0:00:00": one by one, few columns do this
        converted = [f.convert(str(v)) for v in values.to_pylist()]
        if any(v is None for v in converted):
            raise _NoBulk(f.name)
        return np.asarray(converted, dtype=np.float64)
    raise _NoBulk(f.name)  # text where a number belongs: the exact parser says which line


# ---------------------------------------------------------------- NeMo 1 tqdm


def bulk_tqdm(text: str, redraw: re.Pattern[str], snake: Snake) -> Bulk | None:
    """NeMo 1 tqdm refreshes (`Epoch E: ... n/N [t<eta, k=v, ...]`) in bulk, or None."""
    try:
        found = _tqdm_found(text, redraw, drop_repeats=True)
        if found is None or len(found.lines) + found.dropped < MIN_LINES:
            return None
        cols = _tqdm_columns(found, snake)
        if found.dropped and np.isnan(cols.get("consumed_samples", np.zeros(1))).any():
            # a repeat with NaN samples counts as "logged again" (NaN != NaN): keep every repeat
            found = _tqdm_found(text, redraw, drop_repeats=False)
            if found is None:
                return None
            cols = _tqdm_columns(found, snake)
    except (_NoBulk, pa.ArrowException, ValueError, OverflowError):
        return None  # (a lone surrogate, which Arrow cannot hold, is a ValueError too)
    cols["line"] = found.lines
    return Bulk(pd.DataFrame(cols, copy=False), [])


def _tqdm_found(text: str, redraw: re.Pattern[str], drop_repeats: bool) -> Refreshes | None:
    found = tqdm_refreshes(pa.array([text], type=pa.large_string()), TQDM, drop_repeats)
    if found is not None and found.pager_redraws:
        # the pager's forms of a redraw, as plain carriage returns
        text = redraw.sub("\r", text)
        found = tqdm_refreshes(pa.array([text], type=pa.large_string()), TQDM, drop_repeats)
    return found


def _tqdm_columns(found: Refreshes, snake: Snake) -> dict[str, np.ndarray]:
    n = len(found.lines)
    # parsed by Arrow's cast; a "?" total (or a digit Arrow does not read) fails it: exact parser
    cols: dict[str, np.ndarray] = {
        "epoch": _ints(found.epoch),
        "batch": _ints(found.n),
        "total_steps": _ints(found.total),
    }
    fast = read_labelled(found.postfix, ",", "=", 0, _read_as_float) if n else None
    pieces = None if fast is not None or not n else read_pieces(found.postfix, ",")
    labelled = _value_columns(fast, snake) if fast is not None else None
    labelled = labelled if pieces is None else _labelled(pieces, 0, "=", snake)
    if labelled is not None and labelled:
        cols.update(labelled)
        cols["step"] = _tqdm_steps(cols)
        return cols
    split = pc.split_pattern(found.postfix, pattern=",")
    pieces = pc.list_flatten(split)
    has_value = bool_mask(pc.match_substring(pieces, "="))
    # the same number of k=v items on every line, or the grid below would mix lines
    per_line = np.add.reduceat(has_value, np.asarray(split.offsets)[:-1]) if len(pieces) else np.zeros(n)
    if not n or (per_line != per_line[0]).any() or not per_line[0]:
        raise _NoBulk("postfixes differ")
    kv = pc.split_pattern(pc.filter(pieces, pa.array(has_value)), pattern="=", max_splits=1)
    flat = pc.list_flatten(kv)
    starts = np.asarray(kv.offsets)[:-1].reshape(n, int(per_line[0]))
    for j in range(starts.shape[1]):
        label = _label(pc.take(flat, pa.array(starts[:, j])))
        cols.update(_column(label, _strip(pc.take(flat, pa.array(starts[:, j] + 1))), snake))
    cols["step"] = _tqdm_steps(cols)
    return cols


def _tqdm_steps(cols: dict[str, np.ndarray]) -> np.ndarray:
    """global_step when logged (the progress count otherwise), as the exact parser decides."""
    batch = cols["batch"]
    global_step = cols.get("global_step")
    if global_step is None:
        return batch
    finite = np.isfinite(global_step)
    steps: np.ndarray = np.where(finite, np.nan_to_num(global_step), batch).astype(np.int64)
    return steps
