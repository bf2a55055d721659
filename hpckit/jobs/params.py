"""Typed template parameters: what each one accepts, and turning `--set` text into a checked value.

Every value that passes here is one the Jinja environment can put into a script safely: text values
are shell-quoted when printed (see hpckit.jobs.render) and written in sbatch's own quoting on
`#SBATCH` lines (hpckit.slurm.directives). Control characters are refused outright, because an
`#SBATCH` line ends at a newline whatever the quoting, and so are the Unicode line separators and
bidirectional overrides that make a script read differently from what it runs. A value that names a
program or a file may not start with `-`, where srun, torchrun or python would take it as an option.
"""

from __future__ import annotations

import difflib
import math
import re
import shlex
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, Literal

import hostlist
from pydantic import BaseModel, ConfigDict, Field, field_validator

from hpckit.errors import InputError
from hpckit.slurm.directives import DirectiveError, extra_option

ParamType = Literal[
    "str", "int", "float", "bool", "path", "hostlist", "duration", "choice", "args", "env", "sbatch_options"
]
ParamValue = str | int | float | bool | tuple[str, ...]

# C0 and C1 controls, the Unicode line and paragraph separators (Python's splitlines breaks at them),
# and the bidirectional marks and overrides ("Trojan Source": text displayed in another order than read).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_CONTROL_NAMES = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", "\x00": "a NUL byte"}
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Slurm's time formats (sbatch(1) --time): M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or no limit.
_DURATION = re.compile(r"(?:\d+(?::\d{1,2}){0,2}|\d+-\d{1,2}(?::\d{1,2}){0,2}|UNLIMITED|INFINITE)", re.I)
_HOSTLIST_CHARS = re.compile(r"[A-Za-z0-9._\-\[\],]+")
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


class Words(tuple[str, ...]):
    """An `args` value: words split like a shell would split them; each reaches the script quoted on its own."""

    __slots__ = ()

    def __str__(self) -> str:
        return shlex.join(self)


class ParamSpec(BaseModel):
    """One declared parameter. `default` is checked against the type when the template is loaded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    type: ParamType
    default: Any
    help: Annotated[str, Field(min_length=1)]
    choices: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None
    pattern: str | None = None
    # The submit step creates this directory first: Slurm does not, and a job whose --output directory
    # is missing fails without writing a line anywhere.
    mkdir: bool = False
    # The value (an `args` value: its first word) is a program or a file: never an option.
    program: bool = False
    # Characters this parameter may not hold, and why (`/` in a job name that names the output file).
    forbid: str = ""
    forbid_why: str = ""

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            re.compile(value)
        return value

    def convert(self, raw: object) -> ParamValue:
        """Check `raw` (text from the command line, or a YAML/Python value) and return the typed value."""
        converter = _CONVERTERS[self.type]
        value = converter(self, raw)
        if isinstance(value, int | float) and not isinstance(value, bool):
            self._check_range(value)
        if isinstance(value, str) and value and self.pattern and not re.fullmatch(self.pattern, value):
            raise self.error(raw, f"does not match {self.pattern}")
        self._check_text(raw, value)
        return value

    def _check_text(self, raw: object, value: ParamValue) -> None:
        words = list(value) if isinstance(value, tuple) else [value] if isinstance(value, str) else []
        for char in self.forbid:
            if any(char in word for word in words):
                raise self.error(raw, f"contains {char!r}" + (f" ({self.forbid_why})" if self.forbid_why else ""))
        first = words[0] if words else ""
        if (self.program or self.type == "path") and first.startswith("-"):
            what = "a program or a file" if self.program else "a path"
            raise self.error(raw, f"starts with '-': it names {what}, and would be read as an option (write ./{first})")

    def error(self, raw: object, why: str) -> InputError:
        # repr keeps the message on one line whatever the value holds (newlines show as \n).
        return InputError(f"parameter {self.name}: {str(raw)!r} {why}")

    def _check_range(self, value: float) -> None:
        if self.min is not None and value < self.min:
            raise self.error(str(value), f"is below the minimum {_num(self.min)}")
        if self.max is not None and value > self.max:
            raise self.error(str(value), f"is above the maximum {_num(self.max)}")

    def describe_type(self) -> str:
        if self.type == "choice":
            return "|".join(self.choices)
        return self.type


def _num(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


def _text(spec: ParamSpec, raw: object) -> str:
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise spec.error(str(raw), "is not text")
    text = str(raw)
    bad = _CONTROL.search(text)
    if bad:
        char = bad.group()
        name = unicodedata.name(char, "")
        if "\ud800" <= char <= "\udfff":  # how Python keeps a byte of a command line that is not UTF-8
            raise spec.error(text.encode("utf-8", "surrogateescape").decode("utf-8", "replace"), "is not UTF-8 text")
        what = _CONTROL_NAMES.get(char) or (f"U+{ord(char):04X} {name}" if name else f"the control character {char!r}")
        raise spec.error(text, f"contains {what}; parameters are single-line plain text")
    return text


def _to_str(spec: ParamSpec, raw: object) -> str:
    return _text(spec, raw)


def _to_path(spec: ParamSpec, raw: object) -> str:
    text = _text(spec, raw)
    if text != text.strip():
        raise spec.error(text, "has leading or trailing spaces")
    return text


def _to_int(spec: ParamSpec, raw: object) -> int:
    if isinstance(raw, bool):
        raise spec.error(str(raw), "is not an integer")
    if isinstance(raw, int):
        return raw
    text = _text(spec, raw).strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        raise spec.error(text, "is not an integer")
    return int(text)


def _to_float(spec: ParamSpec, raw: object) -> float:
    if isinstance(raw, bool):
        raise spec.error(str(raw), "is not a number")
    try:
        value = float(raw) if isinstance(raw, int | float) else float(_text(spec, raw).strip())
    except ValueError:
        raise spec.error(str(raw), "is not a number") from None
    if not math.isfinite(value):
        raise spec.error(str(raw), "is not a finite number")
    return value


def _to_bool(spec: ParamSpec, raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    text = _text(spec, raw).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise spec.error(str(raw), "is not a boolean (true/false, yes/no, on/off, 1/0)")


def _to_hostlist(spec: ParamSpec, raw: object) -> str:
    text = _text(spec, raw).strip()
    if not text:
        return ""
    if not _HOSTLIST_CHARS.fullmatch(text):
        raise spec.error(text, "is not a host list (names like node[1-4,7],gpu01)")
    try:
        hosts = hostlist.expand_hostlist(text)
    except hostlist.BadHostlist as exc:
        raise spec.error(text, f"is not a host list: {exc}") from None
    return str(hostlist.collect_hostlist(hosts))


def _to_duration(spec: ParamSpec, raw: object) -> str:
    text = _text(spec, raw).strip()
    if text and not _DURATION.fullmatch(text):
        raise spec.error(text, "is not a Slurm time (MM, HH:MM:SS, D-HH:MM:SS or UNLIMITED)")
    return text


def _to_choice(spec: ParamSpec, raw: object) -> str:
    text = _text(spec, raw).strip()
    if text not in spec.choices:
        raise spec.error(text, f"is not one of: {', '.join(spec.choices)}{suggest(text, spec.choices)}")
    return text


def _to_args(spec: ParamSpec, raw: object) -> Words:
    if isinstance(raw, list | tuple):
        return Words(_text(spec, word) for word in raw)
    text = _text(spec, raw)
    try:
        return Words(shlex.split(text))
    except ValueError as exc:
        raise spec.error(text, f"cannot be split into words: {exc}") from None


def _to_env(spec: ParamSpec, raw: object) -> Words:
    """KEY=VALUE settings: every word one setting, the key a shell variable name."""
    words = _to_args(spec, raw)
    for word in words:
        key, sep, _ = word.partition("=")
        if not sep or not _ENV_KEY.fullmatch(key):
            raise spec.error(word, "is not a KEY=VALUE setting (KEY: letters, digits and _, not starting with a digit)")
    return words


def _to_sbatch_options(spec: ParamSpec, raw: object) -> Words:
    """Extra sbatch options (`--constraint=a100 --mail-type=END`): each one long option sbatch knows and
    hpckit lets through, never one a template sets itself or one that changes who or what runs."""
    words = _to_args(spec, raw)
    for word in words:
        try:
            extra_option(word)
        except DirectiveError as exc:
            raise spec.error(word, str(exc)) from None
    return words


_CONVERTERS: dict[str, Callable[[ParamSpec, object], ParamValue]] = {
    "str": _to_str,
    "path": _to_path,
    "int": _to_int,
    "float": _to_float,
    "bool": _to_bool,
    "hostlist": _to_hostlist,
    "duration": _to_duration,
    "choice": _to_choice,
    "args": _to_args,
    "env": _to_env,
    "sbatch_options": _to_sbatch_options,
}


def suggest(name: str, known: Iterable[str]) -> str:
    """'; did you mean X?' when a known name is close to `name`, else ''."""
    close = difflib.get_close_matches(name, list(known), n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def parse_sets(items: Iterable[str]) -> dict[str, str]:
    """`--set key=value` items -> {key: value}; the value may itself contain '='."""
    values: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--set {item!r}: expected KEY=VALUE")
        values[key.strip()] = value
    return values


def bind(template: str, specs: Mapping[str, ParamSpec], given: Mapping[str, object]) -> dict[str, ParamValue]:
    """Defaults overlaid with `given`, every value converted; an unknown name is an InputError with suggestions."""
    unknown = [name for name in given if name not in specs]
    if unknown:
        name = unknown[0]
        raise InputError(f"template {template} has no parameter {name!r}{suggest(name, specs)}")
    values: dict[str, ParamValue] = {}
    for name, spec in specs.items():
        try:
            values[name] = spec.convert(given[name]) if name in given else spec.convert(spec.default)
        except InputError as exc:
            raise InputError(f"template {template}: {exc}") from None
    return values
