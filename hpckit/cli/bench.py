"""`hpckit bench allreduce|allgather|... [--job ID]`, `hpckit bench bisect`, `hpckit bench list`, `hpckit verify`.

Options are typed where they are declared: each command's options are the fields of a frozen dataclass,
and each field carries its own click option, so the value a command reads has the field's type.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from hpckit.bench.backend import BACKENDS, check_env, parse_size
from hpckit.bench.bisect import DEFAULT_RATIO, Report
from hpckit.bench.cluster import ClusterFacts, default_cluster, load_facts
from hpckit.bench.expect import gbps
from hpckit.bench.follow import Progress
from hpckit.bench.output import save, summary, table_text
from hpckit.bench.registry import BENCHMARKS, Benchmark, get
from hpckit.bench.run import BenchJobFailed, BenchRequest, BenchResult, Context, run_bench
from hpckit.cli.blueprint import site_option
from hpckit.errors import InputError
from hpckit.jobs.submit import transport_for
from hpckit.results.report import human_bytes

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")
# (warmup, timed) iterations per size: a benchmark run's, and a bisect probe's (a figure, quickly)
RUN_ITERS = (5, 20)
PROBE_ITERS = (2, 10)
FC = TypeVar("FC", bound=Callable[..., Any])


def option(*decls: str, **attrs: Any) -> Any:
    """A dataclass field that is also a click option; the option's value lands in the field of that name."""
    return field(metadata={"click": (decls, attrs)})


def click_options(*classes: type) -> Callable[[FC], FC]:
    """Decorate a command with every option of these dataclasses, in declaration order."""

    def apply(func: FC) -> FC:
        for cls in reversed(classes):
            for f in reversed(fields(cls)):
                decls, attrs = f.metadata["click"]
                func = click.option(*decls, f.name, **attrs)(func)
        return func

    return apply


def checked(check: Callable[[str], object]) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """An option callback applying the check hpckit makes anyway as click reads the value: a bad one is a
    usage error naming the option, before anything is rendered or submitted. The value stays the text."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        given = value if isinstance(value, tuple) else (value,)  # a `multiple` option's values come as a tuple
        for text in given:
            try:
                if text is not None:
                    check(text)
            except InputError as exc:
                raise click.BadParameter(str(exc), ctx, param) from None
        return value

    return callback


def expand_hostlist(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...] | None:
    """A Slurm hostlist option (node[1-8]) as its node names (none given, or empty: None)."""
    if not value:
        return None
    import hostlist

    try:
        return tuple(hostlist.expand_hostlist(value))
    except hostlist.BadHostlist as exc:
        raise click.BadParameter(f"{value!r}: {exc}", ctx, param) from None


def typed(cls: type[T], values: dict[str, Any]) -> T:
    """The dataclass built from the command's values (click has already converted each one)."""
    return cls(**{f.name: values[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class JobOptions:
    """How a benchmark job runs: every bench command has these."""

    partition: str | None = option("--partition", "-p", help="partition (default: the cluster's default)")
    gpus_per_node: int | None = option(
        "--gpus-per-node", "-g", type=click.IntRange(min=0), help="GPUs per node (default: as declared; 0: CPUs)"
    )
    backend: str = option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True)
    min_bytes: str | None = option("--min-bytes", "-b", callback=checked(parse_size), help="smallest size (1K, 8 ...)")
    max_bytes: str | None = option("--max-bytes", "-e", callback=checked(parse_size), help="largest size (8G ...)")
    warmup: int | None = option(
        "--warmup",
        "-w",
        type=click.IntRange(min=0),
        help=f"warmup iterations per size (default {RUN_ITERS[0]}; bisect {PROBE_ITERS[0]})",
    )
    iters: int | None = option(
        "--iters",
        "-n",
        type=click.IntRange(min=1),
        help=f"timed iterations per size (default {RUN_ITERS[1]}; bisect {PROBE_ITERS[1]})",
    )
    env: tuple[str, ...] = option(
        "--env",
        multiple=True,
        metavar="NAME=VALUE",
        callback=checked(lambda text: check_env((text,))),
        help="setting for every task",
    )
    cluster: str | None = option(
        "--cluster",
        help="a cluster deployed by hpckit (default: $HPCKIT_CLUSTER, else the only one deployed from here, "
        "else Slurm on this machine)",
    )
    python: str | None = option("--python", help="Python with torch on the nodes (torch backend)")
    container: str = option("--container", default="", help="pyxis image to run in")
    nccl_tests_dir: str | None = option("--nccl-tests-dir", help="directory of the nccl-tests *_perf binaries")
    bench_dir: str | None = option("--bench-dir", help="shared directory for logs and history")
    time_limit: str = option("--time", default="00:15:00", show_default=True, help="job time limit")
    timeout: float | None = option("--timeout", type=click.FloatRange(min=1), help="give up (and cancel) after S s")
    as_json: bool = option("--json", is_flag=True, help="print the result as JSON")
    quiet: bool = option("--quiet", "-q", is_flag=True, help="no progress lines")


@dataclass(frozen=True)
class RunOptions:
    """A collective's own options."""

    nodes: int = option("--nodes", "-N", type=click.IntRange(min=1), default=2, show_default=True)
    factor: int = option("--factor", "-f", type=click.IntRange(min=2), default=2, show_default=True)
    no_check: bool = option("--no-check", is_flag=True, help="do not check results against known values")
    expect: float | None = option("--expect", type=click.FloatRange(min=0), help="expected peak busbw, GB/s")
    strict: bool = option("--strict", is_flag=True, help="exit 1 when below the expectation or the history")
    no_history: bool = option("--no-history", is_flag=True, help="neither compare with nor add to the history")
    out_dir: Path = option(  # noqa: RUF009 (option() is dataclasses.field() with the option attached)
        "--out",
        type=click.Path(file_okay=False, path_type=Path),
        default="hpckit-bench",
        show_default=True,
        help="where to write the CSV, Parquet, PNG, JSON and log",
    )
    job: str | None = option("--job", metavar="ID", help="parse and judge this existing job (waits if it runs)")


@dataclass(frozen=True)
class BisectOptions:
    nodes: int | None = option("--nodes", "-N", type=click.IntRange(min=2), help="the partition's first N usable")
    nodelist: tuple[str, ...] | None = option("--nodelist", callback=expand_hostlist, help="these nodes (node[1-8])")
    ratio: float = option(
        "--ratio",
        type=click.FloatRange(0, 1, min_open=True, max_open=True),
        default=DEFAULT_RATIO,
        show_default=True,
        help="without a table figure, a test below this fraction of its reference is slow",
    )
    skip_single: bool = option("--skip-single", is_flag=True, help="no single-node tests first")
    no_rails: bool = option("--no-rails", is_flag=True, help="do not test a slow node's HCAs one by one")
    drain: bool = option("--drain", is_flag=True, help="drain the slow nodes (health policy, circuit breaker)")


@click.group("bench")
def bench_group() -> None:
    """Measure collective bandwidth with a Slurm job and judge it against the hardware and history."""


@bench_group.command("list")
def bench_list() -> None:
    """The benchmarks and their bus bandwidth factors."""
    for bench in BENCHMARKS.values():
        click.echo(f"{bench.name:14} {bench.summary}")


def _command(bench: Benchmark) -> click.Command:
    @click.command(bench.name, help=f"{bench.summary}\n\nRenders the job, submits it, follows it, judges the peak.")
    @click_options(RunOptions, JobOptions)
    def command(**values: Any) -> None:
        _run(bench, typed(RunOptions, values), typed(JobOptions, values))

    return command


def request(bench: Benchmark, nodes: int, j: JobOptions, r: RunOptions | None = None) -> BenchRequest:
    """The job a command asked for; without `r` (the bisect) short probes: a figure, not a full sweep."""
    warmup, iters = RUN_ITERS if r else PROBE_ITERS
    return BenchRequest(
        bench=bench,
        nodes=nodes,
        partition=j.partition,
        gpus_per_node=j.gpus_per_node,
        backend=j.backend,
        min_bytes=j.min_bytes,
        max_bytes=j.max_bytes,
        factor=r.factor if r else 2,
        warmup=warmup if j.warmup is None else j.warmup,
        iters=iters if j.iters is None else j.iters,
        check=not r.no_check if r else True,
        expect=r.expect if r else None,
        env=j.env,
        python=j.python,
        container=j.container,
        nccl_tests_dir=j.nccl_tests_dir,
        bench_dir=j.bench_dir,
        time_limit=j.time_limit,
        timeout=j.timeout,
        history=not r.no_history if r else False,
    )


def context(j: JobOptions) -> tuple[Context, str | None]:
    cluster = j.cluster or default_cluster()
    facts = load_facts(cluster, j.partition)
    ctx = Context(
        transport_for(cluster),
        facts,
        report=(lambda _: None) if j.quiet else _progress,
        warn=lambda text: click.echo(f"hpckit: warning: {text}", err=True),
    )
    return ctx, cluster


def _run(bench: Benchmark, r: RunOptions, j: JobOptions) -> None:
    from hpckit.bench.existing import judge_job

    req = request(bench, r.nodes, j, r)
    ctx, _ = context(j)
    try:
        result = judge_job(req, ctx, r.job) if r.job else run_bench(req, ctx)
    except BenchJobFailed as exc:
        if j.as_json:  # CI reads stdout: say what failed there too
            failed = {"job_id": exc.job_id, "failed_nodes": list(exc.nodes), "failures": [str(exc)]}
            click.echo(json.dumps(failed))
        raise
    files = save(result, r.out_dir)
    failures = _failures(result, r.strict)
    if j.as_json:
        click.echo(json.dumps({**summary(result, files), "failures": failures}, default=str))
    else:
        _print(result, files)
    for failure in failures:
        click.echo(f"hpckit: error: {failure}", err=True)
    if failures:
        sys.exit(1)


def _progress(p: Progress) -> None:
    text = f"job {p.job_id} {p.state}"
    if p.nodes:
        text += f" on {','.join(p.nodes)}"
    if p.size_bytes is not None:
        text += f": {human_bytes(p.size_bytes)} done, busbw {gbps(p.busbw_gbps)} GB/s"
    if p.note:
        text += f" ({p.note})"
    click.echo(f"{text} ({p.elapsed:.0f} s)", err=True)


def _print(result: BenchResult, files: dict[str, str]) -> None:
    click.echo(table_text(result))
    avg = f", average {gbps(result.avg_busbw)} GB/s (all sizes)" if result.avg_busbw is not None else ""
    click.echo(f"\npeak busbw: {gbps(result.peak_busbw)} GB/s ({result.peak_basis}){avg}")
    click.echo(f"settings:   {result.settings_text}")
    click.echo(f"expected:   {result.expectation.describe()}")
    click.echo(f"verdict:    {result.verdict.status}: {result.verdict.message}")
    click.echo(f"history:    {result.history.status}: {result.history.message}")
    if result.wrong:
        click.echo(f"wrong:      {result.wrong} values")
    for warning in result.warnings:
        click.echo(f"warning:    {warning}")
    click.echo("files:      " + ", ".join(files[k] for k in ("csv", "parquet", "png", "json")))


def _failures(result: BenchResult, strict: bool) -> list[str]:
    out = []
    if result.wrong:
        out.append(f"{result.wrong} wrong values in the results (#wrong); see {result.output_path}")
    if strict and result.verdict.below:
        out.append(f"below expectation: {result.verdict.message}")
    if strict and result.history.below:
        out.append(f"below this cluster's history: {result.history.message}")
    return out


# ---------------------------------------------------------------- bisect


@bench_group.command("bisect")
@click_options(BisectOptions, JobOptions)
def bisect_cmd(**values: Any) -> None:
    """Find the node (and the NIC rail) that slows an all-node allreduce: single-node tests, then halves
    and pairs (about log2 N rounds, never all pairs), then one HCA at a time on a slow node."""
    from hpckit.bench.bisect import bisect
    from hpckit.bench.probes import JobRunner

    b, j = typed(BisectOptions, values), typed(JobOptions, values)
    ctx, cluster = context(j)
    nodes = _bisect_nodes(ctx, b)
    runner = JobRunner(request(get("allreduce"), len(nodes), j), {None: ctx}, _deadline(j.timeout))
    hcas = () if b.no_rails or ctx.facts.usable_gpus_per_node < 1 else ctx.facts.hca_names
    report = bisect(nodes, runner, hcas=hcas, ratio=b.ratio, singles=not b.skip_single, partition=j.partition)
    drained = _drain(report, ctx, cluster) if b.drain else None
    if j.as_json:
        click.echo(json.dumps({**report.to_json(), "drain": drained}))
    else:
        print_report(report)
        for line in (drained or {}).get("lines", []):
            click.echo(line)
    sys.exit(1 if report.slow_nodes or not report.complete else 0)


def _deadline(timeout: float | None) -> float | None:
    import time

    return None if timeout is None else time.monotonic() + timeout


def _bisect_nodes(ctx: Context, b: BisectOptions) -> list[str]:
    """The nodes to search: --nodelist, else the partition's first N that Slurm counts as usable."""
    from hpckit.slurm.nodes import NodeOps

    if b.nodelist:
        nodes = list(b.nodelist)
        if len(nodes) < 2:
            raise InputError("bisect needs at least 2 nodes")
        return nodes
    fleet = NodeOps(ctx.transport).fleet()
    part = ctx.facts.partition
    usable = [n for n, s in fleet.nodes.items() if s.usable and (part is None or part in fleet.partitions.get(n, ()))]
    usable = _declared_order(ctx.facts, usable)
    wanted = b.nodes or len(usable)
    if len(usable) < max(wanted, 2):
        where = f"partition {part}" if part else "the cluster"
        raise InputError(f"{where} has {len(usable)} usable nodes ({','.join(usable) or 'none'}); {wanted} asked")
    return usable[:wanted]


def _declared_order(facts: ClusterFacts, nodes: list[str]) -> list[str]:
    order = {n: i for i, n in enumerate(facts.nodes)}
    return sorted(nodes, key=lambda n: (order.get(n, len(order)), n))


def _drain(report: Report, ctx: Context, cluster: str | None) -> dict[str, Any]:
    from hpckit.bench.cluster import load_blueprint
    from hpckit.bench.drain import drain_slow
    from hpckit.health.policy import PolicySettings
    from hpckit.slurm.nodes import NodeOps

    settings = PolicySettings()
    if cluster is not None:
        h = load_blueprint(cluster).health
        settings = PolicySettings(drain=h.drain, circuit_breaker=h.circuit_breaker)
    outcome = drain_slow(report, NodeOps(ctx.transport), settings)
    lines = [f"drain {a.node}: {a.message}" for a in outcome.applied]
    lines += [f"drain held: {m}" for m in outcome.held]
    lines += [
        f"not drained {d.node}: {d.why}" for d in outcome.decisions if d.node in report.slow_nodes and not d.enforce
    ]
    return {
        "applied": [{"node": a.node, "done": a.done, "message": a.message} for a in outcome.applied],
        "held": list(outcome.held),
        "lines": lines,
    }


def print_report(report: Report) -> None:
    """The evidence, round by round, then the verdict."""
    for r in report.rounds:
        click.echo(
            f"round {r.number} ({r.kind}, {len(r.judged)} job{'s' if len(r.judged) > 1 else ''}, {r.seconds:.0f} s)"
        )
        for j in r.judged:
            m = j.measurement
            mark = "SLOW" if j.slow else "n/a " if j.unmeasured else "ok  "
            click.echo(f"  {mark} job {m.job_id or '-':>8}  {m.probe.describe():<30} {gbps(m.busbw):>8} GB/s  {j.why}")
    for note in report.notes:
        click.echo(f"note: {note}")
    for account in report.unmeasured:  # the failed job's own words: its state, exit code, causes, last lines
        click.echo(f"could not measure {account}")
    pairs = f"an all-pairs test would run {_pairs(report)} jobs"
    click.echo(f"{report.jobs} jobs in {len(report.rounds)} rounds, {report.seconds:.0f} s ({pairs})")
    if not report.slow_nodes:
        unfinished = (
            " named: the benchmark could not measure" if report.unmeasured else " found, but the search did not finish"
        )
        click.echo("slow nodes: none" + ("" if report.complete else unfinished))
    for node, why in report.slow_nodes.items():
        click.echo(f"SLOW {node}: {why}")


def _pairs(report: Report) -> int:
    from hpckit.bench.bisect import all_pairs

    return all_pairs(len(report.nodes))


# ---------------------------------------------------------------- verify


@click.command("verify")
@click.argument("blueprint", type=click.Path(dir_okay=False, path_type=Path))
@site_option
@click.option("--timeout", type=click.FloatRange(min=10), default=600.0, show_default=True, help="time box, s")
@click.option("--partition", "-p", "partitions", multiple=True, help="only these partitions (repeatable)")
@click.option("--json", "as_json", is_flag=True)
@click.option("--quiet", "-q", is_flag=True)
def verify_cmd(
    blueprint: Path,
    site_files: tuple[Path, ...],
    timeout: float,
    partitions: tuple[str, ...],
    as_json: bool,
    quiet: bool,
) -> None:
    """Prove a running cluster's collectives: every node alone, then each partition together; name slow nodes."""
    from hpckit.blueprint import load_blueprint

    bp = load_blueprint(blueprint, site_files)
    outcome = run_verify(bp, timeout, partitions, progress=not quiet, evidence=not as_json)
    if as_json:
        click.echo(json.dumps(outcome))
    sys.exit(0 if outcome["status"] == "passed" else 1)


def run_verify(
    bp: Any, timeout: float, partitions: tuple[str, ...] = (), *, progress: bool = True, evidence: bool = True
) -> dict[str, Any]:
    """Verify a deployed blueprint's cluster; its JSON form (what `deploy --verify` records)."""
    from hpckit.bench.verify import VerifyOptions, verify_cluster
    from hpckit.clusters import ClusterDir

    transport = transport_for(bp.cluster_name)
    record = ClusterDir.of(bp.cluster_name)
    recorded = {p.name: record.toolchain(p.name) for p in bp.partitions}
    toolchains = {name: chain for name, chain in recorded.items() if chain is not None}
    warn: Callable[[str], None] = lambda text: click.echo(f"hpckit: warning: {text}", err=True)  # noqa: E731
    result = verify_cluster(
        bp,
        transport,
        VerifyOptions(timeout, partitions=partitions, toolchains=toolchains),
        _progress if progress else lambda _: None,
        warn,
    )
    if evidence:
        print_report(result.search)
        click.echo(f"verify {result.status} in {result.seconds:.0f} s")
    for failure in result.failures:
        click.echo(f"hpckit: verify: {failure}", err=True)
    return result.to_json()


for _bench in BENCHMARKS.values():
    bench_group.add_command(_command(_bench))

COMMANDS = [bench_group, verify_cmd]
