"""Training logs -> one frame row per optimizer step (NeMo 1 tqdm, NeMo 2, Megatron-LM family)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from hpckit.results import speed
from hpckit.results.lines import excerpt, split_lines, strip_prefix
from hpckit.results.memory import release
from hpckit.results.model import ParseError, ParseResult, Value, extract, frame_from_records
from hpckit.results.training_bulk import MIN_LINES, Bulk, bulk_pipe, bulk_tqdm
from hpckit.results.training_fields import (
    LABELS,
    MEGATRON_LINE,
    MEGATRON_MEMORY,
    MEGATRON_MEMORY_LINE,
    MEGATRON_VALIDATION,
    MEGATRON_VALIDATION_LINE,
    NEMO2_LINE,
    REDRAW,
    STEP_MARKER,
    TQDM,
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


# ---------------------------------------------------------------- "label: value | ..." logs


class _StepReader:
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


class PipeReader(_StepReader):
    """NeMo 2 and Megatron: one `... iteration N/M | label: value | ...` line per logged step."""

    path = "pipe-steps"

    def __init__(self, kind: str, source: str) -> None:
        super().__init__(kind, source)
        self.marker = NEMO2_LINE if kind == "nemo2" else MEGATRON_LINE

    def _fast(self, text: str, first_line: int, least: int) -> Bulk | None:
        return bulk_pipe(text, self.marker, _snake, self.kind == "megatron", first_line, least)

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
    release()  # (the chunks' frames back to the system: see memory.py)
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


def _pipe_line(steps: Steps, line: str, lineno: int) -> None:
    head, *segments = line.split("|")
    rec = extract(STEP_MARKER, head)
    step = rec.get("step")
    if not isinstance(step, int):
        return
    for seg in segments:
        label, sep, value = seg.partition(":")
        if sep:
            _put(steps, rec, label.strip(), value.strip(), lineno)
    rec["line"] = lineno
    steps.last_line = line
    steps.add(step, rec)


def _put(steps: Steps, rec: dict[str, Value], label: str, value: str, lineno: int) -> None:
    f = LABELS.lookup(label)
    if f is None:
        number = _number(value)
        if number is not None and label:
            rec[_snake(label)] = number  # an unknown figure: keep it under its own name
        return
    converted = f.convert(value)
    if converted is None:
        steps.warnings.append(f"line {lineno}: unreadable {f.name} ({label}: {value!r})")
        steps.partial = True
        return
    rec[f.name] = converted


def _megatron_extra(steps: Steps, line: str) -> None:
    if MEGATRON_MEMORY_LINE.search(line):
        steps.meta["memory_mb"] = extract(MEGATRON_MEMORY, line)
    elif MEGATRON_VALIDATION_LINE.search(line):
        validation = steps.meta.setdefault("validation", [])
        if isinstance(validation, list):
            validation.append(extract(MEGATRON_VALIDATION, line))


# ---------------------------------------------------------------- NeMo 1 tqdm


class TqdmReader(_StepReader):
    """NeMo 1: tqdm refreshes of `Epoch E: ... n/N [t<eta, k=v, ...]`, one row per global step."""

    path = "tqdm-steps"

    def _fast(self, text: str, first_line: int, least: int) -> Bulk | None:
        return bulk_tqdm(text, REDRAW, _snake, first_line, least)

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
            _put(steps, rec, label.strip(), value.strip(), lineno)
    global_step = rec.get("global_step")
    # Older postfixes have no global_step: the progress count is the step.
    finite = isinstance(global_step, float) and math.isfinite(global_step)
    step = int(global_step) if finite and isinstance(global_step, float) else int(m.group("n"))
    rec["step"] = step
    rec["line"] = lineno
    steps.last_line = m.group(0)
    steps.add(step, rec)


# ---------------------------------------------------------------- assembly


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


def _snake(label: str) -> str:
    return _SNAKE.sub("_", label).strip("_").lower()
