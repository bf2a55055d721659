"""Every log kind, declared once: its name, family, how to tell it and which parser reads it.

Detection tries the kinds in the order below on the head of the log (markers sit near the top of
every format); a JSON document is told by its keys.  The CLI's --kind choices, the report's
families and the parse front door all come from this table.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from hpckit.results.model import ParseResult
from hpckit.results.nccl_fields import FAILURE, NCCL_MARKERS
from hpckit.results.training_fields import MEGATRON_LINE, NEMO1_MARKER, NEMO2_LINE, TQDM

Family = Literal["nccl", "training", "sacct"]


class Reader(Protocol):
    """A parser fed a log a chunk at a time (whole lines; the first line's number alongside, and
    the chunk's count of newlines when known)."""

    def feed(self, text: str, first_line: int, lines: int | None = None) -> None: ...

    def finish(self) -> ParseResult: ...


@dataclass(frozen=True)
class Kind:
    name: str
    family: Family
    marker: Callable[[str], bool]  # on the head of the log (for a JSON kind: of the document)
    reader: Callable[[str, str, str | None], Reader]  # (kind, source, collective) -> a fresh reader
    json: bool = False  # a JSON document: read whole
    json_sibling: str | None = None  # the JSON kind a document handed in under this name goes to


def _readers() -> dict[str, Callable[[str, str, str | None], Reader]]:
    # (imported here: the parsers import the field tables this module's markers come from)
    from hpckit.results.nccl_json import parse_nccl_json
    from hpckit.results.nccl_text import NcclReader
    from hpckit.results.sacct import parse_sacct_json, parse_sacct_text
    from hpckit.results.training import PipeReader
    from hpckit.results.training_tqdm import TqdmReader

    return {
        "nccl-tests": lambda k, s, c: NcclReader(k, s, c),
        "nccl-tests-json": lambda k, s, c: Whole(lambda t: parse_nccl_json(t, k, s, c)),
        "nemo1": lambda k, s, c: TqdmReader(k, s),
        "nemo2": lambda k, s, c: PipeReader(k, s),
        "megatron": lambda k, s, c: PipeReader(k, s),
        "sacct": lambda k, s, c: Whole(lambda t: parse_sacct_text(t, k, s)),
        "sacct-json": lambda k, s, c: Whole(lambda t: parse_sacct_json(t, k, s)),
    }


class Whole:
    """A parser of whole documents behind the chunked interface (JSON, sacct: short outputs)."""

    def __init__(self, parse: Callable[[str], ParseResult]) -> None:
        self.parse = parse
        self.parts: list[str] = []

    def feed(self, text: str, first_line: int, lines: int | None = None) -> None:
        self.parts.append(text)

    def finish(self) -> ParseResult:
        return self.parse("".join(self.parts))


_NAME = r"[A-Za-z][A-Za-z0-9]*"
_SACCT_HEADER = re.compile(rf"\A\s*{_NAME}(?:[^A-Za-z0-9\s][^A-Za-z0-9]*{_NAME})+[^A-Za-z0-9\s]*\s*\Z")


def _sacct(head: str) -> bool:
    """A `--parsable`/`-P` header: field names joined by one delimiter, JobID among them."""
    first = head.lstrip().split("\n", 1)[0].rstrip("\r")
    names = re.split(r"[^A-Za-z0-9]+", first.strip())
    return bool(_SACCT_HEADER.match(first)) and any(n in ("JobID", "JobIDRaw") for n in names)


def _json_keys(*alternatives: tuple[str, ...]) -> Callable[[str], bool]:
    def marker(doc: str) -> bool:
        return any(all(f'"{key}"' in doc for key in keys) for keys in alternatives)

    return marker


_DECLARED: tuple[tuple[str, Family, Callable[[str], bool], bool, str | None], ...] = (
    ("nccl-tests", "nccl", lambda t: bool(NCCL_MARKERS.search(t) or FAILURE.search(t)), False, "nccl-tests-json"),
    ("nemo2", "training", lambda t: NEMO2_LINE.search(t) is not None, False, None),
    ("megatron", "training", lambda t: MEGATRON_LINE.search(t) is not None, False, None),
    ("nemo1", "training", lambda t: bool(NEMO1_MARKER.search(t) and TQDM.search(t)), False, None),
    ("sacct", "sacct", _sacct, False, "sacct-json"),
    ("nccl-tests-json", "nccl", _json_keys(("results", "bus_bw"), ("results", "nccl_version")), True, None),
    ("sacct-json", "sacct", _json_keys(("jobs", "steps"), ("jobs", "association")), True, None),
)
_READERS = _readers()
REGISTRY: dict[str, Kind] = {
    name: Kind(name, family, marker, _READERS[name], json, sibling) for name, family, marker, json, sibling in _DECLARED
}
KINDS: tuple[str, ...] = tuple(REGISTRY)


def family_of(kind: str) -> Family | None:
    entry = REGISTRY.get(kind)
    return None if entry is None else entry.family


def kinds_of(family: Family) -> frozenset[str]:
    return frozenset(k.name for k in REGISTRY.values() if k.family == family)


HEAD = 1 << 20  # markers sit near the top of every format: the first MiB first


def detect_kind(text: str) -> str:
    """One of KINDS, or "unknown"."""
    kind = _detect(text[:HEAD])
    if kind == "unknown" and len(text) > HEAD:
        kind = _detect(text)
    return kind


def _detect(text: str) -> str:
    stripped = text.lstrip().removeprefix("\ufeff").lstrip()
    is_json = stripped.startswith("{")
    doc = stripped[:HEAD]
    for kind in REGISTRY.values():
        if kind.json == is_json and kind.marker(doc if is_json else text.removeprefix("\ufeff")):
            return kind.name
    return "unknown"
