"""The Jinja environment sbatch templates render in: undefined names fail, and every value is shell-quoted.

Quoting is the default, not something a template author has to remember: the environment's `finalize`
hook runs on every `{{ ... }}` and quotes text with shlex.quote. Only numbers (which the parameter types
have already checked) and the output of `| raw`, which accepts numbers only, are printed as they are.
So a value such as `$(touch /tmp/x)` reaches the script as the literal word '$(touch /tmp/x)'.
Templates still must not put `{{ }}` inside double quotes, where single quotes are literal; the
template tests execute every script with hostile values to hold them to that.

`#SBATCH` lines are read by sbatch, not by a shell, with rules of its own (a backslash escapes even
inside single quotes), so shell quoting is wrong there: a line with a value in it is written with
`{{ sbatch(...) }}`, which quotes for sbatch (hpckit.slurm.directives) and checks the line reads back
as exactly that option. After rendering, every line sbatch would take options from must be one of
those, or a literal line of the template's own source (`#SBATCH --exclusive`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import NoReturn

import jinja2

from hpckit.errors import HpckitError, InputError
from hpckit.jobs.params import ParamValue, Words
from hpckit.slurm.directives import (
    DirectiveError,
    directive_line,
    directive_lines,
    extra_option,
    read_directives,
)


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


class ParamText(str):
    """A text parameter's value as a template sees it: still plain text, and it knows its parameter's name
    (so `sbatch()` can name the parameter when a value cannot be written)."""

    param: str

    def __new__(cls, value: str, param: str) -> ParamText:
        text = super().__new__(cls, value)
        text.param = param
        return text


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
        return ParamText(value, name) if isinstance(value, str) else value

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


class Directives:
    """`sbatch(...)` in a template: writes one `#SBATCH --option[=value]` line in sbatch's quoting, and
    remembers it, so the rendered script can be checked to hold these options and no others."""

    def __init__(self) -> None:
        self.written: list[tuple[str, str | None, str]] = []  # option, value, where it came from
        self.lines: list[str] = []

    def __call__(self, option: str, value: object = None, param: str | None = None) -> Raw:
        text = None if value is None else _number(value) if isinstance(value, int | float) else str(value)
        name = param or getattr(value, "param", "")
        source = f"parameter {name}" if name else "the template itself"
        for done, _, owner in self.written:
            if done == option:
                raise InputError(f"--{option} is set twice: by {owner} and by {source}")
        try:
            line = directive_line(option, text)
        except DirectiveError as exc:
            if not re.fullmatch(r"[a-z][a-z0-9-]*", option):
                raise TemplateError(str(exc)) from None
            raise InputError(f"{source}: {text!r} cannot be written on an #SBATCH line: {exc}") from None
        self.written.append((option, text, source))
        self.lines.append(line)
        return Raw(line)

    def extra(self, words: Words, param: str) -> Raw:
        """`sbatch.extra(p.sbatch_options, "sbatch_options")`: one checked line per extra option."""
        lines = []
        for word in words:
            try:
                name, value = extra_option(word)
            except DirectiveError as exc:
                raise InputError(f"parameter {param}: {word!r} {exc}") from None
            lines.append(self(name, value, param))
        return Raw("\n".join(lines))

    def check(self, script: str, where: str, literal: Collection[str] = ()) -> None:
        """Every line sbatch takes options from is one `sbatch()` wrote, or one of the template's own
        literal lines (no value in it); and sbatch would read the script without stopping."""
        try:
            read_directives(script)
        except DirectiveError as exc:
            raise TemplateError(f"{where}: sbatch would refuse the script: {exc}") from None
        written = set(self.lines)
        for line in directive_lines(script):
            if line not in written and line not in literal:
                raise TemplateError(
                    f"{where}: {line!r} is an #SBATCH line with a value in it: write it with {{{{ sbatch(...) }}}}, "
                    "which quotes for sbatch's own reader"
                )
