"""A log as chunks of whole lines, from a file or a str: what every parser is fed (and the heap
given back to the system between the parts a parser builds from them: release).

A file is read CHUNK_BYTES at a time and cut after its last line end, so that a parser never holds
more than one chunk of text (a 1 GB log parses in a fraction of its size on top of the frame).
On the way in:

- a UTF-8 byte order mark is dropped (Windows editors write one; it would hide the first line's
  marker from detection and from the parsers);
- CR-only line ends (classic Mac, some log shippers) become newlines, decided from the head, so
  that a log of N lines reads as N lines (CRLF files keep their "\\r", which the parsers strip);
- NUL bytes in the head refuse the file at once (a sparse or binary file, not a text log), and a
  line longer than MAX_LINE refuses it where that line starts (a hole after a crash) rather than
  growing without bound.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from hpckit.results.lines import excerpt
from hpckit.results.model import ParseError

CHUNK_BYTES = 16 << 20
HEAD_BYTES = 1 << 20
MAX_LINE = 64 << 20
BOM = b"\xef\xbb\xbf"


@dataclass
class Chunk:
    text: str
    first_line: int  # 1-based number of the chunk's first line
    lines: int | None = None  # its count of newlines (counted once, here)


def text_chunks(text: str, source: str, size: int | None = None) -> Iterator[Chunk]:
    """A log held in memory, in chunks of about ``size`` characters cut after a line end."""
    size = size or CHUNK_BYTES
    text = text.removeprefix("\ufeff")
    _refuse_nul(text[:HEAD_BYTES], source)
    if "\n" not in text[:HEAD_BYTES] and "\r" in text[:HEAD_BYTES]:
        text = text.replace("\r", "\n")
    if len(text) <= size:
        yield Chunk(text, 1)  # (no copy, no count: the parser's own split tells)
        return
    line, at = 1, 0
    while at < len(text):
        end = _cut(text, at, size)
        piece = text[at:end]
        count = piece.count("\n")
        yield Chunk(piece, line, count)
        line += count
        at = end


def _cut(text: str, at: int, size: int) -> int:
    """Where a chunk starting at ``at`` ends: after the last "\\n" (else "\\r") within ``size``."""
    if len(text) - at <= size:
        return len(text)
    for end in (text.rfind("\n", at, at + size), text.rfind("\r", at, at + size)):
        if end >= 0:
            return end + 1
    found = text.find("\n", at + size)
    return len(text) if found < 0 else found + 1


def file_chunks(path: Path, source: str, size: int | None = None) -> Iterator[Chunk]:
    """A log file in chunks (UTF-8; undecodable bytes are replaced, not fatal)."""
    size = size or CHUNK_BYTES
    try:
        handle = open(path, "rb")  # noqa: SIM115  (closed below, after the last chunk)
    except OSError as exc:
        raise ParseError(source, 0, "", f"cannot read: {exc.strerror or exc}") from exc
    with handle:
        yield from _read(handle, source, size)


def _read(handle: BinaryIO, source: str, size: int) -> Iterator[Chunk]:
    head = _fill(handle, min(HEAD_BYTES, size), source).removeprefix(BOM)
    _refuse_nul(head.decode("utf-8", errors="replace"), source)
    cr_only = b"\n" not in head and b"\r" in head
    carry, line = head, 1
    while True:
        block = _fill(handle, size, source)
        data = carry + block
        if not block:
            if data:
                yield _chunk(data, line, cr_only)
            return
        end = data.rfind(b"\n")
        end = end if end >= 0 else data.rfind(b"\r")  # (a tqdm log redraws with "\r" alone)
        if end < 0:
            if len(data) > MAX_LINE:  # (module global: tests lower it)
                raise ParseError(source, line, excerpt(data[:80].decode("utf-8", "replace")), _too_long())
            carry = data
            continue
        chunk = _chunk(data[: end + 1], line, cr_only)
        yield chunk
        line += chunk.lines or 0
        carry = data[end + 1 :]


def _fill(handle: BinaryIO, size: int, source: str) -> bytes:
    try:
        return handle.read(size)
    except OSError as exc:
        raise ParseError(source, 0, "", f"cannot read: {exc.strerror or exc}") from exc


def _chunk(data: bytes, line: int, cr_only: bool) -> Chunk:
    if cr_only:
        data = data.replace(b"\r", b"\n")
    return Chunk(data.decode("utf-8", errors="replace"), line, data.count(b"\n"))


def _refuse_nul(head: str, source: str) -> None:
    at = head.find("\0")
    if at >= 0:
        line = head.count("\n", 0, at) + 1
        raise ParseError(source, line, "", f"NUL bytes at character {at + 1}: a binary or sparse file, not a text log")


def _too_long() -> str:
    return f"a line longer than {MAX_LINE >> 20} MiB: not a text log (NUL bytes or a hole in the file?)"


# ---------------------------------------------------------------- memory given back between chunks
# Giving freed memory back to the system while a long log's frame is assembled.
#
# A long log's rows are parsed a chunk at a time into many mid-sized numpy arrays, which glibc's
# malloc places in its heap; the frame's columns, built from them at the end, are each one large
# fresh mapping.  Freed heap memory stays with the process unless it is trimmed, so without this
# the pieces and the finished frame would both count against the peak (2x the frame: for a 1 GB
# nccl-tests log of long runs, about 1.4 GB more).  Trimming after each column is built keeps the
# peak near the frame alone; it costs a walk of the heap's free lists, a few milliseconds.


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None  # not glibc (musl, macOS): nothing to call, memory stays as the allocator keeps it
    return trim


_TRIM = _malloc_trim()


def release() -> None:
    """Return the heap's free pages to the system (glibc's malloc_trim; elsewhere nothing)."""
    if _TRIM is not None:
        _TRIM(0)
