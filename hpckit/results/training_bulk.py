"""The fast paths for long training logs: the same figures as the line-by-line parsers, read by
Arrow kernels, one chunk of the log at a time.

NeMo 2 / Megatron: the step lines are picked by the marker regex in RE2 on Arrow's lines, then
heads, labels and values are cut by one Arrow CSV read per block (pieces.read_labelled), which
parses the floats itself; the step-marker integers are read from the heads' digit runs (or by RE2
where a field is not a plain digit run).  NeMo 1: tqdm refreshes are cut by Arrow
(training_tqdm) and their `k=v` postfixes read the same way.  The declarative field tables still
decide names, units and conversions.  Anything else (text that is not ASCII, lines that do not
all share the first line's labels in the same order, a value that does not convert) declines:
None, and the exact parser reads the log, so the two always agree."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from hpckit.results import speed
from hpckit.results.arrow_text import bool_mask, text_lines
from hpckit.results.digit_runs import digit_runs, run_index, run_shaped
from hpckit.results.model import NA_TOKENS, Field
from hpckit.results.pieces import Labelled, read_labelled
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


def bulk_pipe(
    text: str, marker: re.Pattern[str], snake: Snake, others: bool = True, first_line: int = 1, least: int = MIN_LINES
) -> Bulk | None:
    """NeMo 2 / Megatron `head | label: value | ...` step lines of a chunk in bulk, or None.

    ``others``: also collect the candidate lines that are not step lines (Megatron reads extras
    from them); ``least``: decline a chunk with fewer step lines (the exact parser is as fast)."""
    found = _step_lines_arrow(text, marker, others)
    if found is None:
        return None
    step_lines, linenos, other = found
    if not speed.worth(len(linenos), least):
        return None
    if not len(linenos):
        return _empty(other, first_line)
    try:
        cols = _columns_csv(step_lines, snake)
    except (_NoBulk, pa.ArrowException, ValueError, OverflowError):
        return None
    if cols is None:
        return None
    cols["line"] = linenos + (first_line - 1)
    other = [(n + first_line - 1, line) for n, line in other]
    return Bulk(pd.DataFrame(cols, copy=False), other)  # (no copy into blocks: the dedupe copies)


StepLines = tuple[pa.Array, np.ndarray, list[tuple[int, str]]]  # lines, their numbers, the others


def _empty(other: list[tuple[int, str]], first_line: int) -> Bulk:
    """A chunk without step lines (noise between two stretches of steps)."""
    return Bulk(pd.DataFrame({"step": np.zeros(0, dtype=np.int64)}), [(n + first_line - 1, x) for n, x in other])


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
    return picked, where + 1, []


def _spells(pattern: str, word: str) -> bool:
    """Whether every match of the regex holds ``word``: the pattern spells it out, with no
    alternation, group or class that could make it optional, and no quantifier on its end."""
    at = pattern.find(word)
    after = pattern[at + len(word) : at + len(word) + 1]
    return at >= 0 and not any(c in pattern for c in "|([") and after not in ("?", "*", "{", "+")


def _columns_csv(step_lines: pa.Array, snake: Snake) -> dict[str, np.ndarray] | None:
    """NeMo 2 / Megatron columns read with Arrow's CSV reader (pieces.read_labelled), or None."""
    fast = read_labelled(step_lines, "|", ":", 1, _read_as_float)
    if fast is None:
        return None
    cols = _head_columns(fast.heads[0])
    cols.update(_value_columns(fast, snake))
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


def bulk_tqdm(
    text: str, redraw: re.Pattern[str], snake: Snake, first_line: int = 1, least: int = MIN_LINES
) -> Bulk | None:
    """NeMo 1 tqdm refreshes (`Epoch E: ... n/N [t<eta, k=v, ...]`) of a chunk in bulk, or None."""
    try:
        found = _tqdm_found(text, redraw, drop_repeats=True)
        if found is None or not speed.worth(len(found.lines) + found.dropped, least):
            return None
        if not len(found.lines) + found.dropped:
            return _empty([], first_line)
        cols = _tqdm_columns(found, snake)
        if found.dropped and np.isnan(cols.get("consumed_samples", np.zeros(1))).any():
            # a repeat with NaN samples counts as "logged again" (NaN != NaN): keep every repeat
            found = _tqdm_found(text, redraw, drop_repeats=False)
            if found is None:
                return None
            cols = _tqdm_columns(found, snake)
    except (_NoBulk, pa.ArrowException, ValueError, OverflowError):
        return None  # (a lone surrogate, which Arrow cannot hold, is a ValueError too)
    cols["line"] = found.lines + (first_line - 1)
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
    if fast is None:
        raise _NoBulk("postfixes of another shape")
    cols.update(_value_columns(fast, snake))
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
