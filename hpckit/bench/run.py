"""`hpckit bench COLLECTIVE`: plan the job, submit it, follow it, parse its table and judge the peak."""

from __future__ import annotations

import hashlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from hpckit.bench import settings as settings_mod
from hpckit.bench.backend import (
    CPU_SIZES,
    GPU_SIZES,
    NCCL_TESTS_DIR,
    Backend,
    JobPlace,
    Sweep,
    choose_backend,
    template_values,
)
from hpckit.bench.cluster import DEFAULT_SHARED, ClusterFacts
from hpckit.bench.expect import Expectation, Fabric, Verdict, expected_busbw, judge, judge_history, nvls_in_force
from hpckit.bench.files import ClusterFileError, ClusterFiles
from hpckit.bench.follow import Follower, Progress, culprits, failure_hosts, program_errors, srun_errors
from hpckit.bench.history import KEY_COLUMNS, HistoryError, HistoryStore, past_peaks
from hpckit.bench.registry import Benchmark
from hpckit.errors import HpckitError, InputError
from hpckit.hardware import hardware_table
from hpckit.jobs.submit import render, submit
from hpckit.proc import Transport
from hpckit.results import ParseError, ParseResult, parse_text, peak_busbw
from hpckit.results.derived import GIB
from hpckit.results.report import human_bytes
from hpckit.slurm.client import SlurmClient
from hpckit.slurm.jobparse import JobRecord
from hpckit.slurm.jobs import Jobs

PROGRAM = Path(__file__).resolve().parent / "torch_sweep.py"
TAIL_LINES = 15


class BenchJobFailed(HpckitError):
    """The benchmark job failed; `nodes` are the ones to look at, most certain first."""

    def __init__(self, message: str, nodes: tuple[str, ...], job_id: str) -> None:
        super().__init__(message)
        self.nodes = nodes
        self.job_id = job_id


@dataclass(frozen=True)
class BenchRequest:
    """What the user asked for; None means "decide from the cluster"."""

    bench: Benchmark
    nodes: int
    partition: str | None = None
    gpus_per_node: int | None = None
    backend: str = "auto"
    min_bytes: str | None = None
    max_bytes: str | None = None
    factor: int = 2
    warmup: int = 5
    iters: int = 20
    check: bool = True
    expect: float | None = None
    env: tuple[str, ...] = ()
    python: str | None = None
    container: str = ""
    nccl_tests_dir: str | None = None
    bench_dir: str | None = None
    time_limit: str = "00:15:00"
    timeout: float | None = None
    history: bool = True
    nodelist: tuple[str, ...] = ()  # exactly these nodes (then `nodes` is their count)
    tasks_per_node: int = 0  # ranks per node; 0: one per GPU, one on a CPU node
    ib_hcas: int | None = None  # HCAs the run may use (NCCL_IB_HCA narrowed them); None: every one declared


@dataclass
class Context:
    """Where the bench runs: the login node's transport and what hangs off it."""

    transport: Transport
    facts: ClusterFacts
    report: Callable[[Progress], None] = lambda _: None
    warn: Callable[[str], None] = lambda _: None
    jobs: Jobs = field(init=False)
    slurm: SlurmClient = field(init=False)
    files: ClusterFiles = field(init=False)
    staged: dict[str, str] = field(default_factory=dict)  # bench dir -> torch_sweep.py staged there

    def __post_init__(self) -> None:
        self.jobs = Jobs.on(self.transport, "cli")
        self.slurm = SlurmClient(self.transport)
        self.files = ClusterFiles(self.transport)


@dataclass
class BenchResult:
    run_id: str
    job_id: str
    backend: Backend
    sweep: Sweep
    cluster: str | None
    parsed: ParseResult
    output: str
    output_path: str
    peak_busbw: float
    avg_busbw: float | None
    wrong: int
    settings: dict[str, str]
    settings_text: str
    expectation: Expectation
    verdict: Verdict
    history: Verdict
    hosts: list[str]
    history_median: float | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def peak_basis(self) -> str:
        """Which rows the peak comes from, in words (the table marks the row)."""
        largest = int(self.parsed.frame["size_bytes"].max())
        if largest >= GIB:
            return "best at sizes >= 1 GiB"
        return f"at the largest size, {human_bytes(largest)}"

    @property
    def key(self) -> dict[str, object]:
        gpu = self.gpu_name or ""
        return {
            "op": self.sweep.bench.op,
            "backend": self.backend,
            "nodes": self.sweep.nodes,
            "ranks_per_node": self.sweep.ranks_per_node,
            "gpu": gpu,
            "dtype": "float",
            "max_bytes": int(self.parsed.frame["size_bytes"].max()),
        }

    @property
    def gpu_name(self) -> str | None:
        devices = self.parsed.meta.get("devices")
        if self.sweep.gpus_per_node < 1 or not isinstance(devices, list) or not devices:
            return None
        name = devices[0].get("name")
        return str(name) if name else None


# ---------------------------------------------------------------- planning


@dataclass(frozen=True)
class Plan:
    backend: Backend
    sweep: Sweep
    place: JobPlace
    bench_dir: str


def plan(req: BenchRequest, ctx: Context) -> Plan:
    facts = ctx.facts
    if req.nodelist and len(req.nodelist) != req.nodes:
        raise InputError(f"{len(req.nodelist)} nodes listed ({','.join(req.nodelist)}) but {req.nodes} asked for")
    if facts.partition_nodes is not None and req.nodes > facts.partition_nodes:
        raise InputError(f"partition {facts.partition} has {facts.partition_nodes} nodes; --nodes {req.nodes} asked")
    gpus = facts.usable_gpus_per_node if req.gpus_per_node is None else req.gpus_per_node
    bench_dir = req.bench_dir or f"{facts.shared_mount or DEFAULT_SHARED}/hpckit/bench"
    # What the deploy installed (the record's toolchain) counts as configured: `auto` runs it.
    configured = bool(req.container or req.nccl_tests_dir or facts.toolchain == "nccl-tests")
    bin_dir = req.nccl_tests_dir or facts.nccl_tests_dir or NCCL_TESTS_DIR
    found = req.backend == "auto" and gpus >= 1 and ctx.files.exists(f"{bin_dir}/{req.bench.op}_perf")
    backend = choose_backend(req.backend, gpus, configured, found)
    low, high = GPU_SIZES if gpus >= 1 else CPU_SIZES
    sweep = Sweep(
        req.bench,
        req.nodes,
        gpus,
        req.min_bytes or low,
        req.max_bytes or high,
        req.factor,
        req.warmup,
        req.iters,
        req.check,
        req.env,
        req.tasks_per_node,
    )
    ranks = sweep.ranks_per_node
    place = JobPlace(
        partition=req.partition or facts.partition,
        log_dir=f"{bench_dir}/logs",
        cpus_per_task=(facts.cpus_per_node // ranks) if facts.cpus_per_node else 0,
        # a CPU node's single-node test needs two ranks, which a 1-CPU node (a small VM) can only overcommit
        overcommit=bool(facts.cpus_per_node and ranks > facts.cpus_per_node),
        time=req.time_limit,
        python=req.python or facts.python or (sys.executable if facts.lab else "python3"),
        nccl_tests_dir=bin_dir,
        # the recorded image holds nccl-tests, not torch: only an nccl-tests job runs in it
        container=req.container or (facts.container or "" if backend == "nccl-tests" else ""),
        nodelist=req.nodelist,
    )
    return Plan(backend, sweep, place, bench_dir)


def stage_program(files: ClusterFiles, bench_dir: str) -> str:
    """Copy torch_sweep.py to the shared filesystem (once per version) and return its path there."""
    data = PROGRAM.read_bytes()
    path = f"{bench_dir}/torch_sweep-{hashlib.sha256(data).hexdigest()[:12]}.py"
    if not files.exists(path):
        files.write(path, data)
    return path


# ---------------------------------------------------------------- running


@dataclass(frozen=True)
class Started:
    """A submitted benchmark job, not yet followed."""

    plan: Plan
    job_id: str
    output_path: str
    start: float


def run_bench(req: BenchRequest, ctx: Context) -> BenchResult:
    return finish_bench(req, ctx, start_bench(req, ctx))


def start_bench(req: BenchRequest, ctx: Context) -> Started:
    """Plan, render and submit: several can be started before any is followed (the bisect's rounds)."""
    p = plan(req, ctx)
    if p.backend == "torch":
        staged = ctx.staged.get(p.bench_dir) or stage_program(ctx.files, p.bench_dir)
        ctx.staged[p.bench_dir] = staged
        p = replace(p, place=replace(p.place, program=staged))
    template, values = template_values(p.backend, p.sweep, p.place)
    rendered = render(template, values)
    start = time.monotonic()
    job_id = submit(rendered, ctx.jobs).job_id
    return Started(p, job_id, f"{p.place.log_dir}/{values['job_name']}-{job_id}.out", start)


def finish_bench(req: BenchRequest, ctx: Context, started: Started) -> BenchResult:
    """Follow a started job to its end, then parse and judge what it printed."""
    job_id, output_path = started.job_id, started.output_path
    followed = Follower(ctx.jobs, ctx.slurm, ctx.report).follow(job_id, output_path, started.start, req.timeout)
    record = followed.outcome.record
    output = followed.outcome.output or ctx.jobs.read_file(output_path) or ""
    return judge_output(req, ctx, started.plan, record, followed.lost_nodes, output, output_path)


def judge_output(
    req: BenchRequest,
    ctx: Context,
    p: Plan,
    record: JobRecord,
    lost_nodes: tuple[str, ...],
    output: str,
    output_path: str,
) -> BenchResult:
    job_id = record.job_id
    parsed = parse_output(output, output_path, p.sweep.bench.op)
    wrong = _wrong(parsed)
    failures = _failure_lines(parsed)
    if (not record.ok and not wrong) or failures:
        nodes = culprits(output, lost_nodes, record) or failure_hosts(failures, record.nodes)
        text = _failure(record, nodes, lost_nodes, output, output_path)
        if failures:  # nccl-tests' own words first: "Test NCCL failure common.cu:1279 'unhandled system error'"
            text = "\n".join([text.splitlines()[0], *failures[:4], *text.splitlines()[1:]])
        raise BenchJobFailed(text, nodes, job_id)
    if parsed is None or parsed.frame.empty or parsed.frame["busbw_gbps"].notna().sum() == 0:
        raise BenchJobFailed(f"could not measure: job {job_id} printed no results; see {output_path}", (), job_id)
    return _analyse(req, ctx, p, job_id, parsed, output, output_path, wrong)


def parse_output(output: str, source: str, op: str | None) -> ParseResult | None:
    try:
        return parse_text(output, "nccl-tests", source, op)
    except ParseError:
        return None


def _failure_lines(parsed: ParseResult | None) -> list[str]:
    """The "Test NCCL/CUDA failure" lines of a run that died, however the job itself ended."""
    if parsed is None or not parsed.failed:
        return []
    lines = parsed.meta.get("failures")
    return [str(line) for line in lines] if isinstance(lines, list) and lines else ["nccl-tests reported a failure"]


def _wrong(parsed: ParseResult | None) -> int:
    if parsed is None or parsed.frame.empty:
        return 0
    return int(parsed.frame["wrong"].fillna(0).sum())


def _failure(record: JobRecord, nodes: tuple[str, ...], lost_nodes: tuple[str, ...], output: str, path: str) -> str:
    """What the failed job says: blamed nodes, or (none blamed) that it could not measure; then its causes."""
    how = f"exit code {record.exit_code}" + (f", signal {record.signal}" if record.signal else "")
    if nodes:
        text = f"benchmark job {record.job_id} failed on {', '.join(nodes)} ({record.state}, {how})"
    else:  # nothing ties the failure to one node: a run that could not start is not a slow node
        ran = f" on {','.join(record.nodes)}" if record.nodes else ""
        text = f"could not measure: benchmark job {record.job_id} ended {record.state} ({how}){ran}, no node to blame"
    if record.reason and record.reason != "None":
        text += f": {record.reason}"
    if lost_nodes:
        text += f"\nSlurm marked {', '.join(lost_nodes)} down or not responding while the job ran"
    errors = program_errors(output) + srun_errors(output)[:8]
    if errors:
        text += "\n" + "\n".join(errors)
    tail = "\n".join(output.splitlines()[-TAIL_LINES:])
    return text + (f"\nlast lines of {path}:\n{tail}" if tail.strip() else f"\n{path} is empty or unreadable")


def _settings(p: Plan, ctx: Context, output: str, job_id: str) -> dict[str, str]:
    found = settings_mod.from_words(p.sweep.env)
    if p.backend == "torch":
        return {**found, **settings_mod.from_sweep_output(output)}
    # nccl-tests: what NCCL itself says it took from the environment, in its per-process debug files
    script = 'cat "$1"/nccl-"$2".*.log 2>/dev/null | grep -E "set by environment to|NVLS multicast" | head -n 100'
    done = ctx.transport.run(["sh", "-c", script, "hpckit-nccl-env", p.place.log_dir, job_id])
    return {**found, **settings_mod.from_nccl_debug(done.stdout if done.ok else "")}


def _analyse(
    req: BenchRequest,
    ctx: Context,
    p: Plan,
    job_id: str,
    parsed: ParseResult,
    output: str,
    output_path: str,
    wrong: int,
) -> BenchResult:
    settings = _settings(p, ctx, output, job_id)
    nvls = nvls_in_force(settings) and settings.get("NVLS") != "unavailable"
    peak = peak_busbw(parsed.frame)
    avg = parsed.meta.get("avg_busbw_gbps")
    result = BenchResult(
        run_id=time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{job_id}",
        job_id=job_id,
        backend=p.backend,
        sweep=p.sweep,
        cluster=ctx.facts.name,
        parsed=parsed,
        output=output,
        output_path=output_path,
        peak_busbw=peak,
        avg_busbw=float(avg) if isinstance(avg, int | float) else None,
        wrong=wrong,
        settings=settings,
        settings_text=settings_mod.describe(settings, p.backend, nvls),
        expectation=Expectation(None, None, ""),
        verdict=Verdict("no-figure", ""),
        history=Verdict("no-history", "history not consulted (--no-history)"),
        hosts=_hosts(parsed),
        warnings=list(parsed.warnings),
    )
    facts = ctx.facts if req.ib_hcas is None else replace(ctx.facts, ib_hcas=req.ib_hcas)
    fabric = _fabric(facts, p.sweep, result.gpu_name, nvls)
    result.expectation = expected_busbw(p.sweep.bench, fabric, hardware_table(), req.expect)
    result.verdict = judge(peak, result.expectation, int(parsed.frame["size_bytes"].max()))
    if req.history:
        _history(result, ctx, p.bench_dir)
    return result


def _hosts(parsed: ParseResult) -> list[str]:
    hosts = parsed.meta.get("hosts")
    return [str(h) for h in hosts] if isinstance(hosts, list) else []


def _fabric(facts: ClusterFacts, sweep: Sweep, gpu_name: str | None, nvls: bool) -> Fabric:
    gpu = facts.gpu
    if gpu is None and gpu_name is not None:
        found = hardware_table().gpu(gpu_name)  # no record: the GPU the job reported
        gpu = found.key if found else gpu_name
    return Fabric(gpu, sweep.nodes, sweep.gpus_per_node, facts.ib_hcas, facts.ib_rate_gbps, nvls)


def _history(result: BenchResult, ctx: Context, bench_dir: str) -> None:
    """Judge against earlier runs of the same shape, then add this run to the store."""
    store = HistoryStore(ctx.files, f"{bench_dir}/history")
    try:
        runs = store.load()
        past = past_peaks(runs, result.key)
        result.history = judge_history(result.peak_busbw, past)
        if past:
            result.history_median = statistics.median(past)
        store.append(summary_row(result), result.parsed.frame)
    except (HistoryError, ClusterFileError) as exc:
        result.history = Verdict("no-history", f"history unavailable: {exc}")
        ctx.warn(f"history store {store.root}: {exc}")


def summary_row(result: BenchResult) -> dict[str, object]:
    key = result.key
    assert set(KEY_COLUMNS) <= set(key)
    return {
        "run_id": result.run_id,
        "time": result.run_id.split("-", 1)[0],
        "cluster": result.cluster or "",
        **key,
        "min_bytes": int(result.parsed.frame["size_bytes"].min()),
        "job_id": result.job_id,
        "peak_busbw_gbps": result.peak_busbw,
        "avg_busbw_gbps": result.avg_busbw,
        "wrong": result.wrong,
        "verdict": result.verdict.status,
        "settings": json.dumps(result.settings, sort_keys=True),
    }
