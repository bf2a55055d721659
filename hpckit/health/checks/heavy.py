"""The nightly tier: GEMM throughput, device memory copy bandwidth and NCCL all_reduce, judged against the
hardware table (peak figure x the type's health fraction, minus its tolerance)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpckit.health.context import Context
from hpckit.health.gpubench import BenchReport, BenchUnavailable
from hpckit.health.model import Bounds, Measure, absent, judge, ok
from hpckit.health.registry import check

if TYPE_CHECKING:  # the hardware table (pydantic) loads only when a GPU bench ran: node jobs start faster
    from hpckit.hardware import GpuType, HealthFractions


def _report(ctx: Context, metric: str) -> BenchReport | Measure | None:
    """The bench results, an 'absent' row when they cannot run here, or None on a CPU node."""
    if not ctx.expected_gpus() and not ctx.gpus().usable:
        return None
    try:
        return ctx.bench()
    except BenchUnavailable as exc:
        return absent(metric, str(exc))


@dataclass(frozen=True)
class _PerGpu:
    """How one per-GPU heavy figure is read and judged; gemm and copy differ only in these."""

    report_metric: str
    metric: str
    unit: str
    fault: str
    what: str
    value: Callable[[Any], float]
    peak: Callable[[GpuType], float | None]
    fraction: Callable[[HealthFractions], float]
    missing: str


def _per_gpu(ctx: Context, spec: _PerGpu) -> Iterator[Measure]:
    report = _report(ctx, spec.report_metric)
    if not isinstance(report, BenchReport):
        yield from [report] if report else []
        return
    entry = ctx.gpu_type()
    peak = spec.peak(entry) if entry else None
    health = entry.health if entry else None
    for gpu in report.gpus:
        metric, value = f"gpu{gpu.index}.{spec.metric}", round(spec.value(gpu), 1)
        if peak is None or health is None:
            yield ok(metric, value, spec.unit, f"{gpu.name}: {spec.missing}; history only")
            continue
        bounds = Bounds(peak * spec.fraction(health), rel=health.tolerance, side="low")
        yield judge(metric, value, spec.unit, bounds, spec.fault, what=f"gpu{gpu.index} {spec.what}")


_GEMM = _PerGpu(
    "gemm",
    "tflops",
    "TFLOP/s",
    "gemm-slow",
    "bf16 GEMM",
    lambda g: g.gemm_tflops,
    lambda e: e.bf16_dense_tflops,
    lambda h: h.gemm_fraction,
    "no bf16 figure in the hardware table",
)
_COPY = _PerGpu(
    "copy",
    "copy",
    "GB/s",
    "copy-slow",
    "device copy",
    lambda g: g.copy_gbps,
    lambda e: e.mem_bw_gbps,
    lambda h: h.copy_fraction,
    "no bandwidth figure in the hardware table",
)


@check("gpu.gemm", tier="nightly")
def gemm(ctx: Context) -> Iterator[Measure]:
    """bf16 GEMM TFLOP/s per GPU vs the type's dense bf16 peak x gemm_fraction."""
    return _per_gpu(ctx, _GEMM)


@check("gpu.copy", tier="nightly")
def copy(ctx: Context) -> Iterator[Measure]:
    """Device-to-device copy GB/s per GPU vs the type's memory bandwidth x copy_fraction."""
    return _per_gpu(ctx, _COPY)


@check("gpu.nccl", tier="nightly")
def nccl(ctx: Context) -> Iterator[Measure]:
    """Single-node NCCL all_reduce bus bandwidth vs the type's NVLink figure (without NVLS)."""
    report = _report(ctx, "busbw")
    if not isinstance(report, BenchReport):
        yield from [report] if report else []
        return
    if report.nccl_busbw_gbps is None:
        yield absent("busbw", report.nccl_detail)
        return
    value = round(report.nccl_busbw_gbps, 1)
    entry = ctx.gpu_type()
    figure = entry.nvlink_busbw_gbps.plain if entry and entry.nvlink_busbw_gbps else None
    if figure is None or entry is None or entry.health is None:
        yield ok("busbw", value, "GB/s", f"{report.nccl_detail}: no NVLink figure to judge against; history only")
        return
    bounds = Bounds(figure, rel=entry.health.tolerance, side="low")
    yield judge("busbw", value, "GB/s", bounds, "nccl-slow", what=report.nccl_detail)
