"""NeMo 1: tqdm refreshes of `Epoch E: ... n/N [t<eta, k=v, ...]`, one row per global step, read
exactly (each line split on redraws, each piece searched with TQDM) and by the `tqdm-steps` fast
path (speed.py): the refreshes cut by Arrow kernels, their `k=v` postfixes read like NeMo 2's
pieces (training.read_labelled).  The fast path declines (the exact path reads the log) on the rare
shapes: a pager's redraws ("^M", "[A"), a repeated refresh whose consumed_samples is NaN.

How the fast path finds the refreshes, exactly as TQDM.search finds them one by one:
The exact parser splits each line on redraws and searches every piece with TQDM, whose lazy `.*?`
walks the whole progress bar in Python.  Here the pieces come from two splits (lines, then
carriage returns), a piece that the next one repeats char for char is dropped (it is superseded
before it is read), and each remaining piece is cut at its first "[":

- the head must match TQDM's part before `\\[` to its very end (a DFA test in RE2, spelt with
  Python's Unicode \\d and \\s); then TQDM's match uses that "[", for any match that used a later
  one would start no earlier and take its n/total later, which the lazy `.*?` never prefers;
- epoch is then the first `Epoch\\s+(\\d+):`, n/total the `(\\d+)/(\\d+|\\?)\\s*` that ends the head
  (n takes its whole run of digits, as the earliest start the lazy `.*?` allows), and the postfix
  runs to the first "]" of the rest.

A piece holding "Epoch" that does not fit this shape is searched with TQDM itself; if TQDM finds a
refresh there, None is returned and the exact parser reads the log.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from hpckit.results import speed
from hpckit.results.lines import bool_mask, re2_unicode, split_lines
from hpckit.results.model import Value
from hpckit.results.training import (
    MIN_LINES,
    Bulk,
    NoBulk,
    Snake,
    StepReader,
    Steps,
    empty_bulk,
    ints,
    put,
    read_as_float,
    read_labelled,
    snake,
    value_columns,
)
from hpckit.results.training_fields import REDRAW, TQDM


class TqdmReader(StepReader):
    """NeMo 1: tqdm refreshes of `Epoch E: ... n/N [t<eta, k=v, ...]`, one row per global step."""

    path = "tqdm-steps"

    def _fast(self, text: str, first_line: int, least: int) -> Bulk | None:
        return bulk_tqdm(text, first_line, least)

    def _exact(self, text: str, first_line: int) -> None:
        for lineno, raw in enumerate(split_lines(text), first_line):
            if "Epoch" not in raw:
                continue
            for segment in REDRAW.split(raw):
                m = TQDM.search(segment)
                if m is not None:
                    _tqdm_segment(self.steps, m, lineno)


def _tqdm_segment(steps: Steps, m: re.Match[str], lineno: int) -> None:
    rec: dict[str, Value] = {"epoch": int(m.group("epoch")), "batch": int(m.group("n"))}
    if m.group("total").isdigit():
        rec["total_steps"] = int(m.group("total"))
    for item in m.group("postfix").split(","):
        label, sep, value = item.partition("=")
        if sep:
            put(steps, rec, label.strip(), value.strip(), lineno)
    global_step = rec.get("global_step")
    # Older postfixes have no global_step: the progress count is the step.
    finite = isinstance(global_step, float) and math.isfinite(global_step)
    step = int(global_step) if finite and isinstance(global_step, float) else int(m.group("n"))
    rec["step"] = step
    rec["line"] = lineno
    steps.last_line = m.group(0)
    steps.add(step, rec)


# ---------------------------------------------------------------- fast path tqdm-steps


def bulk_tqdm(text: str, first_line: int = 1, least: int = MIN_LINES) -> Bulk | None:
    """NeMo 1 tqdm refreshes (`Epoch E: ... n/N [t<eta, k=v, ...]`) of a chunk in bulk, or None."""
    try:
        found = tqdm_refreshes(pa.array([text], type=pa.large_string()), TQDM)
        if found is None or not speed.worth(len(found.lines) + found.dropped, least):
            return None
        if not len(found.lines) + found.dropped:
            return empty_bulk([], first_line)
        cols = _tqdm_columns(found, snake)
        if found.dropped and np.isnan(cols.get("consumed_samples", np.zeros(1))).any():
            # a dropped repeat with NaN samples would count as "logged again" (NaN != NaN): rare,
            # the exact path reads it
            return None
    except (NoBulk, pa.ArrowException, ValueError, OverflowError):
        return None  # (a lone surrogate, which Arrow cannot hold, is a ValueError too)
    cols["line"] = found.lines + (first_line - 1)
    return Bulk(pd.DataFrame(cols, copy=False), [])


def _tqdm_columns(found: Refreshes, snake: Snake) -> dict[str, np.ndarray]:
    n = len(found.lines)
    # parsed by Arrow's cast; a "?" total (or a digit Arrow does not read) fails it: exact parser
    cols: dict[str, np.ndarray] = {
        "epoch": ints(found.epoch),
        "batch": ints(found.n),
        "total_steps": ints(found.total),
    }
    fast = read_labelled(found.postfix, ",", "=", 0, read_as_float) if n else None
    if fast is None:
        raise NoBulk("postfixes of another shape")
    cols.update(value_columns(fast, snake))
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


# TQDM (training_fields) in the two parts this reading relies on; another TQDM gets None below.
_HEAD_START = r"Epoch\s+(?P<epoch>\d+):"


_HEAD_END = r"(?P<n>\d+)/(?P<total>\d+|\?)\s*"


_POSTFIX = r"\[(?P<postfix>[^\]]*)\]"


@dataclass
class Refreshes:
    """Every refresh TQDM finds, in file order: its groups as Arrow strings and its line."""

    epoch: pa.Array
    n: pa.Array
    total: pa.Array
    postfix: pa.Array
    lines: np.ndarray
    dropped: int  # pieces with "Epoch" left out because the next piece repeats them exactly


@dataclass(frozen=True)
class _Patterns:
    head: str  # the whole head, anchored at its end
    start: str
    end: str


def _patterns(tqdm: re.Pattern[str]) -> _Patterns | None:
    body = tqdm.pattern.removesuffix(_POSTFIX)
    if body == tqdm.pattern or body != _HEAD_START + ".*?" + _HEAD_END:
        return None
    head, start, end = (re2_unicode(p) for p in (body + "$", _HEAD_START, _HEAD_END + "$"))
    if head is None or start is None or end is None:
        return None
    return _Patterns(head, start, end)


def tqdm_refreshes(whole: pa.Array, tqdm: re.Pattern[str]) -> Refreshes | None:
    """The refreshes of a log (``whole``: the text as a one-element Arrow array), or None (exact
    parser): for another TQDM, and for a piece with "Epoch" that holds a pager's form of a redraw
    ("^M", "[A"), which only the exact parser splits on."""
    patterns = _patterns(tqdm)
    if patterns is None:
        return None
    pieces, lines = _pieces(whole)
    epoch_like = bool_mask(pc.match_substring(pieces, "Epoch"))
    keep = epoch_like.copy()
    if len(pieces) > 1:
        repeated = pc.equal(pieces.slice(0, len(pieces) - 1), pieces.slice(1))
        keep[:-1] &= ~bool_mask(repeated)
    dropped = int(epoch_like.sum() - keep.sum())
    kept = pc.filter(pieces, pa.array(keep))
    if pc.any(pc.match_substring_regex(kept, r"\^M|\[A")).as_py():
        return None
    return _read(kept, lines[keep], patterns, tqdm, dropped)


def _pieces(whole: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Every redraw piece of every line, and its line number (lines split on "\\n" only)."""
    lines = pc.list_flatten(pc.split_pattern(whole, pattern="\n"))
    split = pc.split_pattern(lines, pattern="\r")
    counts = np.diff(np.asarray(split.offsets))
    return pc.list_flatten(split), np.repeat(np.arange(1, len(lines) + 1, dtype=np.int64), counts)


def _read(
    pieces: pa.Array, lines: np.ndarray, patterns: _Patterns, tqdm: re.Pattern[str], dropped: int
) -> Refreshes | None:
    cut = pc.split_pattern(pieces, pattern="[", max_splits=1)
    fits = bool_mask(pc.equal(pc.list_value_length(cut), 2))
    heads = pc.list_element(cut, 0)
    tails = pc.list_element(pc.filter(cut, pa.array(fits)), 1)
    closed = pc.split_pattern(tails, pattern="]", max_splits=1)
    ok = fits.copy()
    ok[fits] = bool_mask(pc.equal(pc.list_value_length(closed), 2))
    ok &= bool_mask(pc.match_substring_regex(heads, patterns.head))
    if not ok.all() and _tqdm_finds(pc.filter(pieces, pa.array(~ok)), tqdm):
        return None
    heads = pc.filter(heads, pa.array(ok))
    end = pc.extract_regex(heads, patterns.end)
    return Refreshes(
        epoch=pc.struct_field(pc.extract_regex(heads, patterns.start), [0]),
        n=pc.struct_field(end, [0]),
        total=pc.struct_field(end, [1]),
        postfix=pc.list_element(pc.filter(closed, pa.array(ok[fits])), 0),
        lines=lines[ok],
        dropped=dropped,
    )


def _tqdm_finds(pieces: pa.Array, tqdm: re.Pattern[str]) -> bool:
    """Whether TQDM finds a refresh in any of these pieces (the few that do not fit the shape)."""
    return any(tqdm.search(str(piece)) for piece in pieces.to_pylist())
