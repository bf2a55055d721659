"""Helpers for the results tests: read a log in both modes (fast paths and exact) and compare."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd

from hpckit.results import ParseError, ParseResult, parse_text, speed

DATA = Path(__file__).parent / "data" / "results"


def outcome(text: str, kind: str, exact: bool) -> ParseResult | tuple[object, ...]:
    """The result, or the error's arguments (a parse error is an outcome too)."""
    try:
        return parse_text(text, kind, source="log", exact=exact)
    except ParseError as exc:
        return exc.args


def fast_and_exact(text: str, kind: str) -> tuple[ParseResult | tuple[object, ...], Counter[str]]:
    """Read ``text`` with the fast paths (on inputs of any length) and exactly, assert that both
    say the same, and return the outcome and the fast paths that answered."""
    with speed.forced(), speed.counting() as ran:
        fast = outcome(text, kind, exact=False)
    with speed.counting() as ran_exact:
        exact = outcome(text, kind, exact=True)
    assert not ran_exact, f"a fast path ran in exact mode: {ran_exact}"
    same(fast, exact)
    return fast, ran


def same(a: ParseResult | tuple[object, ...], b: ParseResult | tuple[object, ...]) -> None:
    if isinstance(a, tuple) or isinstance(b, tuple):
        assert a == b
        return
    pd.testing.assert_frame_equal(a.frame, b.frame)
    assert (a.kind, a.meta, a.warnings, a.partial, a.failed) == (b.kind, b.meta, b.warnings, b.partial, b.failed)
