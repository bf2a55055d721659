"""The pyslurm backend against a stand-in that follows pyslurm 25.11.2's source (tests/pyslurm_fake.py,
where each behaviour cites its file), one test per defect seen on a real Slurm 25.11.7 (issue 18).

The same controller records answer both pyslurm and the commands, so the two backends can be held to
give the same JobInfo for the same job.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from hpckit.errors import HpckitError
from hpckit.slurm.jobs import CliBackend, JobError, JobFailedError, Jobs, backend_for
from hpckit.slurm.pyslurm_backend import PyslurmBackend, pyslurm_unusable
from tests.jobutil import cli_with_jobs
from tests.pyslurm_fake import ControllerJob, FakeSlurm, RPCError, exited, signalled


@pytest.fixture
def slurm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSlurm]:
    fake = FakeSlurm()
    module = fake.module()
    monkeypatch.setitem(sys.modules, "pyslurm", module)
    monkeypatch.setitem(sys.modules, "pyslurm.db", module.db)
    yield fake


# One record per way a job can look: (state, wait status, nodes, reason/desc, batch host).
JOBS = {
    "completed": ControllerJob(1, "COMPLETED", exited(0), "node[1-2]", batch_host="node1"),
    "failed-1": ControllerJob(2, "FAILED", exited(1), "node1", reason="NonZeroExitCode", batch_host="node1"),
    "exit-130": ControllerJob(3, "FAILED", exited(130), "node3", reason="NonZeroExitCode", batch_host="node3"),
    "exit-137": ControllerJob(4, "FAILED", exited(137), "node[1-4]", reason="NonZeroExitCode", batch_host="node1"),
    "exit-128": ControllerJob(5, "FAILED", exited(128), "node2", reason="NonZeroExitCode", batch_host="node2"),
    "cancelled": ControllerJob(6, "CANCELLED", signalled(15), "node1", batch_host="node1"),
    "killed-9": ControllerJob(7, "FAILED", signalled(9), "node2", reason="RaisedSignal:9_Killed", batch_host="node2"),
    "timeout": ControllerJob(8, "TIMEOUT", signalled(15), "node1", reason="TimeLimit", batch_host="node1"),
    "pending": ControllerJob(9, "PENDING", reason="Resources"),
    "pending-no-reason": ControllerJob(10, "PENDING"),
    "held-desc": ControllerJob(11, "PENDING", state_desc="launch failed requeued held"),
    "running-unsorted": ControllerJob(12, "RUNNING", nodes="node4,node1,node[2-3]", batch_host="node1"),
    "completing": ControllerJob(13, "COMPLETING", exited(0), "node1", batch_host="node1"),
    "node-fail": ControllerJob(14, "NODE_FAIL", exited(0), "node3", reason="NodeDown", batch_host="node3"),
}


@pytest.mark.parametrize("case", list(JOBS))
def test_pyslurm_reads_give_the_cli_backends_jobinfo(slurm: FakeSlurm, case: str) -> None:
    """state, exit code (also 128 and above), signal, nodes, reason, batch host and output paths."""
    job = slurm.add(JOBS[case])
    cli = CliBackend(slurm).info(str(job.job_id))
    ours = PyslurmBackend(slurm).info(str(job.job_id))
    assert ours == cli, case
    assert "Job.load" in slurm.pyslurm_calls


def test_exit_codes_of_128_and_more_are_not_the_signal_number(slurm: FakeSlurm) -> None:
    """pyslurm reads 130 as 2 and 137 as 9 (helpers.pyx `_get_exit_code`): a failed job's code comes from scontrol."""
    for job_id, code in ((3, 130), (4, 137), (5, 128)):
        job = slurm.add(JOBS[{3: "exit-130", 4: "exit-137", 5: "exit-128"}[job_id]])
        info = PyslurmBackend(slurm).info(str(job.job_id))
        assert info is not None and (info.record.exit_code, info.record.signal, info.record.status) == (code, 0, code)
    slurm.commands.clear()
    slurm.add(JOBS["completed"])
    assert PyslurmBackend(slurm).info("1") is not None and not slurm.commands  # exact: no command asked


def test_exit_code_of_a_forgotten_job_comes_from_accounting(slurm: FakeSlurm) -> None:
    job = slurm.add(ControllerJob(20, "FAILED", exited(137), "node1", in_controller=False))
    assert PyslurmBackend(slurm).info("20") is None  # the controller has forgotten it
    record = PyslurmBackend(slurm).accounting(str(job.job_id))
    assert record == CliBackend(slurm).accounting("20")
    assert record is not None and (record.exit_code, record.signal, record.nodes) == (137, 0, ("node1",))
    slurm.add(ControllerJob(21, "COMPLETED", exited(0), "node[1-2]", in_controller=False))
    slurm.commands.clear()
    assert PyslurmBackend(slurm).accounting("21") == CliBackend(slurm).accounting("21")
    assert PyslurmBackend(slurm).accounting("22") is None


def test_nodes_come_from_allocated_nodes_not_an_empty_attribute(slurm: FakeSlurm) -> None:
    slurm.add(JOBS["exit-137"])
    info = PyslurmBackend(slurm).info("4")
    assert info is not None and info.record.nodes == ("node1", "node2", "node3", "node4")
    with pytest.raises(JobFailedError, match=r"^job 4 FAILED \(exit code 137\) on node1: NonZeroExitCode"):
        Jobs(PyslurmBackend(slurm), slurm).follow("4", 0.0, 5)


def test_a_missing_reason_is_empty_not_the_text_none(slurm: FakeSlurm) -> None:
    slurm.add(JOBS["pending-no-reason"])
    slurm.add(JOBS["held-desc"])
    assert PyslurmBackend(slurm).info("10").record.reason == ""  # type: ignore[union-attr]
    assert PyslurmBackend(slurm).info("11").record.reason == "launch_failed_requeued_held"  # type: ignore[union-attr]


def test_a_finished_job_has_no_queue_state(slurm: FakeSlurm) -> None:
    for case in JOBS:
        job = slurm.add(JOBS[case])
        assert PyslurmBackend(slurm).queue_state(str(job.job_id)) == CliBackend(slurm).queue_state(str(job.job_id))
    assert PyslurmBackend(slurm).queue_state("1") is None and PyslurmBackend(slurm).queue_state("13") == "COMPLETING"
    assert PyslurmBackend(slurm).queue_state("404") is None


def test_submission_always_goes_through_sbatch(slurm: FakeSlurm) -> None:
    """pyslurm 25.11.2 reads #SBATCH only from a file path, and misreads options when it does."""
    jobs = Jobs.on(slurm, "auto")
    assert jobs.backend.name == "pyslurm"
    assert jobs.submit("#!/bin/bash\n#SBATCH --partition=gpu\nhostname\n", hold=True) == "41"
    assert slurm.submitted == ["#!/bin/bash\n#SBATCH --partition=gpu\nhostname\n"]
    assert ("sbatch", "--parsable", "--hold") in slurm.commands
    assert jobs.test_only("#!/bin/bash\nhostname\n").nodes == "node[1-2]"
    assert not [c for c in slurm.pyslurm_calls if "Submit" in c]
    # What the old code ran into: pyslurm's option loader refuses script text.
    import pyslurm

    with pytest.raises(ValueError, match="script path you provided is not valid"):
        pyslurm.JobSubmitDescription(script="#!/bin/bash\n").load_sbatch_options()


def test_hpckit_submit_with_pyslurm_importable_goes_through_sbatch(
    slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    slurm.add(ControllerJob(41, "COMPLETED", exited(0), "node[1-2]", batch_host="node1", std_out="/tmp/none-{id}"))
    monkeypatch.setattr("hpckit.cli.jobs.transport_for", lambda cluster: slurm)
    for args in (["submit", "run", "-s", "nodes=2"], ["submit", "run", "--test-only"], ["submit", "run", "--wait"]):
        result = CliRunner().invoke(cli_with_jobs(), args)
        assert result.exit_code == 0, result.output
    assert len(slurm.submitted) == 3 and "Job.load" in slurm.pyslurm_calls
    assert not [c for c in slurm.pyslurm_calls if "Submit" in c]


def test_auto_takes_pyslurm_only_where_it_matches_slurm(slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch) -> None:
    assert pyslurm_unusable(slurm) is None
    slurm.version = "24.11.5"
    assert "does not match Slurm" in str(pyslurm_unusable(slurm))
    assert backend_for(slurm, "auto").name == "cli"
    with pytest.raises(JobError, match=r"pyslurm backend cannot be used: pyslurm 25\.11\.2 does not match"):
        backend_for(slurm, "pyslurm")
    slurm.version = "25.11.7"
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # not installed: importing it fails
    assert "pyslurm is not importable" in str(pyslurm_unusable(slurm))
    assert backend_for(slurm, "auto").name == "cli"


def test_no_slurm_clients_means_no_pyslurm_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing pyslurm initialises libslurm, which ends the process where Slurm is not configured:
    sinfo is asked first."""

    class NoSlurm(FakeSlurm):
        def _answer(self, argv: list[str], stdin: str | None) -> tuple[int, str, str]:
            return 1, "", "sinfo: fatal: Could not establish a configuration source\n"

    monkeypatch.setitem(sys.modules, "pyslurm", None)  # an import would say "not importable"
    assert "cannot tell the installed Slurm's version" in str(pyslurm_unusable(NoSlurm()))


@pytest.mark.parametrize(
    "error",
    [
        RPCError(1007, "Unable to contact slurm controller (connect failure)"),
        RPCError(msg="Failed to get Jobs from slurmdbd"),
        ValueError("Database connection is not open"),
        RuntimeError("A new connection should be created through calling Connection.open()"),
        MemoryError("xmalloc failed for job_info_t"),
    ],
)
def test_every_pyslurm_error_becomes_hpckits_own(slurm: FakeSlurm, error: Exception) -> None:
    slurm.add(JOBS["completed"])
    slurm.broken = error
    backend = PyslurmBackend(slurm)
    for read in (backend.info, backend.queue_state, backend.accounting):
        with pytest.raises(JobError, match="pyslurm could not") as caught:
            read("1")
        assert isinstance(caught.value, HpckitError) and str(error) in str(caught.value)
    with pytest.raises(JobError, match="pyslurm could not load the partitions"):
        backend.partitions()


def test_a_pyslurm_error_in_the_command_is_one_line_no_traceback(
    slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    slurm.broken = RPCError(1007, "Unable to contact slurm controller (connect failure)")
    monkeypatch.setattr("hpckit.cli.jobs.transport_for", lambda cluster: slurm)
    result = CliRunner().invoke(cli_with_jobs(), ["submit", "run", "--wait", "--backend", "pyslurm"])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert result.output.startswith("hpckit: error: pyslurm could not load job 41: RPCError: Unable to contact")
    assert result.output.count("\n") == 1


def test_partitions_through_pyslurm_match_sinfo(slurm: FakeSlurm) -> None:
    assert PyslurmBackend(slurm).partitions() == CliBackend(slurm).partitions() == ["cpu", "gpu"]
