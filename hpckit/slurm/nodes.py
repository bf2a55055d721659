"""Node state operations through a Transport: read states and reasons, drain, resume, and start a
one-node job (the health sweep's per-node job). The only place that knows these command lines.

Drain and resume re-read the node right before acting and act only if a caller's guard still agrees,
so that an admin's drain placed between a health run's look and its action is never overwritten.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hpckit.errors import HpckitError
from hpckit.proc import CommandResult, Transport
from hpckit.slurm.client import SlurmCommandError
from hpckit.slurm.parsers import NodeState, parse_sinfo_nodes

# %E (the reason) comes last: it is free text and may itself hold a "|".
SINFO_FORMAT = "%N|%T|%P|%E"


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

    def _run(self, *argv: str, timeout: float = 30.0) -> str:
        result = self.transport.run(argv, timeout=timeout)
        if not result.ok:
            raise SlurmCommandError(result)
        return result.stdout

    def fleet(self, nodes: Sequence[str] | None = None) -> Fleet:
        argv = ["sinfo", "-h", "-N", "-o", SINFO_FORMAT]
        if nodes:
            argv += ["-n", ",".join(nodes)]
        return parse_fleet(self._run(*argv))

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
            self._run("scontrol", "update", f"nodename={node}", "state=resume")
            self._run("scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason(current)}")
        except HpckitError as exc:
            return Applied(node, False, f"failed: {exc}")
        return Applied(node, True, "asked slurmctld to contact it again (still drained)")

    def _guarded(self, node: str, guard: Callable[[NodeState | None], bool], update: list[str], done: str) -> Applied:
        try:
            current = self.state(node)
            if not guard(current):
                now = f"{current.state}{current.flags} ({current.reason or 'no reason'})" if current else "unknown"
                return Applied(node, False, f"not changed: its state changed meanwhile to {now}")
            self._run("scontrol", "update", f"nodename={node}", *update)
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
        cmd = ["srun", f"--nodelist={node}", "--nodes=1", "--ntasks=1", "--exclusive", "--input=none"]
        cmd += [f"--job-name={job_name}", f"--time={time_limit_min}", "--immediate=60", "--quiet"]
        if partition:
            cmd.append(f"--partition={partition}")
        return self.transport.run([*cmd, "--", *argv], timeout=timeout)


@dataclass(frozen=True)
class PendingJob:
    job_id: str
    begin: str  # as squeue prints %S (local time, ISO-like) or "N/A"


class JobOps:
    """Queue operations the health schedule needs: pending jobs by name, submit, cancel."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def _run(self, *argv: str, timeout: float = 30.0) -> str:
        result = self.transport.run(argv, timeout=timeout)
        if not result.ok:
            raise SlurmCommandError(result)
        return result.stdout

    def pending(self, name: str) -> list[PendingJob]:
        text = self._run("squeue", "-h", "-n", name, "-t", "PENDING", "-o", "%i|%S")
        jobs = []
        for line in text.splitlines():
            job_id, _, begin = line.strip().partition("|")
            if job_id:
                jobs.append(PendingJob(job_id, begin))
        return jobs

    def cancel(self, job_id: str) -> None:
        self._run("scancel", job_id)

    def submit(self, argv: Sequence[str]) -> str:
        """Run an ``sbatch --parsable`` command line; the job id (``123`` of ``123;cluster``)."""
        return self._run(*argv).strip().split(";")[0]
