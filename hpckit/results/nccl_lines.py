"""The lines of an nccl-tests log worth reading, found by Arrow kernels: what the scan regex of nccl_scan finds.

The scan regex (Python's regex engine) tries its alternatives at every line start: a run of result rows, a
run of device lines, or one `#` line worth reading, each the first alternative whose line test
passes, runs taken whole (greedy).  Here each line is tested for a row by RE2, and each distinct
other line for the other kinds, with the same line tests (on ASCII text Python's `\\d` and `\\b`
are RE2's), and the runs are cut by numpy: the same blocks, in the same order, at a fraction of
the cost of a regex attempt per line in Python.  Text that is not ASCII gets None, and the caller runs the scan regex.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hpckit.results.arrow_text import bool_mask, text_lines

# kind ("rows", "devices" or "hash"), the lines as one text, first line number, count of lines
Match = tuple[str, str, int, int]


@dataclass
class Found:
    """What the Arrow scan found in a chunk."""

    matches: list[Match]
    others: str | None  # the lines that are not rows joined, when rows are most of the text
    failures: list[tuple[int, str]]  # (1-based line number, line) of the lines the failure test finds
    newlines: int  # the text's count of "\n"


def line_matches(text: str, row: str, hash_start: str, device: str, hashed: str, failure: str) -> Found | None:
    """The scan regex's matches (kind, block, 1-based line number of its first line, count of
    lines), in file order, from the line tests ``row``, ``device`` and ``hashed`` (regexes tried
    at a line's start, each without its `.*` tail; ``hash_start``: what both of the last two begin
    with), and the lines where ``failure`` is found; None for text that is not
    ASCII or a test RE2 cannot read (``failure`` must hold the word "failure")."""
    if not text.isascii():
        return None  # Python's \d is Unicode there
    lines = text_lines(text)
    try:
        rows = bool_mask(pc.match_substring_regex(lines, f"^(?:{row})"))
        # the other lines repeat (a log prints its `#` lines and its noise again and again):
        # each distinct one is tested once, for a `#` start, then for a device or header line
        others = np.flatnonzero(~rows)
        rest = pc.take(lines, pa.array(others))
        encoded = pc.dictionary_encode(rest)
        distinct, codes = encoded.dictionary, encoded.indices.to_numpy()
        hashed_start = bool_mask(pc.match_substring_regex(distinct, f"^(?:{hash_start})"))
        is_device = hashed_start & bool_mask(pc.match_substring_regex(distinct, f"^(?:{device})"))
        # a device line is read as such even when the header test passes too
        is_header = hashed_start & bool_mask(pc.match_substring_regex(distinct, f"^(?:{hashed})")) & ~is_device
        devices, headers = others[is_device[codes]], others[is_header[codes]]
        # every line, rows too (a kernel fault cuts a row with its error), in a log that has the word
        failed = others[:0]
        if "failure" in text:
            failed = np.flatnonzero(bool_mask(pc.match_substring_regex(lines, failure)))
    except pa.ArrowInvalid:
        return None  # RE2 cannot read a test after all
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)[lines.offset : lines.offset + len(lines) + 1]
    offsets = offsets - offsets[0]  # the lines' text without the newlines, then each line's place:
    starts = offsets[:-1] + np.arange(len(lines))
    ends = offsets[1:] + np.arange(len(lines))
    matches = _in_order(text, starts, ends, np.flatnonzero(rows), devices, headers)
    failures = [(int(i) + 1, text[starts[i] : ends[i]]) for i in failed.tolist()]
    # (the rows are most of a long run's log: the other lines are then searched alone)
    return Found(matches, _joined(rest) if len(others) <= len(lines) // 2 else None, failures, len(lines) - 1)


def _joined(lines: pa.Array) -> str:
    one = pa.LargeListArray.from_arrays(pa.array([0, len(lines)], type=pa.int64()), lines)
    text: str = pc.binary_join(one, pa.scalar("\n", pa.large_string()))[0].as_py()
    return text


def _runs(indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First and last line of each run of consecutive line indices."""
    if not len(indices):
        return indices, indices
    breaks = np.flatnonzero(np.diff(indices) != 1)
    return indices[np.r_[0, breaks + 1]], indices[np.r_[breaks, len(indices) - 1]]


def _in_order(
    text: str, starts: np.ndarray, ends: np.ndarray, rows: np.ndarray, devices: np.ndarray, headers: np.ndarray
) -> list[Match]:
    row_first, row_last = _runs(rows)
    dev_first, dev_last = _runs(devices)
    first = np.concatenate([row_first, dev_first, headers])
    last = np.concatenate([row_last, dev_last, headers])
    kind = np.repeat(np.arange(3, dtype=np.int8), [len(row_first), len(dev_first), len(headers)])
    order = np.argsort(first, kind="stable")
    names = ("rows", "devices", "hash")
    first, last = first[order], last[order]
    at_start, at_end = starts[first].tolist(), ends[last].tolist()
    line_at, counts = (first + 1).tolist(), (last - first + 1).tolist()
    kinds = [names[k] for k in kind[order].tolist()]
    # (a list built in one comprehension: tens of thousands of matches in a log of short runs)
    return [
        (k, text[a:b], line, count)
        for k, a, b, line, count in zip(kinds, at_start, at_end, line_at, counts, strict=True)
    ]
