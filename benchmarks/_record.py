"""Write one benchmark's section of benchmarks/RESULTS.md, keeping the other sections as they are."""

from __future__ import annotations

import os
import platform
import re
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEADER = "# Benchmark results\n\nEach section is rewritten by the script named in it; run it again to refresh.\n"


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        mem_kb = 0
    return f"{os.cpu_count()} cores ({cpu}), {mem_kb / 2**20:.0f} GiB RAM, Python {platform.python_version()}"


def record(name: str, body: str) -> None:
    """Replace (or add) the section `name` of RESULTS.md with `body`, stamped with date and machine."""
    stamp = time.strftime("%Y-%m-%d")
    section = f"<!-- bench:{name} -->\n{body.rstrip()}\n\n_{stamp}, {machine()}_\n<!-- /bench:{name} -->\n"
    text = RESULTS.read_text() if RESULTS.exists() else HEADER
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->\n", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip() + "\n\n" + section
    RESULTS.write_text(text)
