"""hpckit.bench: collective bandwidth benchmarks run as Slurm jobs and judged against the hardware table.

A benchmark is registered in `registry` by decorating its bus bandwidth factor. `run.run_bench` plans
the job (nccl-tests, or hpckit's own `torch_sweep` over torch.distributed), submits it through the job
layer, follows it (`follow`), parses its nccl-tests table with hpckit.results and judges the peak
against `expect` (the hardware table, or --expect) and the cluster's own `history` (Parquet on the
shared filesystem). `output` writes the run's files.
"""

from hpckit.bench.expect import Expectation, Fabric, Verdict, expected_busbw, judge, judge_history
from hpckit.bench.registry import BENCHMARKS, Benchmark, benchmark, get
from hpckit.bench.run import BenchJobFailed, BenchRequest, BenchResult, Context, run_bench

__all__ = [
    "BENCHMARKS",
    "BenchJobFailed",
    "BenchRequest",
    "BenchResult",
    "Benchmark",
    "Context",
    "Expectation",
    "Fabric",
    "Verdict",
    "benchmark",
    "expected_busbw",
    "get",
    "judge",
    "judge_history",
    "run_bench",
]
