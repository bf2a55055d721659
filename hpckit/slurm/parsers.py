"""Pure parsers of Slurm command output (text in, typed values out)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpckit.errors import HpckitError

# sinfo's %T: a state name with optional flags appended ("idle*" not responding, "idle~" powered off,
# "mixed-" planned, "drained@" reboot pending ...). See sinfo(1), NODE STATE CODES.
_FLAGS = "*~#!%$@^-+"


class SlurmParseError(HpckitError):
    pass


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str  # base state, lower case: idle, allocated, mixed, down, drained, draining, ...
    flags: str  # the suffix characters
    reason: str

    @property
    def responding(self) -> bool:
        return "*" not in self.flags

    @property
    def usable(self) -> bool:
        return self.responding and self.state in {"idle", "mixed", "allocated", "completing"}


# Reasons slurmctld writes itself when it takes a node out (no person, no tool set them).
SLURM_REASONS = (
    "Not responding",
    "Kill task failed",
    "Node unexpectedly rebooted",
    "Prolog error",
    "Epilog error",
    "batch job complete failure",
)


def reason_by_slurm(reason: str) -> bool:
    return any(reason.startswith(r) for r in SLURM_REASONS)


SINFO_NODES_FORMAT = "%N|%T|%E"


def parse_sinfo_nodes(text: str) -> list[NodeState]:
    """Parse `sinfo -h -N -o '%N|%T|%E'`; a node listed in several partitions appears once."""
    nodes: dict[str, NodeState] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|", 2)
        if len(parts) != 3:
            raise SlurmParseError(f"sinfo output line {lineno}: expected NAME|STATE|REASON, got {line!r}")
        name, raw_state, reason = (p.strip() for p in parts)
        base = raw_state.rstrip(_FLAGS)
        nodes.setdefault(name, NodeState(name, base.lower(), raw_state[len(base) :], reason))
    return list(nodes.values())


_VERSION = re.compile(r"slurm(?:-wlm)?\s+(\d+\.\d+(?:\.\d+)?)", re.I)


def parse_version(text: str) -> str:
    match = _VERSION.search(text)
    if not match:
        raise SlurmParseError(f"not a Slurm version string: {text.strip()!r}")
    return match.group(1)
