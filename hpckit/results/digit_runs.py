"""Integers read out of many short ASCII strings of one shape by numpy, where a regex search
provably finds the same digit run on every one of them.

Step-marker heads (`Training epoch 0, iteration 41/1000`) differ from line to line only in their
digit runs.  When every head has the same *skeleton* (each digit run written as one "0") and a
field's regex is *run-shaped* (see below), the regex's leftmost match sits at the same place in
every skeleton, so its capture is the m-th digit run of every head: one numpy pass over the heads
reads all of them, where a regex extraction per field costs a search per head.

Run-shaped: the pattern is a sequence of literals that are not digits, `\\s`, classes of letters
(each optionally `+`, `*` or `?`), uncaptured `\\d+` and exactly one `(\\d+)`, with an atom that
must match (no `*` or `?`) between any two digit atoms.  No atom but `\\d+` then matches a digit,
so each `\\d+` of a match spans one whole digit run: it starts after a non-digit or where the
match starts, which the leftmost match never puts inside a run, and, greedy, it could only give
back digits to a later `\\d+`, which a non-digit stands in front of.  Matching then depends on
the skeleton alone.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# one token of a run-shaped pattern: a digit atom, or a non-digit atom and its quantifier
_NON_DIGIT = r"\\s|\\ |\\[^\w\s]|\[[A-Za-z]+\]|[A-Za-z ,;:/=_%#@!&'<>~-]"  # \s, an escape, letters, a literal
_TOKEN = re.compile(rf"(?P<digits>\(\\d\+\)|\\d\+)|(?:{_NON_DIGIT})(?P<q>[+*?]?)")
_DIGITS = re.compile(r"[0-9]+")


def run_shaped(pattern: str) -> bool:
    """Whether the regex is of the shape whose capture is one digit run, the same on every string
    of one skeleton (module docstring)."""
    at, captures, apart = 0, 0, True  # apart: a non-digit must stand between here and the last \\d+
    for token in _TOKEN.finditer(pattern):
        if token.start() != at:
            return False
        at = token.end()
        if token.group("digits"):
            if not apart:
                return False
            captures += token.group("digits").startswith("(")
            apart = False
        elif token.group("q") in ("", "+"):
            apart = True
    return at == len(pattern) and captures == 1


def run_index(pattern: re.Pattern[str], first: str) -> int | None:
    """Which digit run of ``first`` the pattern's capture is; -1 when the pattern finds nothing
    there (nor then in any string of the same skeleton); None when the capture is not a whole
    run (cannot happen for a run-shaped pattern, but then the caller reads it another way)."""
    m = pattern.search(first)
    if m is None:
        return -1
    spans = [r.span() for r in _DIGITS.finditer(first)]
    return spans.index(m.span(1)) if m.span(1) in spans else None


def digit_runs(strings: pa.Array) -> np.ndarray | None:
    """(strings, runs) int64: every digit run of every string, when all strings are ASCII text of
    one skeleton and every run fits an int64; None otherwise.

    Few and small temporaries (a byte mask or two of the text, arrays per run, not per byte):
    numpy's big arrays come as fresh pages from the system, whose faults cost as much as the work."""
    arr = strings.combine_chunks() if isinstance(strings, pa.ChunkedArray) else strings
    if arr.type != pa.large_string() or arr.null_count or not len(arr):
        return None
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
    bounds = offsets - offsets[0]
    if (np.diff(bounds) == 0).any() or data.max() >= 128:
        return None  # an empty string (reduceat below needs none) or non-ASCII text
    digit = (data - 48) < 10  # uint8 wraps: only b"0".."9" stay below 10
    starts, ends = _run_edges(digit, bounds)
    if not _one_skeleton(data, digit, starts, bounds):
        return None
    first, last = np.flatnonzero(starts), np.flatnonzero(ends)
    if len(first) % (len(bounds) - 1) or not len(first):
        return None  # (no run at all: nothing to read)
    values = _run_values(arr, offsets[0], first, last)
    return None if values is None else values.reshape(len(bounds) - 1, len(first) // (len(bounds) - 1))


def _run_edges(digit: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Masks of the first and the last digit of every run; a run never spans two strings."""
    starts = digit.copy()
    starts[1:] &= ~digit[:-1]
    starts[bounds[:-1]] = digit[bounds[:-1]]
    ends = digit.copy()
    ends[:-1] &= ~digit[1:]
    ends[bounds[1:] - 1] = digit[bounds[1:] - 1]
    return starts, ends


def _one_skeleton(data: np.ndarray, digit: np.ndarray, starts: np.ndarray, bounds: np.ndarray) -> bool:
    """Whether every string, each digit run written as one "0", is the first string's skeleton."""
    keep = ~digit
    keep |= starts
    lengths = np.add.reduceat(keep, bounds[:-1], dtype=np.int64)
    if (lengths != lengths[0]).any():
        return False
    skeleton = data[keep]
    skeleton[starts[keep]] = 48
    table = skeleton.reshape(len(lengths), int(lengths[0]))
    return bool((table == table[0]).all())


def _run_values(arr: pa.Array, base: int, first: np.ndarray, last: np.ndarray) -> np.ndarray | None:
    """The runs as numbers: Arrow's integer cast on string views of the runs (every other string
    of an array whose offsets are the runs' edges), which reads digits as int() does; None when
    one does not fit an int64."""
    edges = np.empty(2 * len(first) + 1, dtype=np.int64)
    edges[0:-1:2] = first + base
    edges[1::2] = last + 1 + base
    edges[-1] = edges[-2]
    spans = pa.LargeStringArray.from_buffers(len(edges) - 1, pa.py_buffer(edges), arr.buffers()[2])
    runs = pc.take(spans, pa.array(np.arange(0, len(edges) - 1, 2)))
    try:
        values: np.ndarray = pc.cast(runs, pa.int64()).to_numpy()
    except pa.ArrowInvalid:
        return None
    return values
