"""hpckit.bench without a cluster: registry, expectations and verdicts, settings, history store, job following."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest

from hpckit.bench import files as files_mod
from hpckit.bench import settings
from hpckit.bench.backend import JobPlace, Sweep, choose_backend, parse_size, template_values
from hpckit.bench.cluster import default_cluster, facts_from_blueprint
from hpckit.bench.expect import (
    Expectation,
    Fabric,
    expected_busbw,
    judge,
    judge_history,
    nvls_in_force,
)
from hpckit.bench.files import ClusterFiles
from hpckit.bench.follow import Follower, Progress, culprits, last_row, lost
from hpckit.bench.history import HistoryStore, past_peaks
from hpckit.bench.registry import get
from hpckit.blueprint.loader import load_blueprint
from hpckit.errors import InputError
from hpckit.hardware import hardware_table
from hpckit.jobs.submit import render
from hpckit.proc import LocalTransport
from hpckit.results import parse_file
from hpckit.slurm.client import SlurmClient
from hpckit.slurm.jobparse import JobRecord
from hpckit.slurm.jobs import JobInfo, Jobs
from hpckit.slurm.parsers import parse_sinfo_nodes
from tests.fakes import FakeTransport

DATA = Path(__file__).resolve().parent / "data" / "bench"
TABLE = hardware_table()
GIB = 1 << 30


# ---------------------------------------------------------------- registry


def test_registry_lookup_by_either_name_and_suggestion() -> None:
    assert get("all_reduce") is get("allreduce")
    with pytest.raises(InputError, match="did you mean allreduce"):
        get("allreduc")


# ---------------------------------------------------------------- expectations


def _fabric(**kw: object) -> Fabric:
    base: dict[str, object] = {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 8}
    base.update(kw)
    return Fabric(**base)  # type: ignore[arg-type]


def test_one_h100_node_with_and_without_nvls() -> None:
    on = expected_busbw(get("allreduce"), _fabric(nvls=True), TABLE)
    off = expected_busbw(get("allreduce"), _fabric(nvls=False), TABLE)
    assert on.low == pytest.approx(475 * 0.95) and on.high == pytest.approx(475 * 1.05)
    assert off.low == pytest.approx(370 * 0.95)
    assert "with NVLS" in on.basis and "NVLS off" in off.basis


def test_across_nodes_8x_ndr() -> None:
    exp = expected_busbw(get("allreduce"), _fabric(nodes=4, ib_hcas=8, ib_rate_gbps=400), TABLE)
    assert exp.low == pytest.approx(370) and exp.high == pytest.approx(390)
    assert "8x 400 Gb/s InfiniBand" in exp.basis
    # all_gather and reduce_scatter: the same bus bandwidth is expected
    assert expected_busbw(get("allgather"), _fabric(nodes=4, ib_hcas=8, ib_rate_gbps=400), TABLE).low == exp.low


def test_slower_nvlink_bounds_the_inter_node_range() -> None:
    v100 = _fabric(gpu="v100-sxm2", nodes=2, ib_hcas=8, ib_rate_gbps=400)
    exp = expected_busbw(get("allreduce"), v100, TABLE)
    assert exp.high == pytest.approx(130 * 1.05) and "bounded by NVLink" in exp.basis


@pytest.mark.parametrize(
    ("fabric", "bench", "why"),
    [
        (_fabric(gpu="lab", gpus_per_node=0, nodes=4), "allreduce", "no figures for lab"),
        (_fabric(gpu="lab", gpus_per_node=4, nodes=4), "allreduce", "no figures for lab"),
        (_fabric(gpu=None, gpus_per_node=0, nodes=4), "allreduce", "no GPUs"),
        (_fabric(gpu="h100-pcie"), "allreduce", "no NVLink figure"),
        (_fabric(gpus_per_node=4), "allreduce", "for 8 GPUs per node"),
        (_fabric(nodes=2), "allreduce", "no InfiniBand"),
        (_fabric(), "alltoall", "not alltoall"),
        (_fabric(gpu="NVIDIA Z9000"), "allreduce", "not in the hardware table"),
    ],
)
def test_no_figure_cases(fabric: Fabric, bench: str, why: str) -> None:
    exp = expected_busbw(get(bench), fabric, TABLE)
    assert not exp.has_figure and why in exp.basis


def test_product_name_from_the_job_finds_the_table_entry() -> None:
    exp = expected_busbw(get("allreduce"), _fabric(gpu="NVIDIA H100 80GB HBM3"), TABLE)
    assert exp.low == pytest.approx(475 * 0.95)


def test_expect_overrides_everything() -> None:
    exp = expected_busbw(get("alltoall"), _fabric(gpu="lab", gpus_per_node=0), TABLE, override=0.25)
    assert exp == Expectation(0.25, None, "--expect")
    assert judge(0.2, exp, 16 << 20).below
    assert judge(0.3, exp, 16 << 20).status == "ok"


def test_judge_statuses() -> None:
    exp = expected_busbw(get("allreduce"), _fabric(), TABLE)
    assert judge(470, exp, 8 * GIB).status == "ok"
    below = judge(300, exp, 8 * GIB)
    assert below.below and "66%" in below.message
    assert judge(600, exp, 8 * GIB).status == "above"
    small = judge(10, exp, 16 << 20)
    assert small.status == "not-comparable" and not small.below and "16 MiB" in small.message
    assert judge(1, Expectation(None, None, "x"), GIB).status == "no-figure"


def test_judge_history() -> None:
    assert judge_history(1.0, []).status == "no-history"
    assert judge_history(0.95, [1.0, 1.02, 0.98]).status == "ok"
    below = judge_history(0.5, [1.0, 1.02, 0.98, math.nan])
    assert below.below and "3 earlier runs" in below.message
    # a noisy history widens the band (3 scaled MADs) beyond the 10% floor
    assert judge_history(0.6, [1.0, 0.5, 1.5, 0.7, 1.3]).status == "ok"


@pytest.mark.parametrize(
    ("env", "nvls"),
    [
        ({}, True),
        ({"NCCL_NVLS_ENABLE": "0"}, False),
        ({"NCCL_NVLS_ENABLE": "1"}, True),
        ({"NCCL_ALGO": "Ring"}, False),
        ({"NCCL_ALGO": "NVLS,Ring"}, True),
        ({"NCCL_ALGO": "^NVLS"}, False),
        ({"NCCL_ALGO": "^Tree"}, True),
        ({"NCCL_ALGO": "allreduce:nvlstree;allgather:ring"}, True),
    ],
)
def test_nvls_in_force(env: dict[str, str], nvls: bool) -> None:
    assert nvls_in_force(env) is nvls


# ---------------------------------------------------------------- settings, backends, templates


def test_settings_from_the_lab_output() -> None:
    found = settings.from_sweep_output((DATA / "lab-torch-allreduce-4node-gloo.out").read_text())
    assert found == {"OMP_NUM_THREADS": "1", "torch.distributed": "gloo"}
    assert "gloo" in settings.describe(found, "torch", True)


def test_settings_from_nccl_debug_lines() -> None:
    text = (
        "node1:123:130 [0] NCCL INFO NCCL_ALGO set by environment to Ring\n"
        "node1:123:130 [0] NCCL INFO NVLS multicast support is not available on dev 0\n"
    )
    found = settings.from_nccl_debug(text)
    assert found == {"NCCL_ALGO": "Ring", "NVLS": "unavailable"}
    assert settings.describe(found, "nccl-tests", False) == "NCCL_ALGO=Ring; NVLS off"
    assert settings.describe({}, "nccl-tests", True) == "NCCL defaults; NVLS on"


def test_choose_backend() -> None:
    assert choose_backend("auto", 0, True, True) == "torch"
    assert choose_backend("auto", 8, False, False) == "torch"
    assert choose_backend("auto", 8, False, True) == "nccl-tests"
    assert choose_backend("auto", 8, True, False) == "nccl-tests"
    assert choose_backend("torch", 8, True, True) == "torch"
    with pytest.raises(InputError, match="needs GPUs"):
        choose_backend("nccl-tests", 0, True, True)


def test_sweep_checks_its_values() -> None:
    assert parse_size("16M") == 16 << 20 and parse_size("1k") == 1024 and parse_size("8") == 8
    with pytest.raises(InputError, match="size"):
        parse_size("16MB")
    with pytest.raises(InputError, match="min-bytes"):
        Sweep(get("allreduce"), 2, 0, "16M", "1K")
    with pytest.raises(InputError, match="NAME=VALUE"):
        Sweep(get("allreduce"), 2, 0, "1K", "16M", env=("$(reboot)",))


def test_torch_template_renders_the_sweep(tmp_path: Path) -> None:
    sweep = Sweep(get("allgather"), 4, 0, "1K", "16M", env=("NCCL_ALGO=Ring",))
    place = JobPlace("gpu", "/shared/hpckit/bench/logs", 2, python="/opt/py/bin/python", program="/shared/ts.py")
    name, values = template_values("torch", sweep, place)
    script = render(name, values).script
    assert "#SBATCH --nodes=4" in script and "#SBATCH --cpus-per-task=2" in script
    assert "#SBATCH --partition=gpu" in script
    assert "export NCCL_ALGO=Ring" in script
    assert "/opt/py/bin/python /shared/ts.py --op all_gather" in script
    assert "MASTER_PORT=$((15000 + SLURM_JOB_ID % 17000))" in script


def test_nccl_tests_template_gets_the_sweep() -> None:
    sweep = Sweep(get("allreduce"), 2, 8, "8", "8G", env=("NCCL_NVLS_ENABLE=0",))
    name, values = template_values("nccl-tests", sweep, JobPlace(None, "/shared/logs"))
    script = render(name, values).script
    assert "all_reduce_perf -g 1" in script and "-b 8 -e 8G -f 2" in script
    assert "export NCCL_NVLS_ENABLE=0" in script and "#SBATCH --gpus-per-node=8" in script


def test_facts_of_the_lab_blueprint(repo: Path) -> None:
    facts = facts_from_blueprint(load_blueprint(repo / "blueprints" / "lab.yaml"))
    assert (facts.partition, facts.partition_nodes, facts.cpus_per_node) == ("gpu", 4, 2)
    assert facts.gpu == "lab" and facts.gpus_per_node == 4 and facts.usable_gpus_per_node == 0
    assert facts.shared_mount == "/shared" and facts.lab
    with pytest.raises(InputError, match="no partition 'gpux'"):
        facts_from_blueprint(load_blueprint(repo / "blueprints" / "lab.yaml"), "gpux")


# ---------------------------------------------------------------- files and history (this machine as "the cluster")


def test_cluster_files_round_trip_in_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files_mod, "CHUNK_CHARS", 1000)
    files = ClusterFiles(LocalTransport())
    data = bytes(range(256)) * 40  # 10 KiB: 14 pieces
    target = str(tmp_path / "a" / "b" / "blob")
    assert files.read(target) is None and not files.exists(target)
    files.write(target, data)
    assert files.read(target) == data
    files.write(target, b"")
    assert files.read(target) == b""
    assert files.listdir(str(tmp_path / "a" / "b")) == ["blob"]
    assert files.listdir(str(tmp_path / "nowhere")) == []


def _summary(run: str, peak: float, **kw: object) -> dict[str, object]:
    row: dict[str, object] = {
        "run_id": run,
        "time": run,
        "cluster": "lab",
        "op": "all_reduce",
        "backend": "torch",
        "nodes": 4,
        "ranks_per_node": 1,
        "gpu": "",
        "dtype": "float",
        "max_bytes": 16 << 20,
        "min_bytes": 1024,
        "job_id": run,
        "peak_busbw_gbps": peak,
        "avg_busbw_gbps": peak / 3,
        "wrong": 0,
        "verdict": "no-figure",
        "settings": "{}",
    }
    row.update(kw)
    return row


def test_history_store_appends_and_compares_like_with_like(tmp_path: Path) -> None:
    store = HistoryStore(ClusterFiles(LocalTransport()), str(tmp_path / "history"))
    sweep = parse_file(DATA / "lab-torch-allreduce-4node-gloo.out").frame
    assert store.load().empty
    store.append(_summary("r1", 0.30), sweep)
    store.append(_summary("r2", 0.34), sweep)
    store.append(_summary("r3", 9.0, nodes=2), sweep)  # another shape
    store.append(_summary("r4", 0.01, wrong=5), sweep)  # a broken run never sets the bar
    runs = store.load()
    assert list(runs["run_id"]) == ["r1", "r2", "r3", "r4"]
    assert past_peaks(runs, _summary("now", 0)) == [0.30, 0.34]
    assert (tmp_path / "history" / "sweeps" / "r2.parquet").is_file()
    assert len(pd.read_parquet(tmp_path / "history" / "sweeps" / "r2.parquet")) == len(sweep)


# ---------------------------------------------------------------- following a job, and naming the node


def test_culprit_of_the_lab_node_kill() -> None:
    output = (DATA / "lab-torch-allreduce-node3-killed.out").read_text()
    record = JobRecord("4", "FAILED", 15, 0, ("node1", "node2", "node3", "node4"), "sacct", batch_host="node1")
    assert culprits(output, (), record) == ("node3",)
    assert culprits(output, ("node4",), record) == ("node4",)  # Slurm's own word comes first
    assert culprits("", (), record) == ()  # a job that said nothing blames no node, not its batch host


@pytest.mark.parametrize(
    ("text", "nodes"),
    [
        ("srun: error: Node failure on gpu07\nsrun: error: gpu01: task 0: Killed\n", ("gpu07",)),
        # an exit code alone (a missing module, a wrong path) fails every node alike: nobody to blame
        ("srun: error: gpu02: tasks 8-15: Exited with exit code 1\nsrun: error: gpu05: task 40: Killed\n", ()),
        ("srun: error: gpu02: tasks 8-15: Killed\nsrun: error: gpu05: task 40: Segmentation fault\n", ("gpu05",)),
        ("srun: error: Task launch for StepId=9.0 failed on node gpu03: Invalid node name\n", ("gpu03",)),
    ],
)
def test_culprits_from_srun_lines(text: str, nodes: tuple[str, ...]) -> None:
    record = JobRecord("9", "FAILED", 1, 0, ("gpu01",), "sacct", batch_host="gpu01")
    assert culprits(text, (), record) == nodes


def test_lost_nodes_and_last_row() -> None:
    states = parse_sinfo_nodes("node1|allocated|none\nnode3|allocated*|none\nnode4|down|Not responding\nnode9|down|x\n")
    assert lost(states, ["node1", "node3", "node4"]) == ("node3", "node4")
    tail = (DATA / "lab-torch-allreduce-4node-gloo.out").read_text().splitlines()
    assert last_row("\n".join(tail[-8:])) == (16777216, 0.281)
    assert last_row("# Out of bounds values : 0 OK") is None


@dataclass
class FakeSlurm(FakeTransport):
    """A job that pends, runs, and ends as `final`; node states as sinfo prints them, step by step."""

    states: list[str | None]
    sinfo: list[str]
    final: JobRecord
    output: str = ""
    cancelled: list[str] = field(default_factory=list)
    name: str = "fake"

    # -- JobBackend
    def submit(self, script: str) -> str:
        return "7"

    def test_only(self, script: str) -> object:
        raise NotImplementedError

    def queue_state(self, job_id: str) -> str | None:
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]

    def accounting(self, job_id: str) -> JobRecord | None:
        return self.final

    def info(self, job_id: str) -> JobInfo | None:
        return JobInfo(self.final, "/shared/out/job-7.out", "", "/")

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)
        self.states = ["CANCELLED"]

    def partitions(self) -> list[str]:
        return ["gpu"]

    # -- Transport: sinfo's states step by step; the job's output for anything else (cat, tail)
    def __post_init__(self) -> None:
        self.replies["sinfo"] = [(0, text, "") for text in self.sinfo]
        self.default = (0, self.output, "")


def _follow(fake: FakeSlurm, seen: list[Progress]) -> object:
    clock = iter(range(0, 10_000))
    jobs = Jobs(fake, fake, sleep=lambda _: None, clock=lambda: float(next(clock)))  # type: ignore[arg-type]
    follower = Follower(jobs, SlurmClient(fake), seen.append, clock=lambda: float(next(clock)), sleep=lambda _: None)
    return follower.follow("7", "/shared/out/job-7.out", 0.0, None)


def test_follow_reports_progress_and_returns_the_outcome() -> None:
    output = (DATA / "lab-torch-allreduce-4node-gloo.out").read_text()
    nodes = ("node1", "node2", "node3", "node4")
    done = JobRecord("7", "COMPLETED", 0, 0, nodes, "sacct", batch_host="node1")
    idle = "\n".join(f"{n}|allocated|none" for n in nodes)
    fake = FakeSlurm(["PENDING", "RUNNING", "RUNNING", "RUNNING", None], [idle], done, output)
    seen: list[Progress] = []
    followed = _follow(fake, seen)
    assert followed.outcome.record.ok and followed.lost_nodes == () and followed.nodes == nodes  # type: ignore[attr-defined]
    assert [p.state for p in seen][:2] == ["PENDING", "RUNNING"]
    assert seen[-1].size_bytes == 16777216 and seen[-1].nodes == nodes


def test_follow_gives_up_on_a_node_slurm_lost() -> None:
    nodes = ("node1", "node2", "node3", "node4")
    failed = JobRecord("7", "CANCELLED", 0, 15, nodes, "sacct", batch_host="node1")
    ok = "\n".join(f"{n}|allocated|none" for n in nodes)
    fake = FakeSlurm(["RUNNING"], [ok, ok.replace("node3|allocated|", "node3|allocated*|")], failed)
    followed = _follow(fake, [])
    assert followed.lost_nodes == ("node3",) and fake.cancelled == ["7"]  # type: ignore[attr-defined]


def test_default_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HPCKIT_CLUSTER", raising=False)
    assert default_cluster(tmp_path) is None
    for name in ("alpha", "beta"):
        (tmp_path / "clusters" / name / "current").mkdir(parents=True)
    (tmp_path / "clusters" / "alpha" / "current" / "access.json").write_text("{}")
    assert default_cluster(tmp_path) == "alpha"  # beta never finished deploying
    (tmp_path / "clusters" / "beta" / "current" / "access.json").write_text("{}")
    assert default_cluster(tmp_path) is None  # two: the user must say which
    monkeypatch.setenv("HPCKIT_CLUSTER", "beta")
    assert default_cluster(tmp_path) == "beta"
