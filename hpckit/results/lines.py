"""Line plumbing shared by the text parsers: launcher prefixes and numbered lines."""

from __future__ import annotations

import re

# Launchers put a rank tag in front of every line; each form carries the rank in a different group:
#   mpirun --tag-output   "[1,3]<stdout>:"      torchrun/torch.distributed.run "[default3]:"
#   srun -l               "  3: " (right-aligned, may be "0:" alone on an empty line)
PREFIX_RE = re.compile(r"\[\d+,(\d+)\]<std(?:out|err)>:|\[default(\d+)\]:|[ \t]*(\d+):(?:[ \t]|$)")


def strip_prefix(line: str) -> tuple[str, int]:
    """(line without its launcher prefix, rank tag or -1)."""
    # cheap gate first: a prefix starts with '[' or has its ':' within the first few characters
    if line[:1] != "[" and line.find(":", 0, 10) < 0:
        return line, -1
    m = PREFIX_RE.match(line)
    if m is None:
        return line, -1
    tag = m.group(1) or m.group(2) or m.group(3)
    return line[m.end() :], int(tag)


def split_lines(text: str) -> list[str]:
    """Lines split on newlines only, so that line numbers match what an editor shows."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def excerpt(line: str, limit: int = 160) -> str:
    """A line short enough for an error message."""
    line = line.rstrip("\r\n")
    return line if len(line) <= limit else line[: limit - 3] + "..."
