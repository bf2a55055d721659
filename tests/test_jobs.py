"""The job layer on text: parsers on real Slurm output, and waiting/errors against a scripted transport."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpckit.proc import CommandResult, LocalTransport, TransportError
from hpckit.slurm.jobparse import (
    JobRecord,
    base_state,
    expand_output_path,
    parse_delimited,
    parse_exit_code,
    parse_queue_state,
    parse_scontrol,
    parse_submit,
    parse_test_only,
    record_from_sacct,
    record_from_scontrol,
    slurm_error,
    task_failures,
)
from hpckit.slurm.jobs import (
    CliBackend,
    JobError,
    JobFailedError,
    JobRejectedError,
    Jobs,
    JobWaitTimeout,
    UnknownPartitionError,
    backend_for,
    cancel_jobs,
    describe_failure,
    failure_status,
    failure_tail,
    poll_intervals,
)
from hpckit.slurm.parsers import SlurmParseError
from tests.fakes import Answer, FakeTransport, Reply
from tests.jobutil import cli_with_jobs

DATA = Path(__file__).resolve().parent / "data" / "jobs"
LAB = DATA / "lab"


def sample(name: str) -> str:
    return (DATA / name).read_text()


def lab(name: str) -> str:
    return (LAB / name).read_text()


# --- parsers ----------------------------------------------------------------------------------------------


def test_parse_submit() -> None:
    assert parse_submit(lab("sbatch-parsable-22.05.8.txt")) == "14"
    assert parse_submit("77;othercluster\n") == "77"
    with pytest.raises(SlurmParseError, match="not a job id"):
        parse_submit("Submitted batch job 12\n")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "sbatch-invalid-partition-22.05.8.txt",
            "invalid partition specified: nosuch; Batch job submission failed: Invalid partition name specified",
        ),
        (
            "sbatch-cpu-count-per-node-22.05.8.txt",
            "CPU count per node can not be satisfied; "
            "Batch job submission failed: Requested node configuration is not available",
        ),
        ("sbatch-gpus-not-available-22.05.8.txt", "Requested node configuration is not available"),
        ("sbatch-not-a-batch-script-22.05.8.txt", "This does not look like a batch script."),
    ],
)
def test_slurm_error_keeps_slurms_words(name: str, message: str) -> None:
    assert message in slurm_error(lab(name))
    assert "sbatch: error:" not in slurm_error(lab(name))


def test_parse_test_only_lab_and_published() -> None:
    lab_estimate = parse_test_only(lab("sbatch-test-only-22.05.8.txt"))
    assert (lab_estimate.job_id, lab_estimate.processors) == ("13", 2)
    assert (lab_estimate.nodes, lab_estimate.partition) == ("node[1-2]", "gpu")
    assert lab_estimate.start == "2026-11-21T06:09:36"
    # the published line has a stray word before "using"
    a100 = parse_test_only(sample("sbatch-test-only-estimate-a100-partition.txt"))
    assert (a100.job_id, a100.processors, a100.nodes, a100.partition) == ("704798", 8, "spcc-a100g06", "GPU-1A")
    # the old srun form has neither "nodes" nor a partition, inside a wrapper script's own lines
    old = parse_test_only(sample("srun-test-only-estimate-2019-with-wrapper-output.txt"))
    assert (old.job_id, old.processors, old.nodes, old.partition) == ("455329", 1, "charles12", "")
    with pytest.raises(SlurmParseError, match="no start estimate"):
        parse_test_only(lab("sbatch-invalid-partition-22.05.8.txt"))


def test_parse_queue_state() -> None:
    assert parse_queue_state(lab("squeue-h-o-T-running-22.05.8.txt")) == "RUNNING"
    assert parse_queue_state("") is None
    assert parse_queue_state("  \n") is None


def test_states_and_exit_codes() -> None:
    assert base_state("CANCELLED by 0") == "CANCELLED"
    assert base_state("completed") == "COMPLETED"
    assert parse_exit_code("3:0") == (3, 0) and parse_exit_code("0:15") == (0, 15)
    with pytest.raises(SlurmParseError):
        parse_exit_code("3")
    with pytest.raises(SlurmParseError):
        base_state("")


def test_sacct_rows_from_the_lab() -> None:
    fields = ("JobID", "State", "ExitCode", "NodeList")
    failed = record_from_sacct(parse_delimited(lab("sacct-X-n-P-failed-22.05.8.txt"), fields), "14")
    assert failed == JobRecord("14", "FAILED", 3, 0, ("node1", "node2"), "sacct")
    assert failed.finished and not failed.ok and failed.status == 3
    cancelled = record_from_sacct(parse_delimited(lab("sacct-X-n-P-cancelled-22.05.8.txt"), fields), "15")
    assert cancelled is not None and cancelled.state == "CANCELLED" and cancelled.status == 1
    assert record_from_sacct(parse_delimited(lab("sacct-X-n-P-pending-or-running-22.05.8.txt"), fields), "16") is None


def test_sacct_published_with_headers_and_delimiters() -> None:
    rows = parse_delimited(sample("sacct-parsable2-o-all-slurm20.txt"), header=True)
    assert len(rows) == 68 and len(rows[0]) == 109
    assert {r["State"] for r in rows} == {"COMPLETED"} and rows[0]["NodeList"] == "node077"
    record = record_from_sacct(rows, rows[0]["JobID"])
    assert record == JobRecord("8012944_24093.0", "COMPLETED", 0, 0, ("node077",), "sacct")
    running = parse_delimited(sample("sacct-parsable2-o-all-hash-pipe-delim-slurm21.08plus-running.txt"), header=True,
                              delimiter="|#")  # fmt: skip
    assert len(running) == 10 and {r["State"] for r in running} == {"RUNNING"}
    assert "Container" in running[0] and running[0]["JobID"].endswith(".extern")
    with pytest.raises(SlurmParseError, match="fields, expected"):
        parse_delimited("a|b|c\n", ("JobID", "State"))


def test_scontrol_one_line_records_from_the_lab() -> None:
    (fields,) = parse_scontrol(lab("scontrol-show-job-o-failed-22.05.8.txt"))
    record = record_from_scontrol(fields)
    assert (record.job_id, record.state, record.exit_code, record.reason) == ("14", "FAILED", 3, "NonZeroExitCode")
    assert record.nodes == ("node1", "node2") and record.batch_host == "node1"
    assert fields["StdOut"] == "/tmp/f-14.out" and fields["AllocNode:Sid"].startswith("login:")
    (cancelled,) = parse_scontrol(lab("scontrol-show-job-o-cancelled-22.05.8.txt"))
    assert record_from_scontrol(cancelled).signal == 15  # the controller keeps the signal sacct drops


def test_scontrol_multi_line_published_records() -> None:
    (job,) = parse_scontrol(sample("scontrol-show-job-d-8node-64gpu-running.txt"))
    record = record_from_scontrol(job)
    assert record.state == "RUNNING" and len(record.nodes) == 8 and record.nodes[0] == "node1433"
    assert job["ReqTRES"] == "cpu=2048,mem=12000G,node=8,billing=4572,gres/gpu=64"
    assert job["CPUs/Task"] == "32" and job["JobName"] == "slurm_job_name"
    array = parse_scontrol(sample("scontrol-show-job-d-array-job.txt"))
    assert [r["JobId"] for r in array] == ["30214", "31214"] and array[0]["ArrayTaskId"] == "28-59%100"
    with pytest.raises(SlurmParseError, match="no JobState"):
        record_from_scontrol({"JobId": "1", "ExitCode": "0:0"})


def test_expand_output_path() -> None:
    fields = {"JobId": "42", "JobName": "train", "UserId": "alice(1000)", "NodeList": "node[3-4]"}
    assert expand_output_path("/logs/%x-%j.out", fields) == "/logs/train-42.out"
    assert expand_output_path("/logs/%u/%N-%5j%%.out", fields) == "/logs/alice/node3-00042%.out"
    assert expand_output_path("/root/sbatch-1.out", fields) == "/root/sbatch-1.out"  # already filled in


# --- the wait loop and errors, against a scripted transport -------------------------------------------------


class ScriptedTransport(FakeTransport):
    """A scripted FakeTransport that does what the shell does with hpckit's mkdir-then-sbatch command: `calls`
    holds the mkdir and the sbatch, `raw_calls` the command as it ran."""

    def __init__(self, replies: Mapping[str, Sequence[Answer]]) -> None:
        super().__init__(replies={name: list(items) for name, items in replies.items()})
        self.raw_calls: list[tuple[str, ...]] = []

    def answer(self, args: tuple[str, ...]) -> CommandResult:
        self.raw_calls.append(args)
        if args[:2] == ("sh", "-c") and args[3] == "hpckit-submit":
            # What the shell does with it: mkdir -p DIR..., then sbatch OPTION with the script on its stdin.
            args = ("sbatch", args[4])
            self.calls[-1:] = [("mkdir", "-p", "--", *self.raw_calls[-1][5:]), args]
        return super().answer(args)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def jobs_on(transport: ScriptedTransport, clock: FakeClock, *, remote: bool = False) -> Jobs:
    return Jobs(CliBackend(transport, wait_remotely=remote), transport, sleep=clock.sleep, clock=clock.time)


SCONTROL_FAILED = (0, lab("scontrol-show-job-o-failed-22.05.8.txt"), "")
INVALID_ID = (1, "", "slurm_load_jobs error: Invalid job id specified\n")


def scontrol_as(state: str, exit_code: str = "0:0") -> Reply:
    """The lab's record of failed job 14, as the controller shows it in another state."""
    text = SCONTROL_FAILED[1].replace("JobState=FAILED Reason=NonZeroExitCode", f"JobState={state} Reason=None")
    return (0, text.replace("ExitCode=3:0", f"ExitCode={exit_code}"), "")


def test_run_polls_the_controller_quickly_and_ends_on_its_final_record() -> None:
    states = [scontrol_as("PENDING"), scontrol_as("RUNNING"), scontrol_as("RUNNING"), scontrol_as("COMPLETED")]
    transport = ScriptedTransport({"sbatch": [(0, "14\n", "")], "scontrol": states, "cat": [(0, "hello\n", "")]})
    clock = FakeClock()
    outcome = jobs_on(transport, clock).run("#!/bin/bash\nhostname\n")
    assert outcome.record.ok and outcome.output == "hello\n" and outcome.output_path == "/tmp/f-14.out"
    assert outcome.record.nodes == ("node1", "node2") and outcome.record.source == "scontrol"
    assert transport.stdin[0] == "#!/bin/bash\nhostname\n"  # the script goes to sbatch on stdin
    show = ("scontrol", "show", "job", "-o", "14")
    # Nothing is asked twice, and nothing after the poll that saw the end but the output itself.
    assert transport.calls == [("sbatch", "--parsable"), show, show, show, show, ("cat", "--", "/tmp/f-14.out")]
    assert all(s <= 1.0 for s in clock.sleeps) and clock.sleeps[0] <= 0.05


def test_completing_ends_on_the_controllers_final_state() -> None:
    transport = ScriptedTransport({"scontrol": [scontrol_as("COMPLETING", "3:0"), SCONTROL_FAILED]})
    record = jobs_on(transport, FakeClock()).wait("14")
    assert record.source == "scontrol" and record.state == "FAILED" and record.exit_code == 3
    assert not any(c[0] == "sacct" for c in transport.calls)


def test_a_job_stuck_completing_takes_accounting_with_the_controllers_nodes() -> None:
    """An epilog that hangs keeps a job COMPLETING; its script has ended, and sacct has the final state."""
    transport = ScriptedTransport(
        {"scontrol": [scontrol_as("COMPLETING", "3:0")], "sacct": [(0, "14|FAILED|3:0|node1\n", "")]}
    )
    clock = FakeClock()
    record = jobs_on(transport, clock).wait("14")
    assert (record.state, record.source, record.exit_code, record.nodes) == ("FAILED", "sacct", 3, ("node1", "node2"))
    assert 5.0 <= clock.now < 7.0


def test_a_forgotten_job_comes_from_accounting_once_final() -> None:
    still = (0, "14|RUNNING|0:0|node[1-2]\n", "")
    transport = ScriptedTransport({"scontrol": [INVALID_ID], "sacct": [still, (0, "14|FAILED|3:0|node[1-2]\n", "")]})
    record = jobs_on(transport, FakeClock()).wait("14")
    assert record.source == "sacct" and record.state == "FAILED"


def test_the_controller_keeps_the_signal_of_a_cancelled_job() -> None:
    transport = ScriptedTransport({"scontrol": [(0, lab("scontrol-show-job-o-cancelled-22.05.8.txt"), "")]})
    record = jobs_on(transport, FakeClock()).wait("15")
    assert (record.state, record.signal, record.status) == ("CANCELLED", 15, 143)
    assert record.nodes == ("node1",) and record.batch_host == "node1"


def test_wait_timeout_and_nothing_known() -> None:
    running = ScriptedTransport({"scontrol": [scontrol_as("RUNNING")]})
    with pytest.raises(JobWaitTimeout, match="still RUNNING after 5"):
        jobs_on(running, FakeClock()).wait("14", timeout=5)
    vanished = ScriptedTransport({"sacct": [(0, "", "")], "scontrol": [(1, "", "Invalid job id")]})
    with pytest.raises(JobWaitTimeout, match="neither sacct nor scontrol"):
        jobs_on(vanished, FakeClock()).wait("9")


def test_failed_job_error_names_exit_code_node_and_tail() -> None:
    log = "".join(f"line {i}\n" for i in range(40)) + "Traceback: boom\n"
    transport = ScriptedTransport({"sbatch": [(0, "14\n", "")], "scontrol": [SCONTROL_FAILED], "cat": [(0, log, "")]})
    with pytest.raises(JobFailedError) as caught:
        jobs_on(transport, FakeClock()).run("#!/bin/bash\nexit 3\n")
    message = str(caught.value)
    assert message.startswith("job 14 FAILED (exit code 3) on node1")
    assert "last lines of /tmp/f-14.out:" in message and message.endswith("Traceback: boom")
    assert "line 20" not in message and caught.value.exit_code == 3


def test_rejections_carry_slurms_message() -> None:
    partition = ScriptedTransport(
        {"sbatch": [(1, "", lab("sbatch-invalid-partition-22.05.8.txt"))], "sinfo": [(0, "gpu\ncpu\n", "")]}
    )
    with pytest.raises(UnknownPartitionError) as caught:
        jobs_on(partition, FakeClock()).submit("#!/bin/bash\n#SBATCH --partition=nosuch\nhostname\n")
    assert "Invalid partition name specified" in str(caught.value)
    assert "asked for 'nosuch'; partitions: cpu, gpu" in str(caught.value) and caught.value.exit_code == 2
    shape = ScriptedTransport({"sbatch": [(1, "", lab("sbatch-cpu-count-per-node-22.05.8.txt"))]})
    with pytest.raises(JobRejectedError, match="Slurm rejected the job: CPU count per node can not be satisfied"):
        jobs_on(shape, FakeClock()).submit("#!/bin/bash\n")


def test_test_only_and_cancel() -> None:
    transport = ScriptedTransport({"sbatch": [(0, "", lab("sbatch-test-only-22.05.8.txt"))], "scancel": [(0, "", "")]})
    jobs = jobs_on(transport, FakeClock())
    assert jobs.test_only("#!/bin/bash\n").nodes == "node[1-2]"
    assert transport.calls[0] == ("sbatch", "--test-only")
    jobs.cancel("5")  # Slurm 22.05's scancel says nothing, and exits 0, even for an unknown id
    assert transport.calls[1] == ("scancel", "5")


def test_the_log_directories_are_made_in_sbatchs_own_command(tmp_path: Path) -> None:
    transport = ScriptedTransport({"sbatch": [(0, "15\n", "")]})
    script = "#!/bin/bash\n#SBATCH --job-name='a b'\nprintf '%s\\n' \"$x\"\n"
    assert jobs_on(transport, FakeClock()).submit(script, ("/shared/logs", "/shared/x y")) == "15"
    ((sh, flag, command, name, option, *dirs),) = transport.raw_calls
    assert (sh, flag, name, option, dirs) == (
        "sh",
        "-c",
        "hpckit-submit",
        "--parsable",
        ["/shared/logs", "/shared/x y"],
    )
    assert transport.stdin == [script]
    # What the shell really does with it, with cat standing in for sbatch.
    made = [str(tmp_path / "a"), str(tmp_path / "b c")]
    piped = subprocess.run(
        ["sh", "-c", command.replace("sbatch", "cat"), name, "-", *made],
        input=script.encode(),
        capture_output=True,
        check=True,
    )
    assert piped.stdout.decode() == script and all(Path(d).is_dir() for d in made)
    (tmp_path / "file").touch()
    refused = LocalTransport()
    with pytest.raises(JobError, match=r"cannot create .*file/sub"):
        CliBackend(refused).submit(script, (str(tmp_path / "file" / "sub"),))


def test_over_ssh_the_waiting_happens_on_the_login_node() -> None:
    with_output = SCONTROL_FAILED[1] + "\n--- hpckit: job output follows, from /tmp/f-14.out\nboom\n"
    transport = ScriptedTransport({"sh": [(0, with_output, "")]})
    outcome = jobs_on(transport, FakeClock(), remote=True).follow("14", 0.0, 30, check=False)
    assert (outcome.record.state, outcome.record.exit_code, outcome.record.nodes) == ("FAILED", 3, ("node1", "node2"))
    assert outcome.output == "boom\n" and outcome.output_path == "/tmp/f-14.out"
    ((sh, flag, script, name, job_id, limit, grace),) = transport.calls  # one command, nothing asked after it
    assert (sh, flag, name, job_id, limit, grace) == ("sh", "-c", "hpckit-wait", "14", "30", "5000")
    assert 'scontrol show job -o "$id"' in script
    no_output = ScriptedTransport({"sh": [SCONTROL_FAILED], "cat": [(0, "read apart\n", "")]})
    assert jobs_on(no_output, FakeClock(), remote=True).follow("14", 0.0, 30, check=False).output == "read apart\n"
    forgotten = ScriptedTransport(
        {"sh": [(0, "", "")], "scontrol": [INVALID_ID], "sacct": [(0, "14|COMPLETED|0:0|n1\n", "")]}
    )
    assert jobs_on(forgotten, FakeClock(), remote=True).wait("14").ok
    timed_out = ScriptedTransport({"sh": [(124, "", "")]})
    with pytest.raises(JobWaitTimeout, match="still queued or running after 30"):
        jobs_on(timed_out, FakeClock(), remote=True).wait("14", timeout=30)


def test_over_ssh_a_job_completing_too_long_is_settled_by_accounting_at_once() -> None:
    """The login node has watched it COMPLETING for the grace already (a node died under it)."""
    transport = ScriptedTransport(
        {
            "sh": [scontrol_as("COMPLETING", "0:15")],
            "scontrol": [scontrol_as("COMPLETING", "0:15")],
            "sacct": [(0, "14|CANCELLED by 0|0:15|node1\n", "")],
        }
    )
    clock = FakeClock()
    record = jobs_on(transport, clock, remote=True).wait("14", timeout=60)
    assert (record.state, record.signal, record.nodes) == ("CANCELLED", 15, ("node1", "node2")) and clock.now == 0


def _broken_connection() -> Reply:
    raise TransportError("cannot reach login over SSH: connection reset")


def test_a_broken_connection_falls_back_to_polling() -> None:
    transport = ScriptedTransport({"sh": [_broken_connection], "scontrol": [scontrol_as("COMPLETED")]})
    assert jobs_on(transport, FakeClock(), remote=True).wait("14").ok


def test_the_login_node_wait_script_polls_scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shell loop itself, with a stand-in scontrol: RUNNING twice (or forever), then COMPLETED."""
    count = tmp_path / "count"
    count.write_text("0")
    log = tmp_path / "f-14.out"
    log.write_text("line 1\n\nlast line")
    running, completed = scontrol_as("RUNNING")[1], scontrol_as("COMPLETED")[1].replace("/tmp/f-14.out", str(log))
    (tmp_path / "running").write_text(running)
    (tmp_path / "completed").write_text(completed)
    stub = tmp_path / "scontrol"
    stub.write_text(
        f"#!/bin/sh\nn=$(($(cat {count}) + 1)); echo $n > {count}\n"
        f"[ -e {tmp_path}/gone ] && {{ echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1; }}\n"
        f'if [ "$n" -le 2 ] || [ -e {tmp_path}/forever ]; then cat {tmp_path}/running\n'
        f"else cat {tmp_path}/completed; fi\n"
    )
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    backend = CliBackend(LocalTransport(), wait_remotely=True)
    info, output = backend.wait_on_login("14", 10)
    assert info is not None and info.record.state == "COMPLETED" and info.stdout_path == str(log)
    assert output == "line 1\n\nlast line" and count.read_text().strip() == "3"
    (tmp_path / "forever").touch()
    with pytest.raises(JobWaitTimeout):
        backend.wait_on_login("14", 1)
    (tmp_path / "completing").write_text(scontrol_as("COMPLETING")[1])
    (tmp_path / "running").replace(tmp_path / "was-running")
    (tmp_path / "completing").replace(tmp_path / "running")
    info, output = backend.wait_on_login("14", 10, completing_grace=0.2)
    assert info is not None and info.record.state == "COMPLETING" and output is None
    (tmp_path / "gone").touch()
    assert backend.wait_on_login("14", 1) == (None, None)


def test_poll_intervals_are_short_then_capped_at_one_second() -> None:
    gen = poll_intervals()
    delays = [next(gen) for _ in range(200)]
    assert delays[0] <= 0.05 and max(delays) == 1.0 and delays == sorted(delays)
    assert sum(delays[:10]) < 1.0  # a short job is not kept waiting


def test_describe_failure_without_output() -> None:
    record = JobRecord("7", "TIMEOUT", 0, 0, (), "sacct")
    assert (
        describe_failure(record, "/x.out", "")
        == "job 7 TIMEOUT (exit code 0) on no node\n/x.out is empty or unreadable"
    )
    assert record.status == 1


def test_backend_choice() -> None:
    local = LocalTransport()
    assert backend_for(local, "cli").name == "cli"
    ssh = ScriptedTransport({})
    assert backend_for(ssh, "auto").name == "cli"  # pyslurm talks to the local Slurm only
    with pytest.raises(JobError, match="not over SSH"):
        backend_for(ssh, "pyslurm")
    with pytest.raises(JobError, match="unknown job backend"):
        backend_for(local, "rest")


# --- the first task to fail, and cancelling -------------------------------------------------------------

# srun's own words for tasks that ended badly (src/srun/launch.c, Slurm 24.11.5: "%s: %s %s: Exited with
# exit code %d", hosts, "task"/"tasks", ids): rank 2 on node3 fails, then the others are killed.
BROKEN_RUN = """hpckit: job 14 (torchrun) on node[1-4], 4 node(s)
step 1 loss 2.31
rank 2: RuntimeError: CUDA error: an illegal memory access was encountered
srun: error: node3: task 2: Exited with exit code 1
srun: Job step aborted: Waiting up to 32 seconds for job step to finish.
slurmstepd: error: *** STEP 14.0 ON node1 CANCELLED AT 2026-11-21T06:10:01 ***
srun: error: node1: task 0: Exited with exit code 143
srun: error: node[2,4]: tasks 1,3: Killed
"""


def test_the_first_task_to_fail_is_blamed_not_the_last() -> None:
    failures = task_failures(BROKEN_RUN)
    assert [(f.hosts, f.tasks, f.exit_code, f.what) for f in failures] == [
        ("node3", "2", 1, "exit code 1"),
        ("node1", "0", 143, "exit code 143"),
        ("node[2,4]", "1,3", None, "Killed"),
    ]
    scontrol = scontrol_as("FAILED", "143:0")[1].replace("Reason=None", "Reason=NonZeroExitCode")
    transport = ScriptedTransport({"scontrol": [(0, scontrol, "")], "cat": [(0, BROKEN_RUN, "")]})
    with pytest.raises(JobFailedError) as caught:
        jobs_on(transport, FakeClock()).follow("14", 0.0, 30)
    message = str(caught.value)
    assert message.startswith(
        "job 14 FAILED (exit code 143) on node1: NonZeroExitCode; first to fail: task 2 on node3 (exit code 1)"
    )
    assert "at that failure:" in message and message.endswith("srun: error: node3: task 2: Exited with exit code 1")
    assert "illegal memory access" in message and caught.value.exit_code == 1
    assert failure_status(caught.value.record, None) == 143


def _squeue(*rows: str) -> Reply:
    return (0, "".join(f"{row}\n" for row in rows), "")


def test_cancel_says_what_it_cancelled_and_reports_unknown_ids() -> None:
    transport = ScriptedTransport(
        {"squeue": [_squeue("21|alice|RUNNING|train a"), INVALID_ID, _squeue()], "scancel": [(0, "", "")]}
    )
    done = cancel_jobs(CliBackend(transport), ["21", "99", "22", "x;y"])
    assert [j.describe() for j in done.cancelled] == ["job 21 (train a, user alice, RUNNING)"]
    assert [what for what, _ in done.missed] == ["job 99", "job 22", "job x;y"]
    assert ("scancel", "21") in transport.calls and len([c for c in transport.calls if c[0] == "scancel"]) == 1
    assert ("squeue", "-h", "-o", "%i|%u|%T|%j", "-j", "99") in transport.calls


def test_cancel_by_name_is_the_callers_own_jobs_unless_a_user_is_named() -> None:
    transport = ScriptedTransport(
        {"squeue": [_squeue("31|bob|PENDING|sweep", "32_4|bob|RUNNING|sweep")], "scancel": [(0, "", "")]}
    )
    done = cancel_jobs(CliBackend(transport), name="sweep")
    assert [j.job_id for j in done.cancelled] == ["31", "32_4"] and not done.missed
    assert transport.calls[0] == ("squeue", "-h", "-o", "%i|%u|%T|%j", "-n", "sweep", "--me")
    by_user = ScriptedTransport({"squeue": [_squeue()]})
    nothing = cancel_jobs(CliBackend(by_user), user="carol")
    assert by_user.calls[0][-2:] == ("-u", "carol") and nothing.missed == [
        ("jobs with user 'carol'", "none are queued or running")
    ]


def test_cancel_command_exit_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = ScriptedTransport({"squeue": [_squeue("21|alice|RUNNING|a"), INVALID_ID], "scancel": [(0, "", "")]})
    monkeypatch.setattr("hpckit.cli.jobs.transport_for", lambda cluster: transport)
    ok = CliRunner().invoke(cli_with_jobs(), ["cancel", "21"])
    assert ok.exit_code == 0 and ok.stdout == "cancelled job 21 (a, user alice, RUNNING)\n"
    unknown = CliRunner().invoke(cli_with_jobs(), ["cancel", "99"])
    assert unknown.exit_code == 1 and "job 99 is not queued or running" in unknown.stderr
    usage = CliRunner().invoke(cli_with_jobs(), ["cancel"])
    assert usage.exit_code == 2


def test_the_first_failure_of_a_real_torchrun_job() -> None:
    """The lab's torchrun job whose rank on node3 exits 1: srun kills the other three, which then report
    exit code 1 too; the blame and the log tail (torchrun's own root cause) point at node3."""
    output = lab("torchrun-first-failure-node3-22.05.8.out")
    failures = task_failures(output)
    assert [(f.hosts, f.tasks, f.exit_code) for f in failures] == [
        ("node3", "2", 1),
        ("node1", "0", 1),
        ("node2", "1", 1),
        ("node4", "3", 1),
    ]
    tail = failure_tail(output, failures[0])
    assert tail.endswith("srun: error: node3: task 2: Exited with exit code 1")
    assert "  host      : node3" in tail and "  rank      : 2 (local_rank: 0)" in tail


def test_a_tasks_words_written_after_sruns_report_stay_in_the_tail() -> None:
    """srun forwards a task's output apart from its own messages: the task's last line can land after."""
    output = (
        "hpckit: job 9 (run) on node1, 1 node(s)\nsrun: error: node1: task 0: Exited with exit code 7\nlast-words\n"
    )
    assert failure_tail(output, task_failures(output)[0]).endswith("last-words")
