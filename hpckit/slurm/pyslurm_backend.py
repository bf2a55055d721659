"""Job reads through pyslurm (Slurm's C API, about 1 ms a call against 3-7 ms for a command), every
other job command through the command line.

Written against pyslurm 25.11's object API (Job.load, db.Job.load, Partitions.load). What pyslurm
cannot do exactly is left to the command line:

- submission: pyslurm 25.11 reads `#SBATCH` options only from a file, with a parser of its own that
  misreads --partition, --gpus-per-node and quoted names and defaults to one task; sbatch is the one
  reader of #SBATCH lines that is right by definition, so every submission goes through it;
- exit codes of 128 and more: pyslurm takes 128 off them (130 reads 2, 137 reads 9; `_get_exit_code`
  in pyslurm/utils/helpers.pyx), so the code of a job that failed, or is COMPLETING (its script has
  ended, its state does not yet say how), is read from scontrol (or sacct) instead;
- an array task `N_M` or a het job's part `N+K`: pyslurm loads a job by its number only (int("10_3") is
  103 in Python, another job);
- any read pyslurm fails other than with "no such job" (accounting off or slurmdbd down makes
  db.Job.load raise RPCError): the command line answers it, and the first failure of each kind is
  logged as a warning with pyslurm's error (then at debug level: a wait reads every poll);
- cancelling, and `--test-only`, which pyslurm has no call for.

The values are made the command line's own: the node list is `allocated_nodes` (sorted, as scontrol
prints it), a missing reason is empty (pyslurm says "None"), blanks in a reason become `_` (as scontrol
prints them), and a job that has finished has no queue state (squeue lists only live jobs). An id
that names no job (not N, N_M or N+K) reads as no such job, as in the CLI backend. pyslurm is used
only when it imports and was built for the installed Slurm's release (pyslurm 25.11.x with Slurm
25.11.x): another build reads the wrong struct layouts.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import hostlist

from hpckit.proc import Transport, TransportError
from hpckit.slurm.client import SlurmClient
from hpckit.slurm.jobparse import (
    TERMINAL_STATES,
    JobRecord,
    TestOnlyEstimate,
    base_state,
    expand_output_path,
    is_job_id,
)
from hpckit.slurm.jobs import CliBackend, JobError, JobInfo
from hpckit.slurm.parsers import parse_version

# slurm_errno.h: ESLURM_INVALID_JOB_ID (the controller no longer knows the job).
ESLURM_INVALID_JOB_ID = 2017
_T = TypeVar("_T")
LOG = logging.getLogger(__name__)


def _pyslurm() -> Any:
    return importlib.import_module("pyslurm")


def _major_minor(version: str) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def pyslurm_unusable(transport: Transport) -> str | None:
    """Why pyslurm cannot be used here (no Slurm clients, not importable, built for another Slurm), or None.

    Slurm's own clients are asked first: importing pyslurm initialises libslurm, which ends the process
    (a `fatal`) on a machine without a Slurm configuration.
    """
    try:
        done = SlurmClient(transport).sinfo_version(timeout=10)
    except TransportError as exc:
        return f"Slurm's commands do not run here ({exc})"
    if not done.ok:
        return f"cannot tell the installed Slurm's version: {done.describe()}"
    try:
        module = _pyslurm()
    except Exception as exc:  # ImportError, or OSError from a libslurm that does not load
        return f"pyslurm is not importable ({type(exc).__name__}: {exc})"
    slurm = _major_minor(parse_version(done.stdout))
    ours = _major_minor(str(getattr(module, "__version__", "")))
    if slurm is None or ours is None or slurm != ours:
        return f"pyslurm {getattr(module, '__version__', '?')} does not match Slurm {done.stdout.strip()}"
    return None


def _unknown_job(exc: Exception) -> bool:
    """An RPCError saying the job is not (or no longer) there: Job.load's ESLURM_INVALID_JOB_ID, or
    db.Job.load's "Job N does not exist" (pyslurm/db/job.pyx, Job.load)."""
    return getattr(exc, "errno", None) == ESLURM_INVALID_JOB_ID or "does not exist" in str(exc)


@dataclass
class PyslurmBackend:
    transport: Transport
    name: str = "pyslurm"
    cli: CliBackend = field(init=False)
    # The kinds of read that have fallen back to the command line already (warned about once).
    _warned: set[str] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        self.cli = CliBackend(self.transport)

    def submit(self, script: str, mkdirs: Sequence[str] = (), *, hold: bool = False) -> str:
        return self.cli.submit(script, mkdirs, hold=hold)

    def test_only(self, script: str) -> TestOnlyEstimate:
        return self.cli.test_only(script)

    def cancel(self, job_id: str) -> None:
        self.cli.cancel(job_id)

    def _read(
        self, what: str, job_id: str, by_number: Callable[[int], _T | None], by_cli: Callable[[], _T | None]
    ) -> _T | None:
        """`by_number(N)` through pyslurm for job N, else `by_cli()`: for an array task or a het job's part
        (pyslurm loads jobs by number only), and when pyslurm fails other than by not knowing the job.
        None for an id that names no job, as the CLI backend answers."""
        if not is_job_id(job_id):
            return None
        if not job_id.isdigit():
            return by_cli()
        try:
            return by_number(int(job_id))
        except JobError:
            raise  # the command line's own failure, asked for an exact exit code
        except Exception as exc:  # RPCError, ValueError, RuntimeError, MemoryError ...
            if _unknown_job(exc):
                return None
            self._fell_back(what, f"{what} {job_id}", exc)
            return by_cli()

    def _fell_back(self, what: str, subject: str, exc: Exception) -> None:
        """Say why the command line read instead: a warning the first time for each kind of read, then at
        debug level (without slurmdbd, a wait asks accounting at every poll)."""
        level = logging.DEBUG if what in self._warned else logging.WARNING
        self._warned.add(what)
        LOG.log(
            level, "pyslurm could not %s (%s: %s); read with the commands instead", subject, type(exc).__name__, exc
        )

    def queue_state(self, job_id: str) -> str | None:
        return self._read("load job", job_id, _queue_state, lambda: self.cli.queue_state(job_id))

    def info(self, job_id: str) -> JobInfo | None:
        return self._read("load job", job_id, lambda n: self._pyslurm_info(job_id, n), lambda: self.cli.info(job_id))

    def _pyslurm_info(self, job_id: str, number: int) -> JobInfo:
        job = _pyslurm().Job.load(number)  # an unknown job's RPCError: _read's None
        info = _info(job_id, job)
        if not _exit_code_unknown(info.record):
            return info
        exact = self.cli.info(job_id)
        record = exact.record if exact is not None else self.cli.accounting(job_id)
        return replace(info, record=_with_exit(info.record, record)) if record is not None else info

    def accounting(self, job_id: str) -> JobRecord | None:
        return self._read(
            "read accounting for job",
            job_id,
            lambda n: self._pyslurm_accounting(job_id, n),
            lambda: self.cli.accounting(job_id),
        )

    def _pyslurm_accounting(self, job_id: str, number: int) -> JobRecord | None:
        job = _pyslurm().db.Job.load(number)
        record = _db_record(job_id, job)
        return self.cli.accounting(job_id) if _exit_code_unknown(record) else record

    def partitions(self) -> list[str]:
        try:
            return sorted(str(name) for name in _pyslurm().Partitions.load())
        except Exception as exc:
            self._fell_back("load the partitions", "load the partitions", exc)
            return self.cli.partitions()


def _queue_state(number: int) -> str | None:
    state = base_state(str(_pyslurm().Job.load(number).state))
    return None if state in TERMINAL_STATES else state


def _exit_code_unknown(record: JobRecord) -> bool:
    """pyslurm cannot tell exit 2 from 130 (nor 0 from 128): exact only for a job that completed (code 0),
    one killed by a signal (code 0), or one still running. A COMPLETING job's script has ended with its
    code, and its state does not yet say whether that code was 0."""
    ended = record.finished or record.state == "COMPLETING"
    return ended and record.state != "COMPLETED" and record.signal == 0


def _with_exit(pyslurm_record: JobRecord, exact: JobRecord) -> JobRecord:
    return replace(pyslurm_record, exit_code=exact.exit_code, signal=exact.signal)


def _text(value: Any) -> str:
    """pyslurm's strings: None for an empty or NULL C string, sometimes the text "None" (no reason)."""
    text = "" if value is None else str(value)
    return "" if text in ("None", "(null)") else text


def _nodes(value: Any) -> tuple[str, ...]:
    # scontrol prints the allocation sorted (slurm_sort_node_list_str); pyslurm hands over the C string.
    text = _text(value)
    return tuple(hostlist.expand_hostlist(text, sort=True)) if text else ()


def _reason(job: Any) -> str:
    # scontrol replaces blanks in a free-text reason (state_desc) with '_' "for easier parsing".
    return re.sub(r"\s", "_", _text(job.state_reason))


def _record(job_id: str, job: Any, nodes: Any, source: str) -> JobRecord:
    """A Job's (source scontrol) or a db.Job's (source sacct) state, exit code, signal and nodes."""
    code, signal = int(job.exit_code or 0), int(job.exit_code_signal or 0)
    return JobRecord(job_id, base_state(str(job.state)), code, signal, _nodes(nodes), source)


def _info(job_id: str, job: Any) -> JobInfo:
    record = replace(
        _record(job_id, job, job.allocated_nodes, "scontrol"), reason=_reason(job), batch_host=_text(job.batch_host)
    )
    fields = {
        "JobId": job_id,
        "JobName": _text(job.name),
        "UserId": _text(job.user_name),
        "NodeList": _text(job.allocated_nodes),
        "BatchHost": record.batch_host,
        "ArrayJobId": str(job.array_id or job_id),
        "ArrayTaskId": "" if job.array_task_id is None else str(job.array_task_id),
    }
    return JobInfo(
        record,
        expand_output_path(_text(job.standard_output), fields),
        expand_output_path(_text(job.standard_error), fields),
        _text(job.working_directory),
    )


def _db_record(job_id: str, job: Any) -> JobRecord:
    return _record(job_id, job, job.nodelist, "sacct")
