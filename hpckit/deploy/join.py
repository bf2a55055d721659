"""After a deploy: wait until every declared compute node is idle in Slurm, and say why a node did not join.

A node someone took out on purpose (drained or set down with a reason of their own: an admin, hpckit's
health checks) has registered and is where they put it: it is reported with its reason, not waited for,
and not a failure of the deploy.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hpckit.errors import HpckitError
from hpckit.slurm.client import SlurmClient
from hpckit.slurm.parsers import NodeState, reason_by_slurm

SLURMD_LOG = "/var/log/slurm/slurmd.log"
JOINED = {"idle", "mixed", "allocated", "completing"}
HELD = {"drained", "draining", "down", "fail", "failing", "maint"}


@dataclass
class JoinReport:
    expected: list[str]
    joined: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)  # node -> its state (or "absent")
    held: dict[str, str] = field(default_factory=dict)  # node -> its state and reason (taken out on purpose)
    log_tails: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.missing


def wait_for_join(
    slurm: SlurmClient,
    expected: list[str],
    timeout: float = 120.0,
    poll: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> JoinReport:
    start = clock()
    states: dict[str, NodeState] = {}
    while True:
        try:
            states = {n.name: n for n in slurm.nodes()}
        except HpckitError:
            states = {}  # slurmctld may be restarting; keep polling until the deadline
        held = {n: _describe(states[n]) for n in expected if held_on_purpose(states.get(n))}
        missing = {n: _describe(states.get(n)) for n in expected if not _joined(states.get(n)) and n not in held}
        if not missing or clock() - start >= timeout:
            break
        sleep(poll)
    joined = [n for n in expected if n not in missing and n not in held]
    return JoinReport(expected, joined, missing, held=held, seconds=clock() - start)


def held_on_purpose(state: NodeState | None) -> bool:
    """Drained or down with a reason someone gave (not one slurmctld wrote, like "Not responding")."""
    return state is not None and state.state in HELD and bool(state.reason) and not reason_by_slurm(state.reason)


def _joined(state: NodeState | None) -> bool:
    return state is not None and state.responding and state.state in JOINED


def _describe(state: NodeState | None) -> str:
    if state is None:
        return "absent from sinfo"
    text = state.state + state.flags
    return f"{text} ({state.reason})" if state.reason else text
