"""The drain policy: which nodes to drain, which to resume, which to leave alone. Pure logic, no I/O.

Rules (each one answers a known complaint about health tools):

* hpckit's drain reasons read ``hpckit:<fault>:<check>``. hpckit resumes only nodes whose reason it set,
  and never touches a node drained by someone else or down for another reason.
* A node is resumed after ``resume_after`` consecutive clean runs in which the check that drained it
  passed (no flapping between drain and resume on one good run).
* UNKNOWN (a tool that could not run) never drains; after ``escalate_unknown_after`` consecutive
  UNKNOWNs of one check it is escalated to the admin. UNKNOWN with the fault ``absent`` (nothing to look at
  here, e.g. no NVIDIA driver in a lab) is not a failure of a tool and never escalates.
* The one exception is ``health.reach``: whether hpckit could check the node at all (its sweep job ran, or
  an out-of-band probe got through and Slurm hears the node). A node that cannot be checked is never
  healthy: after ``escalate_unknown_after`` such runs in a row it is drained as ``hpckit:unreachable:<why>``
  (the breaker still holds a fleet-wide outage), and it comes back only after ``resume_after`` runs in which
  it was reached again. A run in which it could not be reached never counts as a clean run.
* A node Slurm set DOWN by itself ("Not responding") while hpckit saw it failing is hpckit's to bring back,
  like one hpckit drained: the sweep remembers which nodes it saw failing (``claimed``).
* Circuit breaker: when more than ``circuit_breaker`` of the checked nodes fail the same check in one
  run (and at least ``breaker_min_nodes`` do), hpckit drains none of them for it and reports a likely
  configuration regression instead.
* ``confirm_fails``: consecutive FAIL runs before a drain. The quick tier, which Slurm runs on every node
  at the same moment, uses 2, so that each node sees the others' first verdicts before acting and the
  breaker can hold a fleet-wide false alarm; the sweep sees the whole fleet at once and uses 1.
* ``drain: false`` is report-only: decisions are computed and reported but not enforced.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from hpckit.health.model import ABSENT, Row, Status
from hpckit.slurm.parsers import NodeState, reason_by_slurm

REASON_PREFIX = "hpckit:"
REACH_CHECK = "health.reach"  # pseudo-check: could the node be checked at all (job ran, probe got through)
UNREACHABLE = "unreachable"  # the fault word of a drain for a node that could not be checked


@dataclass(frozen=True)
class PolicySettings:
    drain: bool = True
    resume_after: int = 2
    escalate_unknown_after: int = 3
    circuit_breaker: float = 0.3
    breaker_min_nodes: int = 2  # one broken node is never "the fleet", however small the fleet
    disabled_checks: frozenset[str] = frozenset()
    confirm_fails: int = 1


@dataclass(frozen=True)
class Verdict:
    """A node's verdict on one check in one run: its worst row."""

    node: str
    check: str
    status: Status
    fault: str | None
    evidence: str


def verdicts(rows: Iterable[Row]) -> list[Verdict]:
    """One verdict per (node, check), in first-seen order; the worst row decides (first on ties)."""
    best: dict[tuple[str, str], Row] = {}
    for row in rows:
        key = (row.node, row.check)
        if key not in best or row.status > best[key].status:
            best[key] = row
    return [Verdict(r.node, r.check, r.status, r.fault, r.evidence) for r in best.values()]


def drain_reason(fault: str | None, check: str) -> str:
    """``hpckit:<fault>:<check>``; for a node that could not be checked ``hpckit:unreachable:<why>``."""
    if check == REACH_CHECK:
        return f"{REASON_PREFIX}{UNREACHABLE}:{fault or 'unknown'}"
    return f"{REASON_PREFIX}{fault or 'failed'}:{check}"


def parse_reason(reason: str) -> tuple[str, str] | None:
    """``hpckit:<fault>:<check>`` -> (fault, check); ``hpckit:unreachable:<why>`` -> (why, health.reach);
    None for a reason hpckit did not write."""
    if not reason.startswith(REASON_PREFIX):
        return None
    fault, sep, check = reason[len(REASON_PREFIX) :].partition(":")
    name = check.split()[0] if check.split() else ""
    if fault == UNREACHABLE and sep:
        return (name, REACH_CHECK)
    return (fault, name) if sep else (fault, "")


# --- who owns a node's state --------------------------------------------------------------------------


class Ownership(enum.Enum):
    IN_SERVICE = "in service"  # hpckit may drain it
    OURS = "drained by hpckit"  # hpckit may resume it (or change its hpckit reason)
    FOREIGN = "drained by someone else"
    UNAVAILABLE = "down or not responding"
    MISSING = "not known to Slurm"


_DRAINED = {"drained", "draining", "drain"}
_DOWN = {"down", "fail", "failing"}
_IN_SERVICE = {"idle", "mixed", "allocated", "completing", "planned", "reserved", "alloc", "mix", "comp", "resv"}


def ownership(node: NodeState | None, claimed: bool = False) -> Ownership:
    """Whose the node's state is. A node that stopped answering slurmctld but is not yet marked down
    (``idle*``) is still in service: its own failing verdict (munge down is exactly such a node) gives a
    better reason than the "Not responding" Slurm would set later. A node Slurm set DOWN is hpckit's only
    when it keeps hpckit's reason (Slurm keeps a reason it finds) or when hpckit saw it failing
    (``claimed``) and the reason is Slurm's own; otherwise it is left alone."""
    if node is None:
        return Ownership.MISSING
    if node.state in _DRAINED or node.state in _DOWN:
        if node.reason.startswith(REASON_PREFIX) or (claimed and reason_by_slurm(node.reason)):
            return Ownership.OURS
        return Ownership.FOREIGN if node.state in _DRAINED else Ownership.UNAVAILABLE
    return Ownership.IN_SERVICE if node.state in _IN_SERVICE else Ownership.UNAVAILABLE


# --- memory kept between runs -------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckMemory:
    passes: int = 0  # consecutive OK/WARN runs
    fails: int = 0  # consecutive FAIL runs (an UNKNOWN neither confirms nor clears a failure)
    unknowns: int = 0  # consecutive UNKNOWN runs (tool failures only; 'absent' does not count)

    def after(self, verdict: Verdict) -> CheckMemory:
        if verdict.status == Status.FAIL:
            return CheckMemory(0, self.fails + 1, 0)
        if verdict.status == Status.UNKNOWN:
            return CheckMemory(0, self.fails, 0 if verdict.fault == ABSENT else self.unknowns + 1)
        return CheckMemory(self.passes + 1, 0, 0)


@dataclass(frozen=True)
class NodeMemory:
    checks: Mapping[str, CheckMemory] = field(default_factory=dict)
    clean_runs: int = 0  # consecutive runs without any FAIL


# --- decisions -----------------------------------------------------------------------------------------


class Action(enum.Enum):
    DRAIN = "drain"
    REDRAIN = "redrain"  # drained by hpckit, now for another check: the reason is updated
    RESUME = "resume"
    KEEP = "keep drained"
    NONE = "none"
    SKIP = "leave alone"


@dataclass(frozen=True)
class Decision:
    node: str
    action: Action
    why: str
    reason: str | None = None  # the reason to set (DRAIN, REDRAIN) or the one being cleared (RESUME)
    enforce: bool = True  # False in report-only mode

    @property
    def changes_slurm(self) -> bool:
        return self.action in (Action.DRAIN, Action.REDRAIN, Action.RESUME)


@dataclass(frozen=True)
class FleetCount:
    failing: tuple[str, ...]  # nodes failing the check
    checked: int  # nodes with a verdict on it


@dataclass(frozen=True)
class Trip:
    check: str
    failing: tuple[str, ...]
    checked: int
    faults: tuple[str, ...]

    @property
    def fraction(self) -> float:
        return len(self.failing) / self.checked if self.checked else 0.0

    def message(self, threshold: float) -> str:
        return (
            f"circuit breaker: {len(self.failing)} of {self.checked} checked nodes ({self.fraction:.0%}) fail "
            f"{self.check} ({', '.join(self.faults)}), more than {threshold:.0%}: likely a configuration "
            f"regression, not {len(self.failing)} broken nodes; none drained for it"
        )


@dataclass(frozen=True)
class Escalation:
    node: str
    check: str
    unknowns: int
    evidence: str


@dataclass(frozen=True)
class Outcome:
    decisions: tuple[Decision, ...]
    trips: tuple[Trip, ...]
    escalations: tuple[Escalation, ...]
    memory: Mapping[str, NodeMemory]

    def decision(self, node: str) -> Decision:
        for d in self.decisions:
            if d.node == node:
                return d
        raise KeyError(node)


def fleet_counts(run: Iterable[Verdict]) -> dict[str, FleetCount]:
    failing: dict[str, list[str]] = {}
    checked: dict[str, set[str]] = {}
    for v in run:
        checked.setdefault(v.check, set()).add(v.node)
        if v.status == Status.FAIL:
            failing.setdefault(v.check, []).append(v.node)
    return {c: FleetCount(tuple(sorted(set(failing.get(c, [])))), len(nodes)) for c, nodes in checked.items()}


def trips(
    fleet: Mapping[str, FleetCount], settings: PolicySettings, faults: Mapping[str, Sequence[str]] | None = None
) -> list[Trip]:
    out = []
    for check, count in fleet.items():
        if check in settings.disabled_checks or not count.checked:
            continue
        fraction = len(count.failing) / count.checked
        if len(count.failing) >= settings.breaker_min_nodes and fraction > settings.circuit_breaker:
            out.append(Trip(check, count.failing, count.checked, tuple((faults or {}).get(check, ()))))
    return out


def decide(
    run: Sequence[Verdict],
    slurm: Mapping[str, NodeState],
    memory: Mapping[str, NodeMemory],
    settings: PolicySettings,
    fleet: Mapping[str, FleetCount] | None = None,
    claimed: frozenset[str] = frozenset(),
) -> Outcome:
    """Decide, for every node with a verdict in ``run``, what hpckit does with it.

    ``fleet`` is the fleet view for the circuit breaker; by default the run itself (the sweep sees every
    node). A node drained by hpckit is judged even without verdicts of its own (it stays drained).
    ``claimed``: nodes hpckit saw failing in its last look (see :func:`ownership`).
    """
    enabled = [v for v in run if v.check not in settings.disabled_checks]
    by_node: dict[str, list[Verdict]] = {}
    for v in enabled:
        by_node.setdefault(v.node, []).append(v)
    new_memory = dict(memory)
    for node, node_run in by_node.items():
        new_memory[node] = _remember(memory.get(node, NodeMemory()), node_run)
    # An unreachable node past the escalation limit counts as failing, for the breaker too.
    judged = {n: [_escalated(v, new_memory[n], settings) for v in node_run] for n, node_run in by_node.items()}
    flat = [v for node_run in judged.values() for v in node_run]
    tripped = trips(fleet if fleet is not None else fleet_counts(flat), settings, _faults(flat))
    tripped_checks = {t.check for t in tripped}
    decisions: list[Decision] = []
    escalations: list[Escalation] = []
    for node, node_run in judged.items():
        mem = new_memory[node]
        escalations += _escalations(node, by_node[node], mem, settings)
        state = slurm.get(node)
        decisions.append(_decide_node(node, node_run, state, mem, settings, tripped_checks, node in claimed))
    return Outcome(tuple(decisions), tuple(tripped), tuple(escalations), new_memory)


def _escalated(v: Verdict, mem: NodeMemory, s: PolicySettings) -> Verdict:
    """``health.reach`` UNKNOWN for ``escalate_unknown_after`` runs in a row: a failure from now on."""
    if v.check != REACH_CHECK or v.status != Status.UNKNOWN or v.fault == ABSENT:
        return v
    count = mem.checks[REACH_CHECK].unknowns
    if count < s.escalate_unknown_after:
        return v
    return replace(v, status=Status.FAIL, evidence=f"{v.evidence} ({count} runs in a row)")


def unreachable(v: Verdict) -> bool:
    """The node could not be checked in this run (and the escalation limit is not reached yet)."""
    return v.check == REACH_CHECK and v.status == Status.UNKNOWN and v.fault != ABSENT


def _faults(run: Iterable[Verdict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in run:
        if v.status == Status.FAIL and v.fault and v.fault not in out.setdefault(v.check, []):
            out[v.check].append(v.fault)
    return out


def _remember(mem: NodeMemory, node_run: Sequence[Verdict]) -> NodeMemory:
    checks = dict(mem.checks)
    for v in node_run:
        checks[v.check] = checks.get(v.check, CheckMemory()).after(v)
    clean = not any(v.status == Status.FAIL or unreachable(v) for v in node_run)
    return NodeMemory(checks, mem.clean_runs + 1 if clean else 0)


def _escalations(node: str, node_run: Sequence[Verdict], mem: NodeMemory, s: PolicySettings) -> list[Escalation]:
    out = []
    for v in node_run:
        count = mem.checks[v.check].unknowns
        if v.status == Status.UNKNOWN and count >= s.escalate_unknown_after:
            out.append(Escalation(node, v.check, count, v.evidence))
    return out


def _decide_node(
    node: str,
    node_run: Sequence[Verdict],
    state: NodeState | None,
    mem: NodeMemory,
    s: PolicySettings,
    tripped: set[str],
    claimed: bool = False,
) -> Decision:
    owner = ownership(state, claimed)
    if owner in (Ownership.FOREIGN, Ownership.UNAVAILABLE, Ownership.MISSING):
        detail = f" ({state.state}{state.flags}: {state.reason or 'no reason'})" if state else ""
        return Decision(node, Action.SKIP, f"{owner.value}{detail}; hpckit leaves it alone")
    fails = [v for v in node_run if v.status == Status.FAIL]
    actionable = [
        v
        for v in fails
        if v.check not in tripped and (v.check == REACH_CHECK or mem.checks[v.check].fails >= s.confirm_fails)
    ]
    if owner is Ownership.IN_SERVICE:
        return _in_service(node, node_run, fails, actionable, mem, s, tripped)
    assert state is not None
    return _ours(node, state.reason, node_run, fails, actionable, mem, s)


def _in_service(
    node: str,
    node_run: Sequence[Verdict],
    fails: list[Verdict],
    actionable: list[Verdict],
    mem: NodeMemory,
    s: PolicySettings,
    tripped: set[str],
) -> Decision:
    if actionable:
        first = actionable[0]
        why = "; ".join(f"{v.check}: {v.evidence}" for v in actionable)
        return Decision(node, Action.DRAIN, why, drain_reason(first.fault, first.check), enforce=s.drain)
    held = [
        f"{v.check} held by the circuit breaker"
        if v.check in tripped
        else f"{v.check} failed {mem.checks[v.check].fails} of {s.confirm_fails} runs needed to drain"
        for v in fails
    ]
    held += [
        f"not checked: {v.evidence} ({mem.checks[REACH_CHECK].unknowns} of {s.escalate_unknown_after} runs "
        "before it is drained)"
        for v in node_run
        if unreachable(v)
    ]
    return Decision(node, Action.NONE, "; ".join(held) if held else "healthy")


def _ours(
    node: str,
    reason: str,
    node_run: Sequence[Verdict],
    fails: list[Verdict],
    actionable: list[Verdict],
    mem: NodeMemory,
    s: PolicySettings,
) -> Decision:
    parsed = parse_reason(reason)
    reason_check = parsed[1] if parsed else REACH_CHECK  # Slurm's own reason on a node hpckit saw failing
    if fails:
        failing_checks = {v.check for v in fails}
        if actionable and (parsed is None or reason_check not in failing_checks):
            first = actionable[0]
            was = f"{reason_check or reason} passes now, but" if parsed is not None else f"Slurm's {reason!r};"
            why = f"{was} {first.check} fails: {first.evidence}"
            return Decision(node, Action.REDRAIN, why, drain_reason(first.fault, first.check), enforce=s.drain)
        return Decision(node, Action.KEEP, "still failing: " + "; ".join(f"{v.check}: {v.evidence}" for v in fails))
    blind = [v for v in node_run if unreachable(v)]
    if blind:
        return Decision(node, Action.KEEP, f"kept out: it cannot be checked ({blind[0].evidence})")
    passes = mem.checks[reason_check].passes if reason_check in mem.checks else None
    needed = s.resume_after
    if passes is None and external_check(reason_check) and reason_check not in s.disabled_checks:
        return Decision(node, Action.KEEP, f"held for {reason_check}, which the health checks do not run")
    if reason_check in s.disabled_checks or passes is None:
        passes = mem.clean_runs  # the check is off (or gone): a run of clean runs is all there is to go by
    streak = min(passes, mem.clean_runs)
    if streak >= needed:
        return Decision(node, Action.RESUME, f"{streak} consecutive clean runs (needed {needed})", reason, s.drain)
    return Decision(node, Action.KEEP, f"recovering: {streak} of {needed} clean runs before resume")


def external_check(check: str) -> bool:
    """A check of another hpckit tool (``bisect``), not of the health registry (``room.check``): only its
    owner (or an admin) resumes what it drained, since no sweep ever runs it to see it pass."""
    return bool(check) and "." not in check


def with_enforce(outcome: Outcome, enforce: bool) -> Outcome:
    """The same outcome with every decision's ``enforce`` forced (``False`` for a dry run)."""
    if enforce:
        return outcome
    return replace(outcome, decisions=tuple(replace(d, enforce=False) for d in outcome.decisions))
