"""``/proc/meminfo`` -> the memory a host has, in the unit slurm.conf's RealMemory uses."""

from __future__ import annotations

import re

from hpckit.hw.errors import HwParseError

_MEM_TOTAL = re.compile(r"^MemTotal:\s*(\d+)\s*kB\s*$", re.MULTILINE)


def mem_total_mb(text: str, source: str = "/proc/meminfo") -> int:
    """MemTotal in MiB (the kernel counts KiB; slurmd's RealMemory is MiB)."""
    match = _MEM_TOTAL.search(text)
    if match is None:
        raise HwParseError(source, None, "no 'MemTotal: N kB' line")
    return int(match.group(1)) // 1024
