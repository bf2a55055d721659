"""Giving freed memory back to the system while a long log's frame is assembled.

A long log's rows are parsed a chunk at a time into many mid-sized numpy arrays, which glibc's
malloc places in its heap; the frame's columns, built from them at the end, are each one large
fresh mapping.  Freed heap memory stays with the process unless it is trimmed, so without this
the pieces and the finished frame would both count against the peak (2x the frame: for a 1 GB
nccl-tests log of long runs, about 1.4 GB more).  Trimming after each column is built keeps the
peak near the frame alone; it costs a walk of the heap's free lists, a few milliseconds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable


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
