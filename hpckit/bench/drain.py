"""`hpckit bench bisect --drain`: the slow nodes go through the health drain policy, as any failed check.

Each node the bisect tested is a verdict on the check `bisect`: FAIL with the fault `slow-fabric` when it
was named, OK otherwise. The policy decides (its circuit breaker holds a fleet-wide slowness: that is a
configuration or fabric problem, not so many broken nodes), and hpckit's owned reason
`hpckit:slow-fabric:bisect` (with the evidence after it) lets the health checks and admins tell it apart.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hpckit.bench.bisect import Report
from hpckit.health.model import Status
from hpckit.health.node import apply_decision
from hpckit.health.policy import Action, Decision, PolicySettings, Verdict, decide
from hpckit.slurm.nodes import Applied, NodeOps

CHECK = "bisect"
FAULT = "slow-fabric"
# Slurm keeps a reason of any length, but sinfo's default columns and admins' eyes do not.
REASON_CHARS = 120


@dataclass(frozen=True)
class DrainOutcome:
    decisions: tuple[Decision, ...]
    applied: tuple[Applied, ...]
    held: tuple[str, ...]  # the circuit breaker's messages


def drain_slow(report: Report, ops: NodeOps, settings: PolicySettings) -> DrainOutcome:
    """Drain the report's slow nodes, as the health policy decides, re-reading each node before acting."""
    run = [
        Verdict(n, CHECK, Status.FAIL, FAULT, report.slow_nodes[n])
        if n in report.slow_nodes
        else Verdict(n, CHECK, Status.OK, None, "fast in the bisect")
        for n in report.nodes
    ]
    fleet = ops.fleet(list(report.nodes))
    # one bisect is the evidence: no second run to confirm (the quick tier's reason for confirm_fails)
    outcome = decide(run, fleet.nodes, {}, replace(settings, confirm_fails=1))
    decisions = tuple(_with_evidence(d, report) for d in outcome.decisions)
    applied = []
    for decision in decisions:
        if decision.changes_slurm and decision.enforce and decision.action is not Action.RESUME:
            done = apply_decision(ops, decision)
            if done is not None:
                applied.append(done)
    return DrainOutcome(decisions, tuple(applied), tuple(t.message(settings.circuit_breaker) for t in outcome.trips))


def _with_evidence(decision: Decision, report: Report) -> Decision:
    """The owned reason, then what the bisect saw: `hpckit:slow-fabric:bisect rail mlx5_3 ...`."""
    if decision.reason is None or decision.node not in report.slow_nodes:
        return decision
    rails = report.slow_rails.get(decision.node)
    where = f"rail {','.join(rails)}" if rails else report.slow_nodes[decision.node].split(":", 1)[0]
    return replace(decision, reason=f"{decision.reason} {where}"[:REASON_CHARS])
