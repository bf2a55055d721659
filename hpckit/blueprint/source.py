"""YAML -> plain Python data plus the line and column of every key and value.

libyaml composes the node tree (fast, with marks); we construct the data ourselves so that each value
keeps its position. Duplicate keys, recursive aliases and alias bombs are reported as problems
instead of being silently accepted or hanging.
A blueprint is UTF-8 text: `decode` reports a byte that is not at its line and column.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from hpckit.blueprint.errors import BlueprintError, Path_, Problem, format_path

# Alias expansion can grow a tiny document exponentially; a blueprint of 10,000 nodes has far fewer values.
MAX_VALUES = 500_000
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Mark:
    line: int  # 1-based
    col: int  # 1-based


@dataclass
class Located:
    """A YAML document as plain data with the position of every value (and of every mapping key)."""

    file: str
    data: Any
    values: dict[Path_, Mark] = field(default_factory=dict)
    keys: dict[Path_, Mark] = field(default_factory=dict)
    # Problems that leave the data usable (a duplicate key keeps its last value): reported with the rest.
    problems: list[Problem] = field(default_factory=list)

    def mark(self, path: Path_, *, key: bool = False) -> Mark:
        """Position of `path`, falling back to its nearest located ancestor."""
        table = (self.keys, self.values) if key else (self.values, self.keys)
        for depth in range(len(path), -1, -1):
            for marks in table:
                found = marks.get(path[:depth])
                if found is not None:
                    return found
        return Mark(1, 1)

    def problem(self, path: Path_, message: str, *, key: bool = False) -> Problem:
        m = self.mark(path, key=key)
        return Problem(self.file, m.line, m.col, format_path(path), message)


def _mark_of(node: yaml.Node) -> Mark:
    return Mark(node.start_mark.line + 1, node.start_mark.column + 1)


class _Builder:
    def __init__(self, file: str) -> None:
        self.out = Located(file=file, data=None)
        self.problems: list[Problem] = []
        self.count = 0
        self.constructor = yaml.SafeLoader("")  # only its scalar constructors are used

    def build(self, node: yaml.Node, path: Path_, active: frozenset[int]) -> Any:
        self.count += 1
        if self.count > MAX_VALUES:
            raise _TooBig
        self.out.values[path] = _mark_of(node)
        if id(node) in active:
            self.problems.append(self.out.problem(path, "recursive alias"))
            return None
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path, active | {id(node)})
        if isinstance(node, yaml.SequenceNode):
            inner = active | {id(node)}
            return [self.build(item, (*path, i), inner) for i, item in enumerate(node.value)]
        return self._scalar(node, path)

    def _scalar(self, node: yaml.Node, path: Path_) -> Any:
        try:
            return self.constructor.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError) as exc:
            self.problems.append(self.out.problem(path, f"bad value: {exc}"))
            return None

    def _mapping(self, node: yaml.MappingNode, path: Path_, active: frozenset[int]) -> dict[Any, Any]:
        try:
            self.constructor.flatten_mapping(node)  # resolves `<<` merge keys
        except yaml.YAMLError as exc:
            self.problems.append(self.out.problem(path, f"bad merge key: {exc}"))
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self._key(key_node, path)
            if key is None:
                continue
            child = (*path, key)
            if key in result:
                first = self.out.keys[child]
                self.out.keys[child] = _mark_of(key_node)
                self.problems.append(self.out.problem(child, f"duplicate key (first at line {first.line})", key=True))
            self.out.keys[child] = _mark_of(key_node)
            result[key] = self.build(value_node, child, active)
        return result

    def _key(self, node: yaml.Node, path: Path_) -> str | int | None:
        if not isinstance(node, yaml.ScalarNode):
            self.problems.append(self.out.problem(path, "mapping keys must be plain names"))
            return None
        key = self._scalar(node, path)
        if isinstance(key, bool) or not isinstance(key, str | int):
            return str(node.value)
        return key


class _TooBig(Exception):
    pass


def decode(data: bytes, file: str) -> str:
    """UTF-8 text of a file, or BlueprintError at the line and column of the first byte that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = data.rfind(b"\n", 0, exc.start) + 1
        line = data.count(b"\n", 0, exc.start) + 1
        col = len(data[start : exc.start].decode("utf-8", errors="replace")) + 1
        bad = data[exc.start : exc.end].hex(" ")
        message = f"byte {bad} is not UTF-8 ({exc.reason}); a blueprint is UTF-8 text"
        raise BlueprintError([Problem(file, line, col, "(document)", message)]) from None


def _line_col(text: str, position: int) -> tuple[int, int]:
    before = text[:position]
    return before.count("\n") + 1, position - (before.rfind("\n") + 1) + 1


def load_located(text: str, file: str) -> Located:
    """Parse one YAML document; raise BlueprintError (located) when it cannot be read as YAML at all.

    Problems that still leave a document (duplicate keys, recursive aliases, bad scalars) are kept in
    `Located.problems`, so that the caller reports them beside the rest of what is wrong."""
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        reason = exc.problem or exc.context or "invalid YAML"
        raise BlueprintError([Problem(file, line, col, "(document)", f"YAML syntax: {reason}")]) from None
    except yaml.reader.ReaderError as exc:
        line, col = _line_col(text, exc.position)
        raise BlueprintError(
            [Problem(file, line, col, "(document)", f"character {exc.character!r} is not allowed: {exc.reason}")]
        ) from None
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        raise BlueprintError([Problem(file, 1, 1, "(document)", f"YAML syntax: {exc}")]) from None
    builder = _Builder(file)
    if node is None:
        return builder.out
    try:
        builder.out.data = builder.build(node, (), frozenset())
    except _TooBig:
        raise BlueprintError(
            [Problem(file, 1, 1, "(document)", f"more than {MAX_VALUES} values (alias expansion?)")]
        ) from None
    except RecursionError:
        raise BlueprintError([Problem(file, 1, 1, "(document)", "nesting too deep")]) from None
    builder.out.problems = builder.problems
    return builder.out
