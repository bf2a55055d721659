"""Following a bench job through a pending wait and a slurmctld restart; judging an existing job (--job);
the peak as the table, the peak line and the verdict show it; the commands' typed options."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from hpckit.bench.cluster import ClusterFacts
from hpckit.bench.existing import judge_job
from hpckit.bench.follow import CONTROLLER_OUTAGE_S, Follower, Progress
from hpckit.bench.output import summary, table_text
from hpckit.bench.registry import get
from hpckit.bench.run import BenchRequest
from hpckit.cli import bench as cli_bench
from hpckit.errors import InputError
from hpckit.proc import TransportError
from hpckit.slurm.client import SlurmClient
from hpckit.slurm.jobparse import JobRecord
from hpckit.slurm.jobs import JobInfo, Jobs, JobWaitTimeout
from tests.test_bench import FakeSlurm
from tests.test_bench_run import DATA, FakeCluster, context

NODES = ("node1", "node2", "node3", "node4")
LAB_OUT = (DATA / "lab-torch-allreduce-4node-gloo.out").read_text()
H100_OUT = (DATA / "all_reduce-modern-2node-16gpu-h100-a3mega-full-sweep.txt").read_text()
DONE = JobRecord("7", "COMPLETED", 0, 0, NODES, "sacct", batch_host="node1")
IDLE = "\n".join(f"{n}|allocated|none" for n in NODES)


@dataclass
class Clock:
    """Time that moves only when something waits, or a command takes long."""

    now: float = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


@dataclass
class Restarting(FakeSlurm):
    """The controller goes away for `outage` polls (each squeue then hangs 30 s and fails), accounting
    answers throughout; the job ends during the outage when `ends_meanwhile`."""

    outage: int = 3
    ends_meanwhile: bool = True
    clock: Clock = field(default_factory=Clock)
    pending_reason: str = ""
    asked_accounting: int = 0

    def queue_state(self, job_id: str) -> str | None:
        if self.states and self.states[0] == "DOWN":
            if self.outage > 0:
                self.outage -= 1
                self.clock.now += 30.0
                raise TransportError("`squeue -h -j 7 -o %T` on login did not finish in 30.0 s")
            self.states.pop(0)
        return super().queue_state(job_id)

    def accounting(self, job_id: str) -> JobRecord | None:
        self.asked_accounting += 1
        if self.outage > 0 and not self.ends_meanwhile:
            return dataclasses.replace(self.final, state="RUNNING")
        return self.final

    def info(self, job_id: str) -> JobInfo | None:
        if self.states and self.states[0] == "PENDING":
            pending = dataclasses.replace(self.final, state="PENDING", reason=self.pending_reason, nodes=())
            return JobInfo(pending, "/shared/out/job-7.out", "", "/")
        if self.states and self.states[0] == "DOWN":
            raise TransportError("scontrol: Unable to contact slurm controller")
        return super().info(job_id)


def follow(fake: Restarting, seen: list[Progress], timeout: float | None = None) -> object:
    jobs = Jobs(fake, fake, sleep=fake.clock.sleep, clock=fake.clock)  # type: ignore[arg-type]
    follower = Follower(jobs, SlurmClient(fake), seen.append, clock=fake.clock, sleep=fake.clock.sleep)
    return follower.follow("7", "/shared/out/job-7.out", 0.0, timeout)


def test_waiting_says_why_the_job_pends() -> None:
    fake = Restarting(["PENDING"] * 5 + ["RUNNING", None], [IDLE], DONE, LAB_OUT, outage=0)
    fake.pending_reason = "ReqNodeNotAvail, UnavailableNodes:node3"
    seen: list[Progress] = []
    follow(fake, seen)
    pending = [p for p in seen if p.state == "PENDING"]
    assert pending and pending[0].note == "ReqNodeNotAvail, UnavailableNodes:node3"
    assert len(pending) == 1  # said once, not at every poll


def test_a_slurmctld_restart_is_ridden_out_when_the_job_ends_meanwhile() -> None:
    """squeue hangs 30 s per try while slurmctld is down: accounting says the job ended, so the wait ends."""
    fake = Restarting(["RUNNING", "DOWN", "DOWN"], [IDLE], DONE, LAB_OUT, outage=5)
    seen: list[Progress] = []
    followed = follow(fake, seen)
    assert followed.outcome.record.ok and followed.outcome.record.source == "sacct"  # type: ignore[attr-defined]
    assert followed.outcome.output_path == "/shared/out/job-7.out"  # type: ignore[attr-defined]


def test_a_slurmctld_restart_longer_than_a_squeue_timeout_is_waited_out() -> None:
    """The job still runs while slurmctld is down for 90 s (3 squeue timeouts); then the controller is back."""
    fake = Restarting(["RUNNING", "DOWN", "RUNNING", None], [IDLE], DONE, LAB_OUT, outage=3, ends_meanwhile=False)
    seen: list[Progress] = []
    followed = follow(fake, seen)
    assert followed.outcome.record.ok  # type: ignore[attr-defined]
    unreachable = [p for p in seen if p.state == "UNREACHABLE"]
    assert len(unreachable) == 1 and unreachable[0].note.startswith("slurmctld unreachable for ")
    assert "did not finish in 30.0 s" in unreachable[0].note
    assert fake.clock.now >= 90


def test_an_outage_past_the_limit_gives_up_naming_it() -> None:
    outage = int(CONTROLLER_OUTAGE_S // 30) + 2
    fake = Restarting(["DOWN"], [IDLE], DONE, LAB_OUT, outage=outage, ends_meanwhile=False)
    with pytest.raises(JobWaitTimeout, match=r"slurmctld unreachable for 9\d\d s while following job 7"):
        follow(fake, [])


# ---------------------------------------------------------------- --job ID


@pytest.fixture
def lab_facts(repo: Path) -> ClusterFacts:
    from hpckit.bench.cluster import facts_from_blueprint
    from hpckit.blueprint.loader import load_blueprint

    return facts_from_blueprint(load_blueprint(repo / "blueprints" / "lab.yaml"))


def test_an_existing_lab_job_is_parsed_and_judged_as_if_just_run(lab_facts: ClusterFacts, tmp_path: Path) -> None:
    record = JobRecord("2", "COMPLETED", 0, 0, NODES, "sacct", batch_host="node1")
    fake = FakeCluster(LAB_OUT, record, polls=0)
    req = BenchRequest(get("allreduce"), 2, bench_dir=str(tmp_path))
    result = judge_job(req, context(fake, lab_facts, tmp_path), "2")
    assert fake.scripts == []  # nothing submitted
    assert result.job_id == "2" and result.backend == "torch" and result.sweep.nodes == 4
    assert result.sweep.ranks_per_node == 1 and result.peak_busbw == pytest.approx(0.330)
    assert result.hosts == list(NODES) and result.history.status == "no-history"


def test_an_existing_job_of_another_collective_is_refused(lab_facts: ClusterFacts, tmp_path: Path) -> None:
    fake = FakeCluster(LAB_OUT, dataclasses.replace(DONE, job_id="2"), polls=0)
    req = BenchRequest(get("allgather"), 2, bench_dir=str(tmp_path))
    with pytest.raises(InputError, match="job 2 ran all_reduce, not all_gather"):
        judge_job(req, context(fake, lab_facts, tmp_path), "2")


def test_an_existing_gpu_job_is_judged_against_the_table(tmp_path: Path) -> None:
    facts = ClusterFacts("hgx", "gpu", 16, 224, 8, "h100-sxm", 8, 400.0, "/shared", False)
    record = JobRecord("9", "COMPLETED", 0, 0, ("gpu01", "gpu02"), "sacct", batch_host="gpu01")
    req = BenchRequest(get("allreduce"), 2, bench_dir=str(tmp_path), history=False)
    result = judge_job(req, context(FakeCluster(H100_OUT, record, polls=0), facts, tmp_path), "9")
    assert result.backend == "nccl-tests" and result.sweep.gpus_per_node == 8 and result.sweep.nodes == 2
    assert result.verdict.below and result.expectation.low == pytest.approx(370)


def test_the_peak_reads_the_same_in_the_table_the_peak_line_and_the_verdict(tmp_path: Path) -> None:
    facts = ClusterFacts("hgx", "gpu", 16, 224, 8, "h100-sxm", 8, 400.0, "/shared", False)
    record = JobRecord("9", "COMPLETED", 0, 0, ("gpu01", "gpu02"), "sacct", batch_host="gpu01")
    req = BenchRequest(get("allreduce"), 2, bench_dir=str(tmp_path), history=False)
    result = judge_job(req, context(FakeCluster(H100_OUT, record, polls=0), facts, tmp_path), "9")
    table = table_text(result)
    marked = [line for line in table.splitlines() if line.endswith("<- peak")]
    # 8 GiB out-of-place is the best at >= 1 GiB (the in-place 337.35 is not)
    assert len(marked) == 1 and marked[0].split()[:2] == ["8", "GiB"] and " 338.82 " in marked[0]
    assert result.peak_basis == "best at sizes >= 1 GiB"
    data = summary(result)
    assert data["peak_busbw_gbps"] == pytest.approx(338.82) and data["peak_size_bytes"] == 8 << 30
    assert result.verdict.message.startswith("peak 338.82 GB/s is below the expected 370.00-390.00 GB/s")


# ---------------------------------------------------------------- typed options


def _params(command: click.Command) -> set[str]:
    return {p.name for p in command.params if p.name}


@pytest.mark.parametrize(
    ("command", "classes"),
    [
        (cli_bench.bench_group.commands["allreduce"], (cli_bench.RunOptions, cli_bench.JobOptions)),
        (cli_bench.bench_group.commands["bisect"], (cli_bench.BisectOptions, cli_bench.JobOptions)),
    ],
)
def test_every_option_is_a_typed_field_and_every_field_an_option(
    command: click.Command, classes: tuple[type, ...]
) -> None:
    names = [f.name for cls in classes for f in dataclasses.fields(cls)]
    assert len(names) == len(set(names)) and set(names) == _params(command)
    shorts = [o for p in command.params for o in p.opts if not o.startswith("--")]
    assert len(shorts) == len(set(shorts)), "a short option used twice"


def test_typed_options_carry_click_s_conversions() -> None:
    ctx = cli_bench.bench_group.commands["allreduce"].make_context(
        "allreduce", ["-N", "4", "--timeout", "30", "--env", "NCCL_ALGO=Ring", "--job", "12", "--no-history"]
    )
    run = cli_bench.typed(cli_bench.RunOptions, dict(ctx.params))
    job = cli_bench.typed(cli_bench.JobOptions, dict(ctx.params))
    assert run.nodes == 4 and run.job == "12" and run.no_history and run.out_dir == Path("hpckit-bench")
    assert job.timeout == 30.0 and job.env == ("NCCL_ALGO=Ring",) and job.backend == "auto"
    req = cli_bench.request(get("allreduce"), run.nodes, job, run)
    assert req.nodes == 4 and req.timeout == 30.0 and not req.history and req.env == ("NCCL_ALGO=Ring",)


def test_bisect_nodelist_is_read_as_a_hostlist() -> None:
    bisect = cli_bench.bench_group.commands["bisect"]
    ctx = bisect.make_context("bisect", ["--nodelist", "gpu[01-03,07]"])
    assert cli_bench.typed(cli_bench.BisectOptions, dict(ctx.params)).nodelist == ("gpu01", "gpu02", "gpu03", "gpu07")
    assert cli_bench.typed(cli_bench.BisectOptions, dict(bisect.make_context("bisect", []).params)).nodelist is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bisect", "--nodelist", "gpu[01-"], "Invalid value for '--nodelist': 'gpu[01-'"),
        (["allreduce", "-b", "1KB"], "Invalid value for '--min-bytes' / '-b': size '1KB'"),
        (["allreduce", "--env", "NCCL_ALGO"], "Invalid value for '--env': --env 'NCCL_ALGO': expected NAME=VALUE"),
    ],
)
def test_bad_option_values_stop_at_the_command_line(args: list[str], message: str) -> None:
    """Read as click reads the options: a usage error (exit 2) before any cluster is looked up."""
    done = CliRunner().invoke(cli_bench.bench_group, [*args, "--cluster", "nosuch"])
    assert done.exit_code == 2 and message in done.output, done.output
