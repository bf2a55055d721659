"""The one seam between the exact parsers and their fast paths.

Every parser has an exact path: plain Python, line by line (or one regex per line), the reference
for what a log means.  A long log is read much faster by Arrow kernels, so a family has a fast
path or two (nccl-tests: its scan and its row reader; the training logs: one each), each in the
file of its exact twin (nccl_scan, nccl_table, training, training_tqdm), which must give the same
frame, meta and warnings, and which *decline* (return None or raise Declined) on
anything they cannot read exactly; the exact path then reads that input.

Fast paths run only through ``attempt`` below, which

- skips them in exact mode (``exact()``, ``parse_text(..., exact=True)``, `results parse --exact`,
  or HPCKIT_RESULTS_EXACT=1 in the environment): the way to check a surprising parse, and the
  reference side of the tests that compare both modes;
- counts each time a fast path answered, so that a test fails when a fast path silently stops
  running (deleted, or declining everything after a change).

FAST_PATHS below lists them, each kept because it is what holds parse throughput at >= 0.5x
pandas.read_csv on long logs (benchmarks/bench_parse.py, RESULTS.md); at most two per family.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

FAST_PATHS: dict[str, str] = {
    "nccl-scan": "nccl-tests: the lines worth reading found by RE2 on Arrow's lines (ASCII text)",
    "nccl-rows": "nccl-tests: a block of result rows cut and cast by Arrow kernels",
    "pipe-steps": "NeMo 2 / Megatron: step lines picked by RE2, cut by one Arrow CSV read per block",
    "tqdm-steps": "NeMo 1: tqdm refreshes cut by Arrow, postfixes read by one Arrow CSV read per block",
}

EXACT_ENV = "HPCKIT_RESULTS_EXACT"
_EXACT: ContextVar[bool] = ContextVar("hpckit_results_exact", default=False)
_RAN: Counter[str] = Counter()
_FORCED: ContextVar[bool] = ContextVar("hpckit_results_forced", default=False)


class Declined(Exception):
    """A fast path met input it cannot read exactly: the exact path reads it instead."""


def exact_mode() -> bool:
    """Whether only the exact paths run now."""
    return _EXACT.get() or os.environ.get(EXACT_ENV, "") not in ("", "0")


@contextmanager
def exact(on: bool = True) -> Iterator[None]:
    """Only the exact paths while inside (``on``=False: fast paths allowed again)."""
    token = _EXACT.set(on)
    try:
        yield
    finally:
        _EXACT.reset(token)


def attempt(name: str, fast: Callable[[], T | None]) -> T | None:
    """The fast path's answer, or None: in exact mode, or when it declined."""
    if name not in FAST_PATHS:
        raise KeyError(f"unknown fast path {name!r}: declare it in FAST_PATHS")
    if exact_mode():
        return None
    try:
        answer = fast()
    except Declined:
        return None
    if answer is not None:
        _RAN[name] += 1
    return answer


def worth(items: int, threshold: int) -> bool:
    """Whether an input of ``items`` lines or rows is long enough to pay for a fast path's fixed
    cost (below the threshold the exact path is as fast); always, under ``forced()``."""
    return items >= threshold or _FORCED.get()


@contextmanager
def forced() -> Iterator[None]:
    """Fast paths run on inputs of any length while inside (the tests' small real samples)."""
    token = _FORCED.set(True)
    try:
        yield
    finally:
        _FORCED.reset(token)


@contextmanager
def counting() -> Iterator[Counter[str]]:
    """The fast paths that answered while inside, by name (for tests)."""
    before = Counter(_RAN)
    seen: Counter[str] = Counter()
    try:
        yield seen
    finally:
        seen.update(_RAN - before)
