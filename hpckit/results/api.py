"""parse_text / parse_file: pick the reader for a kind (or detect it) and feed it the log in chunks."""

from __future__ import annotations

import gc
import importlib
import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from hpckit.results import speed
from hpckit.results.chunks import Chunk, file_chunks, text_chunks
from hpckit.results.kinds import HEAD, KINDS, REGISTRY, detect_kind
from hpckit.results.lines import excerpt
from hpckit.results.model import ParseError, ParseResult

Chunks = Callable[[], Iterator[Chunk]]


def parse_text(
    text: str, kind: str = "auto", source: str = "<text>", collective: str | None = None, exact: bool = False
) -> ParseResult:
    """Parse a log held in memory.

    ``kind`` is one of KINDS or "auto"; ``source`` names the input in errors and warnings;
    ``collective`` names the nccl-tests collective when the log itself does not; ``exact``: only
    the exact parsers (no fast path; see speed.py).
    Raises ParseError (never anything else) for input that cannot be read.
    """
    return _parse(lambda: text_chunks(text, source), kind, source, collective, exact)


def parse_file(path: Path, kind: str = "auto", collective: str | None = None, exact: bool = False) -> ParseResult:
    """Parse a log file (UTF-8; undecodable bytes are replaced, not fatal), a chunk at a time."""
    path = Path(path)
    return _parse(lambda: file_chunks(path, str(path)), kind, str(path), collective, exact)


def _parse(chunks: Chunks, kind: str, source: str, collective: str | None, exact: bool) -> ParseResult:
    stream = chunks()
    head = _head(stream)
    kind = _resolve("".join(c.text for c in head)[:HEAD], kind, source)
    try:
        with _gc_paused(), _small_pages(), speed.exact() if exact else nullcontext():
            try:
                return _read(kind, source, collective, itertools.chain(head, stream))
            except speed.Declined:
                # a fast path that reads the whole log (training steps) met a part it cannot
                # read exactly: the exact parser reads the log again, from its start
                with speed.exact():
                    return _read(kind, source, collective, chunks())
    except ParseError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError) as exc:
        # a parser bug on odd input must still come out as a located, typed error
        raise ParseError(source, 1, "", f"cannot parse as {kind}: {type(exc).__name__}: {exc}") from exc


def _head(stream: Iterator[Chunk]) -> list[Chunk]:
    """The first chunks, at least HEAD characters of the log (or all of it): what detection reads."""
    head: list[Chunk] = []
    size = 0
    for chunk in stream:
        head.append(chunk)
        size += len(chunk.text)
        if size >= HEAD:
            break
    return head


def _read(kind: str, source: str, collective: str | None, chunks: Iterator[Chunk]) -> ParseResult:
    reader = REGISTRY[kind].reader(kind, source, collective)
    for chunk in chunks:
        reader.feed(chunk.text, chunk.first_line, chunk.lines)
    result = reader.finish()
    result.kind = kind
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


def _resolve(head: str, kind: str, source: str) -> str:
    """The kind to read as: detected from the head of the log for "auto"."""
    if kind == "auto":
        found = detect_kind(head)
        if found == "unknown":
            first = next((ln for ln in head.splitlines() if ln.strip()), "")
            raise ParseError(source, 1, excerpt(first), f"cannot tell what this is; pass a kind ({', '.join(KINDS)})")
        return found
    if kind not in REGISTRY:
        raise ParseError(source, 0, "", f"unknown kind {kind!r}; known: auto, {', '.join(KINDS)}")
    sibling = REGISTRY[kind].json_sibling
    if sibling is not None and head.lstrip().startswith("{"):
        return sibling  # a JSON document handed in under the name of its text sibling
    return kind
