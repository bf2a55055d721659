"""NVML (through nvidia-ml-py's ``pynvml``) -> the same :class:`GpuInfo` records ``nvidia-smi -q`` gives.

NVML answers in ~ms where ``nvidia-smi -q`` takes seconds on an 8-GPU node, which is what lets the quick
tier stay under its time budget. The binding is passed in (duck-typed) so that tests can give recorded
values instead of a driver.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from hpckit.hw import EccCounts, GpuInfo, NvlinkGpu, NvlinkLink, RemappedRows

_T = TypeVar("_T")

# nvmlClocksEventReason* bits -> the names nvidia-smi -q prints under "Clocks Event Reasons".
CLOCK_EVENT_BITS = {
    0x1: "Idle",
    0x2: "Applications Clocks Setting",
    0x4: "SW Power Cap",
    0x8: "HW Slowdown",
    0x10: "Sync Boost",
    0x20: "SW Thermal Slowdown",
    0x40: "HW Thermal Slowdown",
    0x80: "HW Power Brake Slowdown",
    0x100: "Display Clock Setting",
}
NVLINK_MAX_LINKS = 18
_UNCORRECTED, _CORRECTED, _VOLATILE, _AGGREGATE = 1, 0, 0, 1


class NvmlError(Exception):
    """NVML answered with an error that is not "not supported" (the device is lost, the driver mismatched)."""


def _call(nv: Any, func: Callable[..., _T], *args: Any) -> _T | None:
    """Call an NVML function; None where the GPU does not support it, NvmlError for a real error."""
    try:
        return func(*args)
    except Exception as exc:
        if _not_supported(nv, exc):
            return None
        raise NvmlError(f"{getattr(func, '__name__', 'nvml')}: {exc}") from None


def _not_supported(nv: Any, exc: Exception) -> bool:
    names = ("NVMLError_NotSupported", "NVMLError_FunctionNotFound", "NVMLError_NotFound", "NVMLError_InvalidArgument")
    return any(isinstance(exc, cls) for n in names if isinstance(cls := getattr(nv, n, None), type))


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def gpus_from_nvml(nv: Any) -> list[GpuInfo]:
    count = _call(nv, nv.nvmlDeviceGetCount)
    gpus = []
    for index in range(count or 0):
        handle = _call(nv, nv.nvmlDeviceGetHandleByIndex, index)
        gpus.append(_gpu(nv, index, handle))
    return gpus


def _gpu(nv: Any, index: int, handle: Any) -> GpuInfo:
    pci = _call(nv, nv.nvmlDeviceGetPciInfo, handle)
    ecc = _call(nv, nv.nvmlDeviceGetEccMode, handle)
    util = _call(nv, nv.nvmlDeviceGetUtilizationRates, handle)
    pstate = _call(nv, nv.nvmlDeviceGetPerformanceState, handle)
    return GpuInfo(
        index=index,
        bus_id=_text(getattr(pci, "busId", None)) or f"index {index}",
        line=0,
        product_name=_text(_call(nv, nv.nvmlDeviceGetName, handle)),
        uuid=_text(_call(nv, nv.nvmlDeviceGetUUID, handle)),
        ecc_mode_current=_mode(ecc[0]) if ecc else None,
        ecc_mode_pending=_mode(ecc[1]) if ecc else None,
        ecc_volatile=_ecc(nv, handle, _VOLATILE),
        ecc_aggregate=_ecc(nv, handle, _AGGREGATE),
        remapped_rows=_remapped(nv, handle),
        pcie_gen_current=_call(nv, nv.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        pcie_gen_max=_call(nv, nv.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        pcie_width_current=_call(nv, nv.nvmlDeviceGetCurrPcieLinkWidth, handle),
        pcie_width_max=_call(nv, nv.nvmlDeviceGetMaxPcieLinkWidth, handle),
        clocks_event_reasons=_clock_reasons(nv, handle),
        performance_state=None if pstate is None else f"P{pstate}",
        utilization_gpu_pct=getattr(util, "gpu", None),
    )


def _mode(value: int) -> str:
    return "Enabled" if value else "Disabled"


def _ecc(nv: Any, handle: Any, counter: int) -> EccCounts | None:
    uncorrected = _call(nv, nv.nvmlDeviceGetTotalEccErrors, handle, _UNCORRECTED, counter)
    corrected = _call(nv, nv.nvmlDeviceGetTotalEccErrors, handle, _CORRECTED, counter)
    if uncorrected is None and corrected is None:
        return None
    return EccCounts(correctable=corrected, uncorrectable=uncorrected)


def _remapped(nv: Any, handle: Any) -> RemappedRows | None:
    func = getattr(nv, "nvmlDeviceGetRemappedRows", None)
    rows = _call(nv, func, handle) if func is not None else None
    if rows is None:
        return None
    corrected, uncorrected, pending, failed = rows
    return RemappedRows(int(corrected), int(uncorrected), bool(pending), bool(failed))


def _clock_reasons(nv: Any, handle: Any) -> dict[str, bool]:
    func = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    mask = _call(nv, func, handle) if func is not None else None
    if mask is None:
        return {}
    return {name: bool(mask & bit) for bit, name in CLOCK_EVENT_BITS.items()}


def nvlink_from_nvml(nv: Any, gpus: list[GpuInfo]) -> list[NvlinkGpu]:
    """Per GPU, the state of each NVLink it has (links the GPU lacks answer "not supported")."""
    out = []
    for gpu in gpus:
        assert gpu.index is not None
        handle = _call(nv, nv.nvmlDeviceGetHandleByIndex, gpu.index)
        links = []
        for link in range(NVLINK_MAX_LINKS):
            state = _call(nv, nv.nvmlDeviceGetNvLinkState, handle, link)
            if state is None:
                continue
            # NVML gives the state, not the speed: an active link gets NaN GB/s ("up, speed not read").
            links.append(NvlinkLink(link, float("nan") if state else None))
        out.append(NvlinkGpu(gpu.index, gpu.product_name or "", gpu.uuid, tuple(links), 0))
    return out
