"""parse_text / parse_file: pick the parser for a kind (or detect it) and run it."""

from __future__ import annotations

import gc
import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hpckit.results.detect import KINDS, detect_kind
from hpckit.results.lines import excerpt
from hpckit.results.model import ParseError, ParseResult
from hpckit.results.nccl_json import parse_nccl_json
from hpckit.results.nccl_text import parse_nccl_text
from hpckit.results.sacct import parse_sacct_json, parse_sacct_text
from hpckit.results.training import parse_pipe_log, parse_tqdm_log

Parser = Callable[[str, str, str | None], ParseResult]

_PARSERS: dict[str, Parser] = {
    "nccl-tests": lambda t, s, c: parse_nccl_text(t, s, c),
    "nccl-tests-json": lambda t, s, c: parse_nccl_json(t, s, c),
    "nemo1": lambda t, s, c: parse_tqdm_log(t, s),
    "nemo2": lambda t, s, c: parse_pipe_log(t, s, "nemo2"),
    "megatron": lambda t, s, c: parse_pipe_log(t, s, "megatron"),
    "sacct": lambda t, s, c: parse_sacct_text(t, s),
    "sacct-json": lambda t, s, c: parse_sacct_json(t, s),
}
# a JSON document handed in under the name of its text sibling goes to the JSON parser
_JSON_SIBLING = {"nccl-tests": "nccl-tests-json", "sacct": "sacct-json"}


def parse_text(text: str, kind: str = "auto", source: str = "<text>", collective: str | None = None) -> ParseResult:
    """Parse a log held in memory.

    ``kind`` is one of KINDS or "auto"; ``source`` names the input in errors and warnings;
    ``collective`` names the nccl-tests collective when the log itself does not.
    Raises ParseError (never anything else) for input that cannot be read.
    """
    kind = _resolve(text, kind, source)
    try:
        with _gc_paused(), _small_pages():
            result = _PARSERS[kind](text, source, collective)
    except ParseError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError) as exc:
        # a parser bug on odd input must still come out as a located, typed error
        raise ParseError(source, 1, "", f"cannot parse as {kind}: {type(exc).__name__}: {exc}") from exc
    return result


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a parser runs.

    A long log becomes hundreds of thousands of small tuples, lists and records, none in a cycle;
    the collector would walk all of them again every few thousand allocations, a cost that grows
    with the log (it took a third of the time on 100 MB of NeMo 1 refreshes)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _hugepage_switch() -> Callable[[bool], bool] | None:
    """numpy's switch for asking the kernel for huge pages (private, so looked up with care)."""
    for name in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            switch: Callable[[bool], bool] | None = getattr(
                importlib.import_module(name), "_set_madvise_hugepage", None
            )
        except ImportError:
            continue
        return switch
    return None


_HUGEPAGES = _hugepage_switch()


@contextmanager
def _small_pages() -> Iterator[None]:
    """numpy's huge pages off while a parser runs (restored after).

    numpy marks arrays of a few MB and more for huge pages (madvise); where the kernel's THP
    defrag setting is "madvise" (Debian's default), a fault on such an array may stall on memory
    compaction: one 100 MB nccl-tests log parsed in 0.7 s or 1.4 s by the system time alone. The
    parsers' big arrays are written once, so small pages cost them little."""
    if _HUGEPAGES is None:
        yield
        return
    before = _HUGEPAGES(False)
    try:
        yield
    finally:
        _HUGEPAGES(before)


def parse_file(path: Path, kind: str = "auto", collective: str | None = None) -> ParseResult:
    """Parse a log file (UTF-8; undecodable bytes are replaced, not fatal)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ParseError(str(path), 0, "", f"cannot read: {exc.strerror or exc}") from exc
    return parse_text(data.decode("utf-8", errors="replace"), kind, str(path), collective)


def _resolve(text: str, kind: str, source: str) -> str:
    if kind == "auto":
        found = detect_kind(text)
        if found == "unknown":
            first = next((ln for ln in text.splitlines() if ln.strip()), "")
            raise ParseError(source, 1, excerpt(first), f"cannot tell what this is; pass a kind ({', '.join(KINDS)})")
        return found
    if kind not in _PARSERS:
        raise ParseError(source, 0, "", f"unknown kind {kind!r}; known: auto, {', '.join(KINDS)}")
    if kind in _JSON_SIBLING and text.lstrip().startswith("{"):
        return _JSON_SIBLING[kind]
    return kind
