"""Block-style YAML of plain data (mappings, lists, strings, numbers, booleans, null), as `yaml.dump` writes it
with `default_flow_style=False, sort_keys=False`, for the files `hpckit expand` writes.

Why not yaml.dump: its representer is Python even with libyaml's emitter, and for 10,000 nodes (inventory,
variables and the manifest: 155,000 values) it took 1.9 s of the 6 s the whole expand took. Writing the text
directly takes a tenth of that. Anything this module cannot say with certainty in a plain scalar (a string that
YAML would read as another type, a control character, a float) is written by yaml itself, so the text always
reads back as the data; tests/test_yaml_text.py checks that on generated data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

__all__ = ["dump"]

# Plain scalars that YAML 1.1 reads back as the same string: a conservative alphabet (brackets only inside, as
# block context allows), no leading indicator or dot ("..." alone ends a document), single spaces; and not one
# of the words or numbers the resolver turns into something else (checked below).
_PLAIN = re.compile(r"[A-Za-z0-9_/][A-Za-z0-9_./@+=,\[\]-]*(?: [A-Za-z0-9_./@+=,()\[\]-]+)*")
_RESOLVER = yaml.resolver.Resolver()
_WORDS = frozenset(
    w
    for base in ("y", "yes", "n", "no", "true", "false", "on", "off", "null")
    for w in (base, base.capitalize(), base.upper())
)
# JSON escapes the C0 controls as \uXXXX, which YAML reads back, but leaves these raw: YAML refuses them
# or reads a line break in them (yaml itself writes them escaped, non-ASCII and all).
_UNPRINTABLE = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufeff\ufffe\uffff]")


def dump(data: Any) -> str:
    """``data`` as a YAML document."""
    out: list[str] = []
    if isinstance(data, Mapping) and data:
        _mapping(data, "", out)
    elif isinstance(data, list) and data:
        _sequence(data, "", out)
    else:
        out.append(_scalar(data) + "\n")
    return "".join(out)


def _mapping(data: Mapping[Any, Any], indent: str, out: list[str]) -> None:
    for key, value in data.items():
        head = f"{indent}{_scalar(key)}:"
        if isinstance(value, Mapping) and value:
            out.append(head + "\n")
            _mapping(value, indent + "  ", out)
        elif isinstance(value, list) and value:
            out.append(head + "\n")
            _sequence(value, indent, out)  # yaml.dump's style: a mapping's list at the key's own indent
        else:
            out.append(f"{head} {_scalar(value)}\n")


def _sequence(data: Sequence[Any], indent: str, out: list[str]) -> None:
    inner = indent + "  "
    for value in data:
        if isinstance(value, Mapping | list) and value:
            start = len(out)
            if isinstance(value, Mapping):
                _mapping(value, inner, out)
            else:
                _sequence(value, inner, out)
            out[start] = f"{indent}- {out[start][len(inner) :]}"  # the first line shares the dash's line
        else:
            out.append(f"{indent}- {_scalar(value)}\n")


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        if _PLAIN.fullmatch(value) and value not in _WORDS and (value[0].isalpha() or _string(value)):
            return value
        if not _UNPRINTABLE.search(value):
            return json.dumps(value, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar
    elif value is None:
        return "null"
    elif value is True or value is False:
        return "true" if value else "false"
    elif type(value) is int:
        return str(value)
    return _by_yaml(value)


def _string(plain: str) -> bool:
    """Whether YAML reads ``plain`` as a string (not 10, 1.5, .inf or a date): the resolver's own rules."""
    tag: str = _RESOLVER.resolve(yaml.ScalarNode, plain, (True, False))  # type: ignore[no-untyped-call]
    return tag == "tag:yaml.org,2002:str"


def _by_yaml(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=2**31)
    return text.removesuffix("\n...\n").removesuffix("\n")
