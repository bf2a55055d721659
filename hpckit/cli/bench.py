"""`hpckit bench allreduce|allgather|reducescatter|alltoall|broadcast|reduce`, `hpckit bench list`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from hpckit.bench.backend import BACKENDS
from hpckit.bench.cluster import default_cluster, load_facts
from hpckit.bench.follow import Progress
from hpckit.bench.output import save, summary, table_text
from hpckit.bench.registry import BENCHMARKS, Benchmark
from hpckit.bench.run import BenchJobFailed, BenchRequest, BenchResult, Context, run_bench
from hpckit.jobs.submit import transport_for
from hpckit.results.report import human_bytes


@click.group("bench")
def bench_group() -> None:
    """Measure collective bandwidth with a Slurm job and judge it against the hardware and history."""


@bench_group.command("list")
def bench_list() -> None:
    """The benchmarks and their bus bandwidth factors."""
    for bench in BENCHMARKS.values():
        click.echo(f"{bench.name:14} {bench.summary}")


def _options(func: click.decorators.FC) -> click.decorators.FC:
    options = [
        click.option("--nodes", "-N", type=click.IntRange(min=1), default=2, show_default=True, help="nodes"),
        click.option("--partition", "-p", help="partition (default: the cluster's default)"),
        click.option(
            "--gpus-per-node", "-g", type=click.IntRange(min=0), help="GPUs per node (default: as declared; 0: CPUs)"
        ),
        click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True),
        click.option("--min-bytes", "-b", help="smallest size (1K, 8 ...; default 8 on GPUs, 1K on CPUs)"),
        click.option("--max-bytes", "-e", help="largest size (default 8G on GPUs, 16M on CPUs)"),
        click.option(
            "--factor",
            "-f",
            type=click.IntRange(min=2),
            default=2,
            show_default=True,
            help="size multiplier between steps",
        ),
        click.option(
            "--warmup",
            "-w",
            type=click.IntRange(min=0),
            default=5,
            show_default=True,
            help="warmup iterations per size",
        ),
        click.option(
            "--iters", "-n", type=click.IntRange(min=1), default=20, show_default=True, help="timed iterations per size"
        ),
        click.option("--no-check", is_flag=True, help="do not check results against known values"),
        click.option("--expect", type=click.FloatRange(min=0), help="expected peak busbw, GB/s (overrides the table)"),
        click.option("--strict", is_flag=True, help="exit 1 when below the expectation or the history"),
        click.option("--env", "env", multiple=True, metavar="NAME=VALUE", help="setting for every task (repeatable)"),
        click.option(
            "--cluster",
            help="a cluster deployed by hpckit (default: $HPCKIT_CLUSTER, else the only one deployed from here, "
            "else Slurm on this machine)",
        ),
        click.option("--python", help="Python with torch on the nodes (torch backend)"),
        click.option("--container", default="", help="pyxis image to run in"),
        click.option("--nccl-tests-dir", help="directory of the nccl-tests *_perf binaries"),
        click.option("--bench-dir", help="shared directory for logs and history (default: SHARED/hpckit/bench)"),
        click.option("--no-history", is_flag=True, help="neither compare with nor add to the history"),
        click.option("--time", "time_limit", default="00:15:00", show_default=True, help="job time limit"),
        click.option("--timeout", type=float, help="give up (and cancel) after this many seconds"),
        click.option(
            "--out",
            "out_dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=Path("hpckit-bench"),
            show_default=True,
            help="where to write the CSV, Parquet, PNG, JSON and log",
        ),
        click.option("--json", "as_json", is_flag=True, help="print the result as JSON"),
        click.option("--quiet", "-q", is_flag=True, help="no progress lines"),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _command(bench: Benchmark) -> click.Command:
    @click.command(bench.name, help=f"{bench.summary}\n\nRenders the job, submits it, follows it, judges the peak.")
    @_options
    def command(**opts: object) -> None:
        _run(bench, Options(opts))

    return command


class Options:
    """The command's options, typed at the point of use (click hands them over as one mapping)."""

    def __init__(self, values: dict[str, object]) -> None:
        self.values = values

    def text(self, name: str) -> str | None:
        value = self.values.get(name)
        return None if value is None else str(value)

    def number(self, name: str) -> float | None:
        value = self.values.get(name)
        return float(value) if isinstance(value, int | float) else None

    def integer(self, name: str) -> int | None:
        value = self.values.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def count(self, name: str, default: int) -> int:
        value = self.integer(name)
        return default if value is None else value

    def flag(self, name: str) -> bool:
        return bool(self.values.get(name))

    def words(self, name: str) -> tuple[str, ...]:
        value = self.values.get(name)
        return tuple(str(v) for v in value) if isinstance(value, tuple | list) else ()


def _request(bench: Benchmark, o: Options) -> BenchRequest:
    return BenchRequest(
        bench=bench,
        nodes=o.count("nodes", 2),
        partition=o.text("partition"),
        gpus_per_node=o.integer("gpus_per_node"),
        backend=o.text("backend") or "auto",
        min_bytes=o.text("min_bytes"),
        max_bytes=o.text("max_bytes"),
        factor=o.count("factor", 2),
        warmup=o.count("warmup", 5),
        iters=o.count("iters", 20),
        check=not o.flag("no_check"),
        expect=o.number("expect"),
        env=o.words("env"),
        python=o.text("python"),
        container=o.text("container") or "",
        nccl_tests_dir=o.text("nccl_tests_dir"),
        bench_dir=o.text("bench_dir"),
        time_limit=o.text("time_limit") or "00:15:00",
        timeout=o.number("timeout"),
        history=not o.flag("no_history"),
    )


def _run(bench: Benchmark, o: Options) -> None:
    req = _request(bench, o)
    cluster = o.text("cluster") or default_cluster()
    facts = load_facts(cluster, req.partition)
    quiet = o.flag("quiet")
    ctx = Context(
        transport_for(cluster),
        facts,
        report=(lambda _: None) if quiet else _progress,
        warn=lambda text: click.echo(f"hpckit: warning: {text}", err=True),
    )
    try:
        result = run_bench(req, ctx)
    except BenchJobFailed as exc:
        if o.flag("as_json"):  # CI reads stdout: say what failed there too
            failed = {"job_id": exc.job_id, "failed_nodes": list(exc.nodes), "failures": [str(exc)]}
            click.echo(json.dumps(failed))
        raise
    out_dir = o.values.get("out_dir")
    files = save(result, out_dir if isinstance(out_dir, Path) else Path("hpckit-bench"))
    failures = _failures(result, o.flag("strict"))
    if o.flag("as_json"):
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
        text += f": {human_bytes(p.size_bytes)} done, busbw {p.busbw_gbps:g} GB/s"
    click.echo(f"{text} ({p.elapsed:.0f} s)", err=True)


def _print(result: BenchResult, files: dict[str, str]) -> None:
    click.echo(table_text(result))
    avg = f", average {result.avg_busbw:.3g} GB/s" if result.avg_busbw is not None else ""
    click.echo(f"\npeak busbw: {result.peak_busbw:.3g} GB/s{avg}")
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


for _bench in BENCHMARKS.values():
    bench_group.add_command(_command(_bench))

COMMANDS = [bench_group]
