"""The port record shared by ibstat, ibstatus and sysfs, and the value spellings those three use."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from hpckit.hw.errors import HwParseError

# ibstat prints "Active"/"Initializing"; ibstatus and sysfs print "4: ACTIVE"/"2: INIT". One spelling out.
_STATES = {
    "down": "DOWN",
    "init": "INIT",
    "initializing": "INIT",
    "armed": "ARMED",
    "active": "ACTIVE",
    "active_defer": "ACTIVE_DEFER",
    "active/defer": "ACTIVE_DEFER",
    "nop": "NOP",
}
_NUMBERED = re.compile(r"^\d+:\s*(?P<text>.*)$")
_RATE = re.compile(r"^(?P<gbps>\d+(?:\.\d+)?)(?:\s*Gb/sec)?(?:\s*\((?P<mode>[^)]*)\))?$")


@dataclass(frozen=True)
class IbPort:
    """One HCA port. ``state`` is ACTIVE/DOWN/INIT/ARMED/ACTIVE_DEFER whatever tool printed it;
    ``physical_state`` keeps the tool's word (LinkUp, Polling, Disabled, ...)."""

    ca: str
    port: int
    state: str | None = None
    physical_state: str | None = None
    rate_gbps: float | None = None
    link_layer: str | None = None  # "InfiniBand" or "Ethernet" (RoCE)
    lid: int | None = None
    sm_lid: int | None = None
    lmc: int | None = None
    port_guid: str | None = None  # 16 lower-case hex digits
    gid: str | None = None
    capability_mask: str | None = None
    width_speed: str | None = None  # "4X NDR", from ibstatus or sysfs
    counters: Mapping[str, int] = field(default_factory=dict)  # sysfs counters/ (link_downed, ...)

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"

    @property
    def link_up(self) -> bool:
        return self.physical_state == "LinkUp"

    @property
    def is_infiniband(self) -> bool:
        return (self.link_layer or "").casefold() == "infiniband"


def port_state(text: str, source: str, line: int | None) -> str:
    word = _without_number(text)
    state = _STATES.get(word.casefold())
    if state is None:
        raise HwParseError(source, line, f"unknown port state {text.strip()!r}")
    return state


def physical_state(text: str, source: str, line: int | None) -> str:
    word = _without_number(text)
    if not word:
        raise HwParseError(source, line, "empty physical state")
    return word


def rate(text: str, source: str, line: int | None) -> tuple[float, str | None]:
    """``"400"`` (ibstat) or ``"400 Gb/sec (4X NDR)"`` (ibstatus, sysfs) -> (400.0, "4X NDR")."""
    match = _RATE.match(text.strip())
    if match is None:
        raise HwParseError(source, line, f"unreadable rate {text.strip()!r}")
    return float(match.group("gbps")), match.group("mode")


def lid(text: str, source: str, line: int | None) -> int:
    """LIDs are decimal in ibstat and hex (``0x33bf``) in ibstatus and sysfs."""
    value = text.strip()
    try:
        return int(value, 16) if value.lower().startswith("0x") else int(value)
    except ValueError:
        raise HwParseError(source, line, f"unreadable LID {value!r}") from None


def _without_number(text: str) -> str:
    match = _NUMBERED.match(text.strip())
    return (match.group("text") if match else text).strip()
