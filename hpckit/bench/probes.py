"""Run a round of bisect probes as benchmark jobs, all submitted before any is followed (so they run at once)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from hpckit.bench.bisect import Measurement, OutOfTime, Probe
from hpckit.bench.run import BenchJobFailed, BenchRequest, BenchResult, Context, Started, finish_bench, start_bench
from hpckit.slurm.jobs import JobError, JobWaitTimeout

# Probe sweeps: short, and at sizes where bus bandwidth has levelled off (GPUs: the table's figures
# apply from 256 MiB on and "peak" means >= 1 GiB; CPUs: 1 MiB, past the latency-bound sizes).
GPU_PROBE_SIZES = ("1G", "4G")
CPU_PROBE_SIZES = ("1M", "1M")
# Ranks per node of a single-node probe on CPU nodes: one alone has no bus bandwidth (2(n-1)/n = 0).
CPU_SINGLE_RANKS = 2


@dataclass
class JobRunner:
    """Runs probes as bench jobs through one Context per partition (None: the request's own)."""

    base: BenchRequest  # sizes, iterations, backend ...; nodes, environment and history set per probe
    contexts: Mapping[str | None, Context]
    deadline: float | None = None  # time.monotonic() by which every job must be done
    history_kinds: frozenset[str] = frozenset()  # probe kinds judged against (and added to) the history
    clock: Callable[[], float] = time.monotonic
    results: list[BenchResult] = field(default_factory=list)

    def __call__(self, probes: Sequence[Probe]) -> list[Measurement]:
        started: list[tuple[Probe, BenchRequest, Started]] = []
        try:
            for probe in probes:
                req = self.request(probe)
                started.append((probe, req, start_bench(req, self._ctx(probe))))
            return [self._finish(probe, req, job) for probe, req, job in started]
        except JobWaitTimeout as exc:
            self._cancel(started)
            raise OutOfTime(f"out of time: {exc}") from None
        except BaseException:
            self._cancel(started)
            raise

    def request(self, probe: Probe) -> BenchRequest:
        ctx = self._ctx(probe)
        gpus = ctx.facts.usable_gpus_per_node if self.base.gpus_per_node is None else self.base.gpus_per_node
        tasks = CPU_SINGLE_RANKS if probe.kind == "single" and gpus < 1 else 0
        env = self.base.env + ((f"NCCL_IB_HCA=={probe.rail}",) if probe.rail else ())
        low, high = GPU_PROBE_SIZES if gpus >= 1 else CPU_PROBE_SIZES
        return replace(
            self.base,
            nodes=len(probe.nodes),
            nodelist=probe.nodes,
            partition=probe.partition or self.base.partition,
            tasks_per_node=tasks,
            env=env,
            min_bytes=self.base.min_bytes or low,
            max_bytes=self.base.max_bytes or high,
            ib_hcas=1 if probe.rail else None,
            history=probe.kind in self.history_kinds,
            timeout=self._left(),
        )

    def _finish(self, probe: Probe, req: BenchRequest, job: Started) -> Measurement:
        req = replace(req, timeout=self._left())
        try:
            result = finish_bench(req, self._ctx(probe), job)
        except BenchJobFailed as exc:
            return Measurement(probe, None, exc.job_id, error=str(exc), blamed=exc.nodes)
        self.results.append(result)
        applies = result.verdict.status in ("ok", "below", "above")
        low = result.expectation.low if applies else None
        return Measurement(probe, result.peak_busbw, job.job_id, low, history_median=result.history_median)

    def _left(self) -> float | None:
        return None if self.deadline is None else max(1.0, self.deadline - self.clock())

    def _ctx(self, probe: Probe) -> Context:
        return self.contexts.get(probe.partition) or self.contexts[None]

    def _cancel(self, started: Sequence[tuple[Probe, BenchRequest, Started]]) -> None:
        for probe, _, job in started:
            with contextlib.suppress(JobError):  # it ended already
                self._ctx(probe).jobs.cancel(job.job_id)
