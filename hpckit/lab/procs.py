"""Host-side process facts read from /proc: identity across pid reuse, children, killing by pid."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

_PROC = Path("/proc")


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None when no such process exists.

    Together with the pid this names one process for good: a reused pid has a later start time.
    """
    try:
        stat = (_PROC / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    # Fields after the command name, which may hold spaces and parentheses, start after the last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


def is_alive(pid: int, started: int) -> bool:
    return start_time(pid) == started


def parent_of(pid: int) -> int | None:
    try:
        stat = (_PROC / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def children_of(pid: int) -> list[int]:
    """Pids whose parent is ``pid`` (this kernel may lack /proc/PID/task/TID/children)."""
    found = []
    for entry in _PROC.iterdir():
        if entry.name.isdigit() and parent_of(int(entry.name)) == pid:
            found.append(int(entry.name))
    return found


def namespace_id(pid: int, kind: str) -> str | None:
    """The ``/proc/PID/ns/<kind>`` link text, e.g. 'net:[4026532]', or None when it cannot be read."""
    try:
        return os.readlink(_PROC / str(pid) / "ns" / kind)
    except OSError:
        return None


def pids_in_namespace(kind: str, ns_id: str) -> list[int]:
    """Every host pid whose ``kind`` namespace is ``ns_id``."""
    return [int(e.name) for e in _PROC.iterdir() if e.name.isdigit() and namespace_id(int(e.name), kind) == ns_id]


def kill_exactly(pid: int, started: int) -> None:
    """SIGKILL ``pid`` if it is still the process that started at ``started``."""
    if is_alive(pid, started):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def wait_gone(pid: int, started: int, timeout: float) -> bool:
    """Wait until the process is gone (or a zombie); True when it went in time."""
    deadline = time.monotonic() + timeout
    while is_alive(pid, started):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
