"""Submit, watch, cancel batch jobs and read their output, through a Transport (here, or on the login node).

Two backends behind one interface: the Slurm command line (the default, always there) and pyslurm
(hpckit.slurm.pyslurm_backend), used only when it imports and matches the installed Slurm. `Jobs` puts
the waiting, output fetching and error reporting on top of whichever one is chosen.

Waiting polls `scontrol show job -o ID` 50 ms apart at first, growing to at most a second apart
(`sbatch --wait` polls 2, 8, 32 s apart and so reports a 2 s job 8 s late). That one query carries the
state, exit code, nodes and output path, so the poll that sees the job finished ends the wait with
nothing more to ask. Accounting (`sacct`) answers only for a job the controller has already forgotten
(MinJobAge after its end) or one whose epilog keeps it COMPLETING.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from hpckit.errors import HpckitError
from hpckit.proc import CommandResult, LocalTransport, Transport, TransportError
from hpckit.slurm.client import MKDIR_FAILED, OUTPUT_MARK, SlurmClient
from hpckit.slurm.directives import DirectiveError, read_directives
from hpckit.slurm.jobparse import (
    SACCT_FIELDS,
    JobRecord,
    QueuedJob,
    TaskFailure,
    TestOnlyEstimate,
    expand_output_path,
    is_job_id,
    parse_delimited,
    parse_queue_listing,
    parse_queue_state,
    parse_scontrol,
    parse_submit,
    parse_test_only,
    record_from_sacct,
    record_from_scontrol,
    slurm_error,
    task_failures,
)

POLL_FIRST_S = 0.05
POLL_MAX_S = 1.0
POLL_RAMP_S = 10.0
# After a job leaves the queue, accounting may lag the controller by a moment.
RECORD_GRACE_S = 10.0
# A job stays COMPLETING while epilogs run (milliseconds, unless one hangs); its batch script has ended,
# so after this long accounting's final state is taken instead of waiting for the last node.
COMPLETING_GRACE_S = 5.0
TAIL_LINES = 20


class JobError(HpckitError):
    """A job-layer failure: Slurm refused a command, or a job ended badly."""


class JobRejectedError(JobError):
    """sbatch refused the script; the message is Slurm's own."""

    exit_code = 2


class UnknownPartitionError(JobRejectedError):
    pass


class JobFailedError(JobError):
    """A job ended in a state other than COMPLETED with exit code 0."""

    def __init__(self, record: JobRecord, output_path: str | None, tail: str, first: TaskFailure | None = None) -> None:
        self.record = record
        self.output_path = output_path
        self.tail = tail
        self.first_failure = first
        self.exit_code = failure_status(record, first)
        super().__init__(describe_failure(record, output_path, tail, first))


class JobWaitTimeout(JobError):
    pass


def failure_status(record: JobRecord, first: TaskFailure | None) -> int:
    """The exit status that tells what went wrong: the first failed task's code when srun named one
    (the job's own is often a rank killed after it: 143), else the job's."""
    if first is not None and first.exit_code:
        return first.exit_code
    return record.status


def describe_failure(record: JobRecord, output_path: str | None, tail: str, first: TaskFailure | None = None) -> str:
    where = record.batch_host or (record.nodes[0] if record.nodes else "no node")
    how = f"exit code {record.exit_code}" + (f", signal {record.signal}" if record.signal else "")
    text = f"job {record.job_id} {record.state} ({how}) on {where}"
    if record.reason:
        text += f": {record.reason}"
    if first is not None:
        text += f"; first to fail: {first.describe()}"
    if output_path and tail.strip():
        before = " at that failure" if first is not None else ""
        text += f"\nlast lines of {output_path}{before}:\n{tail.rstrip()}"
    elif output_path:
        text += f"\n{output_path} is empty or unreadable"
    return text


def failure_tail(output: str, first: TaskFailure | None, lines: int = 20) -> str:
    """The output's last lines; with a first failure, the last lines before the other tasks' ends are
    reported: srun's report of the failure and what the task printed, which may reach the file just
    after srun's line (its output is forwarded apart from srun's own messages)."""
    text = output.splitlines()
    end = len(text)
    if first is not None:
        later = (i for i in range(first.line + 1, len(text)) if text[i].startswith(("srun: ", "slurmstepd")))
        end = next(later, len(text))
    return "\n".join(text[max(0, end - lines) : end])


@dataclass(frozen=True)
class JobInfo:
    """The controller's view of a job while it still knows it (MinJobAge after the end)."""

    record: JobRecord
    stdout_path: str
    stderr_path: str
    work_dir: str


class JobBackend(Protocol):
    """One way of talking to Slurm. Every method raises JobError (or a subclass) on failure."""

    name: str

    def submit(self, script: str) -> str: ...

    def test_only(self, script: str) -> TestOnlyEstimate: ...

    def queue_state(self, job_id: str) -> str | None: ...

    def accounting(self, job_id: str) -> JobRecord | None: ...

    def info(self, job_id: str) -> JobInfo | None: ...

    def cancel(self, job_id: str) -> None: ...

    def partitions(self) -> list[str]: ...


@dataclass
class CliBackend:
    """The Slurm command line, machine-readable forms only (--parsable, -h -o, -P, -o)."""

    transport: Transport
    name: str = "cli"
    # Wait with one long command on the login node instead of a command per poll; None: when over SSH.
    wait_remotely: bool | None = None
    slurm: SlurmClient = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.slurm = SlurmClient(self.transport)

    def _sbatch(self, options: str, script: str, mkdirs: Sequence[str] = ()) -> CommandResult:
        done = self.slurm.sbatch(options, script, mkdirs)
        if mkdirs and done.rc == MKDIR_FAILED:
            raise JobError(f"cannot create {', '.join(mkdirs)} on {done.where}: {done.stderr.strip()}")
        return done

    def submit(self, script: str, mkdirs: Sequence[str] = (), *, hold: bool = False) -> str:
        """Submit `script`, first creating the directories it writes into (Slurm does not, and a job whose
        --output directory is missing fails without writing a line anywhere). `hold`: submitted held,
        to start only once released (`scontrol release ID`)."""
        done = self._sbatch("--parsable --hold" if hold else "--parsable", script, mkdirs)
        if not done.ok:
            raise self._rejection(done, script)
        return parse_submit(done.stdout)

    def test_only(self, script: str) -> TestOnlyEstimate:
        done = self._sbatch("--test-only", script)
        if not done.ok:
            raise self._rejection(done, script)
        return parse_test_only(done.stderr + done.stdout)

    def _rejection(self, done: CommandResult, script: str) -> JobRejectedError:
        message = slurm_error(done.stderr) or done.describe()
        if "invalid partition" in message.lower():
            known = ", ".join(self.partitions()) or "none"
            asked = _requested_partition(script)
            return UnknownPartitionError(f"Slurm rejected the job: {message} (asked for {asked}; partitions: {known})")
        return JobRejectedError(f"Slurm rejected the job: {message}")

    def queue_state(self, job_id: str) -> str | None:
        if not is_job_id(job_id):
            return None  # no job has that id (and a command would read "-1" or "1,2" as something else)
        done = self.slurm.queue_state(job_id)
        if not done.ok:
            # Once the controller has purged the job, squeue calls the id invalid: it is no longer queued.
            if "invalid job id" in done.stderr.lower():
                return None
            raise JobError(done.describe())
        return parse_queue_state(done.stdout)

    def accounting(self, job_id: str) -> JobRecord | None:
        if not is_job_id(job_id):
            return None
        done = self.slurm.accounting(job_id)
        if not done.ok:
            return None  # accounting off or slurmdbd unreachable: the controller still knows the job
        return record_from_sacct(parse_delimited(done.stdout, SACCT_FIELDS), job_id)

    def info(self, job_id: str) -> JobInfo | None:
        if not is_job_id(job_id):
            return None
        done = self.slurm.show_job(job_id)
        if not done.ok:
            if "invalid job id" in (done.stderr + done.stdout).lower():
                return None
            raise JobError(done.describe())
        return info_from_scontrol(done.stdout, job_id)

    @property
    def remote(self) -> bool:
        if self.wait_remotely is not None:
            return self.wait_remotely
        return not isinstance(self.transport, LocalTransport)

    def wait_on_login(
        self, job_id: str, timeout: float | None, completing_grace: float = COMPLETING_GRACE_S
    ) -> tuple[JobInfo | None, str | None]:
        """Poll the controller from the login node itself, in one SSH command, until the job has ended.

        Over SSH every command costs a round trip (a few tenths of a second, more on a busy login node);
        polling there keeps Jobs.wait's cadence and costs one, which also brings the job's output back.
        The job's final `scontrol show job` record (None when the controller no longer knows the job)
        and its output (None when it could not be read there). JobWaitTimeout after `timeout` seconds.
        """
        limit = 0 if timeout is None else max(1, int(timeout))
        done = self.slurm.wait_on_login(job_id, limit, int(completing_grace * 1000))
        if done.rc == 124:
            raise JobWaitTimeout(f"job {job_id} still queued or running after {timeout} s")
        if done.rc != 0:
            raise JobError(f"waiting for job {job_id} on {self.transport.where}: {done.describe()}")
        record, marker, rest = done.stdout.partition(OUTPUT_MARK)
        info = info_from_scontrol(record, job_id) if record.strip() else None
        path, _, output = rest.partition("\n")
        # The shell cut the path at the first blank; the output is the job's only if that is the whole path.
        return info, output if marker and info is not None and path == info.stdout_path else None

    def cancel(self, job_id: str) -> None:
        done = self.slurm.scancel(job_id)
        if not done.ok:
            raise JobError(f"cannot cancel job {job_id}: {slurm_error(done.stderr) or done.describe()}")

    def queued(self, job_id: str | None = None, *, name: str | None = None, user: str | None = None) -> list[QueuedJob]:
        """The live jobs (pending, running, completing) matching all that is given; without a job id or a
        user, the calling user's own (`--me`), so a name never reaches another user's jobs."""
        done = self.slurm.queued(job_id, name, user)
        if not done.ok:
            if job_id is not None and "invalid job id" in done.stderr.lower():
                return []
            raise JobError(done.describe())
        return parse_queue_listing(done.stdout)

    def partitions(self) -> list[str]:
        done = self.slurm.partitions()
        return sorted({line.strip() for line in done.stdout.splitlines() if line.strip()}) if done.ok else []


def _names(fields: dict[str, str]) -> set[str]:
    """The ids a `scontrol show job` record answers to: its JobId, and the array task's N_M or the
    heterogeneous job component's N+K that scontrol prints after it (slurm_sprint_job_info)."""
    names = {fields.get("JobId", "")}
    if "ArrayTaskId" in fields:
        names.add(f"{fields.get('ArrayJobId')}_{fields['ArrayTaskId']}")
    if "HetJobOffset" in fields:
        names.add(f"{fields.get('HetJobId')}+{fields['HetJobOffset']}")
    return names


def info_from_scontrol(stdout: str, job_id: str) -> JobInfo | None:
    """`scontrol show job -o ID` output as a JobInfo (its record named `job_id` as asked: 10_3 is the
    task's JobId=13); None when it holds no record of that job."""
    records = [r for r in parse_scontrol(stdout) if job_id in _names(r)]
    if not records:
        return None
    fields = records[0]
    return JobInfo(
        replace(record_from_scontrol(fields), job_id=job_id),
        expand_output_path(fields.get("StdOut", ""), fields),
        expand_output_path(fields.get("StdErr", ""), fields),
        fields.get("WorkDir", ""),
    )


def _requested_partition(script: str) -> str:
    """The partition the script's #SBATCH lines ask for, read as sbatch reads them."""
    try:
        args = [arg for component in read_directives(script) for arg in component]
    except DirectiveError:
        return "the default partition"
    for arg, following in zip(args, [*args[1:], ""], strict=True):
        if arg.startswith("--partition="):
            return repr(arg.split("=", 1)[1])
        if arg in ("-p", "--partition"):
            return repr(following)
        if arg.startswith("-p"):
            return repr(arg[2:])
    return "the default partition"


def backend_for(transport: Transport, prefer: str = "auto") -> JobBackend:
    """pyslurm when asked for (or 'auto' and usable here), else the command line.

    Either way sbatch submits (hpckit.slurm.pyslurm_backend reads through pyslurm only what it reads
    exactly), so 'auto' is never less correct than the command line. pyslurm talks to the local Slurm
    only, so a remote transport always gets the command line.
    """
    if prefer not in ("auto", "cli", "pyslurm"):
        raise JobError(f"unknown job backend {prefer!r} (auto, cli, pyslurm)")
    if prefer != "cli" and isinstance(transport, LocalTransport):
        from hpckit.slurm.pyslurm_backend import PyslurmBackend, pyslurm_unusable

        reason = pyslurm_unusable(transport)
        if reason is None:
            return PyslurmBackend(transport)
        if prefer == "pyslurm":
            raise JobError(f"the pyslurm backend cannot be used: {reason}")
    elif prefer == "pyslurm":
        raise JobError("the pyslurm backend works on the machine running Slurm's clients only, not over SSH")
    return CliBackend(transport)


@dataclass(frozen=True)
class JobOutcome:
    record: JobRecord
    output_path: str | None
    output: str | None
    seconds: float
    # The first task srun reported failed (a multi-node job: where it broke), when the job failed.
    first_failure: TaskFailure | None = None


def poll_intervals(first: float = POLL_FIRST_S, cap: float = POLL_MAX_S, ramp: float = POLL_RAMP_S) -> Iterator[float]:
    """Delays between polls: `first` at the start, growing by 1 s per `ramp` s of waiting, at most `cap`.

    A job that ends in its first second is seen finished within 50-150 ms; one that runs for minutes
    costs the controller one query a second (about 30 in the first 10 s).
    """
    waited = 0.0
    while True:
        delay = min(cap, first + waited / ramp)
        yield delay
        waited += delay


@dataclass
class Jobs:
    backend: JobBackend
    transport: Transport
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def on(cls, transport: Transport, prefer: str = "auto") -> Jobs:
        return cls(backend_for(transport, prefer), transport)

    def submit(self, script: str, mkdirs: Sequence[str] = (), *, hold: bool = False) -> str:
        """Submit `script` with sbatch after creating the directories it writes into (in sbatch's own command).

        Every backend hpckit ships submits through sbatch (pyslurm's through its `cli`); a backend of
        another kind gets the script alone.
        """
        cli = self.backend if isinstance(self.backend, CliBackend) else getattr(self.backend, "cli", None)
        if isinstance(cli, CliBackend):
            return cli.submit(script, mkdirs, hold=hold)
        if hold:
            raise JobError(f"the {self.backend.name} backend cannot submit a job held")
        ensure_dirs(self.transport, tuple(mkdirs))
        return self.backend.submit(script)

    def test_only(self, script: str) -> TestOnlyEstimate:
        return self.backend.test_only(script)

    def cancel(self, job_id: str) -> None:
        self.backend.cancel(job_id)

    def wait(self, job_id: str, timeout: float | None = None) -> JobRecord:
        """Block until the job has finished; its final record (state, exit code, nodes)."""
        return self._wait(job_id, timeout)[0]

    def _wait(self, job_id: str, timeout: float | None) -> tuple[JobRecord, JobInfo | None, str | None]:
        """The final record, the controller's view of the job if it still has one, and the job's output
        when the waiting brought it along (None: read it separately)."""
        if isinstance(self.backend, CliBackend) and self.backend.remote:
            try:
                info, output = self.backend.wait_on_login(job_id, timeout)
            except TransportError:
                pass  # the connection broke (a long job, a restarted sshd): poll from here instead
            else:
                if info is not None and info.record.finished:
                    return info.record, info, output
                if info is not None and info.record.state == "COMPLETING":
                    # The login node has watched it complete for the whole grace already: ask accounting.
                    since = self.clock() - COMPLETING_GRACE_S
                    return *self._poll(job_id, self._deadline(timeout), timeout, since), None
        return *self._poll(job_id, self._deadline(timeout), timeout), None

    def _deadline(self, timeout: float | None) -> float | None:
        return None if timeout is None else self.clock() + timeout

    def _poll(
        self, job_id: str, deadline: float | None, timeout: float | None, completing_since: float | None = None
    ) -> tuple[JobRecord, JobInfo | None]:
        """The controller's record of the job, asked for at poll_intervals() until it shows a final state.

        Right after the end, sacct can still list a job as running, or only its first node, and drops the
        signal of a cancelled job; the controller has all of it, so accounting is asked only when the
        controller has forgotten the job or it has been COMPLETING for long.
        """
        intervals = poll_intervals()
        while True:
            info = self.backend.info(job_id)
            if info is None:
                return self._from_accounting(job_id), None
            if info.record.finished:
                return info.record, info
            if info.record.state == "COMPLETING":
                completing_since = completing_since if completing_since is not None else self.clock()
                record = self._accounting_after(job_id, completing_since)
                if record is not None:
                    return _completed_by(record, info.record), info
            self._pause(next(intervals), deadline, f"job {job_id} still {info.record.state} after {timeout} s")

    def _accounting_after(self, job_id: str, completing_since: float) -> JobRecord | None:
        if self.clock() - completing_since < COMPLETING_GRACE_S:
            return None
        record = self.backend.accounting(job_id)
        return record if record is not None and record.finished else None

    def _from_accounting(self, job_id: str) -> JobRecord:
        """The final record of a job the controller no longer knows: accounting's, which may lag a moment."""
        deadline = self.clock() + RECORD_GRACE_S
        intervals = poll_intervals()
        while True:
            record = self.backend.accounting(job_id)
            if record is not None and record.finished:
                return record
            self._pause(
                next(intervals),
                deadline,
                f"job {job_id} left the queue but neither sacct nor scontrol shows how it ended",
            )

    def _pause(self, delay: float, deadline: float | None, message: str) -> None:
        if deadline is not None and self.clock() + delay > deadline:
            raise JobWaitTimeout(message)
        self.sleep(delay)

    def read_file(self, path: str, tail_lines: int | None = None) -> str | None:
        """A file on the cluster (shared filesystem) as the login node sees it; None when it cannot be read."""
        argv = ["tail", "-n", str(tail_lines), "--", path] if tail_lines else ["cat", "--", path]
        done = self.transport.run(argv, timeout=60)
        return done.stdout if done.ok else None

    def output_path(self, job_id: str) -> str | None:
        info = self.backend.info(job_id)
        return info.stdout_path if info is not None and info.stdout_path else None

    def run(self, script: str, timeout: float | None = None, *, check: bool = True) -> JobOutcome:
        """Submit, wait, and fetch the output; JobFailedError (with the log's tail) when `check` and it failed."""
        start = self.clock()
        job_id = self.submit(script)
        return self.follow(job_id, start, timeout, check=check)

    def follow(self, job_id: str, start: float, timeout: float | None, *, check: bool = True) -> JobOutcome:
        record, info, output = self._wait(job_id, timeout)
        # The controller still knows the job (for MinJobAge, 300 s by default) and so its output path.
        path = info.stdout_path if info is not None and info.stdout_path else None
        if output is None and path:
            output = self.read_file(path)
        first = next(iter(task_failures(output or "")), None) if not record.ok else None
        outcome = JobOutcome(record, path, output, self.clock() - start, first)
        if check and not record.ok:
            raise JobFailedError(record, path, failure_tail(output or "", first, TAIL_LINES), first)
        return outcome


def _completed_by(accounting: JobRecord, controller: JobRecord) -> JobRecord:
    """Accounting's final state with the controller's nodes (sacct's NodeList lags) and signal (sacct drops it)."""
    return replace(
        accounting,
        nodes=controller.nodes or accounting.nodes,
        signal=accounting.signal or controller.signal,
        reason=controller.reason,
        batch_host=controller.batch_host,
    )


def ensure_dirs(transport: Transport, dirs: tuple[str, ...]) -> None:
    """Create the directories a job writes into (Slurm does not, and fails the job silently)."""
    if not dirs:
        return
    done = transport.run(["mkdir", "-p", "--", *dirs], timeout=30)
    if not done.ok:
        raise JobError(f"cannot create {', '.join(dirs)}: {done.describe()}")


@dataclass(frozen=True)
class Cancelled:
    cancelled: list[QueuedJob]
    # (what was asked for, why nothing was cancelled for it)
    missed: list[tuple[str, str]]


def cancel_jobs(
    backend: CliBackend, job_ids: Sequence[str] = (), *, name: str | None = None, user: str | None = None
) -> Cancelled:
    """Cancel the given jobs, or every live job with this name and/or user: each one listed first, so that
    what was cancelled can be named, and an id Slurm does not know is reported (scancel 22.05 says nothing)."""
    found: list[QueuedJob] = []
    missed: list[tuple[str, str]] = []
    for job_id in job_ids:
        if not is_job_id(job_id):
            missed.append(
                (f"job {job_id}", "is not a job id (123, 123_4 for an array task, 123+1 for a het job's part)")
            )
            continue
        listed = backend.queued(job_id, name=name, user=user)
        if not listed:
            missed.append((f"job {job_id}", "is not queued or running (an unknown id, or it has ended)"))
        found += listed
    if not job_ids:
        found = backend.queued(name=name, user=user)
        if not found:
            asked = " and ".join(f"{k} {v!r}" for k, v in (("name", name), ("user", user)) if v is not None)
            missed.append((f"jobs with {asked}", "none are queued or running"))
    cancelled = []
    for job in found:
        try:
            backend.cancel(job.job_id)
        except JobError as exc:
            missed.append((f"job {job.job_id}", str(exc)))
        else:
            cancelled.append(job)
    return Cancelled(cancelled, missed)
