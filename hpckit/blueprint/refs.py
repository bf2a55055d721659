"""`$(vars.NAME)` references: one blueprint, small per-site files that set its vars.

A scalar that is exactly one reference takes the variable's value with its type (a number stays a
number); a reference inside a longer string is replaced by the value's text.

Each variable is resolved once and its result reused, so a chain of variables that each use the next
several times costs one pass over the chain, not one per path through it. What a reference adds to the
document is still counted at every use: a chain that doubles at each step is refused once the result
would outgrow any real blueprint, at the place that uses it, instead of being built.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hpckit.blueprint.errors import BlueprintError, Path_, Problem
from hpckit.blueprint.source import MAX_VALUES, Located

REF = re.compile(r"\$\(vars\.([A-Za-z_][A-Za-z0-9_]*)\)")
# No field of a blueprint is anywhere near this long; a hostlist of 10,000 nodes' addresses is ~150 KB.
MAX_TEXT = 1_000_000
# All text that references produce in one blueprint.
MAX_CHARS = 50_000_000


@dataclass(frozen=True)
class _Done:
    value: Any
    size: int  # values it holds once expanded (1 for a scalar)


class _TooBig(Exception):
    pass


class _Unusable(Exception):
    """A reference that cannot be used here, and why (reported at each place that uses it)."""


class _Resolver:
    def __init__(self, doc: Located, values: dict[str, Any]) -> None:
        self.doc = doc
        self.values = values
        self.done: dict[str, _Done | str] = {}  # a variable's result, or why it cannot be used
        self.active: list[str] = []  # the variables being resolved, outermost first
        self.problems: list[Problem] = []
        self.used = 0  # values in the resolved document so far
        self.chars = 0  # characters that references produced so far

    def document(self, value: Any, path: Path_) -> Any:
        """Resolve one top-level section; what fails is reported at `path` (a place in this document)."""
        if isinstance(value, dict):
            return {k: self.document(v, (*path, k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.document(v, (*path, i)) for i, v in enumerate(value)]
        try:
            done = self._value(value)
            self.used += done.size
            if self.used > MAX_VALUES:
                raise _TooBig(self._grows(f"more than {MAX_VALUES} values"))
        except _TooBig as exc:
            raise BlueprintError([*self.problems, self.doc.problem(path, str(exc))]) from None
        except _Unusable as exc:
            self.problems.append(self.doc.problem(path, str(exc)))
            return None
        return done.value

    def _value(self, value: Any) -> _Done:
        """`value` with its references replaced, and its size; a variable's result is reused, not rebuilt."""
        if isinstance(value, dict):
            items = {k: self._value(v) for k, v in value.items()}
            return _Done({k: d.value for k, d in items.items()}, 1 + sum(d.size for d in items.values()))
        if isinstance(value, list):
            parts = [self._value(v) for v in value]
            return _Done([d.value for d in parts], 1 + sum(d.size for d in parts))
        if isinstance(value, str) and "$(" in value:
            return self._string(value)
        return _Done(value, 1)

    def _string(self, text: str) -> _Done:
        whole = REF.fullmatch(text)
        if whole:
            return self._var(whole.group(1))
        pieces: list[str] = []
        length = last = 0
        for match in REF.finditer(text):
            value = self._var(match.group(1)).value
            if isinstance(value, dict | list):
                raise _Unusable(f"vars.{match.group(1)} is a {type(value).__name__}, not text")
            piece = "" if value is None else str(value)
            pieces += [text[last : match.start()], piece]
            length += match.start() - last + len(piece)
            last = match.end()
            if length > MAX_TEXT:
                raise _TooBig(self._grows(f"text longer than {MAX_TEXT} characters"))
        pieces.append(text[last:])
        self.chars += length
        if self.chars > MAX_CHARS:
            raise _TooBig(self._grows(f"more than {MAX_CHARS} characters of text in all"))
        return _Done("".join(pieces), 1)

    def _var(self, name: str) -> _Done:
        found = self.done.get(name)
        if found is None:
            found = self._resolve(name)
            self.done[name] = found
        if isinstance(found, str):
            raise _Unusable(found)
        return found

    def _resolve(self, name: str) -> _Done | str:
        if name in self.active:
            chain = " -> ".join(f"vars.{n}" for n in [*self.active[self.active.index(name) :], name])
            return f"vars refer to each other in a cycle: {chain}"
        if name not in self.values:
            known = ", ".join(sorted(self.values)) or "none defined"
            where = f" (used by vars.{self.active[-1]})" if self.active else ""
            return f"undefined variable vars.{name}{where} (known: {known})"
        self.active.append(name)
        try:
            done = self._value(self.values[name])
            if done.size > MAX_VALUES:
                raise _TooBig(self._grows(f"more than {MAX_VALUES} values"))
        except _Unusable as exc:
            return str(exc)
        finally:
            self.active.pop()
        return done

    def _grows(self, what: str) -> str:
        names = [f"vars.{n}" for n in self.active]
        if not names:
            return f"references expand to {what}"
        shown = names if len(names) <= 5 else [*names[:2], "...", *names[-2:]]
        where = f" (reached through {' -> '.join(shown[:-1])})" if len(names) > 1 else ""
        return f"{names[-1]} expands to {what}{where}: its references multiply; refused"


def resolve_vars(doc: Located, site_vars: Mapping[str, Any]) -> tuple[Any, list[Problem]]:
    """Return the document with every reference replaced, and the problems found.

    Expansion that grows past what any blueprint holds raises BlueprintError at once, at the first place
    that makes it grow.
    """
    data = doc.data
    if not isinstance(data, dict):
        return data, []
    own = data.get("vars")
    values: dict[str, Any] = dict(own) if isinstance(own, dict) else {}
    values.update(site_vars)
    resolver = _Resolver(doc, values)
    out = {k: (v if k == "vars" else resolver.document(v, (k,))) for k, v in data.items()}
    if isinstance(own, dict):
        out["vars"] = values
    return out, resolver.problems
