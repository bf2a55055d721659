"""Follow a benchmark job to its end: progress while it runs, and which node to blame when it fails.

Polls the job's state at most a second apart (hpckit.slurm.jobs' intervals) and, every couple of
seconds while it runs, the state of its nodes and the last lines of its output. A node that Slurm
marks down or not responding ends the wait at once (the job is cancelled): a collective never
finishes without all of its ranks. After the job, `culprits` reads the launcher's own lines to say
which node's task failed first.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hpckit.errors import HpckitError
from hpckit.proc import TransportError
from hpckit.slurm.client import SlurmClient
from hpckit.slurm.jobparse import FINISHED_QUEUE_STATES, JobRecord
from hpckit.slurm.jobs import JobError, JobOutcome, Jobs, JobWaitTimeout, poll_intervals
from hpckit.slurm.parsers import NodeState

CHECK_EVERY_S = 2.0
# How long the controller may stay unreachable (a slurmctld restart, an upgrade) before the wait gives up;
# accounting (slurmdbd) answers meanwhile, and a job it shows ended ends the wait at once.
CONTROLLER_OUTAGE_S = 900.0
TAIL_LINES = 4
# after the job has left the queue: how long accounting may take to have its final record
RECORD_WAIT_S = 60.0

_ROW = re.compile(r"^\s*(\d+)\s+\d+\s+\S+\s+\S+\s+-?\d+\s+(\S+)\s+(\S+)\s+(\S+)", re.M)
# srun(1)'s reports of tasks that ended badly, and of nodes it lost
_TASK = re.compile(r"^srun: error: (?P<node>[^\s:]+): tasks? [\d,\-]+: (?P<how>.+?)\s*$", re.M)
_NODE_FAIL = re.compile(r"^srun: error: Node failure on (?P<node>[^\s:]+)", re.M)
_LAUNCH = re.compile(r"failed on node (?P<node>[^\s:]+)", re.M)
# what a program prints when it cannot run: a Python exception's last line ("ModuleNotFoundError: No
# module named 'torch'", with or without srun's "N: " label), the shell's missing program or file
_PROGRAM_ERROR = re.compile(
    r"^(?:\d+: )?(?:[A-Za-z_][\w.]*(?:Error|Exception): .+|.*: (?:command not found|No such file or directory))$",
    re.M,
)
# nccl-tests' failure lines start with the host's name (after srun's label, if any)
_FAILURE_HOST = re.compile(r"(?:^|: )(?P<host>[\w.-]+)(?: pid \d+)?: Test (?:NCCL|CUDA) failure")
# srun stopping the whole step (--kill-on-bad-exit, a cancel): the task lines after it are its doing
_STEP_STOPPED = re.compile(
    r"^(?:srun: launch/slurm: _step_signal: Terminating|srun: Force Terminated"
    r"|\S*: error: \*\*\* STEP \S+ ON \S+ CANCELLED)",
    re.M,
)
# what srun --kill-on-bad-exit does to the other tasks once one has failed
_COLLATERAL = re.compile(r"^(Killed|Exited with exit code \d+)$")


@dataclass(frozen=True)
class Progress:
    job_id: str
    state: str
    elapsed: float
    nodes: tuple[str, ...] = ()
    size_bytes: int | None = None  # the last size measured
    busbw_gbps: float | None = None
    note: str = ""  # why it is pending (Slurm's reason), or that the controller cannot be reached


@dataclass(frozen=True)
class Followed:
    outcome: JobOutcome
    lost_nodes: tuple[str, ...]  # job nodes Slurm marked down or not responding while it ran
    nodes: tuple[str, ...] = ()


def last_row(tail: str | None) -> tuple[int, float] | None:
    """(size, out-of-place busbw) of the last table row in an output tail."""
    rows = _ROW.findall(tail or "")
    if not rows:
        return None
    size, *_, busbw = rows[-1]
    try:
        return int(size), float(busbw)
    except ValueError:
        return None


def lost(states: Sequence[NodeState], nodes: Sequence[str]) -> tuple[str, ...]:
    """The job's nodes that Slurm no longer counts on: down, drained, or not responding."""
    wanted = set(nodes)
    bad = {"down", "drained", "draining", "fail", "failing"}
    return tuple(s.name for s in states if s.name in wanted and (not s.responding or s.state in bad))


def culprits(output: str, lost_nodes: Sequence[str], record: JobRecord) -> tuple[str, ...]:
    """The node(s) a failed job's own evidence blames, most certain first; () when it blames none.

    Nodes Slurm itself gave up on; else nodes srun reports lost or could not launch on; else the node
    whose task srun saw end by a signal of its own, before srun stopped the step (the tasks it then
    terminates are not causes).
    A task that merely exited non-zero blames nobody: a missing module or a wrong path fails every node
    alike, and --kill-on-bad-exit stops the others before they can say so; the job could not measure.
    """
    if lost_nodes:
        return tuple(dict.fromkeys(lost_nodes))
    failed = [m.group("node") for m in _NODE_FAIL.finditer(output)] + [
        m.group("node") for m in _LAUNCH.finditer(output)
    ]
    if failed:
        return tuple(dict.fromkeys(failed))
    # once srun (or Slurm) stops the step, every other task ends by its signal: only what came before counts
    stopped = _STEP_STOPPED.search(output)
    before = output[: stopped.start()] if stopped else output
    causes = [m.group("node") for m in _TASK.finditer(before) if not _COLLATERAL.match(m.group("how"))]
    return (causes[0],) if causes else ()


def failure_hosts(failures: Sequence[str], nodes: Sequence[str]) -> tuple[str, ...]:
    """The job's nodes that nccl-tests' "HOST: Test NCCL/CUDA failure" lines name, when only some of them
    do: the same failure on every node is the run's, not a node's."""
    named = tuple(dict.fromkeys(m.group("host") for line in failures for m in _FAILURE_HOST.finditer(line)))
    ours = tuple(h for h in named if h in nodes)
    return ours if ours and len(set(ours)) < len(set(nodes)) else ()


def srun_errors(output: str) -> list[str]:
    """srun's error lines, as printed."""
    return [m.group(0) for m in (*_NODE_FAIL.finditer(output), *_TASK.finditer(output))]


def program_errors(output: str, limit: int = 3) -> list[str]:
    """The program's own error lines (a Python exception's last line, the shell's "not found"), each once."""
    return list(dict.fromkeys(m.group(0).strip() for m in _PROGRAM_ERROR.finditer(output)))[:limit]


@dataclass
class Follower:
    """Watches one job; `report` receives a Progress whenever something changed."""

    jobs: Jobs
    slurm: SlurmClient
    report: Callable[[Progress], None] = lambda _: None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    _nodes: tuple[str, ...] = field(default=(), init=False)
    _last: Progress | None = field(default=None, init=False)

    def follow(self, job_id: str, output_path: str, start: float, timeout: float | None) -> Followed:
        deadline = None if timeout is None else start + timeout
        intervals = poll_intervals()
        next_check = self.clock()
        lost_nodes: tuple[str, ...] = ()
        down_since: float | None = None
        while True:
            asked = self.clock()
            try:
                state = self.jobs.backend.queue_state(job_id)
                down_since = None
            except (JobError, TransportError) as exc:  # squeue itself waits ~60 s for a controller that is gone
                down_since = asked if down_since is None else down_since
                state, final = "UNREACHABLE", self._ended_meanwhile(job_id, exc, down_since, start)
                if final is not None:
                    return Followed(JobOutcome(final, output_path, None, self.clock() - start), lost_nodes, self._nodes)
            if state is None or state in FINISHED_QUEUE_STATES:
                break
            if state not in ("RUNNING", "UNREACHABLE") and self.clock() >= next_check:
                next_check = self.clock() + CHECK_EVERY_S
                self._emit(Progress(job_id, state, self.clock() - start, self._nodes, note=self._reason(job_id)))
            elif state == "RUNNING" and self.clock() >= next_check:
                next_check = self.clock() + CHECK_EVERY_S
                lost_nodes = self._check(job_id, output_path, start)
                if lost_nodes:
                    self.jobs.cancel(job_id)  # its collectives can never finish now
                    break
            if deadline is not None and self.clock() > deadline:
                self.jobs.cancel(job_id)
                raise JobWaitTimeout(f"job {job_id} still {state} after {timeout:.0f} s; cancelled it")
            self.sleep(next(intervals))
        return Followed(self._final(job_id, output_path, start), lost_nodes, self._nodes)

    def _final(self, job_id: str, output_path: str, start: float) -> JobOutcome:
        """The job's final record and output; accounting's record when the controller went away meanwhile."""
        try:
            outcome = self.jobs.follow(job_id, start, RECORD_WAIT_S, check=False)
        except (JobError, TransportError):
            record = self.jobs.backend.accounting(job_id)
            if record is None or not record.finished:
                raise
            outcome = JobOutcome(record, output_path, None, self.clock() - start)
        if not self._nodes:
            self._nodes = outcome.record.nodes
        return outcome

    def _ended_meanwhile(self, job_id: str, exc: Exception, down_since: float, start: float) -> JobRecord | None:
        """While the controller cannot be reached: accounting's record once the job has ended, else None.

        JobWaitTimeout when it has been unreachable for longer than CONTROLLER_OUTAGE_S."""
        record = self.jobs.backend.accounting(job_id)
        if record is not None and record.finished:
            return record
        gone = self.clock() - down_since
        if gone > CONTROLLER_OUTAGE_S:
            raise JobWaitTimeout(f"slurmctld unreachable for {gone:.0f} s while following job {job_id}: {exc}")
        first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        note = f"slurmctld unreachable for {gone:.0f} s, waiting for it ({first})"
        self._emit(Progress(job_id, "UNREACHABLE", self.clock() - start, self._nodes, note=note))
        return None

    def _reason(self, job_id: str) -> str:
        """Why a job is pending, in Slurm's words (Resources, Priority, ReqNodeNotAvail ...)."""
        try:
            info = self.jobs.backend.info(job_id)
        except (JobError, TransportError):
            return ""
        reason = info.record.reason if info is not None else ""
        return "" if reason in ("", "None") else reason

    def _check(self, job_id: str, output_path: str, start: float) -> tuple[str, ...]:
        try:
            if not self._nodes:
                info = self.jobs.backend.info(job_id)
                self._nodes = info.record.nodes if info is not None else ()
            lost_nodes = lost(self.slurm.nodes(), self._nodes)
        except (JobError, TransportError, HpckitError):
            return ()  # the controller went away between two questions: the next poll says so
        row = last_row(self.jobs.read_file(output_path, tail_lines=TAIL_LINES))
        last = self._last
        if row is None and last is not None and last.size_bytes is not None:
            row = (last.size_bytes, last.busbw_gbps or 0.0)  # between rows, or the read failed: no news
        size, busbw = row if row is not None else (None, None)
        self._emit(Progress(job_id, "RUNNING", self.clock() - start, self._nodes, size, busbw))
        return lost_nodes

    def _emit(self, progress: Progress) -> None:
        last = self._last
        if last is None or (progress.state, progress.size_bytes, progress.note.split(" for ")[0]) != (
            last.state,
            last.size_bytes,
            last.note.split(" for ")[0],
        ):
            self._last = progress
            self.report(progress)
