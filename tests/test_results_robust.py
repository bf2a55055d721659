"""Mutated real samples: only a ParseResult or a ParseError may come out, and quickly."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpckit.results import ParseError, ParseResult, detect_kind, parse_text

DATA = Path(__file__).parent / "data" / "results"
SAMPLES = sorted(p for p in DATA.iterdir() if p.suffix in (".txt", ".json"))
TEXTS = {p.name: p.read_text() for p in SAMPLES}
# characters that mean something to the parsers (digits, separators, markers) and anything else
SPECIAL = st.sampled_from([*'0123456789 .e+-#|:=[]\r\t\x00{}",█', "N/A", "nan", "|#", "9" * 25])
CHAR = st.one_of(SPECIAL, st.characters(codec="utf-8", exclude_categories=("Cs",)))
JUNK = st.lists(CHAR, max_size=30).map("".join)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, str, str]:
    name = draw(st.sampled_from(sorted(TEXTS)))
    lines = TEXTS[name].split("\n")
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["truncate", "drop", "duplicate", "flip", "junk", "swap"]))
        i = draw(st.integers(0, max(len(lines) - 1, 0)))
        if op == "truncate":
            text = "\n".join(lines)
            lines = text[: draw(st.integers(0, len(text)))].split("\n")
        elif op == "drop" and lines:
            del lines[i]
        elif op == "duplicate" and lines:
            lines.insert(i, lines[i])
        elif op == "swap" and len(lines) > 1:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "flip" and lines and lines[i]:
            j = draw(st.integers(0, len(lines[i]) - 1))
            lines[i] = lines[i][:j] + draw(CHAR) + lines[i][j + 1 :]
        else:
            lines.insert(i, draw(JUNK))
    return name, detect_kind(TEXTS[name]), "\n".join(lines)


def _check(kind: str, text: str) -> None:
    try:
        result = parse_text(text, kind, source="mutant")
    except ParseError as exc:
        # the front door turns parser crashes into ParseError too; those must not happen
        assert exc.__cause__ is None, f"parser crashed: {exc}"
        assert str(exc).startswith("mutant:")
        return
    assert isinstance(result, ParseResult)
    assert result.kind.startswith(kind.split("-")[0])


@settings(max_examples=250, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutants_of_real_samples_parse_or_fail_cleanly(case: tuple[str, str, str]) -> None:
    _, kind, text = case
    _check(kind, text)


@settings(max_examples=80, deadline=2000)
@given(mutated())
def test_mutants_under_auto_detection(case: tuple[str, str, str]) -> None:
    _, _, text = case
    try:
        parse_text(text, "auto", source="mutant")
    except ParseError as exc:
        assert exc.__cause__ is None, f"parser crashed: {exc}"


@settings(max_examples=60, deadline=2000)
@given(st.sampled_from(sorted(TEXTS)), st.binary(max_size=200))
def test_binary_garbage_appended(name: str, garbage: bytes) -> None:
    text = TEXTS[name] + garbage.decode("utf-8", errors="replace")
    _check(detect_kind(TEXTS[name]), text)
