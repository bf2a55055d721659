"""What a collective's bus bandwidth should be on a given fabric, and the verdicts (pure; no I/O).

The figures come from the hardware table (hpckit/data/hardware.yaml): NVLink inside one 8-GPU node
(with or without NVLink SHARP, "NVLS"), and InfiniBand across nodes (HCAs x rate x efficiency). A GPU
without figures (the lab's emulated ones), a CPU run or a collective the figures do not cover has
"no figure": the run is then judged against the cluster's own history only.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from hpckit.bench.registry import Benchmark
from hpckit.hardware import GpuType, HardwareTable
from hpckit.results.report import human_bytes

# The table's NVLink figures are one value each: a healthy node lands within this fraction of it.
NVLINK_TOLERANCE = 0.05
# nccl-tests' bus bandwidth keeps rising with message size up to a few hundred MiB; a sweep that
# stops below this cannot reach the table's figures, so they are not applied to it.
PLATEAU_BYTES = 256 << 20
# The figures are for full HGX/DGX nodes.
FIGURE_GPUS_PER_NODE = 8
# History: a run is below its history when under the median by more than the larger of these.
HISTORY_REL_TOL = 0.10
HISTORY_MAD_K = 3.0

Status = Literal["ok", "below", "above", "no-figure", "not-comparable", "no-history"]


@dataclass(frozen=True)
class Fabric:
    """What the run ran on, as far as the expectation cares."""

    gpu: str | None  # a hardware table key, GRES or product name; None: unknown or no GPUs
    nodes: int
    gpus_per_node: int
    ib_hcas: int = 0
    ib_rate_gbps: float = 0.0
    nvls: bool = True  # NVLS in force (see nvls_in_force)


@dataclass(frozen=True)
class Expectation:
    """The expected bus bandwidth range (GB/s); low None means there is no figure, and why."""

    low: float | None
    high: float | None
    basis: str

    @property
    def has_figure(self) -> bool:
        return self.low is not None

    def describe(self) -> str:
        if self.low is None:
            return f"no figure ({self.basis})"
        if self.high is None or abs(self.high - self.low) < 1e-9:
            return f">= {gbps(self.low)} GB/s ({self.basis})"
        return f"{gbps(self.low)}-{gbps(self.high)} GB/s ({self.basis})"


@dataclass(frozen=True)
class Verdict:
    status: Status
    message: str

    @property
    def below(self) -> bool:
        return self.status == "below"


def gbps(value: float | None) -> str:
    """Bus bandwidth as hpckit prints it everywhere: the table, the peak line, every verdict."""
    if value is None or value != value:
        return "n/a"
    return f"{value:.2f}" if abs(value) >= 10 else f"{value:.3g}"


def nvls_in_force(env: Mapping[str, str]) -> bool:
    """Whether NCCL may use NVLink SHARP under these settings (it does by default where the system has it).

    NCCL_NVLS_ENABLE=0 turns it off; NCCL_ALGO either lists the algorithms allowed (NVLS on only when
    listed) or, starting with '^', the ones excluded; per-collective forms ("allreduce:nvls,ring") count
    the same way.
    """
    if env.get("NCCL_NVLS_ENABLE", "").strip() == "0":
        return False
    algo = env.get("NCCL_ALGO", "").strip().lower()
    if not algo:
        return True
    if algo.startswith("^"):
        return "nvls" not in algo
    return "nvls" in algo


def no_figure(why: str) -> Expectation:
    return Expectation(None, None, why)


def expected_busbw(
    bench: Benchmark, fabric: Fabric, table: HardwareTable, override: float | None = None
) -> Expectation:
    """The bus bandwidth this run should reach: `override` (--expect) when given, else the table's."""
    if override is not None:
        return Expectation(override, None, "--expect")
    if not bench.table_figures:
        return no_figure(f"the table's figures are for ring collectives, not {bench.op}")
    gpu = table.gpu(fabric.gpu) if fabric.gpu else None
    if fabric.gpu and gpu is None:
        return no_figure(f"GPU {fabric.gpu!r} is not in the hardware table")
    if gpu is not None and not _has_figures(gpu):
        return no_figure(f"the hardware table has no figures for {gpu.key} GPUs")
    if gpu is None or fabric.gpus_per_node < 1:
        return no_figure("no GPUs in the run")
    intra = _nvlink(gpu, fabric)
    if fabric.nodes <= 1:
        return intra
    return _across_nodes(gpu.key, intra, fabric, table)


def _has_figures(gpu: GpuType) -> bool:
    return any(v is not None for v in (gpu.nvlink_busbw_gbps, gpu.bf16_dense_tflops, gpu.mem_bw_gbps))


def _nvlink(gpu: GpuType, fabric: Fabric) -> Expectation:
    key = gpu.key
    nvls = gpu.nvlink_busbw_gbps.nvls if gpu.nvlink_busbw_gbps else None
    plain = gpu.nvlink_busbw_gbps.plain if gpu.nvlink_busbw_gbps else None
    if nvls is None and plain is None:
        return no_figure(f"{key} has no NVLink figure in the hardware table")
    if fabric.gpus_per_node != FIGURE_GPUS_PER_NODE:
        return no_figure(f"the NVLink figures are for {FIGURE_GPUS_PER_NODE} GPUs per node, not {fabric.gpus_per_node}")
    if fabric.nvls and nvls is not None:
        figure, how = nvls, "with NVLS"
    elif plain is not None:
        figure, how = plain, "NVLS off" if nvls is not None else "no NVLS on this GPU"
    else:
        return no_figure(f"{key} has a figure with NVLS only, and NVLS is off")
    low, high = figure * (1 - NVLINK_TOLERANCE), figure * (1 + NVLINK_TOLERANCE)
    return Expectation(low, high, f"{FIGURE_GPUS_PER_NODE}x {key} NVLink, {how}: ~{figure:g} GB/s")


def _across_nodes(key: str, intra: Expectation, fabric: Fabric, table: HardwareTable) -> Expectation:
    if fabric.ib_hcas < 1 or fabric.ib_rate_gbps <= 0:
        return no_figure("no InfiniBand declared for these nodes")
    low, high = table.ib_allreduce_range(fabric.ib_hcas, fabric.ib_rate_gbps)
    basis = f"{fabric.nodes} nodes, {fabric.ib_hcas}x {fabric.ib_rate_gbps:g} Gb/s InfiniBand"
    if intra.low is not None and intra.high is not None and intra.high < high:
        # the slower of the two links bounds the collective
        low, high = min(low, intra.low), intra.high
        basis += f", bounded by NVLink ({key})"
    return Expectation(low, high, basis)


def judge(peak: float, expectation: Expectation, max_bytes: int) -> Verdict:
    """Peak bus bandwidth against the expectation."""
    if expectation.low is None:
        return Verdict("no-figure", f"no expected figure: {expectation.basis}; judged against history only")
    if expectation.basis != "--expect" and max_bytes < PLATEAU_BYTES:
        return Verdict(
            "not-comparable",
            f"the sweep stops at {human_bytes(max_bytes)}, below the {human_bytes(PLATEAU_BYTES)} where bus "
            f"bandwidth levels off; the table's {expectation.describe()} does not apply (raise --max-bytes)",
        )
    if peak < expectation.low:
        pct = 100 * peak / expectation.low
        return Verdict("below", f"peak {gbps(peak)} GB/s is below the expected {expectation.describe()} ({pct:.0f}%)")
    if expectation.high is not None and peak > expectation.high:
        return Verdict(
            "above", f"peak {gbps(peak)} GB/s is above the expected {expectation.describe()}: check the figure"
        )
    return Verdict("ok", f"peak {gbps(peak)} GB/s meets the expected {expectation.describe()}")


def judge_history(peak: float, past: Sequence[float]) -> Verdict:
    """Peak bus bandwidth against earlier runs of the same benchmark on the same cluster and shape."""
    values = [v for v in past if v == v]  # drop NaN
    if not values:
        return Verdict("no-history", "no earlier run of this benchmark and shape on this cluster")
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    slack = max(HISTORY_REL_TOL * median, HISTORY_MAD_K * 1.4826 * mad)
    runs = f"median of {len(values)} earlier run{'s' if len(values) > 1 else ''}"
    pct = 100 * peak / median if median > 0 else float("inf")
    if peak < median - slack:
        return Verdict("below", f"peak {gbps(peak)} GB/s is {pct:.0f}% of the {runs} ({gbps(median)} GB/s)")
    return Verdict("ok", f"peak {gbps(peak)} GB/s is {pct:.0f}% of the {runs} ({gbps(median)} GB/s)")
