"""The pyslurm backend against a real Slurm, on a machine where Slurm's clients and a matching pyslurm
are installed (a login node): `pytest tests/test_pyslurm_login.py` there. Skipped anywhere else, since
pyslurm reads the local Slurm only (pyslurm 25.11 builds only against Slurm 25.11).

Each job is submitted with sbatch and read back through both backends, which must agree.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from hpckit.proc import LocalTransport, TransportError
from hpckit.slurm.jobs import CliBackend, Jobs, backend_for
from hpckit.slurm.pyslurm_backend import PyslurmBackend, pyslurm_unusable


def _unusable() -> str | None:
    try:
        return pyslurm_unusable(LocalTransport())
    except TransportError as exc:
        return str(exc)


pytestmark = pytest.mark.skipif(bool(_unusable()), reason=f"no usable pyslurm here: {_unusable()}")
# Where the jobs write their output: a folder the compute nodes share with this one.
OUT = os.environ.get("HPCKIT_TEST_SHARED_DIR", "/shared/hpckit-pyslurm-tests")


@pytest.fixture(scope="module")
def local() -> Iterator[LocalTransport]:
    yield LocalTransport()


def _job(local: LocalTransport, body: str) -> str:
    script = f"#!/bin/sh\n#SBATCH --output={OUT}/%x-%j.out\n#SBATCH --time=2\n{body}\n"
    return Jobs(CliBackend(local), local).submit(script, (OUT,))


@pytest.mark.parametrize(
    ("body", "state", "code", "signal"),
    [
        ("true", "COMPLETED", 0, 0),
        ("exit 3", "FAILED", 3, 0),
        ("exit 130", "FAILED", 130, 0),
        ("exit 137", "FAILED", 137, 0),
        ("kill -9 $$", "FAILED", 0, 9),
    ],
)
def test_both_backends_read_the_same_finished_job(
    local: LocalTransport, body: str, state: str, code: int, signal: int
) -> None:
    job_id = _job(local, body)
    record = Jobs(CliBackend(local), local).wait(job_id, timeout=120)
    assert (record.state, record.exit_code, record.signal) == (state, code, signal)
    assert PyslurmBackend(local).info(job_id) == CliBackend(local).info(job_id)
    assert PyslurmBackend(local).queue_state(job_id) == CliBackend(local).queue_state(job_id) is None


def test_a_pending_and_a_cancelled_job_read_the_same(local: LocalTransport) -> None:
    script = f"#!/bin/sh\n#SBATCH --output={OUT}/%j.out\nsleep 60\n"
    job_id = Jobs(CliBackend(local), local).submit(script, (OUT,), hold=True)
    assert PyslurmBackend(local).info(job_id) == CliBackend(local).info(job_id)
    assert PyslurmBackend(local).queue_state(job_id) == "PENDING"
    CliBackend(local).cancel(job_id)
    time.sleep(1)
    assert PyslurmBackend(local).info(job_id) == CliBackend(local).info(job_id)


def test_auto_uses_pyslurm_for_reads_and_sbatch_for_submission(local: LocalTransport) -> None:
    backend = backend_for(local, "auto")
    assert isinstance(backend, PyslurmBackend)
    jobs = Jobs(backend, local)
    job_id = jobs.submit(f"#!/bin/sh\n#SBATCH --output={OUT}/%j.out\n#SBATCH --nodes=1\ntrue\n", (OUT,))
    assert jobs.wait(job_id, timeout=120).ok
    assert backend.partitions() == CliBackend(local).partitions()
