"""Templates and the job layer against the real Slurm of the shared lab cluster (the session `cluster` fixture).

Jobs write their output under /shared, the lab's shared filesystem (gone with the lab). The tests that
take `jobs` run once per job backend that can work here: the command line always, pyslurm only where
it imports and the tests run on a machine with Slurm's clients (never the case through SSH).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hpckit.jobs.library import Library
from hpckit.jobs.submit import check_accepted, submit
from hpckit.proc import LocalTransport
from hpckit.slurm.jobparse import parse_scontrol
from hpckit.slurm.jobs import CliBackend, JobFailedError, Jobs, JobWaitTimeout
from tests.hostile import CORPUS, render_hostile
from tests.jobutil import hpckit_jobs
from tests.labutil import REPO, Cluster, needs_lab

pytestmark = [pytest.mark.lab, needs_lab()]

HOSTS = ["ctl", "login", "node1", "node2", "node3", "node4"]
LOGS = "/shared/hpckit-job-tests"
DDP_SMOKE = REPO / "hpckit" / "jobs" / "examples" / "ddp_smoke.py"


@pytest.fixture(scope="module")
def login(cluster: Cluster) -> Iterator[Any]:
    transport = cluster.login()
    yield transport
    close = getattr(transport, "close", None)
    if close is not None:
        close()


@pytest.fixture(params=["cli", "pyslurm"])
def jobs(request: pytest.FixtureRequest, login: Any) -> Jobs:
    """The command line always; pyslurm when these tests run on the login node itself (the login
    transport is then this machine) and pyslurm there matches its Slurm."""
    if request.param == "cli":
        return Jobs(CliBackend(login), login)
    from hpckit.slurm.pyslurm_backend import PyslurmBackend, pyslurm_unusable

    if not isinstance(login, LocalTransport):
        pytest.skip("pyslurm reads the local Slurm: run these tests on the login node (tests/test_pyslurm_login.py)")
    reason = pyslurm_unusable(login)
    if reason:
        pytest.skip(reason)
    return Jobs(PyslurmBackend(login), login)


def cli(cluster: Cluster, *args: str) -> Any:
    return hpckit_jobs(*args, "--cluster", cluster.name, state=cluster.state, timeout=300)


def node_shape(login: Any) -> tuple[int, int]:
    """(CPUs, GPUs) of a lab node, from sinfo."""
    done = login.run(["sinfo", "-h", "-o", "%c %G"])
    assert done.ok, done.describe()
    cpus, gres = done.stdout.split()[:2]
    gpus = re.search(r"gpu(?::[^:(]+)?:(\d+)", gres)
    return int(cpus), int(gpus.group(1)) if gpus else 0


@pytest.mark.parametrize("name", ["nccl-tests", "nemo", "run", "torchrun"])
def test_every_template_passes_sbatch_test_only(login: Any, name: str) -> None:
    """The defaults, except GPUs per node: one task per GPU must fit the lab's small nodes (2 CPUs, 4 GPUs)."""
    template = Library().get(name)
    cpus, gpus = node_shape(login)
    values: dict[str, object] = {}
    wanted = int(template.params["gpus_per_node"].default)
    if wanted > min(cpus, gpus):
        values["gpus_per_node"] = min(cpus, gpus)
    estimate = check_accepted(template.render(values), Jobs(CliBackend(login), login))
    assert estimate.job_id.isdigit() and estimate.partition == "gpu", estimate


def test_test_only_through_the_command(cluster: Cluster) -> None:
    done = cli(cluster, "submit", "torchrun", "--test-only", "--json", "-s", "nodes=4")
    assert done.rc == 0, done.stderr
    assert '"partition": "gpu"' in done.stdout


def test_torchrun_trains_on_four_nodes(cluster: Cluster) -> None:
    """With the template's default python: on the lab, the site defaults name one that has torch."""
    done = cli(
        cluster,
        "submit",
        "torchrun",
        "--wait",
        "--json",
        "-s",
        "nodes=4",
        "-s",
        f"script={DDP_SMOKE}",
        "-s",
        "args=--steps 3",
        "-s",
        f"log_dir={LOGS}",
        "-s",
        "time=10",
    )
    assert done.rc == 0, done.stdout + done.stderr
    result = done.json()
    assert result["state"] == "COMPLETED" and result["exit_code"] == 0
    assert result["nodes"] == ["node1", "node2", "node3", "node4"]
    output = str(result["output"])
    assert "DDP SMOKE OK world=4 hosts=node1,node2,node3,node4" in output, output
    assert str(result["output_path"]).startswith(f"{LOGS}/torchrun-")


def test_failed_job_gives_its_exit_status_node_and_output(cluster: Cluster) -> None:
    command = "sh -c 'echo about-to-fail; exit 3'"
    done = cli(cluster, "submit", "run", "--wait", "-s", f"command={command}", "-s", f"log_dir={LOGS}")
    assert done.rc == 3, done.stdout + done.stderr
    assert "about-to-fail" in done.stdout
    assert re.search(r"job \d+ FAILED \(exit code 3\) on node\d", done.stderr), done.stderr


def test_failed_job_error_through_the_api(jobs: Jobs) -> None:
    rendered = Library().get("run").render({"command": "sh -c 'echo last-words; exit 7'", "log_dir": LOGS})
    with pytest.raises(JobFailedError) as caught:
        submit(rendered, jobs, wait=True, timeout=120)
    assert caught.value.record.exit_code == 7 and caught.value.exit_code == 7
    assert "last-words" in caught.value.tail and "last lines of" in str(caught.value)


def test_unknown_partition_and_impossible_request_are_rejected(cluster: Cluster) -> None:
    partition = cli(cluster, "submit", "run", "-s", "partition=nosuch")
    assert partition.rc == 2, partition.stderr
    assert partition.stderr.count("\n") == 1
    assert "Invalid partition name specified" in partition.stderr and "partitions: gpu" in partition.stderr
    too_big = cli(cluster, "submit", "run", "-s", "gpus_per_node=64")
    assert too_big.rc == 2 and "Requested node configuration is not available" in too_big.stderr


def test_cancel(jobs: Jobs) -> None:
    rendered = Library().get("run").render({"command": "sleep 120", "log_dir": LOGS})
    job_id = submit(rendered, jobs).job_id
    deadline = time.monotonic() + 60
    while jobs.backend.queue_state(job_id) != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.2)
    jobs.cancel(job_id)
    assert jobs.wait(job_id, timeout=60).state == "CANCELLED"


# --- hostile parameter values, submitted -----------------------------------------------------------------

PAYLOADS = ["$(touch {m})", "`touch {m}`", "x' ; touch {m} ; '", 'x" ; touch {m} ; "']


def _hostile(name: str, payload: str) -> dict[str, str]:
    """The payload in every free-text parameter Slurm itself accepts; the job still gets to run its shell.

    job_name gets a payload without '/', since it names the output file; `python` and `command` get one
    too: they are the program's name, so the shell sees them as one word or not at all.
    """
    values: dict[str, str] = {}
    for key, param in Library().get(name).params.items():
        if param.type in ("str", "path", "args") and not param.pattern and key != "log_dir":
            value = payload.format(m=f"/tmp/{MARK}")
            values[key] = shlex.quote(value) if param.type == "args" else value
    values["job_name"] = payload.format(m=MARK)
    values["log_dir"] = LOGS
    if name in ("nemo", "nccl-tests"):
        values["gpus_per_node"] = "1"  # one task per GPU, on 2-CPU nodes
    return values


MARK = f"hpckit-injected-{uuid.uuid4().hex[:8]}"


def _markers(cluster: Cluster) -> list[str]:
    found = []
    for host in HOSTS:
        listing = cluster.on(host, "sh", "-c", f"ls /tmp /root /shared 2>/dev/null | grep -F {MARK} || true")
        found += [f"{host}: {line}" for line in listing.stdout.split()]
    return found + [str(p) for base in (Path("/tmp"), Path("/root")) for p in base.glob(f"{MARK}*")]


def test_hostile_values_submitted_run_nothing(cluster: Cluster, login: Any) -> None:
    """Every template with every payload, all submitted first (they queue and run side by side), then awaited."""
    jobs = Jobs(CliBackend(login), login)
    submitted = []
    for name in ["nccl-tests", "nemo", "run", "torchrun"]:
        for payload in PAYLOADS:
            rendered = Library().get(name).render(_hostile(name, payload))
            submitted.append((name, payload, submit(rendered, jobs).job_id))
    for name, payload, job_id in submitted:
        record = jobs.wait(job_id, timeout=300)
        assert record.finished, (name, record)
        # sbatch read the quoted #SBATCH --job-name back into the very text given (accounting mangles
        # quotes in names, so ask the controller).
        (fields,) = parse_scontrol(login.run(["scontrol", "show", "job", "-o", job_id]).stdout)
        assert fields["JobName"] == payload.format(m=MARK), (name, payload)
    assert not _markers(cluster), "an injected command ran"


# --- the hostile corpus through the real sbatch, held ---------------------------------------------------

# What differs between two held jobs of one template whatever their values: ids and times, and the
# fields the hostile values are meant to reach (their name, the output path it names, a comment).
_PER_JOB = {
    "JobId", "JobName", "SubmitTime", "EligibleTime", "AccrueTime", "LastSchedEval", "StdOut", "StdErr", "Comment",
    "StartTime", "EndTime", "Deadline", "Priority", "RunTime", "AllocNode:Sid",
}  # fmt: skip


# Parameters that refuse some of the corpus (a '/' in a job name, a leading '-' in a program or path ...).
REFUSABLE = {"job_name", "log_dir", "program", "script", "bin_dir", "exp_dir", "command", "python"}


def _held(login: Any, rendered: Any) -> dict[str, str]:
    job_id = CliBackend(login).submit(rendered.script, rendered.mkdirs, hold=True)
    done = login.run(["scontrol", "show", "job", "-o", job_id])
    assert done.ok, done.describe()
    (fields,) = parse_scontrol(done.stdout)
    return fields


@pytest.mark.parametrize("name", ["bench-torch", "nccl-tests", "nemo", "run", "torchrun"])
def test_hostile_corpus_through_the_real_sbatch_adds_nothing(cluster: Cluster, login: Any, name: str) -> None:
    """Every text parameter of the template holds each payload of the corpus; each job is submitted held
    with the real sbatch, and what the controller recorded is compared with a held job of plain values:
    only the job's name, its output path and a comment (sbatch_options) may differ, each exactly as
    given. Refused values name their parameter. Nothing runs, and no payload ran at submission."""
    template = Library().get(name)
    fixed = {"log_dir": LOGS, "gpus_per_node": "1"} if "gpus_per_node" in template.params else {"log_dir": LOGS}
    submitted = []
    try:
        baseline = _held(login, template.render(fixed))
        submitted.append(baseline["JobId"])
        for payload in CORPUS:
            rendered, values, refused = render_hostile(template, payload, fixed, lambda p: f"/tmp/{MARK}-{p}")
            fields = _held(login, rendered)
            submitted.append(fields["JobId"])
            expected_name = payload.format(m=f"/tmp/{MARK}-job_name") if "job_name" in values else name
            assert fields["JobName"] == expected_name, (payload, fields["JobName"])
            assert fields["StdOut"] == f"{LOGS}/{expected_name}-{fields['JobId']}.out", payload
            if "sbatch_options" in values:
                assert fields["Comment"] == payload.format(m=f"/tmp/{MARK}-sbatch_options"), payload
            differs = {k: (baseline.get(k), v) for k, v in fields.items() if k not in _PER_JOB and baseline.get(k) != v}
            # the session id differs per SSH command; the submitting host may not
            assert fields["AllocNode:Sid"].split(":")[0] == baseline["AllocNode:Sid"].split(":")[0]
            assert not differs, (payload, differs)
            assert fields["JobState"] == "PENDING" and fields["Reason"] == "JobHeldUser"
            assert set(refused) <= {
                "job_name",
                "log_dir",
                "program",
                "script",
                "bin_dir",
                "exp_dir",
                "command",
                "python",
            }
    finally:
        if submitted:
            login.run(["scancel", *submitted])
    assert not _markers(cluster), "a payload ran"


def test_newline_in_a_parameter_is_refused_before_submitting(cluster: Cluster) -> None:
    done = cli(cluster, "submit", "run", "-s", f"job_name=x\ntouch /tmp/{MARK}")
    assert done.rc == 2 and done.stderr.count("\n") == 1 and "newline" in done.stderr
    assert not _markers(cluster)


# --- hpckit on the login node (the hpckit_login role) ----------------------------------------------------------


def _login_role_deployed() -> bool:
    return "hpckit_login" in (REPO / "ansible" / "site.yml").read_text()


@pytest.mark.skipif(not _login_role_deployed(), reason="ansible/site.yml does not run the hpckit_login role yet")
def test_hpckit_works_on_the_login_node(cluster: Cluster) -> None:
    listed = cluster.on("login", "hpckit", "templates", "list")
    assert "torchrun" in listed.stdout
    defaults = cluster.on("login", "cat", "/etc/hpckit/template-defaults.yaml").stdout
    assert f"python: {sys.executable}" in defaults, defaults
    done = cluster.on("login", "hpckit", "submit", "run", "--wait", "-s", "nodes=4", "-s", f"log_dir={LOGS}")
    # The job's log starts with the templates' banner line ("hpckit: job N ... on NODES"), then the output.
    names = [line for line in done.stdout.splitlines() if line and not line.startswith("hpckit: job ")]
    assert sorted(names) == ["node1", "node2", "node3", "node4"]


def test_ssh_commands_carry_stdin_both_streams_and_the_exit_code(login: Any) -> None:
    """One channel per command: a script on stdin, stdout and stderr larger than a window, the status."""
    if isinstance(login, LocalTransport):
        pytest.skip("the login node is this machine: no SSH")
    script = "".join(f"echo line {i}\n" for i in range(3000))
    done = login.run(["sh", "-c", 'sh; head -c 3000000 /dev/zero | tr "\\0" x >&2; exit 7'], stdin=script)
    assert done.rc == 7 and done.stdout.splitlines()[-1] == "line 2999" and len(done.stderr) == 3_000_000
    assert login.run(["true"]).ok


# --- failures, cancelling, arrays, dependencies, requeue ------------------------------------------------

FAIL_ON_NODE3 = """import os, socket, sys, time
if socket.gethostname() == "node3":
    print(f"rank {os.environ['RANK']} on node3: giving up", flush=True)
    sys.exit(1)
print(f"rank {os.environ['RANK']} waiting", flush=True)
time.sleep(300)
"""


def _shared_script(cluster: Cluster, name: str, text: str) -> str:
    path = f"{LOGS}/{name}-{uuid.uuid4().hex[:6]}.py"
    cluster.on("login", "sh", "-c", f"mkdir -p {LOGS} && cat > {path} << 'EOF'\n{text}EOF")
    return path


def test_submit_wait_blames_the_first_task_that_failed(cluster: Cluster) -> None:
    """node3's rank exits 1; srun then kills the other ranks (exit 143 and the like): the error names
    node3, its exit code and what it printed, and hpckit exits with that code."""
    script = _shared_script(cluster, "fail-on-node3", FAIL_ON_NODE3)
    done = cli(
        cluster, "submit", "torchrun", "--wait", "-s", "nodes=4", "-s", f"python={sys.executable}",
        "-s", f"script={script}", "-s", f"log_dir={LOGS}", "-s", "time=5", "-s", "job_name=blame",
    )  # fmt: skip
    capture = os.environ.get("HPCKIT_TEST_CAPTURE")  # a folder: keep the job's output as a sample
    if capture:
        (Path(capture) / "torchrun-first-failure-node3.out").write_text(done.stdout)
    assert done.rc == 1, done.stdout + done.stderr
    assert re.search(r"first to fail: task 2 on node3 \(exit code 1\)", done.stderr), done.stderr
    # torchrun's own summary of the failure, and srun's report of it, end the tail shown
    tail = done.stderr.split("the output at that failure:")[1]
    assert "host      : node3" in tail and tail.rstrip().endswith("node3: task 2: Exited with exit code 1"), tail


def test_cancel_by_id_and_name_says_what_it_cancelled(cluster: Cluster, login: Any) -> None:
    name = f"cancel-me-{uuid.uuid4().hex[:6]}"
    rendered = Library().get("run").render({"job_name": name, "command": "sleep 60", "log_dir": LOGS})
    first = CliBackend(login).submit(rendered.script, rendered.mkdirs, hold=True)
    second = CliBackend(login).submit(rendered.script, rendered.mkdirs, hold=True)
    by_id = cli(cluster, "cancel", first)
    assert by_id.rc == 0 and by_id.stdout == f"cancelled job {first} ({name}, user root, PENDING)\n", by_id
    by_name = cli(cluster, "cancel", "--name", name)
    assert by_name.rc == 0 and by_name.stdout == f"cancelled job {second} ({name}, user root, PENDING)\n"
    unknown = cli(cluster, "cancel", "999999")
    assert unknown.rc == 1 and "job 999999 is not queued or running" in unknown.stderr
    again = cli(cluster, "cancel", "--name", name)
    assert again.rc == 1 and "none are queued or running" in again.stderr


def test_arrays_and_dependencies_reach_slurm(login: Any) -> None:
    run = Library().get("run")
    first = CliBackend(login).submit(*_script_and_dirs(run, {"log_dir": LOGS}), hold=True)
    array = run.render({"log_dir": LOGS, "array": "0-2%2", "dependency": f"afterok:{first}", "job_name": "arr"})
    array_id = CliBackend(login).submit(array.script, array.mkdirs, hold=True)
    try:
        (fields, *_) = parse_scontrol(login.run(["scontrol", "show", "job", "-o", array_id]).stdout)
        assert fields["ArrayTaskId"] == "0-2%2" and fields["Dependency"].startswith(f"afterok:{first}")
        assert fields["StdOut"] == f"{LOGS}/arr-{array_id}_4294967294.out" or fields["StdOut"].startswith(
            f"{LOGS}/arr-"
        )
    finally:
        login.run(["scancel", first, array_id])


def _script_and_dirs(template: Any, values: dict[str, str]) -> tuple[str, tuple[str, ...]]:
    rendered = template.render(values)
    return rendered.script, rendered.mkdirs


CHECKPOINTING = """import os, pathlib, signal, sys, time
checkpoint = pathlib.Path(sys.argv[1])
if checkpoint.exists():
    print(f"resumed from {checkpoint.read_text()} (restart {os.environ.get('SLURM_RESTART_COUNT', '0')})", flush=True)
    sys.exit(0)
steps = 0
def save(*_):
    checkpoint.write_text(f"step {steps}")
    print(f"SIGTERM: checkpoint saved at step {steps}", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, save)
print("training", flush=True)
while True:
    time.sleep(0.1)
    steps += 1
"""


def _job_fields(login: Any, job_id: str) -> dict[str, str]:
    (fields,) = parse_scontrol(login.run(["scontrol", "show", "job", "-o", job_id]).stdout)
    return fields


def test_torchrun_checkpoints_on_the_warning_signal_and_resumes_after_requeue(cluster: Cluster, login: Any) -> None:
    """The warning Slurm sends before the time limit (--signal=B:USR1), sent now with scancel: every rank
    gets SIGTERM and saves, the job requeues itself and its second run resumes, in the same log.

    Slurm holds a requeued batch job back for its credential's lifetime plus a second (121 s by
    default; batch_requeue_fini in slurmctld/job_mgr.c: slurmd refuses a launch credential older than
    the job's revocation); blueprints/lab.yaml sets AuthInfo=cred_expire=40, so this test takes about a minute."""
    script = _shared_script(cluster, "checkpointing", CHECKPOINTING)
    checkpoint = f"{script}.ckpt"
    values = {
        "nodes": "1", "python": sys.executable, "script": script, "args": checkpoint, "log_dir": LOGS,
        "time": "5", "job_name": "requeue-me",
    }  # fmt: skip
    jobs = Jobs(CliBackend(login), login)
    job_id = submit(Library().get("torchrun").render(values), jobs).job_id
    log = f"{LOGS}/requeue-me-{job_id}.out"

    def seen() -> str:
        return f"{jobs.read_file(log)}\n{_job_fields(login, job_id)}"

    deadline = time.monotonic() + 120
    while "training" not in (jobs.read_file(log) or ""):
        assert time.monotonic() < deadline, seen()
        time.sleep(0.5)
    assert login.run(["scancel", "--signal=USR1", "--batch", job_id]).ok
    try:
        record = jobs.wait(job_id, timeout=360)
    except JobWaitTimeout:
        capture = os.environ.get("HPCKIT_TEST_CAPTURE")
        if capture:
            (Path(capture) / "requeue-timeout.txt").write_text(seen())
        raise AssertionError(seen()) from None
    output = jobs.read_file(log) or ""
    assert record.state == "COMPLETED", (record, output)
    assert "SIGTERM: checkpoint saved at step" in output and "requeueing job" in output, output
    assert re.search(r"resumed from step \d+ \(restart 1\)", output), output
    fields = _job_fields(login, job_id)
    assert fields["Restarts"] == "1" and fields["Requeue"] == "1"
