"""`hpckit bench COLLECTIVE --job ID`: parse and judge a job that was submitted earlier (waiting if it runs).

What the job ran is read from what it printed (the collective, its hosts, ranks and sizes, torch_sweep's
or nccl-tests' own lines), so a job submitted by hand or by an earlier hpckit is judged as if just run.
"""

from __future__ import annotations

import time

from hpckit.bench.backend import Backend, JobPlace, Sweep
from hpckit.bench.cluster import DEFAULT_SHARED
from hpckit.bench.follow import Follower
from hpckit.bench.run import BenchRequest, BenchResult, Context, Plan, judge_output, parse_output
from hpckit.bench.settings import from_sweep_output
from hpckit.errors import InputError
from hpckit.results import ParseResult
from hpckit.slurm.jobparse import JobRecord


def judge_job(req: BenchRequest, ctx: Context, job_id: str) -> BenchResult:
    if not job_id.isdigit():
        raise InputError(f"--job {job_id!r}: expected a Slurm job id (digits)")
    bench_dir = req.bench_dir or f"{ctx.facts.shared_mount or DEFAULT_SHARED}/hpckit/bench"
    record, path = _locate(ctx, job_id, f"{bench_dir}/logs")
    lost: tuple[str, ...] = ()
    if not record.finished:
        followed = Follower(ctx.jobs, ctx.slurm, ctx.report).follow(job_id, path, time.monotonic(), req.timeout)
        record, lost = followed.outcome.record, followed.lost_nodes
    output = ctx.jobs.read_file(path)
    if output is None:
        raise InputError(f"job {job_id}: cannot read its output {path} on {ctx.transport.where}")
    parsed = parse_output(output, path, None)  # what the log says it ran, checked against the command below
    if parsed is None or parsed.frame.empty:
        if not record.ok:
            return judge_output(req, ctx, _unknown_plan(req, bench_dir, record), record, lost, output, path)
        raise InputError(f"job {job_id}: {path} holds no nccl-tests table (is it a benchmark job?)")
    p = plan_from_output(req, parsed, output, record, bench_dir)
    return judge_output(req, ctx, p, record, lost, output, path)


def _locate(ctx: Context, job_id: str, log_dir: str) -> tuple[JobRecord, str]:
    """The job's record (controller, else accounting) and its output file."""
    info = ctx.jobs.backend.info(job_id)
    record = info.record if info is not None else ctx.jobs.backend.accounting(job_id)
    if record is None:
        raise InputError(f"job {job_id} is known neither to the controller nor to accounting")
    if info is not None and info.stdout_path:
        return record, info.stdout_path
    # the controller forgot it (MinJobAge): hpckit's bench jobs write LOG_DIR/NAME-ID.out
    named = [f for f in ctx.files.listdir(log_dir) if f.endswith(f"-{job_id}.out")]
    if len(named) != 1:
        raise InputError(f"job {job_id}: Slurm no longer says where its output is, and {log_dir} has no *-{job_id}.out")
    return record, f"{log_dir}/{named[0]}"


def plan_from_output(req: BenchRequest, parsed: ParseResult, output: str, record: JobRecord, bench_dir: str) -> Plan:
    """What the job ran, as far as judging it needs: backend, collective, nodes, ranks, GPUs, sizes."""
    op = parsed.meta.get("collective")
    if op is not None and op != req.bench.op:
        raise InputError(f"job {record.job_id} ran {op}, not {req.bench.op}: use `hpckit bench` with that collective")
    dist = from_sweep_output(output).get("torch.distributed")
    backend: Backend = "torch" if dist is not None else "nccl-tests"
    hosts = parsed.meta.get("hosts")
    nodes = len(hosts) if isinstance(hosts, list) and hosts else max(len(record.nodes), 1)
    ranks = parsed.meta.get("ranks")
    per_node = max(int(ranks) // nodes, 1) if isinstance(ranks, int) else 1
    gpus = 0 if dist == "gloo" else per_node
    sizes = parsed.frame["size_bytes"]
    params = parsed.meta.get("params")
    step = params.get("step") if isinstance(params, dict) else None
    sweep = Sweep(
        req.bench,
        nodes,
        gpus,
        str(int(sizes.min())),
        str(int(sizes.max())),
        int(step) if isinstance(step, int) and step >= 2 else 2,
        env=req.env,
        tasks_per_node=per_node if gpus == 0 else 0,
    )
    return Plan(backend, sweep, JobPlace(partition=req.partition, log_dir=f"{bench_dir}/logs"), bench_dir)


def _unknown_plan(req: BenchRequest, bench_dir: str, record: JobRecord) -> Plan:
    """A failed job that printed no table: only enough of a plan to report the failure."""
    sweep = Sweep(req.bench, max(len(record.nodes), 1), 0, "1", "1")
    return Plan("torch", sweep, JobPlace(partition=None, log_dir=f"{bench_dir}/logs"), bench_dir)
