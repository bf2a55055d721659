"""One pass over nccl-tests text: which runs there are, their header lines, and their row blocks.

A log is mostly NCCL INFO chatter and result rows.  Both are handled without Python touching each
line: one compiled regex, anchored on newlines, picks out only the lines that matter and takes runs
of consecutive result rows (and of device lines) as one block each; the blocks go to the bulk row
reader as they are.  Python sees one match per block and one per header line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hpckit.results import speed
from hpckit.results.lines import PREFIX_RE, bool_mask, excerpt, re2_ascii, strip_prefix, text_lines
from hpckit.results.model import Value
from hpckit.results.nccl_fields import (
    BINARY,
    FAILURE,
    HEADER_RULES,
    NCCL_VERSION,
    LineRule,
    classify_header,
    failure_message,
    triggers,
)
from hpckit.results.nccl_table import Schema, schema_from_header

# launcher prefix (see lines.PREFIX_RE), row, device line and the `#` lines worth reading
_PREFIX = r"(?:\[\d+,\d+\]<std(?:out|err)>:|\[default\d+\]:|[ \t]*\d+:[ \t]?)"
_P = _PREFIX + "?"
# a row without a prefix is tried first: it is by far the most common line worth reading
_NUMBER_FIRST = r"[ \t]*\d[\d.eE+-]*[ \t]"
# ".*" rather than "[^\n]*": the same lines (no DOTALL), but the regex engine runs to the end of
# a line without testing a character set at every character
# each line test, then `.*` to the end of its line
_ROW_TEST = rf"(?:{_NUMBER_FIRST}|{_PREFIX}{_NUMBER_FIRST})"
_HASH_START = _P + r"[ \t]*#"


def _within_line(trigger: str) -> str:
    """A trigger that cannot run past its line in the scan regex, which reads the text whole (the Arrow scan
    tests one line at a time, where \\s never meets a newline)."""
    return trigger.replace(r"\s", r"[^\S\n]")


@dataclass(frozen=True)
class LineTests:
    """The line tests of the scan, built from the header rules: ``scan`` for Python's engine (any
    text), ``re2`` (row, `#` start, device, header; None when RE2 cannot spell one) for Arrow's."""

    scan: re.Pattern[str]
    re2: tuple[str, str, str, str, str] | None


def line_tests(rules: tuple[LineRule, ...]) -> LineTests:
    device, hashed = triggers(rules)
    device_test = _HASH_START + rf"[ \t]*(?:{device})"
    hash_test = _HASH_START + r"[ \t]*(?:" + "|".join(hashed) + ")"
    row, dev, hsh = (_within_line(t) + ".*" for t in (_ROW_TEST, device_test, hash_test))
    # The lookahead is what every alternative needs (after a prefix: a digit or "#"): most noise
    # lines (NCCL INFO, tagged or not) fail it once instead of failing each alternative in turn.
    gate = rf"(?={_P}[ \t]*[#\d])"
    scan = re.compile(rf"\n{gate}(?:(?P<rows>{row}(?:\n{row})*)|(?P<devices>{dev}(?:\n{dev})*)|(?P<hash>{hsh}))")
    spelt = [re2_ascii(t) for t in (_ROW_TEST, _HASH_START, device_test, hash_test, FAILURE.pattern)]
    re2 = None if any(t is None for t in spelt) else (spelt[0], spelt[1], spelt[2], spelt[3], spelt[4])
    return LineTests(scan, re2)  # type: ignore[arg-type]


TESTS = line_tests(HEADER_RULES)
_STARTERS = frozenset({"version", "start", "params"})
_FOOTERS = frozenset({"oob", "avg", "end"})
_RANK0 = re.compile(r"#\s*Rank\s+0\b")


@dataclass
class Chunk:
    """Consecutive result rows as printed (launcher prefix removed), and where they start."""

    text: str
    first_line: int
    rows: int


@dataclass
class Run:
    """One invocation of an nccl-tests binary as it appears in the log."""

    index: int
    tag: int
    start_line: int
    info: dict[str, Value] = field(default_factory=dict)
    device_lines: list[str] = field(default_factory=list)
    schema: Schema | None = None
    assumed: Schema | None = None  # the layout read from the width of a row before any header
    chunks: list[Chunk] = field(default_factory=list)  # rows not yet parsed
    nrows: int = 0
    finished: bool = False
    last_row: tuple[int, str] = (0, "")  # (line number, text) of the run's last row

    def starts_anew(self, event: str) -> bool:
        """Whether a header line of kind ``event`` belongs to a new run rather than this one."""
        if self.nrows or self.schema is not None or "nthreads" in self.info:
            return True
        if event == "version":
            return "nccl_tests_version" in self.info or "binary" in self.info
        return event == "start" and "binary" in self.info

    def devices(self) -> list[dict[str, Value]]:
        rule = classify_header("#  Rank 0 device 0")
        assert rule is not None
        return [rule.extract(line) for line in self.device_lines]

    def rank0_lines(self) -> int:
        return sum(1 for line in self.device_lines if _RANK0.match(line))


@dataclass
class Scan:
    """Everything one pass over the lines found."""

    source: str
    runs: list[Run] = field(default_factory=list)
    current: dict[int, Run] = field(default_factory=dict)
    nccl_version: str | None = None
    binaries: list[str] = field(default_factory=list)
    param_lines: list[tuple[int, str]] = field(default_factory=list)  # (tag, text) per `# nThread`
    interleaved: bool = False
    last_row_line: int = 0
    warnings: list[str] = field(default_factory=list)
    failures: list[tuple[int, str]] = field(default_factory=list)  # (line number, message)
    cause: tuple[int, str] | None = None  # the first failure line that says why (NCCL's or CUDA's error)
    pending: list[Run] = field(default_factory=list)  # runs with rows not yet parsed
    last_line: tuple[int, str] = (0, "")  # the last line that is not blank
    first_line: tuple[int, str] = (1, "")  # the first line that is not blank (for errors)

    def new_run(self, tag: int, lineno: int) -> Run:
        run = Run(len(self.runs), tag, lineno)
        self.runs.append(run)
        self.current[tag] = run
        return run

    def run_for(self, tag: int, lineno: int) -> Run:
        run = self.current.get(tag) or (self.runs[-1] if self.runs else None)
        return run if run is not None else self.new_run(tag, lineno)


def scan(text: str, source: str) -> Scan:
    """Runs, header values and row blocks of a whole nccl-tests log (rows are parsed later)."""
    sc = Scan(source)
    scan_chunk(sc, text, 1)
    return sc


def scan_chunk(sc: Scan, text: str, first_line: int, lines: int | None = None) -> None:
    """Add a chunk of whole lines (its first line numbered ``first_line``; ``lines``: its count of
    newlines, when the caller knows it) to the scan."""
    tests = TESTS.re2
    found = None if tests is None else speed.attempt("nccl-scan", lambda: line_matches(text, *tests))
    offset = first_line - 1
    for kind, block, lineno, nlines in _scan_matches(text, TESTS.scan) if found is None else found.matches:
        if kind == "rows":
            _rows(sc, block, lineno + offset, nlines)
        elif kind == "devices":
            _devices(sc, block, lineno + offset)
        else:
            _header_line(sc, lineno + offset, *_header(block))
    if sc.nccl_version is None:
        _versions(sc, text)
    # binary names: rows hold none when they hold no "_": then the other lines are searched alone
    others = None if found is None else found.others
    no_rows = others is not None and not any("_" in c.text for r in sc.pending for c in r.chunks)
    _binaries(sc, others if no_rows and others is not None else text)
    failures = _failures(text) if found is None else found.failures
    for n, line in failures:
        message, is_cause = failure_message(line)
        sc.failures.append((n + offset, message))
        if is_cause and sc.cause is None:
            sc.cause = (n + offset, message)
    if lines is None:
        lines = text.count("\n") if found is None else found.newlines
    _last_line(sc, text, first_line, lines)


def _scan_matches(text: str, scan: re.Pattern[str]) -> Iterator[Match]:
    """The scan's matches by Python's regex engine (any text): what line_matches (below) finds on ASCII text."""
    padded = "\n" + text  # every line, the first included, now follows a newline
    lineno, counted = 0, 0
    for m in scan.finditer(padded):
        start = m.start()
        lineno += padded.count("\n", counted, start + 1)
        counted = start + 1
        kind = m.lastgroup or "hash"
        block = m.group(kind)
        yield kind, block, lineno, block.count("\n") + 1


def _failures(text: str) -> list[tuple[int, str]]:
    """(line number in the chunk, line) where a test says it failed, as the Arrow scan finds them
    (searched for the word first: most logs have none).  Result rows too: a kernel fault cuts the
    row being printed with the error that says why."""
    found = []
    at = text.find("failure")
    while at >= 0:
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        line = text[start:end]
        if FAILURE.search(line):
            found.append((text.count("\n", 0, start) + 1, line))
        at = text.find("failure", end)
    return found


def _last_line(sc: Scan, text: str, first_line: int, lines: int) -> None:
    """The log's first and last lines that are not blank (for errors, and a row cut to one field
    is seen only on the last line); found from the ends, without a copy of the chunk."""
    end = len(text)
    while end and text[end - 1].isspace():
        end -= 1
    if not end:
        return
    if not sc.first_line[1]:
        at = 0
        while text[at].isspace():
            at += 1
        stop = text.find("\n", at)
        sc.first_line = (first_line + text.count("\n", 0, at), text[at : len(text) if stop < 0 else stop])
    start = text.rfind("\n", 0, end) + 1
    sc.last_line = (first_line + lines - text.count("\n", start), text[start:end])


# ---------------------------------------------------------------- blocks


def _split_by_tag(block: str, lineno: int, nlines: int) -> list[tuple[int, int, str, int]]:
    """(tag, first line, lines without prefix, their count) for each stretch of one launcher tag
    in a block of ``nlines`` lines."""
    # every form of prefix holds a ":": a first line without one has none (most blocks of rows)
    end = block.find("\n")
    first = PREFIX_RE.match(block) if block.find(":", 0, len(block) if end < 0 else end) >= 0 else None
    if first is None:
        return [(-1, lineno, block, nlines)]  # no prefix at all (rows never start with "[" or "N:")
    prefix = first.group(0)
    if block.count("\n" + prefix) == nlines - 1:  # one tag throughout: strip it in one go
        return [(strip_prefix(block)[1], lineno, block[len(prefix) :].replace("\n" + prefix, "\n"), nlines)]
    stretches: list[tuple[int, int, list[str]]] = []
    for i, raw in enumerate(block.split("\n")):
        line, tag = strip_prefix(raw)
        if stretches and stretches[-1][0] == tag:
            stretches[-1][2].append(line)
        else:
            stretches.append((tag, lineno + i, [line]))
    return [(tag, n, "\n".join(lines), len(lines)) for tag, n, lines in stretches]


def _rows(sc: Scan, block: str, lineno: int, nlines: int) -> None:
    for tag, first, text, count in _split_by_tag(block, lineno, nlines):
        run = sc.current.get(tag) or (sc.runs[-1] if sc.runs else None) or sc.new_run(tag, first)
        if not run.chunks:
            sc.pending.append(run)
        run.chunks.append(Chunk(text, first, count))
        run.nrows += count
        run.last_row = (first + count - 1, text[text.rfind("\n") + 1 :])
        sc.last_row_line = max(sc.last_row_line, first + count - 1)


def _devices(sc: Scan, block: str, lineno: int) -> None:
    for tag, offset, lines in _device_stretches(block):
        sc.run_for(tag, lineno + offset).device_lines.extend(lines)


@lru_cache(maxsize=1024)
def _device_stretches(block: str) -> tuple[tuple[int, int, tuple[str, ...]], ...]:
    """(tag, line offset, stripped lines) per stretch of a device block: runs on the same nodes
    print the same block, so each distinct one is cut once."""
    return tuple(
        (tag, first, tuple(line.strip() for line in text.split("\n")))
        for tag, first, text, _ in _split_by_tag(block, 0, block.count("\n") + 1)
    )


# ---------------------------------------------------------------- header lines


@lru_cache(maxsize=4096)
def _header(raw: str) -> tuple[str, int, LineRule | None, dict[str, Value]]:
    """A `#` line without its launcher prefix and blanks, its rank tag, kind and values.  Logs of
    many runs print the same header lines again and again (params, versions, out-of-bounds
    footers): each distinct line is read once (the values are copied out, never changed)."""
    line, tag = strip_prefix(raw)
    s = line.strip()
    rule = classify_header(s)
    return s, tag, rule, ({} if rule is None else rule.extract(s))


def _header_line(sc: Scan, lineno: int, s: str, tag: int, rule: LineRule | None, values: dict[str, Value]) -> None:
    if rule is None:
        _maybe_columns(sc, s, lineno, tag)
        return
    event = rule.event
    run = sc.current.get(tag)
    if event in _STARTERS and (run is None or run.starts_anew(event)):
        if event == "params" and run is not None and "nthreads" in run.info and not run.nrows:
            # a second header before the first run printed anything: concurrent processes
            sc.interleaved = True
        run = sc.new_run(tag, lineno)
    elif run is None:
        run = sc.run_for(tag, lineno)
    if event == "params":
        sc.param_lines.append((tag, s))
    run.info.update(values)
    if event in _FOOTERS:
        run.finished = True


_SCHEMAS: dict[tuple[str, ...], Schema | None] = {}
_NOT_COLUMNS = object()  # a `#` line without a "size" token
_LINE_SCHEMAS: dict[str, object] = {}  # line -> its schema, None or _NOT_COLUMNS


def _schema_cached(tokens: tuple[str, ...]) -> Schema | None:
    """A long log repeats the same few headers: build each schema once."""
    if tokens not in _SCHEMAS:
        if len(_SCHEMAS) > 256:
            _SCHEMAS.clear()
            _LINE_SCHEMAS.clear()  # (equal headers must keep sharing one Schema)
        _SCHEMAS[tokens] = schema_from_header(tokens)
    return _SCHEMAS[tokens]


def _line_schema(s: str) -> object:
    """The schema of a column header line, each distinct line split once."""
    found = _LINE_SCHEMAS.get(s, _LINE_SCHEMAS)
    if found is _LINE_SCHEMAS:
        tokens = s[1:].split()
        found = _schema_cached(tuple(tokens)) if "size" in tokens else _NOT_COLUMNS
        if len(_LINE_SCHEMAS) > 4096:
            _LINE_SCHEMAS.clear()
        _LINE_SCHEMAS[s] = found
    return found


def _maybe_columns(sc: Scan, s: str, lineno: int, tag: int) -> None:
    schema = _line_schema(s)
    if schema is _NOT_COLUMNS:
        return
    if not isinstance(schema, Schema):
        sc.warnings.append(f"line {lineno}: unrecognised column header ignored: {excerpt(s, 80)}")
        return
    run = sc.current.get(tag)
    # concurrent processes writing untagged lines: a second copy of the same header is not a new run
    same = sc.interleaved and run is not None and run.schema == schema
    if run is None or run.finished or (run.nrows and not same):
        run = sc.new_run(tag, lineno)
    run.schema = schema


def _versions(sc: Scan, text: str) -> None:
    """`NCCL version x` (first one)."""
    at = text.find("NCCL version")
    if at >= 0:
        version = NCCL_VERSION.search(text[max(at - 1, 0) : at + 80])
        if isinstance(version, str):
            sc.nccl_version = version


def _binaries(sc: Scan, text: str) -> None:
    """Binary names mentioned anywhere, e.g. in a command echo (a name lies within a line: the
    lines that can hold one are enough)."""
    at = text.find("_perf")
    while at >= 0 and len(sc.binaries) < 64:
        start = at
        while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_") and at - start < 64:
            start -= 1  # back to the start of the word holding "_perf"
        m = BINARY.match(text, start, at + 10)
        if m is not None:
            sc.binaries.append(m.group(1))
        at = text.find("_perf", at + 5)


# ---------------------------------------------------------------- fast path nccl-scan
# The same matches as the scan regex, found by Arrow kernels.  The scan regex (Python's engine)
# tries its alternatives at every line start: a run of result rows, a run of device lines, or one
# `#` line worth reading, each the first alternative whose line test passes, runs taken whole
# (greedy).  Here each line is tested for a row by RE2, and each distinct other line for the other
# kinds, with the same line tests (on ASCII text Python's `\d` and `\b` are RE2's), and the runs
# are cut by numpy: the same blocks, in the same order, at a fraction of the cost of a regex
# attempt per line in Python.  Text that is not ASCII gets None, and the caller runs the scan regex.

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
