"""Training logs -> one frame row per optimizer step (NeMo 1 tqdm, NeMo 2, Megatron-LM family)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from hpckit.results.lines import excerpt, split_lines, strip_prefix
from hpckit.results.model import ParseError, ParseResult, Value, extract, frame_from_records
from hpckit.results.training_bulk import bulk_pipe, bulk_tqdm
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


def parse_pipe_log(text: str, source: str, kind: str) -> ParseResult:
    """NeMo 2 and Megatron: one `... iteration N/M | label: value | ...` line per logged step."""
    marker = NEMO2_LINE if kind == "nemo2" else MEGATRON_LINE
    steps = Steps(source, kind)
    bulk = bulk_pipe(text, marker, _snake, others=kind == "megatron")
    if bulk is not None:
        if kind == "megatron":
            for _, line in bulk.other_lines:
                _megatron_extra(steps, strip_prefix(line)[0])
        return _finish(steps, _dedupe(steps, bulk.frame))
    for lineno, raw in enumerate(split_lines(text), 1):
        if "iteration" not in raw:
            continue
        line, _ = strip_prefix(raw)
        if marker.search(line):
            _pipe_line(steps, line, lineno)
        elif kind == "megatron":
            _megatron_extra(steps, line)
    return _result(steps, text)


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


def parse_tqdm_log(text: str, source: str) -> ParseResult:
    """NeMo 1: tqdm refreshes of `Epoch E: ... n/N [t<eta, k=v, ...]`, one row per global step."""
    steps = Steps(source, "nemo1")
    bulk = bulk_tqdm(text, REDRAW, _snake)
    if bulk is not None:
        return _finish(steps, _dedupe(steps, bulk.frame))
    for lineno, raw in enumerate(split_lines(text), 1):
        if "Epoch" not in raw:
            continue
        for segment in REDRAW.split(raw):
            m = TQDM.search(segment)
            if m is not None:
                _tqdm_segment(steps, m, lineno)
    return _result(steps, text)


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


def _result(steps: Steps, text: str) -> ParseResult:
    if not steps.records:
        lines = split_lines(text)
        first = next((i for i, ln in enumerate(lines, 1) if ln.strip()), 1)
        raise ParseError(
            steps.source,
            first,
            excerpt(lines[first - 1]) if lines else "",
            f"no {steps.kind} step lines found",
        )
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


def iter_step_lines(text: str) -> Iterator[str]:
    """Lines that carry a step (for detection)."""
    for raw in split_lines(text):
        line, _ = strip_prefix(raw)
        if NEMO2_LINE.search(line) or MEGATRON_LINE.search(line) or TQDM.search(line):
            yield line
