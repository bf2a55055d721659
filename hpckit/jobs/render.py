"""The Jinja environment sbatch templates render in: undefined names fail, and every value is shell-quoted.

Quoting is the default, not something a template author has to remember: the environment's `finalize`
hook runs on every `{{ ... }}` and quotes text with shlex.quote. Only numbers (which the parameter types
have already checked) and the output of `| raw`, which accepts numbers only, are printed as they are.
So a value such as `$(touch /tmp/x)` reaches the script as the literal word '$(touch /tmp/x)'.
Templates still must not put `{{ }}` inside double quotes, where single quotes are literal; the
template tests execute every script with hostile values to hold them to that.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import NoReturn

import jinja2

from hpckit.errors import HpckitError, InputError
from hpckit.jobs.params import ParamValue, Words


class TemplateError(HpckitError):
    """A template file is broken (syntax, an undeclared parameter, a bad header): fix the template."""


class Raw(str):
    """Text printed unquoted; only `| raw` makes one, and only from a number."""

    __slots__ = ()


def _number(value: int | float) -> str:
    return str(value) if isinstance(value, int) else repr(value)


def finalize(value: object) -> str:
    """What `{{ value }}` prints: quoted text, plain numbers, nothing else."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _number(value)
    if isinstance(value, Words):
        return " ".join(shlex.quote(word) for word in value)
    if isinstance(value, str):
        return shlex.quote(value)
    raise TemplateError(f"a template printed a {type(value).__name__}; only parameters, text and numbers print")


def raw(value: object) -> Raw:
    """`{{ n | raw }}`: print a number unquoted (numbers already print so; this states it)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TemplateError(f"`| raw` takes a number, not {type(value).__name__} {value!r}")
    return Raw(_number(value))


def override_keys(words: Iterable[str]) -> list[str]:
    """`key=value` words (Hydra overrides) -> their keys, so a template adds a default only when absent."""
    return [word.split("=", 1)[0].lstrip("+~") for word in words]


def fail(message: str) -> NoReturn:
    """`{{ fail("...") }}`: a template's own check on a combination of values."""
    raise InputError(message)


class Params:
    """`p` in a template: attribute access to the bound values, and nothing else (no dict methods to shadow)."""

    __slots__ = ("_values",)
    _values: dict[str, ParamValue]

    def __init__(self, values: Mapping[str, ParamValue]) -> None:
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name: str) -> ParamValue:
        try:
            value: ParamValue = self._values[name]
        except KeyError:
            raise AttributeError(name) from None
        return value

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("template parameters are read-only")


def environment(dirs: Sequence[Path]) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(d) for d in dirs]),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        finalize=finalize,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["raw"] = raw
    env.filters["override_keys"] = override_keys
    env.globals["fail"] = fail
    return env
