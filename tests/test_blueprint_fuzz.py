"""Thousands of generated documents: only located BlueprintErrors come out, never a traceback or a hang."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpckit.blueprint import Blueprint, BlueprintError, parse_blueprint

REPO = Path(__file__).resolve().parent.parent
SEEDS = [(REPO / "blueprints" / name).read_text() for name in ("lab.yaml", "h100-ib.yaml")]
LOCATED = re.compile(r"^fuzz\.yaml:\d+:\d+: \S.*: .+")


def fast(examples: int) -> settings:
    return settings(max_examples=examples, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20))
documents = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=30,
)


def check(text: str) -> None:
    try:
        result = parse_blueprint(text, "fuzz.yaml")
    except BlueprintError as exc:
        assert exc.problems, "a BlueprintError must carry at least one problem"
        for line in str(exc).splitlines():
            assert LOCATED.match(line), line
    else:
        assert isinstance(result, Blueprint)


@fast(800)
@given(st.text(max_size=300))
def test_random_text(text: str) -> None:
    check(text)


@pytest.mark.slow  # 800 documents: ~6 s
@fast(800)
@given(documents)
def test_random_yaml_documents(doc: object) -> None:
    check(yaml.safe_dump(doc))


@st.composite
def mutated(draw: st.DrawFn) -> str:
    lines = draw(st.sampled_from(SEEDS)).splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["drop", "dup", "junk", "flip", "value", "indent"]))
        line = lines[i]
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, line)
        elif op == "junk":
            lines.insert(i, draw(st.text(max_size=30)) + "\n")
        elif op == "flip" and line.strip():
            j = draw(st.integers(0, len(line) - 1))
            lines[i] = line[:j] + draw(st.characters()) + line[j + 1 :]
        elif op == "value" and ":" in line:
            key = line.split(":", 1)[0]
            lines[i] = (
                f"{key}: {draw(st.sampled_from(['', '[]', '{}', '-1', 'x', '10.0.0.[1-', '$(vars.nope)', '*a']))}\n"
            )
        elif op == "indent":
            lines[i] = "  " + line
        if not lines:
            lines = ["{}\n"]
    return "".join(lines)


@pytest.mark.slow  # 1500 mutants: ~6 s
@fast(1500)
@given(mutated())
def test_mutated_blueprints(text: str) -> None:
    check(text)


def test_alias_bomb_is_refused_quickly() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for level in range(1, 9):
        bomb += f"{chr(97 + level)}: &{chr(97 + level)} [" + ", ".join([f"*{chr(96 + level)}"] * 10) + "]\n"
    check(bomb)


@pytest.mark.parametrize("key", ["0\n", "name\n", "a b", "x\r\ny"])
def test_a_key_with_a_line_break_stays_on_its_problem_line(key: str) -> None:
    """Found by the fuzzer: a key ending in a newline passed `^...$` as a plain name and split its problem in two."""
    check(yaml.safe_dump({key: None}))
