"""Prove a cluster's collectives after a deploy: `hpckit deploy --verify` and `hpckit verify BLUEPRINT`.

Every compute node alone first, all at once (in-node bandwidth: NVLink on GPU nodes against the
hardware table; loopback on CPU nodes against the partition's median and history), then each
partition's passing nodes in one job (the fabric against the table, or against this cluster's history).
When that figure is low, or there is nothing yet to judge it by (a first run on CPU nodes), the bisect's
halving search names the nodes. The whole proof runs in a time box; what it found goes to the record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from hpckit.bench.bisect import DEFAULT_RATIO, Judged, Measurement, OutOfTime, Report, Search, cause
from hpckit.bench.cluster import ClusterFacts, facts_from_blueprint
from hpckit.bench.expect import gbps
from hpckit.bench.follow import Progress
from hpckit.bench.probes import JobRunner
from hpckit.bench.registry import get
from hpckit.bench.run import BenchRequest, Context
from hpckit.blueprint.models import Blueprint
from hpckit.errors import InputError
from hpckit.proc import Transport

Status = Literal["passed", "failed", "incomplete"]
DEFAULT_TIMEOUT_S = 600.0
# A partition's figure below this fraction of its history median starts the halving search.
SUSPECT_RATIO = 0.5


@dataclass(frozen=True)
class VerifyOptions:
    timeout: float = DEFAULT_TIMEOUT_S  # the time box, seconds
    ratio: float = DEFAULT_RATIO
    partitions: tuple[str, ...] = ()  # empty: every partition
    bench_dir: str | None = None
    python: str | None = None
    time_limit: str = "00:10:00"
    iters: int = 10
    warmup: int = 2
    # partition -> what the cluster's record says its benchmarks run (toolchain.json); absent: from the blueprint
    toolchains: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass
class VerifyReport:
    search: Report
    partitions: dict[str, Judged | None] = field(default_factory=dict)  # partition -> its all-node test
    failures: list[str] = field(default_factory=list)
    status: Status = "passed"
    seconds: float = 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "status": self.status,
            "seconds": round(self.seconds, 1),
            "failures": list(self.failures),
            "partitions": {p: _all_json(j) for p, j in self.partitions.items()},
            **self.search.to_json(),
        }


def _all_json(judged: Judged | None) -> dict[str, object] | None:
    if judged is None:
        return None
    m = judged.measurement
    return {
        "job_id": m.job_id,
        "nodes": list(m.probe.nodes),
        "busbw_gbps": m.busbw,
        "slow": judged.slow,
        "why": judged.why,
    }


def verify_cluster(
    bp: Blueprint,
    transport: Transport,
    options: VerifyOptions = VerifyOptions(),
    report: Callable[[Progress], None] = lambda _: None,
    warn: Callable[[str], None] = lambda _: None,
    make_context: Callable[[ClusterFacts], Context] | None = None,
) -> VerifyReport:
    start = time.monotonic()
    parts = [p for p in bp.partitions if not options.partitions or p.name in options.partitions]
    if not parts:
        raise InputError(f"{bp.name} has no partition {', '.join(options.partitions)} to verify")
    make = make_context or (lambda facts: Context(transport, facts, report, warn))
    contexts: dict[str | None, Context] = {
        p.name: make(facts_from_blueprint(bp, p.name, options.toolchains.get(p.name))) for p in parts
    }
    contexts[None] = contexts[parts[0].name]
    base = BenchRequest(
        get("allreduce"),
        1,
        iters=options.iters,
        warmup=options.warmup,
        bench_dir=options.bench_dir,
        python=options.python,
        time_limit=options.time_limit,
    )
    runner = JobRunner(base, contexts, start + options.timeout, frozenset({"single", "all"}))
    search = Search(runner, options.ratio)
    result = VerifyReport(search.report)
    try:
        passed = search.singles_by_partition({p.name: p.hostnames() for p in parts})
        for part in parts:
            _partition(search, result, part.name, passed[part.name])
    except OutOfTime as exc:
        result.status = "incomplete"
        result.failures.append(f"verification did not finish in its {options.timeout:.0f} s: {exc}")
    for node, why in search.report.slow_nodes.items():
        result.failures.append(f"{node}: {why}")
    for account in search.report.unmeasured:  # a test that could not run names no node, and passes nothing
        probe, _, error = account.partition(": ")
        result.failures.append(f"could not measure on {probe}: {cause(error)}")
    if result.failures and result.status == "passed":
        result.status = "failed"
    result.seconds = time.monotonic() - start
    return result


def _suspect(m: Measurement) -> bool:
    """Well below this cluster's history, if not below the slow ratio: worth the halving search, which
    compares probes that run side by side (one earlier figure is a noisy yardstick on shared CPU nodes)."""
    if m.expected_low is not None or m.history_median is None or m.busbw is None:
        return False
    return m.busbw < SUSPECT_RATIO * m.history_median


def _partition(search: Search, result: VerifyReport, name: str, nodes: list[str]) -> None:
    """All of the partition's passing nodes together; the halving search when that is low or unjudged."""
    if len(nodes) < 2:
        result.partitions[name] = None
        return
    together = search.together(nodes, name)
    result.partitions[name] = together
    if together.unmeasured:
        return
    m = together.measurement
    judged_by_something = m.expected_low is not None or m.history_median is not None
    if not together.slow and judged_by_something and not _suspect(m):
        return
    before = set(search.report.slow_nodes)
    search.fabric(nodes, name, reference=m.history_median)
    named = set(search.report.slow_nodes) - before
    if together.slow and not named:
        result.failures.append(
            f"partition {name}: {together.why}, and no node explains it: the fabric as a whole is slow "
            f"(all {len(nodes)} nodes at {gbps(m.busbw)} GB/s)"
        )
