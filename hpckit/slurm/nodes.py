"""Node state operations through a Transport: read states and reasons, drain, resume, and start a
one-node job (the health sweep's per-node job); the queue operations of the health schedule. Their command
lines are SlurmClient's.

Drain and resume re-read the node right before acting and act only if a caller's guard still agrees,
so that an admin's drain placed between a health run's look and its action is never overwritten.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hpckit.errors import HpckitError
from hpckit.proc import CommandResult, Transport
from hpckit.slurm.client import SlurmClient, SlurmCommandError
from hpckit.slurm.parsers import NodeState, parse_sinfo_nodes


@dataclass(frozen=True)
class Fleet:
    nodes: dict[str, NodeState]
    partitions: dict[str, tuple[str, ...]]  # node -> partitions it is in (default partition marker '*' removed)


def parse_fleet(text: str) -> Fleet:
    """``sinfo -h -N -o '%N|%T|%P|%E'`` -> states and partitions (a node appears once per partition)."""
    partitions: dict[str, list[str]] = {}
    plain = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, sep1, rest = line.partition("|")
        state, sep2, rest = rest.partition("|")
        partition, sep3, reason = rest.partition("|")
        if not (sep1 and sep2 and sep3):
            plain.append(line)  # let the shared parser name the bad line
            continue
        partitions.setdefault(name.strip(), [])
        part = partition.strip().rstrip("*")
        if part and part not in partitions[name.strip()]:
            partitions[name.strip()].append(part)
        plain.append(f"{name}|{state}|{reason}")
    nodes = {n.name: n for n in parse_sinfo_nodes("\n".join(plain))}
    return Fleet(nodes, {n: tuple(p) for n, p in partitions.items()})


@dataclass(frozen=True)
class Applied:
    node: str
    done: bool
    message: str


class NodeOps:
    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.slurm = SlurmClient(transport)

    def fleet(self, nodes: Sequence[str] | None = None) -> Fleet:
        return parse_fleet(self.slurm.fleet_text(nodes))

    def state(self, node: str) -> NodeState | None:
        return self.fleet([node]).nodes.get(node)

    def drain(self, node: str, reason: str, guard: Callable[[NodeState | None], bool]) -> Applied:
        """Drain ``node`` with ``reason`` if ``guard`` accepts its state as read right now."""
        return self._guarded(node, guard, ["state=drain", f"reason={reason}"], f"drained: {reason}")

    def resume(self, node: str, guard: Callable[[NodeState | None], bool]) -> Applied:
        return self._guarded(node, guard, ["state=resume"], "resumed")

    def recontact(
        self, node: str, guard: Callable[[NodeState | None], bool], reason: Callable[[NodeState], str]
    ) -> Applied:
        """Have slurmctld contact a node it stopped hearing, keeping the node drained (with ``reason`` of
        its state as read right before).

        slurmctld never pings a node it set DOWN for not responding; it asks for its registration only
        about every 20th ping cycle (half an hour with the default SlurmdTimeout), so a node fixed
        meanwhile stays out that long. A resume clears DOWN and makes slurmctld ask for the registration
        at once; the node stays "not responding" (no job lands on it) until it answers, and the drain goes
        straight back before it can.
        """
        try:
            current = self.state(node)
            if current is None or not guard(current):
                now = f"{current.state}{current.flags} ({current.reason or 'no reason'})" if current else "unknown"
                return Applied(node, False, f"not changed: its state changed meanwhile to {now}")
            self.slurm.update_node(node, "state=resume")
            self.slurm.update_node(node, "state=drain", f"reason={reason(current)}")
        except HpckitError as exc:
            return Applied(node, False, f"failed: {exc}")
        return Applied(node, True, "asked slurmctld to contact it again (still drained)")

    def _guarded(self, node: str, guard: Callable[[NodeState | None], bool], update: list[str], done: str) -> Applied:
        try:
            current = self.state(node)
            if not guard(current):
                now = f"{current.state}{current.flags} ({current.reason or 'no reason'})" if current else "unknown"
                return Applied(node, False, f"not changed: its state changed meanwhile to {now}")
            self.slurm.update_node(node, *update)
        except HpckitError as exc:
            return Applied(node, False, f"failed: {exc}")
        return Applied(node, True, done)

    def run_job(
        self,
        node: str,
        argv: Sequence[str],
        *,
        partition: str | None = None,
        time_limit_min: int = 10,
        timeout: float = 900.0,
        job_name: str = "hpckit-health",
    ) -> CommandResult:
        """Run ``argv`` as a one-node exclusive job on ``node`` and wait for it; its stdout comes back
        through srun, so the result does not depend on the node's shared filesystem."""
        return self.slurm.srun_on(
            node, argv, partition=partition, time_limit_min=time_limit_min, timeout=timeout, job_name=job_name
        )


@dataclass(frozen=True)
class PendingJob:
    job_id: str
    begin: str  # as squeue prints %S (local time, ISO-like) or "N/A"


class JobOps:
    """Queue operations the health schedule needs: pending jobs by name, submit, cancel."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.slurm = SlurmClient(transport)

    def pending(self, name: str) -> list[PendingJob]:
        text = self.slurm.pending(name)
        jobs = []
        for line in text.splitlines():
            job_id, _, begin = line.strip().partition("|")
            if job_id:
                jobs.append(PendingJob(job_id, begin))
        return jobs

    def cancel(self, job_id: str) -> None:
        done = self.slurm.scancel(job_id)
        if not done.ok:
            raise SlurmCommandError(done)

    def submit_held(
        self, name: str, command: str, begin: dt.datetime, *, output: str, time_limit_min: int, partition: str | None
    ) -> str:
        """Queue `command` as job `name`, held until `begin` (one such job at a time); its id."""
        return self.slurm.sbatch_wrap(
            name, command, begin, output=output, time_limit_min=time_limit_min, partition=partition
        )
