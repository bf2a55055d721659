"""GPU checks (quick tier), on NVML or ``nvidia-smi -q`` records.

Where the node has no NVIDIA driver tools at all (the lab), every check but the device count says
UNKNOWN/absent; the device count then counts ``/dev/nvidia<N>`` character devices, so a GPU whose device
node vanished is still caught.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from hpckit.health.context import Context
from hpckit.health.model import Measure, Status, absent, fail, ok, unknown, warn
from hpckit.health.registry import check

if TYPE_CHECKING:
    from hpckit.hw import GpuInfo, NvlinkGpu

_DEV = re.compile(r"^nvidia(\d+)$")


def _gpu_label(gpu: GpuInfo, position: int) -> str:
    return f"gpu{gpu.index if gpu.index is not None else position}"


def _not_usable(ctx: Context) -> Measure | None:
    """The row every per-GPU check gives when the driver cannot be asked (None when it can)."""
    facts = ctx.gpus()
    if facts.source == "absent":
        return absent("gpus", facts.detail)
    if facts.source == "error":
        return unknown("gpus", "gpu-driver-error", facts.detail)
    return None


def _gpus_expected(ctx: Context) -> bool:
    return bool(ctx.expected_gpus()) or ctx.gpus().usable


def _per_gpu(ctx: Context, judge_one: Callable[[str, GpuInfo], Iterable[Measure]]) -> Iterator[Measure]:
    if not _gpus_expected(ctx):
        return  # a CPU node: nothing to say
    blocked = _not_usable(ctx)
    if blocked is not None:
        yield blocked
        return
    for position, gpu in enumerate(ctx.gpus().gpus):
        yield from judge_one(_gpu_label(gpu, position), gpu)


@check("gpu.count")
def count(ctx: Context) -> Iterator[Measure]:
    """As many GPUs as the blueprint declares (NVML/nvidia-smi; /dev/nvidia<N> without a driver)."""
    expected = ctx.expected_gpus()
    facts = ctx.gpus()
    if facts.usable:
        found = [f"{_gpu_label(g, i)} {g.bus_id}" for i, g in enumerate(facts.gpus)]
        actual, source = len(found), f"{facts.detail}: {', '.join(found) or 'none'}"
    elif facts.source == "error":
        if "did not finish" in facts.detail:
            yield unknown("gpus", "gpu-driver-hung", facts.detail)
        else:
            yield fail("gpus", "gpu-driver", f"the NVIDIA driver answers with an error: {facts.detail}")
        return
    else:
        devices = _device_nodes(ctx)
        actual = len(devices)
        source = f"no driver tools; /dev character devices: {', '.join(f'nvidia{d}' for d in devices) or 'none'}"
        if expected and actual < expected:
            missing = sorted(set(range(expected)) - set(devices))
            source += f"; missing: {', '.join(f'/dev/nvidia{d}' for d in missing)}"
    if not expected:
        if actual:
            yield ok("gpus", float(actual), "gpus", source)
        return
    if actual < expected:
        yield fail("gpus", "gpu-missing", f"{actual} of {expected} GPUs: {source}", float(actual), "gpus")
    elif actual > expected:
        yield warn("gpus", "gpu-extra", f"{actual} GPUs, blueprint says {expected}: {source}", float(actual), "gpus")
    else:
        yield ok("gpus", float(actual), "gpus", source)


def _device_nodes(ctx: Context) -> list[int]:
    names = ctx.probe.listdir("/dev") or []
    found = [int(m.group(1)) for n in names if (m := _DEV.match(n))]
    return sorted(d for d in found if ctx.probe.is_char_device(f"/dev/nvidia{d}"))


@check("gpu.ecc")
def ecc(ctx: Context) -> Iterator[Measure]:
    """ECC is on and no uncorrected error since the driver loaded (volatile counters)."""

    def one(label: str, gpu: GpuInfo) -> Iterator[Measure]:
        mode = gpu.ecc_mode_current
        if mode is not None and mode not in ("Enabled", "Disabled"):
            yield fail(
                f"{label}.mode", "ecc-state", f"{label} {gpu.bus_id}: ECC mode reads {mode!r}: GPU in a bad state"
            )
            return
        if mode == "Disabled":
            yield warn(f"{label}.mode", "ecc-off", f"{label} {gpu.bus_id}: ECC is disabled")
        elif mode is not None and gpu.ecc_mode_pending not in (None, mode):
            yield warn(f"{label}.mode", "ecc-pending", f"{label}: ECC {mode}, {gpu.ecc_mode_pending} after reset")
        volatile = gpu.ecc_volatile
        uncorrected = volatile.uncorrectable if volatile else None
        if volatile is not None and volatile.sram_threshold_exceeded:
            yield fail(f"{label}.sram", "ecc-sram-threshold", f"{label} {gpu.bus_id}: SRAM threshold exceeded")
        if uncorrected:
            yield fail(
                f"{label}.uncorrected",
                "ecc-uncorrected",
                f"{label} {gpu.bus_id}: {uncorrected} uncorrected ECC errors since the driver loaded",
                float(uncorrected),
                "errors",
            )
        elif uncorrected is not None:
            yield ok(f"{label}.uncorrected", 0.0, "errors", f"{label}: ECC {mode or '?'}, no uncorrected errors")

    yield from _per_gpu(ctx, one)


@check("gpu.remap")
def remap(ctx: Context) -> Iterator[Measure]:
    """No pending or failed row remap (Ampere+), no pending page retirement (older GPUs)."""

    def one(label: str, gpu: GpuInfo) -> Iterator[Measure]:
        rows, pages = gpu.remapped_rows, gpu.retired_pages
        where = f"{label} {gpu.bus_id}"
        if rows is not None and rows.failure:
            yield fail(f"{label}.remap", "remap-failed", f"{where}: row remapping failed: replace the GPU")
        elif rows is not None and rows.pending:
            yield fail(f"{label}.remap", "remap-pending", f"{where}: row remap pending: reset the GPU to apply it")
        elif rows is not None and rows.histogram.get("None", 0) > 0:
            yield warn(
                f"{label}.remap", "remap-exhausted", f"{where}: banks without spare rows: {dict(rows.histogram)}"
            )
        elif rows is not None:
            yield ok(f"{label}.remap", float(rows.uncorrectable or 0), "rows", f"{where}: no remap pending")
        if pages is not None and pages.pending:
            yield fail(f"{label}.retired", "retire-pending", f"{where}: page retirement pending: reset the GPU")

    yield from _per_gpu(ctx, one)


@check("gpu.xid")
def xid(ctx: Context) -> Iterator[Measure]:
    """Xid events in the kernel log: hardware Xids fail (until reboot), disputed ones warn."""
    if not _gpus_expected(ctx):
        return
    if ctx.gpus().source == "absent":
        yield absent("xids", ctx.gpus().detail)
        return
    log = ctx.kernel()
    if log.error is not None:
        yield unknown("xids", "kernel-log-unreadable", log.error)
        return
    from hpckit.hw import HwParseError, parse_xid_events

    try:
        events = parse_xid_events(log.text, "kernel log", strict=False)
    except HwParseError as exc:
        yield unknown("xids", "kernel-log-unreadable", str(exc))
        return
    found: list[Measure] = []
    for event in events:
        cls = event.xid_class
        text = f"Xid {event.xid} on {event.bus_id} ({cls.name}): {cls.action}. Log: {event.message[:160]}"
        metric = f"xid{event.xid}:{event.bus_id}"
        if cls.severity == "hardware":
            found.append(fail(metric, f"xid-{event.xid}", text, float(event.xid)))
        elif cls.severity == "disputed":
            found.append(warn(metric, f"xid-{event.xid}", text, float(event.xid)))
    found = _dedupe(ctx.sticky("gpu.xid", found))
    yield ok("xids", float(len(events)), "events", f"{len(events)} Xid events in {log.new_lines} new kernel log lines")
    yield from found


def _dedupe(measures: list[Measure]) -> list[Measure]:
    """One row per (metric, status): a burst of the same Xid on one GPU reads as one finding."""
    seen: dict[tuple[str, Status], Measure] = {}
    for m in measures:
        seen.setdefault((m.metric, m.status), m)
    return list(seen.values())


def _loaded(gpu: GpuInfo) -> bool:
    """Idle GPUs train their PCIe link down to save power; only a busy GPU's link speed means anything."""
    return (gpu.utilization_gpu_pct or 0) >= 10


@check("gpu.pcie")
def pcie(ctx: Context) -> Iterator[Measure]:
    """PCIe link width and generation at the GPU's maximum (generation judged only under load)."""

    def one(label: str, gpu: GpuInfo) -> Iterator[Measure]:
        where = f"{label} {gpu.bus_id}"
        width, width_max = gpu.pcie_width_current, gpu.pcie_width_max
        gen, gen_max = gpu.pcie_gen_current, gpu.pcie_gen_max
        loaded = _loaded(gpu)
        if width is not None and width_max is not None and width < width_max:
            text = f"{where}: PCIe x{width}, capable of x{width_max}" + (" under load" if loaded else "")
            yield (fail if loaded else warn)(f"{label}.width", "pcie-width", text, float(width), "lanes")
        elif width is not None:
            yield ok(f"{label}.width", float(width), "lanes", f"{where}: x{width}")
        if gen is not None and gen_max is not None:
            if gen < gen_max and loaded:
                yield warn(f"{label}.gen", "pcie-gen", f"{where}: PCIe gen {gen} under load, capable of {gen_max}")
            else:
                state = "under load" if loaded else "idle, not judged"
                yield ok(f"{label}.gen", float(gen), "gen", f"{where}: gen {gen} of {gen_max} ({state})")

    yield from _per_gpu(ctx, one)


# Clock event reasons that point at cooling or power delivery, the most specific first (it names the
# fault); the others (Idle, SW Power Cap, Sync Boost ...) are normal operation.
WARN_CLOCK_REASONS = ("HW Power Brake Slowdown", "HW Thermal Slowdown", "SW Thermal Slowdown", "HW Slowdown")


@check("gpu.clocks")
def clocks(ctx: Context) -> Iterator[Measure]:
    """Thermal or power-brake clock slowdowns (warn only)."""

    def one(label: str, gpu: GpuInfo) -> Iterator[Measure]:
        active = [r for r in WARN_CLOCK_REASONS if r in gpu.active_clocks_event_reasons]
        others = ", ".join(gpu.active_clocks_event_reasons) or "none"
        if active:
            fault = "clocks-" + re.sub(r"[^a-z]+", "-", active[0].lower()).strip("-")
            yield warn(f"{label}.clocks", fault, f"{label} {gpu.bus_id}: clocks slowed by {', '.join(active)}")
        else:
            yield ok(f"{label}.clocks", 0.0, "", f"{label}: active reasons: {others}")

    yield from _per_gpu(ctx, one)


@check("gpu.nvlink")
def nvlink(ctx: Context) -> Iterator[Measure]:
    """Every NVLink of an NVLink GPU type (SXM) is up."""
    if not _gpus_expected(ctx):
        return
    blocked = _not_usable(ctx)
    if blocked is not None:
        yield blocked
        return
    entry = ctx.gpu_type()
    expect_links = entry is not None and entry.nvlink_busbw_gbps is not None
    status = ctx.gpus().nvlink
    if status is None:
        if expect_links:
            yield unknown("links", "nvlink-unreadable", "NVLink state could not be read")
        return
    for gpu in status:
        yield _nvlink_gpu(gpu, expect_links)


def _nvlink_gpu(gpu: NvlinkGpu, expect_links: bool) -> Measure:
    label = f"gpu{gpu.index}"
    down = gpu.inactive_links
    up = len(gpu.links) - len(down)
    if not gpu.links:
        if expect_links:
            return fail(f"{label}.nvlink", "nvlink-down", f"{label}: no NVLink up on an NVLink GPU type", 0.0, "links")
        return ok(f"{label}.nvlink", 0.0, "links", f"{label}: no NVLink (PCIe GPU)")
    if down:
        text = f"{label}: NVLink {', '.join(map(str, down))} down ({up} of {len(gpu.links)} up)"
        return (fail if expect_links else warn)(f"{label}.nvlink", "nvlink-down", text, float(up), "links")
    return ok(f"{label}.nvlink", float(up), "links", f"{label}: all {up} NVLinks up")
