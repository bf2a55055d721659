"""Training logs -> one frame row per optimizer step: what every step reader shares, and the NeMo 2 /
Megatron `... iteration N/M | label: value | ...` lines, read exactly and by the `pipe-steps` fast
path (NeMo 1's tqdm refreshes, both ways: training_tqdm).

The exact path reads line by line in Python: the reference.  The fast path (see speed.py) picks the
step lines by the marker regex in RE2 on Arrow's lines, then cuts heads, labels and values by one
Arrow CSV read per block (read_labelled, below), which parses the floats itself; the step-marker
fields are extracted by RE2.  The declarative field tables still decide names, units and
conversions.  Anything else (text that is not ASCII, lines that do not all share the first line's
labels in the same order, a value that does not convert) declines: None, and the exact parser reads
the log, so the two always agree.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from hpckit.results import speed
from hpckit.results.chunks import release
from hpckit.results.lines import PY_WHITESPACE, bool_mask, excerpt, re2_ascii, split_lines, strip_prefix, text_lines
from hpckit.results.model import NA_TOKENS, Field, ParseError, ParseResult, Value, extract, frame_from_records
from hpckit.results.training_fields import (
    LABELS,
    MEGATRON_LINE,
    MEGATRON_MEMORY,
    MEGATRON_MEMORY_LINE,
    MEGATRON_VALIDATION,
    MEGATRON_VALIDATION_LINE,
    NEMO2_LINE,
    STEP_MARKER,
    UNITS,
)

FRONT = ["step", "epoch", "timestamp", "loss", "step_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu"]


@dataclass
class Steps:
    """Step records keyed by step (a refreshed or repeated line replaces the earlier one)."""

    source: str
    kind: str
    records: dict[int, dict[str, Value]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    meta: dict[str, object] = field(default_factory=dict)
    partial: bool = False
    last_line: str = ""

    replaced: int = 0

    def add(self, step: int, rec: dict[str, Value]) -> None:
        old = self.records.get(step)
        # a tqdm redraw repeats a step with the same progress; a different sample count means the
        # step was logged again by another run (a restart, or logs pasted together): last one wins
        if old is not None and old.get("consumed_samples") != rec.get("consumed_samples"):
            self.replaced += 1
        self.records[step] = rec


class StepReader:
    """A training log fed a chunk at a time.  The fast path reads each chunk's step lines into a
    frame; when it declines on the first chunk the exact parser reads the log, and on a later one
    the front door reads the log again exactly (speed.Declined)."""

    path = ""  # the fast path's name in speed.FAST_PATHS

    def __init__(self, kind: str, source: str) -> None:
        self.kind = kind
        self.steps = Steps(source, kind)
        self.exact = speed.exact_mode()
        self.frames: list[pd.DataFrame] = []
        self.first: tuple[int, str] | None = None

    def feed(self, text: str, first_line: int, lines: int | None = None) -> None:
        self.first = self.first or _first_line(text, first_line)
        if not self.exact:
            opening = not self.frames
            least = MIN_LINES if opening else 0
            bulk = speed.attempt(self.path, lambda: self._fast(text, first_line, least))
            if bulk is not None:
                _same_columns(self.frames, bulk.frame)
                self._extras(bulk)
                self.frames.append(bulk.frame)
                return
            if not opening:
                raise speed.Declined("a later part of the log")
            self.exact = True
        self._exact(text, first_line)

    def finish(self) -> ParseResult:
        return _finish_frames(self.steps, self.frames, self.exact, self.first)

    def _fast(self, text: str, first_line: int, least: int) -> Bulk | None:
        raise NotImplementedError

    def _extras(self, bulk: Bulk) -> None:
        """What the fast path found besides step lines."""

    def _exact(self, text: str, first_line: int) -> None:
        raise NotImplementedError


def _same_columns(frames: list[pd.DataFrame], frame: pd.DataFrame) -> None:
    """A chunk's step lines must share the first chunk's labels, as the fast path asks of every
    line of one chunk (a last line cut short, a restart with other figures: the exact parser)."""
    first = next((f for f in frames if len(f)), None)
    if first is not None and len(frame) and list(frame.columns) != list(first.columns):
        raise speed.Declined("a part of the log with other figures")


def _finish_frames(steps: Steps, frames: list[pd.DataFrame], exact: bool, first: tuple[int, str] | None) -> ParseResult:
    """The result from the fast path's frames (one per chunk), or from the exact parser's steps."""
    kept = [f for f in frames if len(f)]  # (chunks of noise only)
    frames.clear()  # (each part held once: by ``kept``, until joined)
    if exact or not kept:
        return _result(steps, first)
    return _finish(steps, _dedupe(steps, _joined(kept)))


def _joined(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    frames.clear()
    release()  # (the chunks' frames back to the system: see chunks.release)
    return frame


def _first_line(text: str, first_line: int) -> tuple[int, str] | None:
    """The first line that is not blank, and its number (for the error of a log without steps)."""
    at = 0
    while at < len(text) and text[at].isspace():
        at += 1
    if at == len(text):
        return None
    stop = text.find("\n", at)
    return first_line + text.count("\n", 0, at), text[at : len(text) if stop < 0 else stop]


def put(steps: Steps, rec: dict[str, Value], label: str, value: str, lineno: int) -> None:
    f = LABELS.lookup(label)
    if f is None:
        number = _number(value)
        if number is not None and label:
            rec[snake(label)] = number  # an unknown figure: keep it under its own name
        return
    converted = f.convert(value)
    if converted is None:
        steps.warnings.append(f"line {lineno}: unreadable {f.name} ({label}: {value!r})")
        steps.partial = True
        return
    rec[f.name] = converted


def _result(steps: Steps, first: tuple[int, str] | None) -> ParseResult:
    if not steps.records:
        lineno, line = first or (1, "")
        raise ParseError(steps.source, lineno, excerpt(line), f"no {steps.kind} step lines found")
    records = [steps.records[k] for k in sorted(steps.records)]
    if steps.replaced:
        steps.warnings.append(
            f"{steps.replaced} step(s) logged again with different values (restarted run or "
            "concatenated logs?); kept the last of each"
        )
    _check_last(steps, records)
    return _finish(steps, frame_from_records(records, FRONT))


def _dedupe(steps: Steps, frame: pd.DataFrame) -> pd.DataFrame:
    """Bulk rows in file order -> one row per step, the last logged (as Steps.add does)."""
    step = frame["step"].to_numpy()
    if not (step[1:] > step[:-1]).all():  # (steps that only go up: nothing to drop or sort)
        frame = _last_of_each_step(steps, frame)
    front = [c for c in FRONT if c in frame.columns]
    return frame[[*front, *(c for c in frame.columns if c not in front)]].reset_index(drop=True)


def _last_of_each_step(steps: Steps, frame: pd.DataFrame) -> pd.DataFrame:
    if "consumed_samples" in frame.columns:
        samples = frame.groupby("step", sort=False)["consumed_samples"]
        again = frame["step"].duplicated() & (samples.shift() != frame["consumed_samples"])
        steps.replaced = int(again.sum())
    frame = frame.drop_duplicates("step", keep="last").sort_values("step", kind="stable")
    if steps.replaced:
        steps.warnings.append(
            f"{steps.replaced} step(s) logged again with different values (restarted run or "
            "concatenated logs?); kept the last of each"
        )
    return frame


def _finish(steps: Steps, frame: pd.DataFrame) -> ParseResult:
    frame = frame.drop(columns=["global_step"], errors="ignore")
    if "timestamp" in frame.columns:
        frame["timestamp"] = pd.to_datetime(frame["timestamp"], format="%Y-%m-%d %H:%M:%S", errors="coerce")
    _as_int(frame, ("step", "epoch", "batch", "total_steps", "line", "global_batch_size"))
    meta = dict(steps.meta)
    meta["steps"] = len(frame)
    meta["units"] = {k: v for k, v in UNITS.items() if k in frame.columns}
    return ParseResult(steps.kind, frame, meta, steps.partial, steps.warnings)


def _check_last(steps: Steps, records: list[dict[str, Value]]) -> None:
    """A last step line with fewer figures than the others was cut off: keep it, flag partial."""
    if len(records) < 2:
        return
    last = max(records, key=lambda r: int(r.get("line") or 0))
    widest = max(len(r) for r in records)
    if len(last) < widest:
        steps.partial = True
        steps.warnings.append(
            f"line {last.get('line')}: step {last.get('step')} has {len(last)} of {widest} fields (truncated line?)"
        )


def _as_int(frame: pd.DataFrame, names: tuple[str, ...]) -> None:
    for name in names:
        if name in frame.columns and frame[name].dtype != np.int64:  # (int64 already: as it is)
            frame[name] = frame[name].astype("Int64" if frame[name].isna().any() else "int64")


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


_SNAKE = re.compile(r"[^0-9a-zA-Z]+")


def snake(label: str) -> str:
    return _SNAKE.sub("_", label).strip("_").lower()


# ---------------------------------------------------------------- NeMo 2 / Megatron: the exact path


class PipeReader(StepReader):
    """NeMo 2 and Megatron: one `... iteration N/M | label: value | ...` line per logged step."""

    path = "pipe-steps"

    def __init__(self, kind: str, source: str) -> None:
        super().__init__(kind, source)
        self.marker = NEMO2_LINE if kind == "nemo2" else MEGATRON_LINE

    def _fast(self, text: str, first_line: int, least: int) -> Bulk | None:
        return bulk_pipe(text, self.marker, snake, self.kind == "megatron", first_line, least)

    def _extras(self, bulk: Bulk) -> None:
        for _, line in bulk.other_lines:
            _megatron_extra(self.steps, strip_prefix(line)[0])

    def _exact(self, text: str, first_line: int) -> None:
        for lineno, raw in enumerate(split_lines(text), first_line):
            if "iteration" not in raw:
                continue
            line, _ = strip_prefix(raw)
            if self.marker.search(line):
                _pipe_line(self.steps, line, lineno)
            elif self.kind == "megatron":
                _megatron_extra(self.steps, line)


def _pipe_line(steps: Steps, line: str, lineno: int) -> None:
    head, *segments = line.split("|")
    rec = extract(STEP_MARKER, head)
    step = rec.get("step")
    if not isinstance(step, int):
        return
    for seg in segments:
        label, sep, value = seg.partition(":")
        if sep:
            put(steps, rec, label.strip(), value.strip(), lineno)
    rec["line"] = lineno
    steps.last_line = line
    steps.add(step, rec)


def _megatron_extra(steps: Steps, line: str) -> None:
    if MEGATRON_MEMORY_LINE.search(line):
        steps.meta["memory_mb"] = extract(MEGATRON_MEMORY, line)
    elif MEGATRON_VALIDATION_LINE.search(line):
        validation = steps.meta.setdefault("validation", [])
        if isinstance(validation, list):
            validation.append(extract(MEGATRON_VALIDATION, line))


# ---------------------------------------------------------------- NeMo 2 / Megatron: fast path pipe-steps


MIN_LINES = 64  # below this the line-by-line parser is as fast


Snake = Callable[[str], str]


@dataclass
class Bulk:
    frame: pd.DataFrame  # one row per step line, in file order (duplicates not yet removed)
    other_lines: list[tuple[int, str]]  # candidate lines that were not step lines (for extras)


class NoBulk(Exception):
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
        return empty_bulk(other, first_line)
    try:
        cols = _columns_csv(step_lines, snake)
    except (NoBulk, pa.ArrowException, ValueError, OverflowError):
        return None
    if cols is None:
        return None
    cols["line"] = linenos + (first_line - 1)
    other = [(n + first_line - 1, line) for n, line in other]
    return Bulk(pd.DataFrame(cols, copy=False), other)  # (no copy into blocks: the dedupe copies)


StepLines = tuple[pa.Array, np.ndarray, list[tuple[int, str]]]  # lines, their numbers, the others


def empty_bulk(other: list[tuple[int, str]], first_line: int) -> Bulk:
    """A chunk without step lines (noise between two stretches of steps)."""
    return Bulk(pd.DataFrame({"step": np.zeros(0, dtype=np.int64)}), [(n + first_line - 1, x) for n, x in other])


def _step_lines_arrow(text: str, marker: re.Pattern[str], others: bool = True) -> StepLines | None:
    """Step lines picked by Arrow kernels (split, substring and RE2 tests): no Python per line.

    Only for ASCII text and a marker that RE2 reads as Python does (see lines.re2_ascii)."""
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
    """NeMo 2 / Megatron columns read with Arrow's CSV reader (read_labelled, below), or None."""
    fast = read_labelled(step_lines, "|", ":", 1, read_as_float)
    if fast is None:
        return None
    cols = _head_columns(fast.heads[0])
    cols.update(value_columns(fast, snake))
    return cols


def _head_columns(heads: pa.Array) -> dict[str, np.ndarray]:
    """Step-marker fields (step, epoch, total, timestamp) of every line's head, by RE2 extraction."""
    cols: dict[str, np.ndarray] = {}
    if not pc.all(pc.string_is_ascii(heads)).as_py():
        raise NoBulk("non-ASCII heads")  # RE2's \d and \s are ASCII-only, Python's are not
    first = str(heads[0].as_py())
    for f in STEP_MARKER:
        found = _extracted(f, heads, first)
        if found is not None:
            cols[f.name] = found
    if "step" not in cols:
        raise NoBulk("no step")
    return cols


def _extracted(f: Field, heads: pa.Array, first: str) -> np.ndarray | None:
    """One step-marker field of every head by RE2 extraction; None when in no head."""
    pattern = re2_ascii(f.regex)
    if pattern is None:
        raise NoBulk(f"{f.name}: no RE2 spelling")
    if f.pattern.search(first) is None and not pc.any(pc.match_substring_regex(heads, pattern)).as_py():
        return None  # in no head (the test alone is cheaper than an extraction)
    found = pc.struct_field(pc.extract_regex(heads, pattern.replace("(", "(?P<v>", 1)), [0])
    nulls = found.null_count
    if nulls == len(heads):
        return None
    if nulls:
        raise NoBulk(f"{f.name} on some lines only")
    values: np.ndarray = found.to_numpy(zero_copy_only=False) if f.kind == "str" else ints(found)
    return values


# ---------------------------------------------------------------- figures of labelled pieces (both fast paths)


def read_as_float(label: str) -> bool:
    """Whether a label's values are read as float64 by the CSV reader: those of a float field or
    an unknown label (an int is read exactly from its digits, `suffixed` and `hms` are text)."""
    f = LABELS.lookup(label)
    return f is None or f.kind == "float"


def value_columns(labelled: Labelled, snake: Snake) -> dict[str, np.ndarray]:
    cols: dict[str, np.ndarray] = {}
    for label, values in labelled.values:
        if values.type == pa.float64():
            cols.update(_column(label, values, snake, values.to_numpy()))
        else:
            cols.update(_column(label, _strip(values), snake))
    return cols


def _strip(values: pa.Array) -> pa.Array:
    return pc.utf8_trim(values, characters=PY_WHITESPACE)


def ints(values: pa.Array) -> np.ndarray:
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
            raise NoBulk(label)
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
                ints(values)
                if pc.all(pc.match_substring_regex(values, r"^-?\d+$")).as_py()
                else (numbers.astype(np.int64))
            )
        raise NoBulk(f.name)
    if f.kind in ("suffixed", "hms"):  # "1.258B", "0:00:00": one by one, few columns do this
        converted = [f.convert(str(v)) for v in values.to_pylist()]
        if any(v is None for v in converted):
            raise NoBulk(f.name)
        return np.asarray(converted, dtype=np.float64)
    raise NoBulk(f.name)  # text where a number belongs: the exact parser says which line


# ---------------------------------------------------------------- labelled pieces read by Arrow's CSV reader
# Log lines cut into pieces by Arrow's CSV reader (threaded C++), with their `label<sep>value`
# pieces cut at the separator too, so that the reader itself parses the numbers.
#
# The lines are cut on a delimiter (`|` for NeMo 2 step lines, `,` for tqdm postfixes), after
# read_labelled first writes the delimiter after every ``sep`` of the text,
# so that `h | lr: 1e-4 | loss: 2.5` reads as `h`, ` lr:`, ` 1e-4 `, ` loss:`, ` 2.5`.  That is the
# line's own `label<sep>value` cut, exactly what `piece.partition(sep)` gives, when every line has
# the first line's count of fields, each label column holds the first line's `label<sep>` on every
# line and ``sep`` occurs nowhere else (its count in the text is one per label and line): each
# line then has its `sep`s at the ends of its label fields only, so the delimiters that were
# written are the ones right after them, and the line's own pieces are the fields put back
# together there (a head before the labelled pieces may hold ``sep`` too, the same number of times
# on every line: its pieces are joined back).  The reader converts the value columns to float64 as it cuts them: Arrow's
# cast (correctly rounded like Python's float) after trimming spaces and tabs, which str.strip
# removes too; where it cannot read a value the columns are read as strings instead.


def _read_csv(body: pa.Buffer, delimiter: str, names: list[str], floats: dict[str, bool]) -> pa.Table | None:
    """Read ``body`` into the named columns: float64 where ``floats`` says so (only the columns it
    names, when it names any), large strings elsewhere; None when a line has another count of
    the delimiter or a float column holds what Arrow does not read as a number."""
    wanted = list(floats) or names
    types = {n: pa.float64() if floats.get(n) else pa.large_string() for n in wanted}
    try:
        return pacsv.read_csv(
            pa.BufferReader(body),
            read_options=pacsv.ReadOptions(column_names=names),
            parse_options=pacsv.ParseOptions(delimiter=delimiter, quote_char=False, ignore_empty_lines=False),
            convert_options=pacsv.ConvertOptions(
                column_types=types,
                include_columns=wanted,
                null_values=[],  # "N/A", "NULL" ... are not numbers to Python either: no nulls at all
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except pa.ArrowInvalid:
        return None


@dataclass
class Labelled:
    """The head columns (before ``start``) as strings, and (label, values) per labelled piece,
    the label stripped, the values float64 or raw strings."""

    heads: list[pa.ChunkedArray]
    values: list[tuple[str, pa.ChunkedArray]]


def read_labelled(
    lines: pa.Array, delimiter: str, sep: str, start: int, floats: Callable[[str], bool]
) -> Labelled | None:
    """The lines' head columns and `label<sep>value` pieces in one read (the comment above _read_csv), values
    float64 where ``floats(label)`` says so; None when the lines are not all of the first line's
    shape (the same count of ``sep`` in every piece, the same labels)."""
    first = str(lines[0].as_py())
    if first.startswith("\ufeff") or sep == delimiter:
        return None
    pieces = first.split(delimiter)
    labels = [p.partition(sep)[0] if sep in p else None for p in pieces[start:]]
    if not any(label is not None for label in labels):
        return None
    # a head or a value may hold the separator too (a Megatron timestamp, an "eta: 0:00:00"):
    # the fields it cuts them into are put back together after the read
    seps = [p.count(sep) for p in pieces]
    names = [f"h{i}_{m}" for i in range(start) for m in range(seps[i] + 1)]
    for j, label in enumerate(labels):
        names += [f"u{j}_0"] if label is None else [f"l{j}", *(f"v{j}_{m}" for m in range(seps[start + j]))]
    as_float = {f"v{j}_0": floats(label.strip()) and seps[start + j] == 1 for j, label in enumerate(labels) if label}
    wanted = [n for n in names if n[0] != "u"]
    cut = _Cut(sep, delimiter, sum(seps), names)
    table = cut.read_all(lines, {n: as_float.get(n, False) for n in wanted})
    if table is None and not cut.misplaced and any(as_float.values()):
        table = cut.read_all(lines, dict.fromkeys(wanted, False))  # a value that is no float
    if table is None or table.num_rows != len(lines):
        return None
    for j, label in enumerate(labels):
        if label is not None and not pc.all(pc.equal(table.column(f"l{j}"), label + sep)).as_py():
            return None
    values = [
        (label.strip(), _joined_fields([table.column(f"v{j}_{m}") for m in range(seps[start + j])]))
        for j, label in enumerate(labels)
        if label is not None
    ]
    heads = [_joined_fields([table.column(f"h{i}_{m}") for m in range(seps[i] + 1)]) for i in range(start)]
    return Labelled(heads, values)


def _joined_fields(parts: list[pa.ChunkedArray]) -> pa.ChunkedArray:
    """Fields that were one piece of the line before the read cut it at its separators."""
    if len(parts) == 1:
        return parts[0]
    joined: pa.ChunkedArray = pc.binary_join_element_wise(*parts, pa.scalar("", pa.large_string()))
    return joined


# Lines per text handed to the reader: a few MB, which Arrow's pool keeps between calls, where a
# text of a whole long log is a fresh allocation (page faults) every time.
BLOCK_LINES = 32768


@dataclass
class _Cut:
    """How the lines are cut: the delimiter written after every ``sep``, then read, block by block
    (each block's text is freed before the next is made, so that the pool reuses its pages)."""

    sep: str
    delimiter: str
    labels: int  # seps per line
    names: list[str]
    misplaced: bool = False  # a sep elsewhere than right after a label: no read can do

    def read_all(self, lines: pa.Array, floats: dict[str, bool]) -> pa.Table | None:
        tables = []
        for at in range(0, len(lines), BLOCK_LINES):
            body = self._body(lines.slice(at, BLOCK_LINES))
            table = None if body is None else _read_csv(body, self.delimiter, self.names, floats)
            if table is None:
                return None
            tables.append(table)
        return pa.concat_tables(tables)

    def _body(self, lines: pa.Array) -> pa.Buffer | None:
        """The lines as one text, the delimiter written after every sep; None unless that makes
        exactly one per label of each line (the comment above _read_csv)."""
        rows = pa.LargeListArray.from_arrays(pa.array([0, len(lines)], type=pa.int64()), lines)
        text = pc.binary_join(rows, pa.scalar("\n", pa.large_string()))  # one string
        body = pc.replace_substring(text, self.sep, self.sep + self.delimiter)
        # each sep grew by the delimiter: the growth counts them (Arrow's own count is a slow search)
        grown = pc.binary_length(body)[0].as_py() - pc.binary_length(text)[0].as_py()
        if grown != len(lines) * self.labels * len(self.delimiter):
            self.misplaced = True  # a sep in a value or a head, or twice in a piece: fields would shift
            return None
        buffer: pa.Buffer = body[0].as_buffer()
        return buffer
