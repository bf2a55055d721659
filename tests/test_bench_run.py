"""`run_bench` and `hpckit bench` end to end without a cluster: a fake Slurm hands back real job outputs.

The fake answers the job layer's calls (submit, queue state, accounting, output file); the shared
filesystem is a folder here (ClusterFiles over a LocalTransport), so the history store is real.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpckit.bench.cluster import ClusterFacts, facts_from_blueprint
from hpckit.bench.files import ClusterFiles
from hpckit.bench.output import save, summary
from hpckit.bench.registry import get
from hpckit.bench.run import BenchJobFailed, BenchRequest, Context, run_bench
from hpckit.blueprint.loader import load_blueprint
from hpckit.cli.bench import _failures
from hpckit.clusters import ClusterAccess, SshAccess
from hpckit.proc import LocalTransport
from hpckit.slurm.client import SlurmClient
from hpckit.slurm.jobparse import JobRecord
from hpckit.slurm.jobs import JobInfo, Jobs
from tests.fakes import FakeTransport

DATA = Path(__file__).resolve().parent / "data" / "bench"
LAB_NODES = ("node1", "node2", "node3", "node4")


@dataclass
class FakeCluster(FakeTransport):
    """Slurm's side of one job: RUNNING for a few polls, then `record`; the job prints `output`."""

    output: str
    record: JobRecord
    polls: int = 3
    scripts: list[str] = field(default_factory=list)
    name: str = "fake"

    def __post_init__(self) -> None:
        sinfo = "\n".join(f"{n}|allocated|none" for n in self.record.nodes)
        self.replies.update(sinfo=[(0, sinfo, "")], cat=[(0, self.output, "")], tail=[(0, self.output, "")])
        self.default = (0, "", "")  # mkdir, the NCCL debug grep

    def submit(self, script: str) -> str:
        self.scripts.append(script)
        return self.record.job_id

    def test_only(self, script: str) -> object:
        raise NotImplementedError

    def queue_state(self, job_id: str) -> str | None:
        self.polls -= 1
        return "RUNNING" if self.polls >= 0 else None

    def accounting(self, job_id: str) -> JobRecord | None:
        return self.record

    def info(self, job_id: str) -> JobInfo | None:
        return JobInfo(self.record, f"/shared/logs/job-{job_id}.out", "", "/")

    def cancel(self, job_id: str) -> None:
        raise AssertionError("nothing here should be cancelled")

    def partitions(self) -> list[str]:
        return ["gpu"]


def context(fake: FakeCluster, facts: ClusterFacts, shared: Path) -> Context:
    ctx = Context(LocalTransport(), facts)
    ctx.jobs = Jobs(fake, fake, sleep=lambda _: None)  # type: ignore[arg-type]
    ctx.slurm = SlurmClient(fake)
    ctx.files = ClusterFiles(LocalTransport())  # "the shared filesystem" is a folder here
    ctx.transport = fake
    return ctx


@pytest.fixture
def lab_facts(repo: Path) -> ClusterFacts:
    return facts_from_blueprint(load_blueprint(repo / "blueprints" / "lab.yaml"))


def test_lab_run_then_history(lab_facts: ClusterFacts, tmp_path: Path) -> None:
    output = (DATA / "lab-torch-allreduce-4node-gloo.out").read_text()
    record = JobRecord("2", "COMPLETED", 0, 0, LAB_NODES, "sacct", batch_host="node1")
    req = BenchRequest(get("allreduce"), 4, bench_dir=str(tmp_path / "shared"))
    fake = FakeCluster(output, record)
    first = run_bench(req, context(fake, lab_facts, tmp_path))
    script = fake.scripts[0]
    assert "#SBATCH --nodes=4" in script and "#SBATCH --cpus-per-task=2" in script and "--partition=gpu" in script
    assert "--op all_reduce" in script and "-b 1K -e 16M" in script
    staged = list((tmp_path / "shared").glob("torch_sweep-*.py"))
    assert len(staged) == 1 and str(staged[0]) in script
    assert first.backend == "torch" and first.peak_busbw == pytest.approx(0.330) and first.wrong == 0
    assert first.verdict.status == "no-figure" and "no figures for lab" in first.verdict.message
    assert first.history.status == "no-history"
    second = run_bench(req, context(FakeCluster(output, record), lab_facts, tmp_path))
    assert second.history.status == "ok" and second.history_median == pytest.approx(0.330)
    files = save(second, tmp_path / "out")
    data = json.loads(Path(files["json"]).read_text())
    assert data["history"]["status"] == "ok" and data["hosts"] == list(LAB_NODES)
    assert Path(files["png"]).stat().st_size > 10_000 and len(data["rows"]) == 30
    assert _failures(second, strict=True) == []


def test_h100_nccl_tests_output_is_judged_against_8x_ndr(tmp_path: Path) -> None:
    """A published 2-node H100 sweep (peak 338.8 GB/s), judged as if from nodes with 8 NDR HCAs."""
    output = (DATA / "all_reduce-modern-2node-16gpu-h100-a3mega-full-sweep.txt").read_text()
    facts = ClusterFacts("hgx", "gpu", 16, 224, 8, "h100-sxm", 8, 400.0, "/shared", False)
    record = JobRecord("9", "COMPLETED", 0, 0, ("gpu01", "gpu02"), "sacct", batch_host="gpu01")
    req = BenchRequest(get("allreduce"), 2, backend="nccl-tests", bench_dir=str(tmp_path), history=False)
    fake = FakeCluster(output, record)
    result = run_bench(req, context(fake, facts, tmp_path))
    assert "all_reduce_perf -g 1" in fake.scripts[0] and "-b 8 -e 8G" in fake.scripts[0]
    assert result.peak_busbw == pytest.approx(338.82)
    assert result.expectation.low == pytest.approx(370) and result.expectation.high == pytest.approx(390)
    assert result.verdict.below and "92%" in result.verdict.message
    assert result.settings_text == "NCCL defaults; NVLS on"
    assert _failures(result, strict=False) == []
    assert [f.split(":")[0] for f in _failures(result, strict=True)] == ["below expectation"]


def _failed_bench(tmp_path: Path, sample: str, op: str, state: str, exit_code: int) -> list[str]:
    """The lines of the failure `hpckit bench` raises for a job that printed a real results sample."""
    output = (DATA.parent / "results" / sample).read_text()
    facts = ClusterFacts("hgx", "gpu", 16, 224, 8, "h100-sxm", 8, 400.0, "/shared", False)
    record = JobRecord("9", state, exit_code, 0, ("gpu01", "gpu02"), "sacct", batch_host="gpu01")
    req = BenchRequest(get(op), 2, backend="nccl-tests", bench_dir=str(tmp_path), history=False)
    with pytest.raises(BenchJobFailed) as caught:
        run_bench(req, context(FakeCluster(output, record), facts, tmp_path))
    return str(caught.value).splitlines()


def test_a_run_nccl_tests_calls_failed_is_failed_with_its_words(tmp_path: Path) -> None:
    """Rows, then "Test NCCL failure" (a real log, nccl-tests#322): never judged as a run that merely
    stopped early, even when the job's exit status hides it."""
    lines = _failed_bench(
        tmp_path, "issue-nccl-tests-322-rows-then-test-nccl-failure-excerpt.txt", "allreduce", "COMPLETED", 0
    )
    # every host of the log printed it, and none is a node of this job: the run failed, not a node
    assert lines[0].startswith("could not measure: benchmark job 9 ended COMPLETED (exit code 0) on gpu01,gpu02")
    assert "Test NCCL failure common.cu:1204 'unhandled cuda error" in lines[1]


def test_a_failure_inside_a_row_is_the_job_failure_s_first_words(tmp_path: Path) -> None:
    """The CUDA error printed inside a row (nccl-tests#355) is what the failure says first, not the
    "Test failure" trace lines after it."""
    lines = _failed_bench(tmp_path, "issue-nccl-tests-355-test-cuda-failure-mid-row.txt", "alltoall", "FAILED", 1)
    assert lines[1] == "27: node0: Test CUDA failure common.cu:389 'an illegal memory access was encountered'"


@pytest.mark.parametrize(("cpus", "overcommit"), [(1, True), (2, False), (None, False)])
def test_a_single_node_cpu_test_overcommits_only_a_1_cpu_node(
    lab_facts: ClusterFacts, tmp_path: Path, cpus: int | None, overcommit: bool
) -> None:
    """Two ranks on a node with one CPU (a small VM): Slurm refuses the job ("CPU count per node can not be
    satisfied") unless it may overcommit; a node with the CPUs, or unknown ones, asks for nothing more."""
    output = (DATA / "lab-torch-allreduce-4node-gloo.out").read_text()
    record = JobRecord("2", "COMPLETED", 0, 0, LAB_NODES[:1], "sacct", batch_host="node1")
    facts = replace(lab_facts, cpus_per_node=cpus)
    req = BenchRequest(get("allreduce"), 1, bench_dir=str(tmp_path), history=False, tasks_per_node=2)
    fake = FakeCluster(output, record)
    with contextlib.suppress(BenchJobFailed):  # the 4-node output read as a 1-node job: only the script matters
        run_bench(req, context(fake, facts, tmp_path))
    script = fake.scripts[0]
    assert "#SBATCH --ntasks-per-node=2" in script
    assert ("#SBATCH --overcommit" in script) is overcommit
    assert ("#SBATCH --cpus-per-task" in script) is (cpus == 2)


def test_a_job_that_cannot_run_anywhere_names_no_node(lab_facts: ClusterFacts, tmp_path: Path) -> None:
    """Every rank dies at `import torch`; srun kills some before they say so. Exit codes blame nobody: the
    run could not measure, and says why in the program's own words."""
    trace = 'Traceback (most recent call last):\n  File "/shared/torch_sweep.py", line 33, in <module>\n'
    output = (
        "hpckit: job 7 (bench-allreduce) on node[1-4], 4 node(s)\n"
        + (trace + "ModuleNotFoundError: No module named 'torch'\n") * 2
        + "srun: error: node2: task 1: Exited with exit code 1\n"
        "srun: launch/slurm: _step_signal: Terminating StepId=7.0\n"
        "srun: error: node1: task 0: Terminated\nsrun: error: node4: task 3: Exited with exit code 1\n"
        "srun: error: node3: task 2: Terminated\nsrun: Force Terminated StepId=7.0\n"
    )
    record = JobRecord("7", "FAILED", 1, 0, LAB_NODES, "sacct", batch_host="node1")
    req = BenchRequest(get("allreduce"), 4, bench_dir=str(tmp_path), history=False)
    with pytest.raises(BenchJobFailed) as caught:
        run_bench(req, context(FakeCluster(output, record), lab_facts, tmp_path))
    assert caught.value.nodes == () and caught.value.exit_code == 1
    lines = str(caught.value).splitlines()
    assert lines[0] == (
        "could not measure: benchmark job 7 ended FAILED (exit code 1) on node1,node2,node3,node4, no node to blame"
    )
    assert lines[1] == "ModuleNotFoundError: No module named 'torch'"
    assert lines[2] == "srun: error: node2: task 1: Exited with exit code 1"


def test_a_lost_node_is_named(lab_facts: ClusterFacts, tmp_path: Path) -> None:
    output = (DATA / "lab-torch-allreduce-node3-killed.out").read_text()
    record = JobRecord("4", "FAILED", 15, 0, LAB_NODES, "sacct", batch_host="node1")
    req = BenchRequest(get("allreduce"), 4, bench_dir=str(tmp_path))
    with pytest.raises(BenchJobFailed) as caught:
        run_bench(req, context(FakeCluster(output, record), lab_facts, tmp_path))
    assert caught.value.nodes == ("node3",) and caught.value.exit_code == 1
    message = str(caught.value)
    assert message.startswith("benchmark job 4 failed on node3 (FAILED, exit code 15)")
    assert "srun: error: node3: task 2: Terminated" in message


def test_wrong_values_fail_the_run_but_keep_the_table(lab_facts: ClusterFacts, tmp_path: Path) -> None:
    text = (DATA / "lab-torch-allreduce-4node-gloo.out").read_text()
    row = "     1048576        262144     float     sum      -1"
    line = next(ln for ln in text.splitlines() if ln.startswith(row))
    broken = text.replace(line, line[: line.rindex("0")] + "7")  # 7 wrong values, in-place
    record = JobRecord("5", "FAILED", 3, 0, LAB_NODES, "sacct", batch_host="node1")  # torch_sweep exits 3
    req = BenchRequest(get("allreduce"), 4, bench_dir=str(tmp_path), history=False)
    result = run_bench(req, context(FakeCluster(broken, record), lab_facts, tmp_path))
    assert result.wrong == 7
    assert _failures(result, strict=False)[0].startswith("7 wrong values")
    assert summary(result)["wrong"] == 7


# ---------------------------------------------------------------- the command line's own checks


def _cli() -> object:
    from hpckit.cli import cli
    from hpckit.cli.bench import COMMANDS

    for command in COMMANDS:
        if command.name not in cli.commands:
            cli.add_command(command)
    return cli


def _recorded_lab(state: Path, repo: Path) -> None:
    """A deployment record of the lab blueprint, as `hpckit deploy` leaves it."""
    current = state / "clusters" / "lab" / "current"
    current.mkdir(parents=True)
    bp = load_blueprint(repo / "blueprints" / "lab.yaml")
    (current / "blueprint.json").write_text(json.dumps(bp.model_dump(mode="json")))
    access = ClusterAccess("lab", "login", "10.77.0.11", "ctl", {}, SshAccess("root"), True)
    (current / "access.json").write_text(json.dumps(asdict(access)))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cluster", "nosuch"], "no deployment recorded for cluster 'nosuch'"),
        (["--cluster", "lab", "-N", "9"], "partition gpu has 4 nodes; --nodes 9 asked"),
        (["--cluster", "lab", "-p", "cpu"], "no partition 'cpu'"),
        (["--cluster", "lab", "--env", "1X=2"], "--env '1X=2': expected NAME=VALUE"),
        (["--cluster", "lab", "-e", "16MB"], "size '16MB'"),
        (["--cluster", "lab", "-b", "32M"], "need 0 < --min-bytes <= --max-bytes"),
        (["--cluster", "lab", "--backend", "nccl-tests"], "the nccl-tests backend needs GPUs"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path, repo: Path) -> None:
    _recorded_lab(tmp_path / "state", repo)
    runner = CliRunner()
    done = runner.invoke(_cli(), ["bench", "allreduce", *args], env={"HPCKIT_STATE": str(tmp_path / "state")})  # type: ignore[arg-type]
    assert done.exit_code == 2, done.output
    assert message in done.output and "Traceback" not in done.output
