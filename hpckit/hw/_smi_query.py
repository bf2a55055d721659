"""``nvidia-smi -q`` (and ``-q -d ECC,ROW_REMAPPER`` style subsets) -> :class:`GpuInfo` per GPU."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from hpckit.hw._smi_tree import Entry, Names, build_report
from hpckit.hw.errors import HwParseError, no_value, parse_flag, parse_int, parse_number

SOURCE = "nvidia-smi -q"


@dataclass(frozen=True)
class EccCounts:
    """ECC error counters of one kind (volatile or aggregate).

    Hopper-era drivers split SRAM/DRAM (and, from 535, SRAM uncorrectable into Parity and SEC-DED, summed
    here); older drivers print Single Bit / Double Bit tables, whose ``Total`` rows fill ``correctable`` /
    ``uncorrectable`` and whose ``Device Memory`` rows fill the DRAM fields. ``None`` means not reported.
    """

    correctable: int | None
    uncorrectable: int | None
    sram_correctable: int | None = None
    sram_uncorrectable: int | None = None
    dram_correctable: int | None = None
    dram_uncorrectable: int | None = None
    sram_threshold_exceeded: bool | None = None


@dataclass(frozen=True)
class RetiredPages:
    """Dynamic page retirement (pre-Ampere GPUs; Ampere and newer report N/A and use row remapping)."""

    single_bit: int | None
    double_bit: int | None
    pending: bool | None


@dataclass(frozen=True)
class RemappedRows:
    """Row remapper state (Ampere and newer). ``pending`` means a GPU reset is needed to apply a remap."""

    correctable: int | None
    uncorrectable: int | None
    pending: bool | None
    failure: bool | None
    histogram: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class MigDevice:
    index: int | None
    gpu_instance_id: int | None
    compute_instance_id: int | None
    multiprocessors: int | None
    memory_total_mib: int | None
    memory_used_mib: int | None


@dataclass(frozen=True)
class GpuInfo:
    """One GPU of an ``nvidia-smi -q`` report. Every field the report did not carry (or printed as N/A)
    is ``None``; a ``-q -d ECC,ROW_REMAPPER`` subset fills only the ECC and remapping fields.

    ``index`` is the GPU's position in the report, which is nvidia-smi's index unless the report was
    filtered with ``-i`` (then fewer sections than ``Attached GPUs`` are present and ``index`` is None).
    """

    index: int | None
    bus_id: str
    line: int
    product_name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    minor_number: int | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    vbios_version: str | None = None
    persistence_mode: bool | None = None
    mig_mode_current: bool | None = None
    mig_mode_pending: bool | None = None
    mig_devices: tuple[MigDevice, ...] = ()
    # As printed: "Enabled", "Disabled", or "Unknown Error" on a GPU in a bad state.
    ecc_mode_current: str | None = None
    ecc_mode_pending: str | None = None
    ecc_volatile: EccCounts | None = None
    ecc_aggregate: EccCounts | None = None
    retired_pages: RetiredPages | None = None
    remapped_rows: RemappedRows | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    pcie_replays: int | None = None  # "Replays Since Reset": a climbing count points at a bad PCIe link
    clocks_event_reasons: Mapping[str, bool] = field(default_factory=dict)
    performance_state: str | None = None
    temperature_c: float | None = None
    memory_temperature_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    utilization_gpu_pct: int | None = None
    utilization_memory_pct: int | None = None

    @property
    def uuid_masked(self) -> bool:
        """True when the collector replaced the UUID by zeros (shared captures do this)."""
        return self.uuid is not None and set(self.uuid.removeprefix("GPU-").replace("-", "")) == {"0"}

    @property
    def active_clocks_event_reasons(self) -> tuple[str, ...]:
        return tuple(name for name, active in self.clocks_event_reasons.items() if active)


def parse_query_q(text: str, source: str = SOURCE) -> list[GpuInfo]:
    """Parse ``nvidia-smi -q`` output (full or ``-d`` subsets, drivers 535..590) into one GpuInfo per GPU."""
    if not text.strip():
        raise HwParseError(source, None, "empty output")
    report = build_report(text, source)
    if not report.gpus:
        raise HwParseError(source, None, "no 'GPU <bus id>' section found; is this `nvidia-smi -q` output?")
    reader = _Reader(source)
    header = report.header
    driver = reader.text(header.child("Driver Version"))
    cuda = reader.text(header.child("CUDA Version"))
    attached = reader.integer(header.child("Attached GPUs"), "Attached GPUs")
    complete = attached is None or attached == len(report.gpus)
    return [_gpu(reader, gpu, index if complete else None, driver, cuda) for index, gpu in enumerate(report.gpus)]


class _Reader:
    """Typed access to entries; every conversion error names the line it came from."""

    def __init__(self, source: str) -> None:
        self.source = source

    def text(self, entry: Entry | None) -> str | None:
        if entry is None or entry.value is None or no_value(entry.value):
            return None
        return entry.value

    def state(self, entry: Entry | None) -> str | None:
        """A mode as printed; unlike :meth:`text` it keeps ``Unknown Error``, which tells of a sick GPU."""
        if entry is None or entry.value is None or entry.value.strip() in ("", "N/A"):
            return None
        return entry.value

    def integer(self, entry: Entry | None, what: str) -> int | None:
        if entry is None or entry.value is None:
            return None
        return parse_int(entry.value, self.source, entry.line, what)

    def number(self, entry: Entry | None, what: str) -> float | None:
        if entry is None or entry.value is None:
            return None
        return parse_number(entry.value, self.source, entry.line, what)

    def flag(self, entry: Entry | None, what: str) -> bool | None:
        if entry is None or entry.value is None:
            return None
        return parse_flag(entry.value, self.source, entry.line, what)


def _gpu(reader: _Reader, gpu: Entry, index: int | None, driver: str | None, cuda: str | None) -> GpuInfo:
    assert gpu.value is not None  # a GPU entry always carries its bus id
    ecc = gpu.child("ECC Errors")
    pcie = _pcie(reader, gpu)
    power = _power_entries(gpu)
    return GpuInfo(
        index=index,
        bus_id=gpu.value,
        line=gpu.line,
        product_name=reader.text(gpu.child("Product Name")),
        uuid=reader.text(gpu.child("GPU UUID")),
        serial=reader.text(gpu.child("Serial Number")),
        minor_number=reader.integer(gpu.child("Minor Number"), "Minor Number"),
        driver_version=driver,
        cuda_version=cuda,
        vbios_version=reader.text(gpu.child("VBIOS Version")),
        persistence_mode=reader.flag(gpu.child("Persistence Mode"), "Persistence Mode"),
        mig_mode_current=reader.flag(gpu.at("MIG Mode", "Current"), "MIG Mode Current"),
        mig_mode_pending=reader.flag(gpu.at("MIG Mode", "Pending"), "MIG Mode Pending"),
        mig_devices=tuple(_mig_device(reader, mig) for mig in gpu.children_named("MIG Device")),
        ecc_mode_current=reader.state(gpu.at("ECC Mode", "Current")),
        ecc_mode_pending=reader.state(gpu.at("ECC Mode", "Pending")),
        ecc_volatile=_ecc_counts(reader, ecc.child("Volatile") if ecc else None),
        ecc_aggregate=_ecc_counts(reader, ecc.child("Aggregate") if ecc else None),
        retired_pages=_retired_pages(reader, gpu.child("Retired Pages")),
        remapped_rows=_remapped_rows(reader, gpu.child("Remapped Rows")),
        pcie_gen_current=pcie.gen_current,
        pcie_gen_max=pcie.gen_max,
        pcie_width_current=pcie.width_current,
        pcie_width_max=pcie.width_max,
        pcie_replays=reader.integer(gpu.at("PCI", "Replays Since Reset"), "Replays Since Reset"),
        clocks_event_reasons=_clocks_event_reasons(reader, gpu),
        performance_state=reader.text(gpu.child(("Performance State", "Performance Mode"))),
        temperature_c=reader.number(gpu.at("Temperature", "GPU Current Temp"), "GPU Current Temp"),
        memory_temperature_c=reader.number(gpu.at("Temperature", "Memory Current Temp"), "Memory Temp"),
        power_draw_w=reader.number(power.draw, "Power Draw"),
        power_limit_w=reader.number(power.limit, "Power Limit"),
        memory_total_mib=reader.integer(gpu.at("FB Memory Usage", "Total"), "FB Memory Total"),
        memory_used_mib=reader.integer(gpu.at("FB Memory Usage", "Used"), "FB Memory Used"),
        utilization_gpu_pct=reader.integer(gpu.at("Utilization", "Gpu"), "Utilization Gpu"),
        utilization_memory_pct=reader.integer(gpu.at("Utilization", "Memory"), "Utilization Memory"),
    )


def _mig_device(reader: _Reader, mig: Entry) -> MigDevice:
    memory = mig.child(("Shared FB Memory Usage", "FB Memory Usage"))
    return MigDevice(
        index=reader.integer(mig.child("Index"), "MIG Index"),
        gpu_instance_id=reader.integer(mig.child("GPU Instance ID"), "GPU Instance ID"),
        compute_instance_id=reader.integer(mig.child("Compute Instance ID"), "Compute Instance ID"),
        multiprocessors=reader.integer(
            mig.at("Device Attributes", "Shared", "Multiprocessor count"), "Multiprocessor count"
        ),
        memory_total_mib=reader.integer(memory.child("Total") if memory else None, "MIG memory Total"),
        memory_used_mib=reader.integer(memory.child("Used") if memory else None, "MIG memory Used"),
    )


def _sum(values: list[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _ecc_counts(reader: _Reader, section: Entry | None) -> EccCounts | None:
    if section is None:
        return None
    single, double = section.child("Single Bit"), section.child("Double Bit")
    if single is not None or double is not None:
        return _ecc_bit_tables(reader, single, double)
    counts: dict[str, list[int | None]] = {"sram_c": [], "sram_u": [], "dram_c": [], "dram_u": []}
    for entry in section.children:
        slot = _ECC_SLOTS.get(entry.key.casefold())
        if slot is None and entry.key.casefold().startswith("sram uncorrectable"):
            slot = "sram_u"  # 535+ split: "SRAM Uncorrectable Parity" / "SRAM Uncorrectable SEC-DED"
        if slot is not None:
            counts[slot].append(reader.integer(entry, entry.key))
    sram_c, sram_u = _sum(counts["sram_c"]), _sum(counts["sram_u"])
    dram_c, dram_u = _sum(counts["dram_c"]), _sum(counts["dram_u"])
    return EccCounts(
        correctable=_sum([sram_c, dram_c]),
        uncorrectable=_sum([sram_u, dram_u]),
        sram_correctable=sram_c,
        sram_uncorrectable=sram_u,
        dram_correctable=dram_c,
        dram_uncorrectable=dram_u,
        sram_threshold_exceeded=reader.flag(section.child("SRAM Threshold Exceeded"), "SRAM Threshold Exceeded"),
    )


_ECC_SLOTS = {
    "sram correctable": "sram_c",
    "sram uncorrectable": "sram_u",
    "dram correctable": "dram_c",
    "dram uncorrectable": "dram_u",
}


def _ecc_bit_tables(reader: _Reader, single: Entry | None, double: Entry | None) -> EccCounts:
    """The pre-Hopper layout: ``Single Bit`` / ``Double Bit`` tables per memory, with a ``Total`` row."""

    def row(table: Entry | None, name: str) -> int | None:
        return reader.integer(table.child(name) if table else None, name)

    return EccCounts(
        correctable=row(single, "Total"),
        uncorrectable=row(double, "Total"),
        dram_correctable=row(single, "Device Memory"),
        dram_uncorrectable=row(double, "Device Memory"),
    )


def _retired_pages(reader: _Reader, section: Entry | None) -> RetiredPages | None:
    if section is None or not section.children:
        return None
    pending = next((c for c in section.children if c.key.casefold().startswith("pending")), None)
    return RetiredPages(
        single_bit=_count(reader, section.child(("Single Bit ECC", "Single Bit"))),
        double_bit=_count(reader, section.child(("Double Bit ECC", "Double Bit"))),
        pending=reader.flag(pending, "Retired Pages Pending"),
    )


def _count(reader: _Reader, entry: Entry | None) -> int | None:
    """Older drivers nest the retired-page count one level deeper (``Single Bit ECC`` / ``Count``)."""
    if entry is not None and entry.value is None:
        entry = entry.child("Count")
    return reader.integer(entry, "retired page count")


def _remapped_rows(reader: _Reader, section: Entry | None) -> RemappedRows | None:
    if section is None or not section.children:
        return None  # "Remapped Rows : N/A" on GPUs (or MIG setups) without a row remapper
    histogram = section.child("Bank Remap Availability Histogram")
    buckets = histogram.children if histogram else []
    return RemappedRows(
        correctable=reader.integer(section.child("Correctable Error"), "Remapped Rows Correctable Error"),
        uncorrectable=reader.integer(section.child("Uncorrectable Error"), "Remapped Rows Uncorrectable Error"),
        pending=reader.flag(section.child("Pending"), "Remapped Rows Pending"),
        failure=reader.flag(section.child("Remapping Failure Occurred"), "Remapping Failure Occurred"),
        histogram={
            bucket.key: count
            for bucket in buckets
            if (count := reader.integer(bucket, f"histogram {bucket.key}")) is not None
        },
    )


class _Pcie(NamedTuple):
    gen_current: int | None
    gen_max: int | None
    width_current: int | None
    width_max: int | None


def _pcie(reader: _Reader, gpu: Entry) -> _Pcie:
    gen = gpu.at("PCI", "GPU Link Info", "PCIe Generation")
    width = gpu.at("PCI", "GPU Link Info", "Link Width")

    def value(section: Entry | None, name: str, what: str) -> int | None:
        return reader.integer(section.child(name) if section else None, what)

    return _Pcie(
        value(gen, "Current", "PCIe Generation Current"),
        value(gen, "Max", "PCIe Generation Max"),
        value(width, "Current", "Link Width Current"),
        value(width, "Max", "Link Width Max"),
    )


# Drivers before 530 call the section "Clocks Throttle Reasons"; later ones "Clocks Event Reasons".
_EVENT_REASONS: Names = ("Clocks Event Reasons", "Clocks Throttle Reasons")


def _clocks_event_reasons(reader: _Reader, gpu: Entry) -> dict[str, bool]:
    """Flatten the section (``HW Slowdown`` nests its thermal/power-brake sub-reasons)."""
    section = gpu.child(_EVENT_REASONS)
    reasons: dict[str, bool] = {}
    pending = list(section.children) if section else []
    while pending:
        entry = pending.pop(0)
        active = reader.flag(entry, entry.key)
        if active is not None:
            reasons[entry.key] = active
        pending[:0] = entry.children
    return reasons


class _Power(NamedTuple):
    draw: Entry | None
    limit: Entry | None


def _power_entries(gpu: Entry) -> _Power:
    # "GPU Power Readings" from 530, "Power Readings" before. 590 splits Power Draw into Average and
    # Instantaneous; Average is what `--query-gpu=power.draw` reports, so it is preferred.
    power = gpu.child(("GPU Power Readings", "Power Readings"))
    if power is None:
        return _Power(None, None)
    return _Power(
        power.child(("Power Draw", "Average Power Draw", "Instantaneous Power Draw")),
        power.child(("Current Power Limit", "Enforced Power Limit", "Power Limit")),
    )
