"""The nightly sweep: the heavy tier as one exclusive Slurm job per idle node, the fleet's verdicts judged
together by the drain policy, and the run stored (history, per-node verdicts, metrics) for the report.

Which node gets what:

* idle and answering slurmctld -> a job runs every check, heavy tier included, on it;
* busy, not answering slurmctld yet not down, or drained by hpckit -> its fresh quick-tier verdict from
  the store stands in (no job). Such a verdict can drain a node, but never resumes one: a drained node
  resumes itself from its own quick runs;
* idle but failing in its fresh quick verdict -> no job is sent (a node whose munge is down cannot start
  one, and trying could get it marked down by Slurm); the verdict stands in;
* drained by someone else, or down -> skipped, never touched.

Results come back on the job's stdout through srun, not through the shared filesystem, because that
filesystem may be exactly what is broken on the node.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field, replace

from hpckit.errors import HpckitError, InputError
from hpckit.health.config import NodeConfig
from hpckit.health.model import Row, Status, unknown
from hpckit.health.node import apply_decision
from hpckit.health.policy import (
    Action,
    Decision,
    NodeMemory,
    Outcome,
    Ownership,
    decide,
    ownership,
    verdicts,
    with_enforce,
)
from hpckit.health.registry import get
from hpckit.health.store import Store, StoreError, Verdict
from hpckit.slurm.nodes import Applied, Fleet, NodeOps
from hpckit.slurm.transport import Transport

JOB_CHECK = "health.job"  # the pseudo-check a node gets when its sweep job gave no rows


@dataclass(frozen=True)
class SweepOptions:
    nodes: Sequence[str] | None = None  # only these (default: every node Slurm knows)
    dry_run: bool = False
    disabled: Sequence[str] = ()
    time_limit_min: int = 15
    job_timeout_s: float = 1200.0
    parallel: int = 64
    textfile: str | None = None  # also write the Prometheus textfile here (node_exporter's dir)


@dataclass
class JobResult:
    node: str
    rows: list[Row]
    error: str | None = None
    seconds: float = 0.0


@dataclass
class SweepResult:
    run_id: str
    started: float
    rows: list[Row]
    outcome: Outcome
    sources: dict[str, str]  # node -> "job", "quick verdict", ...
    skipped: dict[str, str]  # node -> why it was left out
    applied: list[Applied] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


JobRunner = Callable[[str, "str | None"], JobResult]


def node_job_command(config: NodeConfig, disabled: Sequence[str]) -> list[str]:
    argv = [*config.command, "job"]
    for name in disabled:
        argv += ["--disable", name]
    return argv


def srun_runner(ops: NodeOps, config: NodeConfig, options: SweepOptions) -> JobRunner:
    """A job per node through srun; its stdout is the node's rows as JSON."""
    argv = node_job_command(config, options.disabled)

    def run(node: str, partition: str | None) -> JobResult:
        start = time.monotonic()
        try:
            done = ops.run_job(
                node, argv, partition=partition, time_limit_min=options.time_limit_min, timeout=options.job_timeout_s
            )
        except HpckitError as exc:
            return JobResult(node, [], str(exc), time.monotonic() - start)
        seconds = time.monotonic() - start
        if not done.ok:
            return JobResult(node, [], done.describe(), seconds)
        try:
            return JobResult(node, parse_job_output(done.stdout, node), None, seconds)
        except ValueError as exc:
            return JobResult(node, [], f"unreadable job output: {exc}", seconds)

    return run


def parse_job_output(text: str, node: str) -> list[Row]:
    """The last JSON document on stdout (anything a login script printed before it is ignored)."""
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            data = json.loads(line)
            rows = [Row.from_dict(r) for r in data["rows"]]
            return [r for r in rows if r.node == node] or rows
    raise ValueError(f"no JSON in {text.strip()[-200:]!r}")


def detach_from_job() -> None:
    """Forget the Slurm job this process may run in (a scrontab entry is a job): otherwise every srun
    below would start a step of that job, on its node, instead of a job of its own."""
    for name in [n for n in os.environ if n.startswith("SLURM_")]:
        del os.environ[name]


def new_run_id(now: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now)) + "-" + secrets.token_hex(2)


def sweep(
    config: NodeConfig,
    options: SweepOptions,
    transport: Transport,
    runner: JobRunner | None = None,
    now: Callable[[], float] = time.time,
) -> SweepResult:
    start = time.monotonic()
    started = now()
    store = Store(config.store)
    ops = NodeOps(transport)
    fleet = _fleet(ops, options.nodes)
    plan = _plan(fleet, store, config, started)
    runner = runner or srun_runner(ops, config, options)
    results = _run_jobs(plan.jobs, fleet, runner, options.parallel)
    rows, sources = _collect(plan, results)
    result = SweepResult(new_run_id(started), started, rows, Outcome((), (), (), {}), sources, plan.skipped)
    _judge(config, options, store, fleet, result, now())
    if not options.dry_run:
        _apply(ops, result)
        _save(store, result, results, options)
    result.seconds = time.monotonic() - start
    return result


def _fleet(ops: NodeOps, nodes: Sequence[str] | None) -> Fleet:
    fleet = ops.fleet()
    if not nodes:
        return fleet
    unknown_nodes = [n for n in nodes if n not in fleet.nodes]
    if unknown_nodes:
        raise InputError(f"Slurm knows no node {', '.join(unknown_nodes)}")
    return Fleet({n: fleet.nodes[n] for n in nodes}, {n: fleet.partitions.get(n, ()) for n in nodes})


@dataclass
class _Plan:
    jobs: list[str] = field(default_factory=list)
    stand_in: dict[str, Verdict] = field(default_factory=dict)  # node -> fresh quick verdict used instead
    skipped: dict[str, str] = field(default_factory=dict)


def _plan(fleet: Fleet, store: Store, config: NodeConfig, now: float) -> _Plan:
    plan = _Plan()
    try:
        latest = store.read_verdicts("latest", list(fleet.nodes))
    except OSError:
        latest = {}
    fresh = {n: v for n, v in latest.items() if now - v.time <= config.fresh_s}
    for name, state in fleet.nodes.items():
        owner = ownership(state)
        verdict = fresh.get(name)
        failing = verdict is not None and any(r.status == Status.FAIL for r in verdict.rows)
        if owner is Ownership.IN_SERVICE and state.state == "idle" and state.responding and not failing:
            plan.jobs.append(name)
        elif owner in (Ownership.IN_SERVICE, Ownership.OURS) and verdict is not None:
            plan.stand_in[name] = verdict
        elif owner in (Ownership.IN_SERVICE, Ownership.OURS):
            plan.skipped[name] = f"{state.state}: no job possible and no fresh quick verdict"
        else:
            plan.skipped[name] = f"{owner.value} ({state.state}{state.flags}: {state.reason or 'no reason'})"
    return plan


def _run_jobs(nodes: list[str], fleet: Fleet, runner: JobRunner, parallel: int) -> dict[str, JobResult]:
    if not nodes:
        return {}

    def one(node: str) -> JobResult:
        parts = fleet.partitions.get(node) or (None,)
        return runner(node, parts[0])

    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(nodes)))) as pool:
        return dict(zip(nodes, pool.map(one, nodes), strict=True))


def _collect(plan: _Plan, results: dict[str, JobResult]) -> tuple[list[Row], dict[str, str]]:
    rows: list[Row] = []
    sources: dict[str, str] = {}
    for node, result in results.items():
        if result.rows:
            rows += result.rows
            sources[node] = f"job ({result.seconds:.1f} s)"
        else:
            when = time.time()
            rows.append(unknown("job", "job-failed", result.error or "no rows").row(node, JOB_CHECK, "nightly", when))
            sources[node] = "job failed"
    for node, verdict in plan.stand_in.items():
        rows += verdict.rows
        sources[node] = f"quick verdict of {time.strftime('%H:%M:%S', time.localtime(verdict.time))}"
    return rows, sources


def _judge(
    config: NodeConfig, options: SweepOptions, store: Store, fleet: Fleet, result: SweepResult, now: float
) -> None:
    """The policy over the whole run. Nodes judged on their stored quick verdict (no job ran) already
    counted that verdict in their memory when they wrote it: their memory is left as it is, and the sweep
    never resumes them on it (the verdict may predate the node's own drain, e.g. when the node could not
    write to the store); each node resumes itself from its own quick runs."""
    settings = config.policy
    if options.disabled:
        settings = replace(settings, disabled_checks=settings.disabled_checks | frozenset(options.disabled))
    run = verdicts(result.rows)
    nodes = sorted({v.node for v in run})
    judged_by_job = {n for n, source in result.sources.items() if source.startswith("job")}
    with ExitStack() as stack:
        if not options.dry_run:
            for node in nodes:
                stack.enter_context(store.locked(node))
        memory = _memories(store, nodes, result.notes)
        outcome = decide(run, fleet.nodes, memory, settings)
        kept = {n: outcome.memory[n] if n in judged_by_job else memory[n] for n in nodes}
        outcome = replace(
            outcome, memory=kept, decisions=tuple(_no_stale_resume(d, judged_by_job) for d in outcome.decisions)
        )
        if not options.dry_run:
            for node in nodes:
                if node in judged_by_job:
                    store.write_memory(node, kept[node], now)
    result.outcome = with_enforce(outcome, not options.dry_run)


def _memories(store: Store, nodes: Sequence[str], notes: list[str]) -> dict[str, NodeMemory]:
    memory: dict[str, NodeMemory] = {}
    for node in nodes:
        try:
            memory[node] = store.read_memory(node)[0]
        except StoreError as exc:
            notes.append(f"{exc}; starting {node}'s memory afresh")
            memory[node] = NodeMemory()
    return memory


def _no_stale_resume(decision: Decision, judged_by_job: set[str]) -> Decision:
    if decision.action is not Action.RESUME or decision.node in judged_by_job:
        return decision
    return Decision(decision.node, Action.KEEP, "recovering: the node resumes itself from its own quick runs")


def _apply(ops: NodeOps, result: SweepResult) -> None:
    for decision in result.outcome.decisions:
        if decision.changes_slurm and decision.enforce:
            applied = apply_decision(ops, decision)
            if applied is not None:
                result.applied.append(applied)


def _save(store: Store, result: SweepResult, jobs: dict[str, JobResult], options: SweepOptions) -> None:
    from hpckit.health import history, report

    for node, job in jobs.items():
        if not job.rows:
            continue
        store.write_verdict("latest", Verdict(node, result.started, "nightly", tuple(job.rows)))
        heavy = tuple(r for r in job.rows if _is_nightly(r.check))
        store.write_verdict("nightly", Verdict(node, result.started, "nightly", heavy))
    history.append_run(store, result.run_id, result.started, result.rows)
    from hpckit.health.store import write_json

    write_json(store.path("runs", f"{result.run_id}.json"), report.run_summary(result))
    text = report.prometheus_text(result)
    report.write_textfile(store.path("metrics", "hpckit_health.prom"), text)
    if options.textfile:
        report.write_textfile(os.path.abspath(options.textfile), text)


def _is_nightly(check: str) -> bool:
    try:
        return get(check).tier == "nightly"
    except HpckitError:
        return False
