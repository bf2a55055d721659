"""The indented ``key : value`` tree that ``nvidia-smi -q`` prints, as a plain tree of entries.

The key column width changed across drivers (44 columns up to 545, 57 from 590, narrower again inside
``Processes``), so entries are split on the first ``" : "`` and nested by indentation only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from hpckit.hw.errors import HwParseError

Names = str | tuple[str, ...]

_KEY_VALUE = re.compile(r"^(?P<key>\S.*?)\s*:(?:\s(?P<value>.*))?$")
_GPU_HEADER = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$")
_SECTION = re.compile(r"^[A-Za-z][A-Za-z0-9 ./()-]*$")
# What nvidia-smi prints on stdout instead of a report when it cannot talk to the driver or finds no GPU.
_FAILURES = (
    "No devices were found",
    "NVIDIA-SMI has failed",
    "Failed to initialize NVML",
    "Unable to determine",
)


@dataclass
class Entry:
    """One line of the report: a section header (``value is None``) or a ``key : value`` pair."""

    key: str
    value: str | None
    line: int
    children: list[Entry] = field(default_factory=list)

    def child(self, names: Names) -> Entry | None:
        """The child named ``names`` (or the first of several alternatives, in order of preference).

        Case-insensitive, because drivers spell the same key ``Gpu`` and ``GPU``.
        """
        for name in (names,) if isinstance(names, str) else names:
            found = next(self.children_named(name), None)
            if found is not None:
                return found
        return None

    def children_named(self, name: str) -> Iterator[Entry]:
        return (c for c in self.children if c.key.casefold() == name.casefold())

    def at(self, *path: Names) -> Entry | None:
        node: Entry | None = self
        for names in path:
            node = node.child(names) if node is not None else None
        return node


@dataclass
class Report:
    header: Entry
    gpus: list[Entry]


def build_report(text: str, source: str) -> Report:
    """Split ``nvidia-smi -q`` text into the top-level header entries and one tree per GPU."""
    header = Entry("", None, 0)
    gpus: list[Entry] = []
    stack: list[tuple[int, Entry]] = [(-1, header)]
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.expandtabs(4).rstrip()
        content = line.strip()
        if not content or (content.startswith("=") and "NVSMI LOG" in content):
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0:
            stack = _top_level(content, number, source, header, gpus)
            continue
        if len(stack) < 2:
            raise HwParseError(source, number, f"indented line outside any 'GPU <bus id>' section: {content!r}")
        while stack[-1][0] >= indent:
            stack.pop()
        entry = _entry(content, number)
        stack[-1][1].children.append(entry)
        stack.append((indent, entry))
    return Report(header, gpus)


def _top_level(content: str, number: int, source: str, header: Entry, gpus: list[Entry]) -> list[tuple[int, Entry]]:
    """Handle a line in column 0; return the new indentation stack."""
    gpu = _GPU_HEADER.match(content)
    if gpu is not None:
        entry = Entry("GPU", gpu.group("bus"), number)
        gpus.append(entry)
        return [(-1, header), (0, entry)]
    if content.startswith(_FAILURES):
        raise HwParseError(source, number, f"nvidia-smi reported a failure: {content}")
    entry = _entry(content, number)
    if entry.value is None and _SECTION.match(content) is None:
        raise HwParseError(source, number, f"unexpected line {content!r} (not 'key : value', not 'GPU <bus id>')")
    header.children.append(entry)
    # Newer drivers print a few top-level sections (vGPU driver capability) before the GPUs.
    return [(-1, header), (0, entry)] if entry.value is None else [(-1, header)]


def _entry(content: str, number: int) -> Entry:
    match = _KEY_VALUE.match(content)
    if match is None:
        return Entry(content, None, number)
    return Entry(match.group("key"), (match.group("value") or "").strip(), number)
