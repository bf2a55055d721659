"""`$(vars.NAME)` references: one blueprint, small per-site files that set its vars.

A scalar that is exactly one reference takes the variable's value with its type (a number stays a
number); a reference inside a longer string is replaced by the value's text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from hpckit.blueprint.errors import Path_, Problem
from hpckit.blueprint.source import Located

REF = re.compile(r"\$\(vars\.([A-Za-z_][A-Za-z0-9_]*)\)")
_MAX_DEPTH = 32


class _Resolver:
    def __init__(self, doc: Located, values: dict[str, Any]) -> None:
        self.doc = doc
        self.values = values
        self.problems: list[Problem] = []

    def expand(self, value: Any, path: Path_, depth: int = 0) -> Any:
        if isinstance(value, dict):
            return {k: self.expand(v, (*path, k), depth) for k, v in value.items()}
        if isinstance(value, list):
            return [self.expand(v, (*path, i), depth) for i, v in enumerate(value)]
        if isinstance(value, str) and "$(" in value:
            return self._string(value, path, depth)
        return value

    def _string(self, text: str, path: Path_, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            self.problems.append(self.doc.problem(path, "vars refer to each other in a cycle"))
            return None
        whole = REF.fullmatch(text)
        if whole:
            return self._lookup(whole.group(1), path, depth)

        def sub(match: re.Match[str]) -> str:
            found = self._lookup(match.group(1), path, depth)
            if isinstance(found, dict | list):
                self.problems.append(
                    self.doc.problem(path, f"vars.{match.group(1)} is a {type(found).__name__}, not text")
                )
                return ""
            return "" if found is None else str(found)

        return REF.sub(sub, text)

    def _lookup(self, name: str, path: Path_, depth: int) -> Any:
        if name not in self.values:
            known = ", ".join(sorted(self.values)) or "none defined"
            self.problems.append(self.doc.problem(path, f"undefined variable vars.{name} (known: {known})"))
            return None
        return self.expand(self.values[name], path, depth + 1)


def resolve_vars(doc: Located, site_vars: Mapping[str, Any]) -> tuple[Any, list[Problem]]:
    """Return the document with every reference replaced, and the problems found."""
    data = doc.data
    if not isinstance(data, dict):
        return data, []
    own = data.get("vars")
    values: dict[str, Any] = dict(own) if isinstance(own, dict) else {}
    values.update(site_vars)
    resolver = _Resolver(doc, values)
    out = {k: (v if k == "vars" else resolver.expand(v, (k,))) for k, v in data.items()}
    if isinstance(own, dict):
        out["vars"] = values
    return out, resolver.problems
