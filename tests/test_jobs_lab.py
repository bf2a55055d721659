"""Templates and the job layer against the real Slurm of the shared lab cluster (the session `cluster` fixture).

Jobs write their output under /shared, the lab's shared filesystem (gone with the lab). The tests that
take `jobs` run once per job backend that can work here: the command line always, pyslurm only where
it imports and the tests run on a machine with Slurm's clients (never the case through SSH).
"""

from __future__ import annotations

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
from hpckit.slurm.jobparse import parse_scontrol
from hpckit.slurm.jobs import CliBackend, JobFailedError, Jobs
from hpckit.slurm.transport import LocalTransport
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


def _pyslurm_param() -> Any:
    try:
        import pyslurm  # noqa: F401
    except ImportError:
        return pytest.param("pyslurm", marks=pytest.mark.skip(reason="pyslurm is not installed"))
    return pytest.param(
        "pyslurm", marks=pytest.mark.skip(reason="pyslurm works on a machine with Slurm's clients, not through SSH")
    )


@pytest.fixture(params=["cli", _pyslurm_param()])
def jobs(request: pytest.FixtureRequest, login: Any) -> Jobs:
    if request.param == "cli":
        return Jobs(CliBackend(login), login)
    from hpckit.slurm.pyslurm_backend import PyslurmBackend

    return Jobs(PyslurmBackend(LocalTransport()), LocalTransport())


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
    done = cli(
        cluster,
        "submit",
        "torchrun",
        "--wait",
        "--json",
        "-s",
        "nodes=4",
        "-s",
        f"python={sys.executable}",
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
