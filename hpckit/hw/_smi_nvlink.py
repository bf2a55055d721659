"""``nvidia-smi nvlink -s`` / ``nvidia-smi nvlink --status`` -> per GPU, per link speed or inactive."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpckit.hw.errors import HwParseError

SOURCE = "nvidia-smi nvlink --status"

_GPU = re.compile(r"^GPU (?P<index>\d+): (?P<name>.*?)(?: \(UUID: (?P<uuid>[^)]*)\))?$")
_LINK = re.compile(r"^Link (?P<link>\d+): (?P<state>.*)$")
_SPEED = re.compile(r"^(?P<speed>\d+(?:\.\d+)?) GB/s$")
# What the driver prints for a link that is not trained, or a whole GPU whose links are all down.
_INACTIVE = re.compile(r"^<?inactive>?$", re.IGNORECASE)
_NVML_NOTICE = re.compile(r"^NVML: .*", re.IGNORECASE)


@dataclass(frozen=True)
class NvlinkLink:
    link: int
    speed_gbps: float | None  # GB/s per direction as printed; None when the link is inactive

    @property
    def active(self) -> bool:
        return self.speed_gbps is not None


@dataclass(frozen=True)
class NvlinkGpu:
    index: int
    name: str
    uuid: str | None
    links: tuple[NvlinkLink, ...]
    line: int

    @property
    def inactive_links(self) -> tuple[int, ...]:
        return tuple(link.link for link in self.links if not link.active)


def parse_nvlink_status(text: str, source: str = SOURCE) -> list[NvlinkGpu]:
    """Parse ``nvidia-smi nvlink -s``; a GPU without NVLink (or with all links down) gets no links."""
    gpus: list[NvlinkGpu] = []
    links: list[NvlinkLink] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or _NVML_NOTICE.match(line):
            continue
        gpu = _GPU.match(line)
        if gpu is not None:
            links = []
            gpus.append(NvlinkGpu(int(gpu.group("index")), gpu.group("name"), gpu.group("uuid"), (), number))
            continue
        if not gpus:
            raise HwParseError(source, number, f"expected 'GPU <n>: <name>' first, got {line!r}")
        links.append(_link(line, number, source))
        last = gpus[-1]
        gpus[-1] = NvlinkGpu(last.index, last.name, last.uuid, tuple(links), last.line)
    if not gpus:
        raise HwParseError(source, None, "no 'GPU <n>: <name>' line found")
    return gpus


def _link(line: str, number: int, source: str) -> NvlinkLink:
    match = _LINK.match(line)
    if match is None:
        raise HwParseError(source, number, f"expected 'Link <n>: <speed> GB/s', got {line!r}")
    state = match.group("state").strip()
    if _INACTIVE.match(state):
        return NvlinkLink(int(match.group("link")), None)
    speed = _SPEED.match(state)
    if speed is None:
        raise HwParseError(source, number, f"link {match.group('link')}: unreadable speed {state!r}")
    return NvlinkLink(int(match.group("link")), float(speed.group("speed")))
