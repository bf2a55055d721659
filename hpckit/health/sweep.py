"""The nightly sweep: the heavy tier as one exclusive Slurm job per idle node, the fleet's verdicts judged
together by the drain policy, and the run stored (history, per-node verdicts, metrics) for the report.

Which node gets what:

* idle and answering slurmctld -> a job runs every check, heavy tier included, on it;
* busy and answering, or idle but failing in its stored quick verdict (a node whose munge is down cannot
  start a job, and trying could get it marked down) -> that verdict stands in, but only while it is newer
  than the node's last failed sweep job and its last state change (see NodeLedger): a verdict from before
  the node went quiet says nothing about it now;
* drained by hpckit, not answering slurmctld, or whose job failed -> checked over SSH where the config
  allows it (hpckit.health.oob), else its usable stored verdict stands in. Such a node also gets a
  ``health.reach`` verdict: a node that cannot be checked is never reported healthy, and is drained as
  ``hpckit:unreachable:<why>`` after ``escalate_unknown_after`` sweeps;
* drained by someone else, or down for a reason that is not hpckit's -> skipped, never touched.

A stored verdict can drain a node, but never resumes one (it may predate the drain); a fresh look (a job,
or the check over SSH) can. A drained node also resumes itself from its own quick runs.

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
from hpckit.health.model import ABSENT, Row, Status
from hpckit.health.node import apply_decision
from hpckit.health.oob import Prober, ProbeResult, reach_row, run_probes, ssh_prober
from hpckit.health.policy import (
    REACH_CHECK,
    Action,
    Decision,
    NodeMemory,
    Outcome,
    Ownership,
    decide,
    drain_reason,
    ownership,
    parse_reason,
    verdicts,
    with_enforce,
)
from hpckit.health.registry import get
from hpckit.health.store import NodeLedger, Store, StoreError, Verdict
from hpckit.proc import Transport
from hpckit.slurm.nodes import Applied, Fleet, NodeOps
from hpckit.slurm.parsers import NodeState


@dataclass(frozen=True)
class SweepOptions:
    nodes: Sequence[str] | None = None  # only these (default: every node Slurm knows)
    dry_run: bool = False
    disabled: Sequence[str] = ()
    time_limit_min: int = 15
    job_timeout_s: float = 1200.0
    parallel: int = 64
    textfile: str | None = None  # also write the Prometheus textfile here (node_exporter's dir)
    probe: bool = True  # check nodes no job can reach over SSH, where the config allows it


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
    prober: Prober | None = None,
) -> SweepResult:
    start = time.monotonic()
    started = now()
    store = Store(config.store)
    ops = NodeOps(transport)
    fleet = _fleet(ops, options.nodes)
    ledgers = _ledgers(store, fleet, started)
    if prober is None and config.probe is not None and options.probe:
        prober = ssh_prober(config, config.probe)
    plan = _plan(fleet, store, config, started, ledgers, prober is not None)
    runner = runner or srun_runner(ops, config, options)
    results = _run_jobs(plan.jobs, fleet, runner, options.parallel)
    failed = [n for n, r in results.items() if not r.rows]
    probes = run_probes([*failed, *plan.probe], prober, options.parallel) if prober is not None else {}
    rows, sources = _collect(plan, results, probes, fleet, now())
    result = SweepResult(new_run_id(started), started, rows, Outcome((), (), (), {}), sources, plan.skipped)
    claimed = frozenset(n for n, led in ledgers.items() if led.claimed)
    _judge(config, options, store, fleet, result, now(), claimed)
    if not options.dry_run:
        _apply(ops, result, claimed)
        _recontact(ops, result, fleet, probes, claimed)
        _save(store, result, results, options)
        after = _fleet(ops, list(fleet.nodes)) if any(a.done for a in result.applied) else fleet
        _save_ledgers(store, after, _ledgers_after(ledgers, after, now()), result, results, claimed)
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


def state_signature(state: NodeState) -> str:
    """What counts as a change of a node's state for its stored verdict: in or out of service, answering
    slurmctld or not, the reason; not idle versus busy, which jobs change all day."""
    base = "up" if ownership(state) is Ownership.IN_SERVICE else state.state
    return f"{base}{'' if state.responding else '*'}|{state.reason}"


def _ledgers(store: Store, fleet: Fleet, now: float) -> dict[str, NodeLedger]:
    """Each node's ledger with this run's state in it. A node seen for the first time has no known change
    (a node not answering slurmctld is never judged on a stored verdict alone anyway)."""
    out = {}
    for name, state in fleet.nodes.items():
        try:
            old = store.read_ledger(name)
        except OSError:
            old = None
        signature = state_signature(state)
        if old is None:
            out[name] = NodeLedger(signature, 0.0)
        elif old.state != signature:
            out[name] = replace(old, state=signature, state_since=now)
        else:
            out[name] = old
    return out


def _ledgers_after(ledgers: dict[str, NodeLedger], fleet: Fleet, now: float) -> dict[str, NodeLedger]:
    """The state changes this sweep made itself (drains, resumes), dated now: a verdict the node writes
    from now on is newer than them."""
    out = {}
    for name, ledger in ledgers.items():
        state = fleet.nodes.get(name)
        signature = state_signature(state) if state is not None else ledger.state
        out[name] = ledger if signature == ledger.state else replace(ledger, state=signature, state_since=now)
    return out


@dataclass
class _Plan:
    jobs: list[str] = field(default_factory=list)
    stand_in: dict[str, Verdict] = field(default_factory=dict)  # node -> usable stored verdict used instead
    probe: list[str] = field(default_factory=list)  # nodes checked over SSH instead of by a job
    blind: list[str] = field(default_factory=list)  # not answering slurmctld, nothing else to go by
    skipped: dict[str, str] = field(default_factory=dict)


def _plan(
    fleet: Fleet, store: Store, config: NodeConfig, now: float, ledgers: dict[str, NodeLedger], can_probe: bool
) -> _Plan:
    plan = _Plan()
    try:
        latest = store.read_verdicts("latest", list(fleet.nodes))
    except OSError:
        latest = {}
    for name, state in fleet.nodes.items():
        ledger = ledgers[name]
        owner = ownership(state, ledger.claimed)
        if owner not in (Ownership.IN_SERVICE, Ownership.OURS):
            plan.skipped[name] = f"{owner.value} ({state.state}{state.flags}: {state.reason or 'no reason'})"
            continue
        verdict = latest.get(name)
        usable = verdict if verdict and now - verdict.time <= config.fresh_s and ledger.newer(verdict.time) else None
        failing = usable is not None and any(r.status == Status.FAIL for r in usable.rows)
        serving = owner is Ownership.IN_SERVICE and state.responding
        if serving and state.state == "idle" and not failing:
            plan.jobs.append(name)
        elif serving and usable is not None:
            plan.stand_in[name] = usable
        elif can_probe:
            plan.probe.append(name)
        elif usable is not None:
            plan.stand_in[name] = usable
            if not state.responding:
                plan.blind.append(name)
        elif not state.responding:
            plan.blind.append(name)
        else:
            plan.skipped[name] = f"{state.state}{state.flags}: no job possible and no usable quick verdict"
    return plan


def _run_jobs(nodes: list[str], fleet: Fleet, runner: JobRunner, parallel: int) -> dict[str, JobResult]:
    if not nodes:
        return {}

    def one(node: str) -> JobResult:
        parts = fleet.partitions.get(node) or (None,)
        return runner(node, parts[0])

    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(nodes)))) as pool:
        return dict(zip(nodes, pool.map(one, nodes), strict=True))


def _collect(
    plan: _Plan, results: dict[str, JobResult], probes: dict[str, ProbeResult], fleet: Fleet, when: float
) -> tuple[list[Row], dict[str, str]]:
    """Every node's rows and where they came from; each node hpckit tried to check, or that Slurm does
    not hear, also gets its ``health.reach`` row (see hpckit.health.oob)."""
    rows: list[Row] = []
    sources: dict[str, str] = {}
    for node, result in results.items():
        probe = probes.get(node)
        responding = fleet.nodes[node].responding
        if result.rows:
            rows += result.rows
            sources[node] = f"job ({result.seconds:.1f} s)"
        else:  # its health.reach row below carries the job's error
            rows += probe.rows if probe is not None else []
            sources[node] = "job failed" + (", checked over SSH" if probe is not None and probe.rows else "")
        reach = reach_row(
            node,
            when,
            responding=responding,
            job_error=result.error or (None if result.rows else "no rows"),
            job_ran=True,
            probe=probe,
        )
        rows += [reach] if reach is not None else []
    for node in plan.probe:
        probe = probes[node]
        rows += probe.rows
        sources[node] = f"over SSH ({probe.seconds:.1f} s)" if probe.rows else "out-of-band check failed"
        reach = reach_row(node, when, responding=fleet.nodes[node].responding, probe=probe)
        rows += [reach] if reach is not None else []
    for node, verdict in plan.stand_in.items():
        rows += verdict.rows
        sources[node] = f"quick verdict of {time.strftime('%H:%M:%S', time.localtime(verdict.time))}"
    for node in plan.blind:
        reach = reach_row(node, when, responding=False)
        rows += [reach] if reach is not None else []
        sources.setdefault(node, "not responding, not checked")
    return rows, sources


def _judge(
    config: NodeConfig,
    options: SweepOptions,
    store: Store,
    fleet: Fleet,
    result: SweepResult,
    now: float,
    claimed: frozenset[str],
) -> None:
    """The policy over the whole run. Nodes judged on a fresh look (a job, or a check over SSH) have their
    memory updated and may be resumed. Nodes judged on their stored quick verdict already counted it in
    their memory when they wrote it: only their ``health.reach`` memory moves, and the sweep never resumes
    them on it (the verdict may predate the node's own drain); such a node resumes itself from its own
    quick runs."""
    settings = config.policy
    if options.disabled:
        settings = replace(settings, disabled_checks=settings.disabled_checks | frozenset(options.disabled))
    run = verdicts(result.rows)
    nodes = sorted({v.node for v in run})
    fresh = {n for n, source in result.sources.items() if not source.startswith("quick verdict")}
    with ExitStack() as stack:
        if not options.dry_run:
            for node in nodes:
                stack.enter_context(store.locked(node))
        memory = _memories(store, nodes, result.notes)
        outcome = decide(run, fleet.nodes, memory, settings, claimed=claimed)
        kept = {n: outcome.memory[n] if n in fresh else _reach_only(memory[n], outcome.memory[n]) for n in nodes}
        outcome = replace(outcome, memory=kept, decisions=tuple(_no_stale_resume(d, fresh) for d in outcome.decisions))
        if not options.dry_run:
            for node in nodes:
                store.write_memory(node, kept[node], now)
    result.outcome = with_enforce(outcome, not options.dry_run)


def _reach_only(before: NodeMemory, after: NodeMemory) -> NodeMemory:
    if REACH_CHECK not in after.checks:
        return before
    return replace(before, checks={**before.checks, REACH_CHECK: after.checks[REACH_CHECK]})


def _memories(store: Store, nodes: Sequence[str], notes: list[str]) -> dict[str, NodeMemory]:
    memory: dict[str, NodeMemory] = {}
    for node in nodes:
        try:
            memory[node] = store.read_memory(node)[0]
        except StoreError as exc:
            notes.append(f"{exc}; starting {node}'s memory afresh")
            memory[node] = NodeMemory()
    return memory


def _no_stale_resume(decision: Decision, fresh: set[str]) -> Decision:
    if decision.action is not Action.RESUME or decision.node in fresh:
        return decision
    return Decision(decision.node, Action.KEEP, "recovering: the node resumes itself from its own quick runs")


def _apply(ops: NodeOps, result: SweepResult, claimed: frozenset[str]) -> None:
    for decision in result.outcome.decisions:
        if decision.changes_slurm and decision.enforce:
            applied = apply_decision(ops, decision, decision.node in claimed)
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


def _recontact(
    ops: NodeOps, result: SweepResult, fleet: Fleet, probes: dict[str, ProbeResult], claimed: frozenset[str]
) -> None:
    """A node hpckit keeps out that answers over SSH with nothing failing, but that Slurm does not hear
    (it stopped pinging it): have Slurm contact it again, so that it can come back after its clean runs."""
    held = {d.node for d in result.outcome.decisions if d.action in (Action.DRAIN, Action.REDRAIN, Action.KEEP)}
    for node, probe in probes.items():
        state = fleet.nodes[node]
        clean = probe.error is None and probe.rows and not any(r.status == Status.FAIL for r in probe.rows)
        if node not in held or state.responding or not clean:
            continue
        mine = node in claimed

        def guard(s: NodeState | None, mine: bool = mine) -> bool:
            return s is not None and not s.responding and ownership(s, mine) is Ownership.OURS

        result.applied.append(ops.recontact(node, guard, _hold_reason))


def _hold_reason(state: NodeState) -> str:
    """hpckit's reason stays; Slurm's own ("Not responding") becomes hpckit's: it is hpckit that holds it now."""
    return state.reason if parse_reason(state.reason) else drain_reason("slurmctld", REACH_CHECK)


def _save_ledgers(
    store: Store,
    fleet: Fleet,
    ledgers: dict[str, NodeLedger],  # as of after this sweep's own changes
    result: SweepResult,
    jobs: dict[str, JobResult],
    claimed: frozenset[str],
) -> None:
    """Failed jobs, and which nodes hpckit holds: one it saw failing or could not check, or one it keeps
    out, until it resumes it (or someone else takes the node over)."""
    decisions = {d.node: d for d in result.outcome.decisions}
    troubled = {
        r.node
        for r in result.rows
        if r.status == Status.FAIL or (r.check == REACH_CHECK and r.status == Status.UNKNOWN and r.fault != ABSENT)
    }
    for name, ledger in ledgers.items():
        decision = decisions.get(name)
        state = fleet.nodes.get(name)
        if state is None:
            continue
        owner = ownership(state, name in claimed or name in troubled)
        holding = owner is Ownership.OURS and (decision is None or decision.action is not Action.RESUME)
        failed_job = name in jobs and not jobs[name].rows
        updated = replace(
            ledger,
            last_failed_job=result.started if failed_job else ledger.last_failed_job,
            claimed=owner in (Ownership.IN_SERVICE, Ownership.OURS) and (name in troubled or holding),
        )
        try:
            store.write_ledger(name, updated)
        except OSError as exc:
            result.notes.append(f"{name}'s ledger not stored: {exc.strerror or exc}")


def _is_nightly(check: str) -> bool:
    try:
        return get(check).tier == "nightly"
    except HpckitError:
        return False
