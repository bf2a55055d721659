"""One node checks itself: ``hpckit health check`` (the quick tier as Slurm's HealthCheckProgram, or any
tier by hand, or the nightly tier inside a sweep job).

With ``act`` the node applies the drain policy to itself: it drains itself on a confirmed FAIL (reason
``hpckit:<fault>:<check>``), resumes itself after enough clean runs, and leaves alone whatever state
someone else gave it. Its fleet view for the circuit breaker is the other nodes' fresh verdicts in the
shared store. Nothing here imports pandas.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

from hpckit.errors import HpckitError
from hpckit.health.config import NodeConfig
from hpckit.health.context import Context, LocalState
from hpckit.health.model import Row
from hpckit.health.policy import (
    Action,
    Decision,
    FleetCount,
    NodeMemory,
    Outcome,
    Ownership,
    Verdict,
    decide,
    fleet_counts,
    ownership,
    verdicts,
    with_enforce,
)
from hpckit.health.probe import LocalProbe, Probe
from hpckit.health.registry import Tier, get
from hpckit.health.runner import RunOptions, check_here
from hpckit.health.store import Store, StoreError
from hpckit.health.store import Verdict as StoredVerdict
from hpckit.proc import LocalTransport, Transport
from hpckit.slurm.nodes import Applied, NodeOps
from hpckit.slurm.parsers import NodeState

LOCAL_MEMORY = "policy-memory"


@dataclass(frozen=True)
class NodeRunOptions:
    tier: Tier = "quick"
    disabled: Sequence[str] = ()
    only: Sequence[str] = ()
    act: bool = False  # apply the drain policy to this node
    dry_run: bool = False  # change nothing: no drain, no stored verdict, no cursor moved
    store: bool = True  # write the verdict to the shared store
    deadline_s: float = 40.0


@dataclass
class NodeReport:
    node: str
    tier: Tier
    rows: list[Row]
    outcome: Outcome | None = None
    applied: Applied | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def decision(self) -> Decision | None:
        return self.outcome.decisions[0] if self.outcome and self.outcome.decisions else None


def check_node(
    config: NodeConfig,
    options: NodeRunOptions,
    probe: Probe | None = None,
    transport: Transport | None = None,
) -> NodeReport:
    start = time.monotonic()
    probe = probe or LocalProbe()
    run = RunOptions(options.tier, options.disabled, options.only, options.deadline_s)
    ctx, rows, notes = check_here(config, run, probe, commit=not options.dry_run)
    report = NodeReport(ctx.node, options.tier, rows, notes=notes)
    store = Store(config.store)
    if options.tier == "quick":
        disabled = (*config.policy.disabled_checks, *options.disabled)
        rows += _cached_nightly(store, ctx.node, rows, disabled, options.only, report.notes)
    if options.act:
        _act(config, options, store, ctx, report, transport or LocalTransport(where=ctx.node))
    if options.store and not options.dry_run:
        _store_verdict(store, report, probe.now())
    report.seconds = time.monotonic() - start
    return report


def _cached_nightly(
    store: Store, node: str, rows: list[Row], disabled: Sequence[str], only: Sequence[str], notes: list[str]
) -> list[Row]:
    """The heavy rows of the node's last sweep: the quick tier judges them again instead of re-running them."""
    try:
        cached = store.read_verdict("nightly", node)
    except (StoreError, OSError) as exc:
        notes.append(f"nightly verdict unreadable: {exc}")
        return []
    if cached is None:
        return []
    have = {r.check for r in rows}
    keep = []
    for row in cached.rows:
        if row.check in have or row.check in disabled or (only and row.check not in only):
            continue
        if not _nightly_check(row.check):
            continue
        stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(cached.time))
        keep.append(replace(row, evidence=f"nightly {stamp}: {row.evidence}"))
    return keep


def _nightly_check(name: str) -> bool:
    """A registered nightly-tier check (a cache from an older hpckit may name checks that are gone)."""
    try:
        return get(name).tier == "nightly"
    except HpckitError:
        return False


def _store_verdict(store: Store, report: NodeReport, now: float) -> None:
    """The latest verdict; a nightly run by hand also refreshes the heavy rows the quick tier re-reads
    (how a node drained for a heavy-tier fault, which gets no sweep job, is re-tested after a repair)."""
    note = "; ".join(report.notes)
    try:
        store.write_verdict("latest", StoredVerdict(report.node, now, report.tier, tuple(report.rows), note))
        if report.tier == "nightly":
            heavy = tuple(r for r in report.rows if _nightly_check(r.check))
            store.write_verdict("nightly", StoredVerdict(report.node, now, "nightly", heavy, note))
    except OSError as exc:
        report.notes.append(f"verdict not stored in {store.root}: {exc.strerror or exc}")


# --- the node's own drain policy ------------------------------------------------------------------


def _act(
    config: NodeConfig, options: NodeRunOptions, store: Store, ctx: Context, report: NodeReport, transport: Transport
) -> None:
    ops = NodeOps(transport)
    state, blind = _slurm_state(ops, ctx.node, report.notes)
    run = verdicts(report.rows)
    settings = config.policy
    if options.tier == "quick":
        settings = replace(settings, confirm_fails=max(settings.confirm_fails, config.quick_confirm_fails))
    now = ctx.probe.now()
    try:
        with nullcontext() if options.dry_run else store.locked(ctx.node):
            memory = _read_memory(store, ctx.local, ctx.node)
            fleet = _fleet_view(config, store, ctx, run, now)
            outcome = decide(run, {ctx.node: state} if state else {}, {ctx.node: memory}, settings, fleet)
            if not options.dry_run:
                _write_memory(store, ctx.local, ctx.node, outcome.memory[ctx.node], now, report.notes)
    except OSError as exc:  # the shared store cannot even be locked: decide on this node's own memory
        report.notes.append(f"shared store unusable ({exc.strerror or exc}); deciding on local memory")
        memory = _read_memory(None, ctx.local, ctx.node)
        outcome = decide(run, {ctx.node: state} if state else {}, {ctx.node: memory}, settings, None)
        if not options.dry_run:
            _write_memory(None, ctx.local, ctx.node, outcome.memory[ctx.node], now, report.notes)
    if blind:
        why = "its Slurm state cannot be read from here"
        outcome = replace(outcome, decisions=tuple(replace(d, action=Action.SKIP, why=why) for d in outcome.decisions))
    report.outcome = with_enforce(outcome, not options.dry_run)
    decision = report.decision
    if decision is not None and decision.changes_slurm and decision.enforce:
        report.applied = apply_decision(ops, decision)


def _slurm_state(ops: NodeOps, node: str, notes: list[str]) -> tuple[NodeState | None, bool]:
    """The node's state as Slurm has it, and whether it could not be read (munge down, controller gone)."""
    try:
        return ops.state(node), False
    except HpckitError as exc:
        notes.append(f"cannot read this node's Slurm state, so it cannot act on it: {exc}")
        return None, True


def _read_memory(store: Store | None, local: LocalState, node: str) -> NodeMemory:
    """The newer of the shared copy and this node's own copy (written when the shared one could not be)."""
    from hpckit.health.store import memory_from_json

    mine = local.load(LOCAL_MEMORY)
    best, stamp = memory_from_json(mine) if mine else NodeMemory(), float(mine.get("updated", 0.0))
    if store is not None:
        try:
            shared, shared_stamp = store.read_memory(node)
            if shared_stamp >= stamp:
                best = shared
        except (StoreError, OSError):
            pass
    return best


def _write_memory(
    store: Store | None, local: LocalState, node: str, memory: NodeMemory, now: float, notes: list[str]
) -> None:
    from hpckit.health.store import memory_to_json

    local.save(LOCAL_MEMORY, memory_to_json(memory, now))
    local.commit()
    if store is None:
        return
    try:
        store.write_memory(node, memory, now)
    except OSError as exc:
        notes.append(f"policy memory kept on this node only: {exc.strerror or exc}")


def _fleet_view(
    config: NodeConfig, store: Store, ctx: Context, run: list[Verdict], now: float
) -> dict[str, FleetCount] | None:
    """Fresh verdicts of every node in slurm.conf, with this run's in place of this node's.

    Read only when this run fails something (the breaker matters only then), so that a healthy fleet's
    quick runs do not all read every node's file on the shared filesystem every few minutes.
    """
    from hpckit.health.model import Status

    if not any(v.status == Status.FAIL for v in run):
        return None
    names = _fleet_names(config, ctx)
    others = [n for n in names if n != ctx.node]
    everyone = list(run)
    for verdict in store.read_verdicts("latest", others).values():
        if now - verdict.time <= config.fresh_s:
            everyone += verdicts(verdict.rows)
    return fleet_counts(everyone)


def _fleet_names(config: NodeConfig, ctx: Context) -> list[str]:
    from hpckit.slurm.conf import SlurmConfError, parse_nodes

    text = ctx.probe.read_text(config.slurm_conf) or ""
    try:
        return [d.name for d in parse_nodes(text, config.slurm_conf)]
    except SlurmConfError:
        return [ctx.node]


def apply_decision(ops: NodeOps, decision: Decision, claimed: bool = False) -> Applied | None:
    """Carry out a DRAIN/REDRAIN/RESUME, re-checking right before that the node's state still allows it.
    ``claimed``: hpckit saw the node failing before Slurm took it out (see hpckit.health.policy)."""
    if decision.action in (Action.DRAIN, Action.REDRAIN):
        assert decision.reason is not None
        return ops.drain(
            decision.node, decision.reason, lambda s: ownership(s, claimed) in (Ownership.IN_SERVICE, Ownership.OURS)
        )
    if decision.action is Action.RESUME:
        expected = decision.reason
        return ops.resume(
            decision.node,
            lambda s: ownership(s, claimed) is Ownership.OURS and s is not None and s.reason == expected,
        )
    return None
