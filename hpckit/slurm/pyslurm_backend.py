"""The pyslurm job backend: Slurm's C API through pyslurm, for a machine that runs Slurm's clients itself.

Used only when pyslurm imports and was built for the installed Slurm (pyslurm 23.2.x pairs with Slurm
23.02.x): a pyslurm built against another release reads the wrong struct layouts. Written against the
pyslurm >= 23.2 object API (JobSubmitDescription, Job, db.Job). Without pyslurm the tests that take
the backend as a parameter skip it.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any

from hpckit.slurm.jobparse import JobRecord, TestOnlyEstimate, base_state, expand_nodes
from hpckit.slurm.jobs import JobError, JobInfo, JobRejectedError
from hpckit.slurm.parsers import parse_version
from hpckit.slurm.transport import Transport


def _pyslurm() -> Any:
    return importlib.import_module("pyslurm")


def _major_minor(version: str) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def pyslurm_unusable(transport: Transport) -> str | None:
    """Why pyslurm cannot be used here (not importable, or built for another Slurm), or None when it can."""
    try:
        module = _pyslurm()
    except ImportError as exc:
        return f"pyslurm is not importable ({exc})"
    done = transport.run(["sinfo", "--version"], timeout=10)
    if not done.ok:
        return f"cannot tell the installed Slurm's version: {done.describe()}"
    slurm = _major_minor(parse_version(done.stdout))
    ours = _major_minor(str(getattr(module, "__version__", "")))
    if slurm is None or ours is None or slurm != ours:
        return f"pyslurm {getattr(module, '__version__', '?')} does not match Slurm {done.stdout.strip()}"
    return None


def _rpc_error() -> type[Exception]:
    error: type[Exception] = getattr(_pyslurm(), "RPCError", RuntimeError)
    return error


@dataclass
class PyslurmBackend:
    transport: Transport
    name: str = "pyslurm"

    def submit(self, script: str) -> str:
        desc = _pyslurm().JobSubmitDescription(script=script)
        desc.load_sbatch_options()
        try:
            return str(desc.submit())
        except (_rpc_error(), ValueError) as exc:
            raise JobRejectedError(f"Slurm rejected the job: {exc}") from None

    def test_only(self, script: str) -> TestOnlyEstimate:
        raise JobError("the pyslurm backend cannot test a script (sbatch --test-only); use the cli backend")

    def _load(self, job_id: str) -> Any:
        try:
            return _pyslurm().Job.load(int(job_id))
        except _rpc_error():
            return None

    def queue_state(self, job_id: str) -> str | None:
        job = self._load(job_id)
        return base_state(str(job.state)) if job is not None else None

    def accounting(self, job_id: str) -> JobRecord | None:
        try:
            job = _pyslurm().db.Job.load(int(job_id))
        except (_rpc_error(), AttributeError):
            return None
        return _record(job_id, job, "sacct")

    def info(self, job_id: str) -> JobInfo | None:
        job = self._load(job_id)
        if job is None:
            return None
        return JobInfo(
            _record(job_id, job, "scontrol"),
            str(getattr(job, "standard_output", "") or ""),
            str(getattr(job, "standard_error", "") or ""),
            str(getattr(job, "working_directory", "") or ""),
        )

    def cancel(self, job_id: str) -> None:
        try:
            _pyslurm().Job(int(job_id)).cancel()
        except _rpc_error() as exc:
            raise JobError(f"cannot cancel job {job_id}: {exc}") from None

    def partitions(self) -> list[str]:
        return sorted(str(name) for name in _pyslurm().Partitions.load())


def _record(job_id: str, job: Any, source: str) -> JobRecord:
    code = getattr(job, "exit_code", 0) or 0
    signal = getattr(job, "exit_code_signal", 0) or 0
    nodes = str(getattr(job, "nodes", "") or "")
    return JobRecord(
        job_id,
        base_state(str(job.state)),
        int(code),
        int(signal),
        expand_nodes(nodes),
        source,
        reason=str(getattr(job, "state_reason", "") or ""),
        batch_host=str(getattr(job, "batch_host", "") or ""),
    )
