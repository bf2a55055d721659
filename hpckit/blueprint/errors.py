"""Located blueprint problems: every one reads `FILE:LINE:COL: field.path: message`."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from hpckit.errors import InputError

Path_ = tuple[str | int, ...]
_PLAIN = re.compile(r"^[A-Za-z0-9_-]+$")


def format_path(path: Path_) -> str:
    """`("partitions", 0, "hardware")` -> `partitions[0].hardware`; the empty path is `(document)`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _PLAIN.fullmatch(part):  # not match: its `$` accepts a trailing newline
            out += f"[{part!r}]"  # keys with spaces or odd characters stay readable and unambiguous
        else:
            out += f".{part}" if out else part
    return out or "(document)"


@dataclass(frozen=True, order=True)
class Problem:
    file: str
    line: int
    col: int
    path: str
    message: str

    def __post_init__(self) -> None:
        # One problem, one line: YAML and pydantic messages sometimes span several.
        object.__setattr__(self, "message", " ".join(self.message.split()))

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}: {self.path}: {self.message}"


class BlueprintError(InputError):
    """One or more problems found in a blueprint; the message lists all of them, one per line."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = sorted(set(problems))
        super().__init__("\n".join(str(p) for p in self.problems))
