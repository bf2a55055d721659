"""The collective benchmarks hpckit runs, each registered by decorating its bus bandwidth factor.

A benchmark is a collective and the factor that turns its algorithm bandwidth (bytes / time) into bus
bandwidth, the figure that reflects the hardware whatever the rank count (nccl-tests'
doc/PERFORMANCE.md). Everything else (templates, parsing, verdicts, files) is shared, so a new
collective is one decorated function here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hpckit.errors import InputError
from hpckit.jobs.params import suggest

Factor = Callable[[int], float]


@dataclass(frozen=True)
class Benchmark:
    name: str  # the command name: allreduce
    op: str  # the nccl-tests / torch_sweep collective: all_reduce
    factor: Factor
    summary: str
    # whether the hardware table's all_reduce bus bandwidth figures apply to this collective
    table_figures: bool


BENCHMARKS: dict[str, Benchmark] = {}


def benchmark(name: str, op: str, *, table_figures: bool = True) -> Callable[[Factor], Factor]:
    """Register the decorated bus bandwidth factor (ranks -> factor) as benchmark `name`."""

    def register(factor: Factor) -> Factor:
        if name in BENCHMARKS:
            raise ValueError(f"benchmark {name!r} is registered twice")
        summary = (factor.__doc__ or op).strip().splitlines()[0]
        BENCHMARKS[name] = Benchmark(name, op, factor, summary, table_figures)
        return factor

    return register


def get(name: str) -> Benchmark:
    """A benchmark by command name (allreduce) or collective name (all_reduce)."""
    for bench in BENCHMARKS.values():
        if name in (bench.name, bench.op):
            return bench
    raise InputError(f"no benchmark {name!r}{suggest(name, BENCHMARKS)} (benchmarks: {', '.join(BENCHMARKS)})")


# Ring-based collectives move the same bytes per link whatever the collective once scaled by these
# factors, so a fabric's all_reduce figure is also what all_gather and reduce_scatter should reach.


@benchmark("allreduce", "all_reduce")
def _all_reduce(n: int) -> float:
    """All-reduce (sum): every rank ends with the sum; busbw = algbw x 2(n-1)/n."""
    return 2.0 * (n - 1) / n


@benchmark("allgather", "all_gather")
def _all_gather(n: int) -> float:
    """All-gather: every rank ends with every rank's part; busbw = algbw x (n-1)/n."""
    return (n - 1) / n


@benchmark("reducescatter", "reduce_scatter")
def _reduce_scatter(n: int) -> float:
    """Reduce-scatter (sum): each rank ends with its part of the sum; busbw = algbw x (n-1)/n."""
    return (n - 1) / n


# alltoall crosses the bisection rather than a ring: the table's ring figures do not apply to it.
@benchmark("alltoall", "alltoall", table_figures=False)
def _alltoall(n: int) -> float:
    """All-to-all: each rank sends a part to every rank; busbw = algbw x (n-1)/n."""
    return (n - 1) / n


@benchmark("broadcast", "broadcast", table_figures=False)
def _broadcast(n: int) -> float:
    """Broadcast from rank 0; busbw = algbw."""
    return 1.0


@benchmark("reduce", "reduce", table_figures=False)
def _reduce(n: int) -> float:
    """Reduce (sum) to rank 0; busbw = algbw."""
    return 1.0
