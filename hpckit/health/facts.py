"""Observations several checks share, gathered once per run: the GPUs (NVML, else nvidia-smi) and the
kernel log since the last run."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from hpckit.health.probe import shown

if TYPE_CHECKING:
    from hpckit.health.probe import Probe
    from hpckit.hw import GpuInfo, NvlinkGpu

# The parsers are imported where used: a node without NVIDIA tools (the lab) never needs them, and their
# regular expressions cost start-up time on every quick-tier run.

GpuSource = Literal["nvml", "nvidia-smi", "absent", "error"]
NVIDIA_SMI_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class GpuFacts:
    """What the driver says about the GPUs. ``absent``: no NVML and no nvidia-smi on this node;
    ``error``: the driver stack is there but answered with an error (``detail`` says which)."""

    source: GpuSource
    gpus: tuple[GpuInfo, ...] = ()
    nvlink: tuple[NvlinkGpu, ...] | None = None  # None: not asked or not available
    detail: str = ""

    @property
    def usable(self) -> bool:
        return self.source in ("nvml", "nvidia-smi")


def gather_gpus(probe: Probe) -> GpuFacts:
    nv = probe.nvml()
    if nv is not None:
        from hpckit.hw.nvml import NvmlError, gpus_from_nvml, nvlink_from_nvml

        try:
            gpus = gpus_from_nvml(nv)
            return GpuFacts("nvml", tuple(gpus), tuple(nvlink_from_nvml(nv, gpus)), "NVML")
        except NvmlError as exc:
            return GpuFacts("error", detail=f"NVML: {exc}")
    return _from_nvidia_smi(probe)


def _from_nvidia_smi(probe: Probe) -> GpuFacts:
    done = probe.run(["nvidia-smi", "-q"], timeout=NVIDIA_SMI_TIMEOUT_S)
    if done.missing:
        return GpuFacts("absent", detail="no NVIDIA driver tools here (neither NVML nor nvidia-smi)")
    if done.timed_out:
        return GpuFacts("error", detail=shown(done))
    if not done.ok:
        return GpuFacts("error", detail=shown(done))
    from hpckit.hw import HwParseError, parse_query_q

    try:
        gpus = parse_query_q(done.stdout, "nvidia-smi -q")
    except HwParseError as exc:
        return GpuFacts("error", detail=str(exc))
    return GpuFacts("nvidia-smi", tuple(gpus), _nvlink_from_smi(probe), "nvidia-smi -q")


def _nvlink_from_smi(probe: Probe) -> tuple[NvlinkGpu, ...] | None:
    done = probe.run(["nvidia-smi", "nvlink", "--status"], timeout=NVIDIA_SMI_TIMEOUT_S)
    if not done.ok:
        return None
    from hpckit.hw import HwParseError, parse_nvlink_status

    try:
        return tuple(parse_nvlink_status(done.stdout, "nvidia-smi nvlink --status"))
    except HwParseError:
        return None


# --- kernel log ----------------------------------------------------------------------------------------

_STAMP = re.compile(r"^\[\s*(?P<uptime>\d+\.\d+)\]")


@dataclass(frozen=True)
class KernelLog:
    """The kernel log lines since the previous run of this tier on this boot."""

    boot_id: str
    text: str = ""
    cursor: float | None = None  # the uptime stamp of the last line read (the next run starts after it)
    error: str | None = None  # dmesg could not be read
    first_read: bool = False  # no cursor for this boot: the whole log of this boot was read
    new_lines: int = 0
    lines: tuple[str, ...] = field(default_factory=tuple)


def read_kernel_log(probe: Probe, boot_id: str, after: float | None) -> KernelLog:
    """``dmesg`` lines stamped after ``after`` (uptime seconds). Lines without a stamp (continuations)
    go with the line before them."""
    done = probe.run(["dmesg", "--kernel"], timeout=10.0)
    if not done.ok:
        return KernelLog(boot_id, cursor=after, error=shown(done))
    keep: list[str] = []
    cursor = after
    taking = after is None
    for line in done.stdout.splitlines():
        stamp = _STAMP.match(line)
        if stamp is not None:
            uptime = float(stamp.group("uptime"))
            taking = after is None or uptime > after
            if cursor is None or uptime > cursor:
                cursor = uptime
        if taking:
            keep.append(line)
    return KernelLog(boot_id, "\n".join(keep), cursor, None, after is None, len(keep), tuple(keep))
