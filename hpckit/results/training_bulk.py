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
from itertools import pairwise

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from hpckit.results.model import NA_TOKENS, Field
from hpckit.results.training_fields import LABELS, STEP_MARKER

MIN_LINES = 64  # below this the line-by-line parser is as fast
Snake = Callable[[str], str]


@dataclass
class Bulk:
    frame: pd.DataFrame  # one row per step line, in file order (duplicates not yet removed)
    other_lines: list[tuple[int, str]]  # candidate lines that were not step lines (for extras)


class _NoBulk(Exception):
    """Something the bulk path does not handle: the exact parser runs (and says which line)."""


def bulk_pipe(text: str, marker: re.Pattern[str], snake: Snake) -> Bulk | None:
    """NeMo 2 / Megatron `head | label: value | ...` step lines in bulk, or None."""
    found = _step_lines_arrow(text, marker) or _step_lines_python(text, marker)
    if found is None:
        return None
    step_lines, linenos, other = found
    try:
        cols = _columns(step_lines, snake)
    except (_NoBulk, pa.ArrowException, ValueError, OverflowError):
        return None
    cols["line"] = linenos
    return Bulk(pd.DataFrame(cols), other)


StepLines = tuple[pa.Array, np.ndarray, list[tuple[int, str]]]  # lines, their numbers, the others


def _step_lines_arrow(text: str, marker: re.Pattern[str]) -> StepLines | None:
    """Step lines picked by Arrow kernels (split, substring and RE2 tests): no Python per line.

    Only for ASCII text and a marker that RE2 reads as Python does (see _re2_ascii)."""
    pattern = _re2_ascii(marker.pattern) if text.isascii() else None
    if pattern is None:
        return None
    lines = pc.list_flatten(pc.split_pattern(pa.array([text], type=pa.large_string()), pattern="\n"))
    candidate = pc.and_(pc.match_substring(lines, "iteration"), pc.match_substring(lines, "|"))
    try:
        step = pc.and_(candidate, pc.match_substring_regex(lines, pattern))
    except pa.ArrowInvalid:
        return None  # RE2 cannot read it after all: Python picks the lines
    numbers = np.arange(1, len(lines) + 1, dtype=np.int64)
    if (pc.sum(step).as_py() or 0) < MIN_LINES:
        return None
    rest = pc.and_(candidate, pc.invert(step))
    rest_numbers = numbers[rest.to_numpy(zero_copy_only=False)].tolist()
    other = list(zip(rest_numbers, pc.filter(lines, rest).to_pylist(), strict=True))
    return pc.filter(lines, step), numbers[step.to_numpy(zero_copy_only=False)], other


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


# What Python's \s matches in ASCII text (str.isspace: \t-\r and \x1c-\x1f too); RE2's is narrower.
_SPACE, _NOT_SPACE = r"[\t-\r\x1c- ]", r"[^\t-\r\x1c- ]"
_RE2_UNSURE = re.compile(r"\(\?<[=!]|\(\?P=|\\\\|\\[ZAG]|\[[^\]]*\\[sS]")


def _re2_ascii(pattern: str) -> str | None:
    """A Python regex as RE2 must be written to match the same on ASCII text, or None when that is
    not sure (lookbehind, back-references, \\s inside a class ...).  On ASCII text \\d, \\w, \\b and
    "." already agree; only \\s and \\S need spelling out."""
    if _RE2_UNSURE.search(pattern):
        return None
    return pattern.replace(r"\S", _NOT_SPACE).replace(r"\s", _SPACE)


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


def _label_value_pieces(pairs: pa.Array, n: int) -> tuple[pa.Array, np.ndarray]:
    """Every `label: value` piece cut at its first ":", flattened (label, value, label, ...), and
    where the label of piece j of line i sits in that array, as an (n, pieces per line) grid."""
    kv = pc.split_pattern(pairs, pattern=":", max_splits=1)
    if pc.min(pc.list_value_length(kv)).as_py() != 2:
        # a Megatron line ends with " |": its last piece is blank, on every line alike
        blank = pc.equal(_strip(pairs), "")
        keep = ~np.asarray(blank.to_numpy(zero_copy_only=False), dtype=bool)
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


# Exactly the characters str.strip() removes (str.isspace), so that Arrow trims as the exact parser.
PY_WHITESPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
PY_WHITESPACE += "\u2028\u2029\u202f\u205f\u3000"


def _strip(values: pa.Array) -> pa.Array:
    return pc.utf8_trim(values, characters=PY_WHITESPACE)


def _head_columns(heads: pa.Array) -> dict[str, np.ndarray]:
    """Step-marker fields (step, epoch, total, timestamp) of every line's head."""
    cols: dict[str, np.ndarray] = {}
    joined = "\n".join(heads.to_pylist())
    for f in STEP_MARKER:
        if f.pattern.search(joined) is None:
            continue  # in no head (one C search over them all; an RE2 pass costs a call per head)
        found = pc.struct_field(pc.extract_regex(heads, f.regex.replace("(", "(?P<v>", 1)), [0])
        nulls = found.null_count
        if nulls == len(heads):
            continue
        if nulls:
            raise _NoBulk(f"{f.name} on some lines only")
        cols[f.name] = found.to_numpy(zero_copy_only=False) if f.kind == "str" else _ints(found)
    if "step" not in cols:
        raise _NoBulk("no step")
    return cols


def _ints(values: pa.Array) -> np.ndarray:
    ints: np.ndarray = pc.cast(values, pa.int64()).to_numpy()
    return ints


def _column(label: str, values: pa.Array, snake: Snake) -> dict[str, np.ndarray]:
    """{name: values} for one label; empty for an unknown label that is never a number."""
    f = LABELS.lookup(label)
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

# One whole refresh: "Epoch E:", the bar, "n/total [", the postfix up to "]" and the rest of the
# refresh; nothing crosses "\r" or "\n", the ends of a refresh, nor the bar its first "[".  The lazy
# bar takes the leftmost n/total, as TQDM's ".*?" does.  One findall per line reads every refresh
# in C; the count check in _refreshes makes sure each is what TQDM.search would find.
_REFRESH = re.compile(r"Epoch[^\S\r\n]+(\d+):[^\r\n\[]*?(\d+)/(\d+|\?)[^\S\r\n]*\[([^\]\r\n]*+)\][^\r\n]*+")
_MARKER = re.compile(r"Epoch[^\S\r\n]+\d+:")
Refresh = tuple[str, str, str, str]  # epoch, n, total, postfix


@dataclass
class _Refreshes:
    found: list[Refresh]  # per refresh kept, in file order
    lines: list[int]
    dropped: int  # refreshes left out because the next one repeats them exactly


def bulk_tqdm(text: str, redraw: re.Pattern[str], snake: Snake) -> Bulk | None:
    """NeMo 1 tqdm refreshes (`Epoch E: ... n/N [t<eta, k=v, ...]`) in bulk, or None."""
    refreshes = _refreshes(text, redraw, drop_repeats=True)
    if refreshes is None or len(refreshes.found) + refreshes.dropped < MIN_LINES:
        return None
    try:
        cols = _tqdm_columns(refreshes.found, snake)
        if refreshes.dropped and np.isnan(cols.get("consumed_samples", np.zeros(1))).any():
            # a repeat with NaN samples counts as "logged again" (NaN != NaN): keep every repeat
            refreshes = _refreshes(text, redraw, drop_repeats=False)
            assert refreshes is not None
            cols = _tqdm_columns(refreshes.found, snake)
    except (_NoBulk, pa.ArrowException, ValueError, OverflowError):
        return None
    cols["line"] = np.asarray(refreshes.lines, dtype=np.int64)
    return Bulk(pd.DataFrame(cols), [])


def _refreshes(text: str, redraw: re.Pattern[str], drop_repeats: bool) -> _Refreshes | None:
    """Every refresh, or None when one might read differently than TQDM.search reads it."""
    if "^M" in text or "[A" in text:
        text = redraw.sub("\r", text)  # the pager's forms of a redraw, as plain carriage returns
    found: list[Refresh] = []
    lines: list[int] = []
    dropped = 0
    for lineno, line in enumerate(text.split("\n"), 1):
        if "Epoch" not in line:
            continue
        if drop_repeats and "\r" in line:
            line, skipped = _without_repeats(line)
            dropped += skipped
        hits = _REFRESH.findall(line)
        # Each refresh runs to the end of its segment, so equal counts mean one refresh per
        # "Epoch E:" and none missed (a bar with "[" before n/total would be): else the exact
        # parser decides.
        if len(hits) != line.count("Epoch") and len(hits) != len(_MARKER.findall(line)):
            return None
        found += hits
        lines += [lineno] * len(hits)
    return _Refreshes(found, lines, dropped)


def _without_repeats(line: str) -> tuple[str, int]:
    """The line without redraws that the next redraw repeats char for char, and how many went.

    Such a redraw is superseded before it is read: the exact parser keeps the last record of a step,
    and the repeat gives the same record on the same line.  Skipping it here spares the regex its
    characters (a split, a comparison per redraw and a join, all in C or nearly)."""
    segments = line.split("\r")
    kept = [a for a, b in pairwise(segments) if a != b]
    kept.append(segments[-1])
    return "\r".join(kept), len(segments) - len(kept)


def _tqdm_columns(found: list[Refresh], snake: Snake) -> dict[str, np.ndarray]:
    n = len(found)
    epoch, batch, total, postfixes = zip(*found, strict=True)
    # parsed by Arrow's cast; a "?" total (or a digit Arrow does not read) fails it: exact parser
    cols: dict[str, np.ndarray] = {
        "epoch": _ints(pa.array(epoch, type=pa.string())),
        "batch": _ints(pa.array(batch, type=pa.string())),
        "total_steps": _ints(pa.array(total, type=pa.string())),
    }
    split = pc.split_pattern(pa.array(postfixes, type=pa.large_string()), pattern=",")
    pieces = pc.list_flatten(split)
    has_value = np.asarray(pc.match_substring(pieces, "=").to_numpy(zero_copy_only=False), dtype=bool)
    # the same number of k=v items on every line, or the grid below would mix lines
    per_line = np.add.reduceat(has_value, np.asarray(split.offsets)[:-1]) if len(pieces) else np.zeros(n)
    if (per_line != per_line[0]).any() or not per_line[0]:
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
