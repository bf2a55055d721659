"""The pyslurm backend against a stand-in that follows pyslurm 25.11.2's source (tests/pyslurm_fake.py,
where each behaviour cites its file), one test per defect seen on a real Slurm 25.11.7 (issue 18).

The same controller records answer both pyslurm and the commands, so the two backends can be held to
give the same JobInfo for the same job.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

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
    # A COMPLETING job's script has ended: its code is final, and pyslurm takes 128 off it as for any other.
    "completing-130": ControllerJob(15, "COMPLETING", exited(130), "node1", batch_host="node1"),
    "completing-128": ControllerJob(16, "COMPLETING", exited(128), "node1", batch_host="node1"),
    "completing-killed": ControllerJob(17, "COMPLETING", signalled(9), "node1", batch_host="node1"),
    "array-task": ControllerJob(18, "FAILED", exited(130), "node2", reason="NonZeroExitCode", array=(10, 3)),
    "het-component": ControllerJob(21, "RUNNING", nodes="node3", batch_host="node3", het=(20, 1)),
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
def test_every_pyslurm_read_failure_falls_back_to_the_commands(
    slurm: FakeSlurm, error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    """Only "no such job" is an answer; any other failure is pyslurm's, and the command line reads instead,
    saying why."""
    for case in ("completed", "exit-130", "pending", "completing-130"):
        slurm.add(JOBS[case])
    slurm.broken = error
    backend, cli = PyslurmBackend(slurm), CliBackend(slurm)
    caplog.set_level(logging.DEBUG, "hpckit.slurm.pyslurm_backend")
    for job_id in ("1", "3", "9", "15", "404"):
        assert backend.info(job_id) == cli.info(job_id)
        assert backend.queue_state(job_id) == cli.queue_state(job_id)
        assert backend.accounting(job_id) == cli.accounting(job_id)
    assert backend.partitions() == cli.partitions() == ["cpu", "gpu"]
    said = [r.getMessage() for r in caplog.records]
    assert f"pyslurm could not load job 1 ({type(error).__name__}: {error}); read with the commands instead" in said
    assert any(m.startswith("pyslurm could not read accounting for job 1 (") for m in said)
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 3, "one warning per kind of read (a job, its accounting, the partitions), repeats at debug"


def test_when_the_commands_fail_too_their_error_is_hpckits_own(slurm: FakeSlurm) -> None:
    slurm.add(JOBS["completed"])
    slurm.broken = RPCError(1007, "Unable to contact slurm controller (connect failure)")
    slurm.controller_down = True
    backend = PyslurmBackend(slurm)
    for read in (backend.info, backend.queue_state):
        with pytest.raises(JobError, match="Unable to contact slurm controller") as caught:
            read("1")
        assert isinstance(caught.value, HpckitError)


def test_a_read_failure_in_the_command_is_one_line_no_traceback(
    slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    slurm.broken = RPCError(1007, "Unable to contact slurm controller (connect failure)")
    slurm.controller_down = True
    monkeypatch.setattr("hpckit.cli.jobs.transport_for", lambda cluster: slurm)
    result = CliRunner().invoke(cli_with_jobs(), ["submit", "run", "--wait", "--backend", "pyslurm"])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "hpckit: error: " in result.output and "Unable to contact slurm controller" in result.output


class CompletingFor:
    """A clock under which job `raw` stays COMPLETING (an epilog that takes `seconds`), then COMPLETED."""

    def __init__(self, raw: ControllerJob, seconds: float) -> None:
        self.raw, self.seconds, self.now = raw, seconds, 0.0

    def time(self) -> float:
        return self.now

    def sleep(self, delay: float) -> None:
        self.now += delay
        if self.now >= self.seconds:
            self.raw.job_state = "COMPLETED"


@pytest.mark.parametrize("accounting", ["off", "down"])
@pytest.mark.parametrize("backend", [PyslurmBackend, CliBackend])
def test_waiting_without_accounting_outlasts_a_long_completing(
    slurm: FakeSlurm, accounting: str, backend: type[PyslurmBackend] | type[CliBackend]
) -> None:
    """A job COMPLETING past COMPLETING_GRACE_S makes the wait ask accounting; without slurmdbd (off, or down)
    pyslurm's db.Job.load raises, and the wait goes on as the command line's does, until the job is done."""
    raw = slurm.add(ControllerJob(41, "COMPLETING", exited(0), "node1", batch_host="node1", std_out="/tmp/none-{id}"))
    slurm.accounting = accounting
    clock = CompletingFor(raw, 12.0)
    jobs = Jobs(backend(slurm), slurm, sleep=clock.sleep, clock=clock.time)
    outcome = jobs.follow("41", 0.0, 60)
    assert (outcome.record.state, outcome.record.exit_code, outcome.record.source) == ("COMPLETED", 0, "scontrol")
    assert clock.now >= 12.0
    if backend is PyslurmBackend:
        assert "db.Job.load" in slurm.pyslurm_calls
    assert any(c[0] == "sacct" for c in slurm.commands)


def test_submit_wait_without_accounting_prints_the_output(
    slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`hpckit submit --wait` on auto, slurmdbd down, a job COMPLETING for 6 s: its output, exit 0."""
    out = tmp_path / "out-{id}"
    (tmp_path / "out-41").write_text("hello from the job\n")
    raw = slurm.add(ControllerJob(41, "COMPLETING", exited(0), "node1", batch_host="node1", std_out=str(out)))
    slurm.accounting = "down"
    clock = CompletingFor(raw, 6.0)
    real = Jobs.on

    def on(transport: FakeSlurm, prefer: str = "auto") -> Jobs:
        jobs = real(transport, prefer)
        jobs.sleep, jobs.clock = clock.sleep, clock.time
        return jobs

    monkeypatch.setattr("hpckit.cli.jobs.transport_for", lambda cluster: slurm)
    monkeypatch.setattr(Jobs, "on", on)
    result = CliRunner().invoke(cli_with_jobs(), ["submit", "run", "--wait"])
    assert result.exit_code == 0, result.output
    assert "hello from the job" in result.output and "Job.load" in slurm.pyslurm_calls
    said = "pyslurm could not read accounting for job 41 (RPCError: Failed to get Jobs from slurmdbd)"
    assert [r.levelname for r in caplog.records if r.getMessage().startswith(said)] == ["WARNING"]


@pytest.mark.parametrize("case", ["completing-130", "completing-128"])
def test_a_completing_jobs_exit_code_is_the_real_one(slurm: FakeSlurm, case: str) -> None:
    job = slurm.add(JOBS[case])
    info = PyslurmBackend(slurm).info(str(job.job_id))
    assert info is not None and info.record.exit_code == {"completing-130": 130, "completing-128": 128}[case]


def test_an_array_task_is_read_by_its_name_not_as_a_number(slurm: FakeSlurm) -> None:
    """int("10_3") is 103 in Python: job 103 is another job. pyslurm loads jobs by number only, so a task
    (and a heterogeneous job's component) is read through scontrol, as the CLI backend reads it."""
    slurm.add(ControllerJob(103, "RUNNING", nodes="node9", batch_host="node9"))
    task = slurm.add(JOBS["array-task"])
    slurm.add(JOBS["het-component"])
    backend, cli = PyslurmBackend(slurm), CliBackend(slurm)
    for job_id in ("10_3", "20+1"):
        assert backend.info(job_id) == cli.info(job_id) is not None, job_id
        assert backend.queue_state(job_id) == cli.queue_state(job_id)
        assert backend.accounting(job_id) == cli.accounting(job_id)
    info = backend.info("10_3")
    assert info is not None and (info.record.job_id, info.record.nodes, info.record.exit_code) == (
        "10_3",
        ("node2",),
        130,
    )
    assert backend.accounting("10_3") is not None and task.job_id == 18
    assert backend.info("103") is not None and backend.info("103") != info


NOT_JOB_IDS = [
    "10_3_1",
    "1_0_3",
    " 103",
    "103\n",
    "+103",
    "١٠٣",
    "10_[1-3]",
    "10_*",
    "abc",
    "",
    "0",
    "007",
    "1.5",
    "-1",
]


@pytest.mark.parametrize("job_id", NOT_JOB_IDS)
def test_what_is_not_a_job_id_reads_as_no_such_job_in_both_backends(slurm: FakeSlurm, job_id: str) -> None:
    """Slurm's forms of one job's id are N, N_M (array task) and N+K (heterogeneous job's component); int()
    also takes blanks, signs, underscores and other scripts' digits, so none of those may reach a job."""
    for n in (1, 3, 7, 103):
        slurm.add(ControllerJob(n, "RUNNING", nodes="node1"))
    for backend in (PyslurmBackend(slurm), CliBackend(slurm)):
        assert (backend.info(job_id), backend.queue_state(job_id), backend.accounting(job_id)) == (None, None, None)
    assert not slurm.pyslurm_calls and not slurm.commands


def test_partitions_through_pyslurm_match_sinfo(slurm: FakeSlurm) -> None:
    assert PyslurmBackend(slurm).partitions() == CliBackend(slurm).partitions() == ["cpu", "gpu"]
