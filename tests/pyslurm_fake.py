"""A stand-in for pyslurm 25.11.2 and for the Slurm commands, both reading one set of controller records.

pyslurm cannot be built here (PyPI carries only 25.11, built against a Slurm 25.11 this box does not
have), so this follows its published source distribution (`pip download --no-deps --no-binary :all:
pyslurm==25.11.2`); each behaviour names the file it comes from:

- pyslurm/__init__.py: `__version__` "25.11.2"; `Job`, `Partitions`, `JobSubmitDescription`, `db`,
  `RPCError`, `PyslurmError` at the top level.
- pyslurm/core/error.pyx: `RPCError(errno=SLURM_ERROR, msg=None)`, a PyslurmError with `.errno`/`.msg`.
- pyslurm/core/job/job.pyx: `Job.load(job_id)` (static) hands the id to slurm_load_job as a uint32_t
  (a number only: an array task `N_M` cannot be loaded by its name) and raises RPCError for an id the
  controller does not know (slurm_load_job's ESLURM_INVALID_JOB_ID, 2017, "Invalid job id specified" in Slurm's
  src/common/slurm_errno.c); `state` is job_state_string(); `state_reason` is state_desc if set, else
  the reason's name; `allocated_nodes` is the C string `nodes` (None when empty, cstr.to_unicode);
  `exit_code`/`exit_code_signal` come from `_get_exit_code`; `standard_output` is
  slurm_get_job_stdout(), the same call scontrol prints.
- pyslurm/utils/helpers.pyx `_get_exit_code`: for a signalled job (0, signal); for an exited one
  (status, 0), with 128 taken off a status of 128 or more (130 -> 2, 137 -> 9).
- pyslurm/core/job/submission.pyx and sbatch_opts.pyx: `load_sbatch_options()` raises ValueError("You
  need to set the 'script' attribute first.") without a script and ValueError("The script path you
  provided is not valid.") when `script` is not a path to a file.
- pyslurm/db/job.pyx: `db.Job.load(job_id, cluster=None, with_script=False, with_env=False)` raises
  RPCError(msg="Job N does not exist on Cluster C") for an unknown id; without accounting it fails before
  asking for the job (pyslurm/db/connection.pyx): with AccountingStorageType none slurmdb_connection_get
  gives no connection (RPCError "Failed to open onnection to slurmdbd", pyslurm's spelling), with
  slurmdbd down slurmdb_jobs_get gives no list (db.Jobs.load's RPCError "Failed to get Jobs from
  slurmdbd"); `nodelist`, `state`, `exit_code` (the same `_get_exit_code`).
- `array_id`/`array_task_id`: the array's id and the task's index (None for a job outside an array).
- pyslurm/core/partition.pyx, pyslurm/xcollections.pyx: `Partitions.load()` is a map; iterating it
  gives the partition names.
- The one fact measured rather than read: against Slurm 25.11.7, a job with no reason reads
  `state_reason` "None" (the text), not None (issue 18).

The command side prints what Slurm's own code prints for the same record: scontrol per
src/scontrol/info_job.c of Slurm 24.11.5 (Reason with blanks as '_', ExitCode=STATUS:SIGNAL from the
wait status, NodeList sorted, BatchHost only when set, `ArrayJobId=N ArrayTaskId=M` or `HetJobId=N
HetJobOffset=K` after the JobId), laid out like the lab's real
`scontrol show job -o` line (tests/data/jobs/lab); squeue lists only live jobs (src/squeue/print.c).
The commands take a job by number, as an array task `N_M` or a heterogeneous job's component `N+K`
(slurm_xlate_job_id); sacct prints a task's JobID as `N_M`. sacct's errors without accounting are
the ones it prints with AccountingStorageType none and with slurmdbd down.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hostlist

from hpckit.proc import CommandResult, LocalTransport

DATA = Path(__file__).resolve().parent / "data" / "jobs" / "lab"
SLURM_ERROR = -1
ESLURM_INVALID_JOB_ID = 2017
LIVE = {"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "STAGE_OUT"}
# What pyslurm's db.Job.load and sacct say without accounting: "off" (AccountingStorageType none), "down" (slurmdbd).
NO_DB_RPC = {"off": "Failed to open onnection to slurmdbd", "down": "Failed to get Jobs from slurmdbd"}
NO_DB_SACCT = {
    "off": "sacct: error: Slurm accounting storage is disabled\n",
    "down": "sacct: error: slurm_persist_conn_open_without_init: failed to open persistent connection to host:"
    "ctl:6819: Connection refused\nsacct: error: Sending PersistInit msg: Connection refused\n"
    "sacct: error: Problem talking to the database: Connection refused\n",
}
CONTROLLER_DOWN = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"


def exited(code: int) -> int:
    """The wait status of a process that exited with `code`."""
    return code << 8


def signalled(signal: int) -> int:
    return signal


@dataclass
class ControllerJob:
    """What slurmctld holds of a job (slurm_job_info_t's fields that hpckit reads)."""

    job_id: int
    job_state: str
    exit_code: int = 0  # a wait status
    nodes: str | None = None
    state_desc: str | None = None
    reason: str = "None"  # job_state_reason_string(state_reason)
    batch_host: str | None = None
    name: str = "train"
    user: str = "root"
    std_out: str = "/shared/logs/train-{id}.out"
    work_dir: str = "/root"
    in_controller: bool = True  # False once MinJobAge has passed: only accounting knows it
    in_accounting: bool = True
    array: tuple[int, int] | None = None  # (array job id, task index): answers to `N_M`
    het: tuple[int, int] | None = None  # (het job id, offset): answers to `N+K`

    @property
    def names(self) -> tuple[str, ...]:
        """The ids Slurm's commands take for this job."""
        extra = [f"{self.array[0]}_{self.array[1]}"] if self.array else []
        extra += [f"{self.het[0]}+{self.het[1]}"] if self.het else []
        return (str(self.job_id), *extra)

    @property
    def sacct_id(self) -> str:
        return self.names[-1] if self.array or self.het else str(self.job_id)

    @property
    def stdout_path(self) -> str:
        return self.std_out.format(id=self.job_id)


def _get_exit_code(status: int) -> tuple[int, int]:
    """pyslurm/utils/helpers.pyx `_get_exit_code`."""
    if status & 0x7F:  # WIFSIGNALED
        return 0, status & 0x7F
    code = (status >> 8) & 0xFF  # WIFEXITED, WEXITSTATUS
    return (code - 128 if code >= 128 else code), 0


class PyslurmError(Exception):
    pass


class RPCError(PyslurmError):
    def __init__(self, errno: int = SLURM_ERROR, msg: str | None = None) -> None:
        self.errno = errno
        self.msg = msg or f"slurm error {errno}"
        super().__init__(self.msg)


@dataclass
class FakeSlurm(LocalTransport):
    """The controller's jobs and partitions, answering pyslurm and the commands on "this machine" (a
    LocalTransport: pyslurm works only where Slurm's clients do); records the calls made through each."""

    jobs: dict[int, ControllerJob] = field(default_factory=dict)
    partitions: tuple[str, ...] = ("gpu", "cpu")
    version: str = "25.11.7"
    pyslurm_calls: list[str] = field(default_factory=list)
    commands: list[tuple[str, ...]] = field(default_factory=list)
    submitted: list[str] = field(default_factory=list)
    broken: Exception | None = None  # raised by every pyslurm call when set
    accounting: str = "on"  # "off" (AccountingStorageType none) or "down" (slurmdbd not answering)
    controller_down: bool = False  # the commands cannot reach slurmctld

    def add(self, job: ControllerJob) -> ControllerJob:
        self.jobs[job.job_id] = job
        return job

    # --------------------------------------------------------------- the pyslurm module
    def module(self) -> types.ModuleType:
        fake = self
        pyslurm = types.ModuleType("pyslurm")
        pyslurm.__version__ = "25.11.2"  # type: ignore[attr-defined]
        pyslurm.PyslurmError = PyslurmError  # type: ignore[attr-defined]
        pyslurm.RPCError = RPCError  # type: ignore[attr-defined]

        class Job:
            def __init__(self, job_id: int) -> None:
                self._raw = ControllerJob(job_id, "PENDING")

            @staticmethod
            def load(job_id: int) -> Job:
                fake._pyslurm("Job.load")
                if not isinstance(job_id, int):  # Cython's conversion to uint32_t
                    raise TypeError(f"an integer is required, not {type(job_id).__name__}")
                raw = fake.jobs.get(job_id)
                if raw is None or not raw.in_controller:
                    raise RPCError(ESLURM_INVALID_JOB_ID, "Invalid job id specified")
                job = Job(raw.job_id)
                job._raw = raw
                return job

            id = property(lambda self: self._raw.job_id)
            name = property(lambda self: self._raw.name)
            user_name = property(lambda self: self._raw.user)
            state = property(lambda self: self._raw.job_state)
            state_reason = property(lambda self: self._raw.state_desc or self._raw.reason)
            allocated_nodes = property(lambda self: self._raw.nodes or None)
            batch_host = property(lambda self: self._raw.batch_host or None)
            exit_code = property(lambda self: _get_exit_code(self._raw.exit_code)[0])
            exit_code_signal = property(lambda self: _get_exit_code(self._raw.exit_code)[1])
            standard_output = property(lambda self: self._raw.stdout_path)
            standard_error = property(lambda self: self._raw.stdout_path)
            working_directory = property(lambda self: self._raw.work_dir)
            array_id = property(lambda self: self._raw.array[0] if self._raw.array else None)
            array_task_id = property(lambda self: self._raw.array[1] if self._raw.array else None)

            def cancel(self) -> None:
                fake._pyslurm("Job.cancel")

        class DbJob:
            def __init__(self, raw: ControllerJob) -> None:
                self._raw = raw

            @staticmethod
            def load(job_id: int, cluster: str | None = None, with_script: bool = False, with_env: bool = False) -> Any:
                fake._pyslurm("db.Job.load")
                if fake.accounting != "on":
                    raise RPCError(msg=NO_DB_RPC[fake.accounting])
                raw = fake.jobs.get(int(job_id))
                if raw is None or not raw.in_accounting:
                    raise RPCError(msg=f"Job {job_id} does not exist on Cluster {cluster or 'lab'}")
                return DbJob(raw)

            state = property(lambda self: self._raw.job_state)
            nodelist = property(lambda self: self._raw.nodes or None)
            exit_code = property(lambda self: _get_exit_code(self._raw.exit_code)[0])
            exit_code_signal = property(lambda self: _get_exit_code(self._raw.exit_code)[1])

        class JobSubmitDescription:
            def __init__(self, **kwargs: Any) -> None:
                self.script: str | None = None
                for key, value in kwargs.items():
                    setattr(self, key, value)

            def load_sbatch_options(self, overwrite: bool = False) -> None:
                if not self.script:
                    raise ValueError("You need to set the 'script' attribute first.")
                if not Path(self.script).is_file():
                    raise ValueError("The script path you provided is not valid.")

            def submit(self) -> int:
                fake._pyslurm("JobSubmitDescription.submit")
                return 99

        class Partitions(dict[str, object]):
            @staticmethod
            def load() -> Partitions:
                fake._pyslurm("Partitions.load")
                return Partitions({name: object() for name in fake.partitions})

        db = types.ModuleType("pyslurm.db")
        db.Job = DbJob  # type: ignore[attr-defined]
        pyslurm.Job = Job  # type: ignore[attr-defined]
        pyslurm.JobSubmitDescription = JobSubmitDescription  # type: ignore[attr-defined]
        pyslurm.Partitions = Partitions  # type: ignore[attr-defined]
        pyslurm.db = db  # type: ignore[attr-defined]
        return pyslurm

    def _pyslurm(self, call: str) -> None:
        self.pyslurm_calls.append(call)
        if self.broken is not None:
            raise self.broken

    # --------------------------------------------------------------- the commands (a Transport)
    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float | None = 60.0,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        self.commands.append(tuple(argv))
        rc, out, err = self._answer(list(argv), stdin)
        return CommandResult(tuple(argv), rc, out, err, self.where)

    def _answer(self, argv: list[str], stdin: str | None) -> tuple[int, str, str]:
        if argv[:2] == ["sinfo", "--version"]:
            return 0, f"slurm {self.version}\n", ""
        if argv[0] == "sbatch":
            self.submitted.append(stdin or "")
            if "--test-only" in argv:
                estimate = "Job 41 to start at 2026-11-25T12:00:00 using 2 processors on nodes node[1-2] in partition p"
                return 0, "", f"sbatch: {estimate}\n"
            return 0, "41\n", ""
        if argv[:2] == ["cat", "--"]:  # a job's output, on the "shared filesystem" (here: this machine's)
            path = Path(argv[2])
            return (0, path.read_text(), "") if path.is_file() else (1, "", f"cat: {path}: No such file or directory\n")
        if argv[0] == "scancel":
            return 0, "", ""
        if argv[:3] == ["sinfo", "-h", "-o"]:
            return 0, "".join(f"{name}\n" for name in self.partitions), ""
        ident = argv[argv.index("-j") + 1] if "-j" in argv else argv[-1]
        raw = next((j for j in self.jobs.values() if ident in j.names), None)
        job = raw if raw is not None and raw.in_controller else None
        if argv[0] == "sacct" and self.accounting != "on":
            return 1, "", NO_DB_SACCT[self.accounting]
        if argv[0] in ("scontrol", "squeue") and self.controller_down:
            return 1, "", CONTROLLER_DOWN
        if argv[0] == "scontrol":
            return (0, scontrol_line(job), "") if job else (1, "", "slurm_load_jobs error: Invalid job id specified\n")
        if argv[0] == "squeue":
            if job is None:
                return 1, "", "slurm_load_jobs error: Invalid job id specified\n"
            return 0, (job.job_state + "\n") if job.job_state in LIVE else "", ""
        if argv[0] == "sacct":
            return 0, sacct_line(raw) if raw and raw.in_accounting else "", ""
        return 127, "", f"{argv[0]}: not faked\n"


def _exit_field(status: int) -> str:
    """info_job.c: ExitCode=%u:%u from WIFSIGNALED/WTERMSIG, WIFEXITED/WEXITSTATUS."""
    if status & 0x7F:
        return f"0:{status & 0x7F}"
    return f"{(status >> 8) & 0xFF}:0"


def scontrol_line(job: ControllerJob) -> str:
    """`scontrol show job -o ID` for this record, on the layout of the lab's real line."""
    line = (DATA / "scontrol-show-job-o-failed-22.05.8.txt").read_text()
    reason = "".join("_" if c.isspace() else c for c in job.state_desc) if job.state_desc else job.reason
    ids = f"JobId={job.job_id} "
    if job.array:
        ids += f"ArrayJobId={job.array[0]} ArrayTaskId={job.array[1]} "
    elif job.het:
        ids += f"HetJobId={job.het[0]} HetJobOffset={job.het[1]} "
    nodes = str(hostlist.collect_hostlist(hostlist.expand_hostlist(job.nodes, sort=True))) if job.nodes else "(null)"
    batch = f"BatchHost={job.batch_host} " if job.batch_host else ""
    replacements = {
        "JobId=14 JobName=sbatch UserId=root(0)": f"{ids}JobName={job.name} UserId={job.user}(0)",
        "JobState=FAILED Reason=NonZeroExitCode": f"JobState={job.job_state} Reason={reason}",
        "ExitCode=3:0": f"ExitCode={_exit_field(job.exit_code)}",
        "NodeList=node[1-2] BatchHost=node1 ": f"NodeList={nodes} {batch}",
        "WorkDir=/root StdErr=/tmp/f-14.out": f"WorkDir={job.work_dir} StdErr={job.stdout_path}",
        "StdOut=/tmp/f-14.out": f"StdOut={job.stdout_path}",
    }
    for old, new in replacements.items():
        assert old in line, old
        line = line.replace(old, new)
    return line


def sacct_line(job: ControllerJob) -> str:
    """`sacct -X -n -P -j ID -o JobID,State,ExitCode,NodeList` (a cancelled job's state says by whom)."""
    state = "CANCELLED by 0" if job.job_state == "CANCELLED" else job.job_state
    return f"{job.sacct_id}|{state}|{_exit_field(job.exit_code)}|{job.nodes or 'None assigned'}\n"
