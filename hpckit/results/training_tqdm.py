"""NeMo 1 tqdm refreshes found by Arrow kernels, exactly as TQDM.search finds them one by one.

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

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hpckit.results.arrow_text import bool_mask
from hpckit.results.re2 import re2_unicode

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
    # a piece with "Epoch" holds a pager's form of a redraw ("^M", "[A"): the caller turns those
    # into carriage returns and reads again (only such pieces can read differently then)
    pager_redraws: bool = False


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


def tqdm_refreshes(whole: pa.Array, tqdm: re.Pattern[str], drop_repeats: bool) -> Refreshes | None:
    """The refreshes of a log (``whole``: the text as a one-element Arrow array) whose redraws are
    plain carriage returns, or None (exact parser)."""
    patterns = _patterns(tqdm)
    if patterns is None:
        return None
    pieces, lines = _pieces(whole)
    epoch_like = bool_mask(pc.match_substring(pieces, "Epoch"))
    keep = epoch_like.copy()
    if drop_repeats and len(pieces) > 1:
        repeated = pc.equal(pieces.slice(0, len(pieces) - 1), pieces.slice(1))
        keep[:-1] &= ~bool_mask(repeated)
    dropped = int(epoch_like.sum() - keep.sum())
    kept = pc.filter(pieces, pa.array(keep))
    if pc.any(pc.match_substring_regex(kept, r"\^M|\[A")).as_py():
        return Refreshes(*(pa.array([], pa.string()),) * 4, np.zeros(0, np.int64), dropped, pager_redraws=True)
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
