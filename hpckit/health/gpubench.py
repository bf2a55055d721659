"""The heavy GPU tier: a bf16 GEMM, a device-to-device copy, and a single-node NCCL all_reduce, with torch.

Run only by the nightly sweep, on a node it holds exclusively. torch is imported here and nowhere else,
and only after a cheap look for a loaded NVIDIA driver: a node without GPUs never pays its import time.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any

GEMM_N = 8192  # 2*N^3 = 1.1 TFLOP per multiply: long enough to time, short enough for many repeats
GEMM_ITERS = 50
COPY_BYTES = 1 << 30
COPY_ITERS = 20
NCCL_BYTES = 256 << 20
NCCL_ITERS = 20
WARMUP = 3


class BenchUnavailable(Exception):
    """The heavy tier cannot run on this node (no driver, no torch, no CUDA device)."""


@dataclass(frozen=True)
class GpuBench:
    index: int
    name: str
    gemm_tflops: float
    copy_gbps: float


@dataclass(frozen=True)
class BenchReport:
    gpus: tuple[GpuBench, ...]
    nccl_busbw_gbps: float | None  # None when it could not run (one GPU, NCCL error)
    nccl_detail: str = ""


def gemm_tflops(n: int, iters: int, seconds: float) -> float:
    return 2.0 * n**3 * iters / seconds / 1e12


def copy_gbps(nbytes: int, iters: int, seconds: float) -> float:
    """A copy reads and writes every byte once: 2 x nbytes per iteration."""
    return 2.0 * nbytes * iters / seconds / 1e9


def allreduce_busbw_gbps(nbytes: int, ranks: int, seconds_per_iter: float) -> float:
    """nccl-tests' bus bandwidth of all_reduce: algbw x 2(n-1)/n, comparable across rank counts."""
    return nbytes / seconds_per_iter / 1e9 * 2.0 * (ranks - 1) / ranks


def run_local_bench(gpus: int) -> BenchReport:
    torch = _torch()
    count = torch.cuda.device_count()
    if gpus and count < gpus:
        raise BenchUnavailable(f"torch sees {count} CUDA devices, {gpus} expected")
    results = tuple(_bench_device(torch, index) for index in range(count))
    busbw, detail = _nccl(count)
    return BenchReport(results, busbw, detail)


def _torch() -> Any:
    if not os.path.exists("/proc/driver/nvidia/version"):
        raise BenchUnavailable("no NVIDIA driver loaded")
    try:
        import torch
    except ImportError:
        raise BenchUnavailable("torch is not installed in hpckit's environment") from None
    if not torch.cuda.is_available():
        raise BenchUnavailable(f"torch {torch.__version__} sees no CUDA device")
    return torch


def _timed(torch: Any, device: int, work: Any, iters: int) -> float:
    """Seconds for ``iters`` calls of ``work`` after a warm-up, timed with CUDA events."""
    for _ in range(WARMUP):
        work()
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        work()
    end.record()
    torch.cuda.synchronize(device)
    return float(start.elapsed_time(end)) / 1000.0


def _bench_device(torch: Any, index: int) -> GpuBench:
    with torch.cuda.device(index):
        gemm_s = _gemm_seconds(torch, index)
        copy_s = _copy_seconds(torch, index)
        torch.cuda.empty_cache()
    return GpuBench(
        index,
        str(torch.cuda.get_device_name(index)),
        gemm_tflops(GEMM_N, GEMM_ITERS, gemm_s),
        copy_gbps(COPY_BYTES, COPY_ITERS, copy_s),
    )


def _gemm_seconds(torch: Any, index: int) -> float:
    """The tensors live only in this frame, so the copy test after it gets the memory back."""
    a = torch.randn(GEMM_N, GEMM_N, dtype=torch.bfloat16, device=index)
    b = torch.randn(GEMM_N, GEMM_N, dtype=torch.bfloat16, device=index)
    out = torch.empty(GEMM_N, GEMM_N, dtype=torch.bfloat16, device=index)
    return _timed(torch, index, lambda: torch.matmul(a, b, out=out), GEMM_ITERS)


def _copy_seconds(torch: Any, index: int) -> float:
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=index)
    dst = torch.empty_like(src)
    return _timed(torch, index, lambda: dst.copy_(src), COPY_ITERS)


def _nccl(ranks: int) -> tuple[float | None, str]:
    if ranks < 2:
        return None, "one GPU: no all_reduce to measure"
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="hpckit-nccl-") as tmp:
        ctx = mp.get_context("spawn")
        queue = ctx.SimpleQueue()
        procs = [ctx.Process(target=_nccl_rank, args=(r, ranks, f"file://{tmp}/store", queue)) for r in range(ranks)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=300)
        bad = [p.exitcode for p in procs if p.exitcode != 0]
        if bad or queue.empty():
            return None, f"NCCL all_reduce ranks exited {bad or 'without a result'}"
        seconds: float = queue.get()
    return allreduce_busbw_gbps(NCCL_BYTES, ranks, seconds), f"{ranks} GPUs, {NCCL_BYTES >> 20} MiB all_reduce"


def _nccl_rank(rank: int, ranks: int, init: str, queue: Any) -> None:
    """One rank of the all_reduce; rank 0 reports seconds per iteration (the slowest rank sets the pace)."""
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=ranks)
    try:
        data = torch.ones(NCCL_BYTES // 2, dtype=torch.bfloat16, device="cuda")
        seconds = _timed(torch, rank, lambda: dist.all_reduce(data), NCCL_ITERS)
        slowest = torch.tensor([seconds], device="cuda")
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        if rank == 0:
            queue.put(float(slowest.item()) / NCCL_ITERS)
    finally:
        dist.destroy_process_group()
