"""`hpckit bench bisect` and `verify` without a cluster.

The search itself runs against a simulated fabric (each node's in-node and link speed, with noise);
the job path (render, submit, follow, parse, judge) against a fake Slurm whose jobs print the published
2-node H100 nccl-tests sweep, its busbw scaled to what the job's nodes and rail would allow.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import hostlist
import pytest

from hpckit.bench.bisect import Measurement, Probe, Report, Search, all_pairs, bisect, halves
from hpckit.bench.cluster import ClusterFacts
from hpckit.bench.drain import drain_slow
from hpckit.bench.files import ClusterFiles
from hpckit.bench.probes import JobRunner
from hpckit.bench.registry import get
from hpckit.bench.run import BenchRequest, Context
from hpckit.health.policy import PolicySettings
from hpckit.proc import CommandResult, LocalTransport
from hpckit.slurm.client import SlurmClient
from hpckit.slurm.jobparse import JobRecord
from hpckit.slurm.jobs import JobInfo, Jobs
from hpckit.slurm.nodes import NodeOps
from tests.fakes import FakeTransport

DATA = Path(__file__).resolve().parent / "data" / "bench"
H100_SWEEP = (DATA / "all_reduce-modern-2node-16gpu-h100-a3mega-full-sweep.txt").read_text()
# The probes ask for 1 GiB..4 GiB: the sweep's rows of those sizes are what such a job prints (its best
# busbw there, 330.58 GB/s at 4 GiB, is what the fakes scale to the figure each probe should show).
H100_PEAK = 330.58
ROW = re.compile(r"^\s+(\d+)\s+\d+\s+float\s+sum\s+-1\s.*\n", re.M)
H100_PROBE = ROW.sub(lambda m: m.group(0) if (1 << 30) <= int(m.group(1)) <= (4 << 30) else "", H100_SWEEP)


@dataclass
class Fabric:
    """What each probe measures: a node's in-node speed alone, the slowest member's link together."""

    inode: dict[str, float]
    link: dict[str, float]
    fails: frozenset[str] = frozenset()
    error: str = "exit code 1"  # what a failed job says
    blamed: bool = False  # whether a failed job's evidence names its nodes (Slurm lost them)
    noise: float = 0.0  # each figure times up to 1+noise or divided by up to 1+noise (log-uniform)
    seed: int = 0
    figure: float | None = None  # the table's lowest acceptable busbw, when it has one
    probes: list[Probe] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def __call__(self, probes: Sequence[Probe]) -> list[Measurement]:
        assert len({n for p in probes for n in p.nodes}) == sum(len(p.nodes) for p in probes), "nodes overlap"
        self.probes += probes
        out = []
        for p in probes:
            if self.fails & set(p.nodes):
                blamed = p.nodes if self.blamed else ()
                out.append(Measurement(p, None, str(len(self.probes)), error=self.error, blamed=blamed))
                continue
            speed = self.inode[p.nodes[0]] if p.kind == "single" else min(self.link[n] for n in p.nodes)
            speed *= math.exp(self.rng.uniform(-1, 1) * math.log1p(self.noise))
            out.append(Measurement(p, speed, str(len(self.probes)), self.figure))
        return out


def nodes(n: int) -> list[str]:
    return [f"node{i}" for i in range(1, n + 1)]


def fabric(n: int, slow: Sequence[str] = (), noise: float = 1.0, seed: int = 0, **kw: object) -> Fabric:
    """Healthy figures up to 4x apart (0.5x-2x), as on lab nodes sharing a busy box; a slow link 1/40."""
    link = {x: (0.006 if x in slow else 0.25) for x in nodes(n)}  # the lab: 50 Mbit/s tbf vs ~2 Gbit/s
    return Fabric({x: 0.3 for x in nodes(n)}, link, noise=noise, seed=seed, **kw)  # type: ignore[arg-type]


def fabric_jobs(report: Report) -> int:
    return sum(len(r.judged) for r in report.rounds if r.kind != "single")


@pytest.mark.parametrize("n", [3, 4, 5, 7, 8, 16, 33])
def test_one_slow_node_is_named_in_log2_rounds_wherever_it_is(n: int) -> None:
    for victim in nodes(n) if n <= 8 else nodes(n)[:: max(n // 5, 1)]:
        for seed in range(5):
            report = bisect(nodes(n), fabric(n, [victim], seed=seed))
            assert list(report.slow_nodes) == [victim], (victim, seed, report.to_json())
            assert report.slow_nodes[victim].startswith("fabric: ") and report.complete
            rounds = len(report.rounds) - 1  # the single-node round aside
            assert rounds <= math.ceil(math.log2(n)) + 1
            assert fabric_jobs(report) <= 2 * rounds
            assert fabric_jobs(report) < all_pairs(n) or n <= 4


def test_nothing_slow_names_no_node_in_one_round_of_halves() -> None:
    for n in (3, 4, 8, 16):
        report = bisect(nodes(n), fabric(n))
        assert report.slow_nodes == {} and report.complete and report.notes == []
        # three nodes: the three pairs, one round each (halves would leave one node without a partner)
        assert [r.kind for r in report.rounds] == ["single", *(["pairs"] * 3 if n == 3 else ["halves"])]


def test_every_round_is_kept_as_evidence() -> None:
    report = bisect(nodes(8), fabric(8, ["node6"], noise=0))
    assert [(r.kind, len(r.judged)) for r in report.rounds] == [
        ("single", 8),
        ("halves", 2),
        ("halves", 2),
        ("pairs", 2),
    ]
    first_fabric = report.rounds[1].judged
    assert [j.measurement.probe.nodes for j in first_fabric] == [tuple(nodes(4)), tuple(nodes(8)[4:])]
    assert [j.slow for j in first_fabric] == [False, True]
    pairs = report.rounds[3].judged
    assert pairs[0].measurement.probe.nodes == ("node5", "node1") and not pairs[0].slow
    assert pairs[1].measurement.probe.nodes == ("node6", "node2") and pairs[1].slow
    assert "2% of the fast multi-node tests (0.25 GB/s)" in report.slow_nodes["node6"]
    data = report.to_json()
    assert data["jobs"] == 14 and data["all_pairs_jobs"] == 28
    assert data["slow_nodes"] == [{"node": "node6", "why": report.slow_nodes["node6"], "rails": []}]


def test_two_slow_nodes_in_one_half_are_both_named() -> None:
    report = bisect(nodes(8), fabric(8, ["node2", "node3"]))
    assert sorted(report.slow_nodes) == ["node2", "node3"]


def test_with_a_table_figure_slow_nodes_in_both_halves_are_named() -> None:
    """The table judges each probe on its own: nothing depends on one half being fast."""
    report = bisect(nodes(8), fabric(8, ["node2", "node7"], figure=0.2, noise=0.2))
    assert sorted(report.slow_nodes) == ["node2", "node7"]


def test_a_node_slow_alone_is_named_in_node_and_left_out_of_the_fabric_search() -> None:
    fab = fabric(8)
    fab.inode["node4"] = 0.01
    report = bisect(nodes(8), fab)
    assert list(report.slow_nodes) == ["node4"] and report.slow_nodes["node4"].startswith("in-node: ")
    assert all("node4" not in p.nodes for p in fab.probes if p.kind != "single")


def test_a_node_whose_jobs_fail_is_named() -> None:
    fab = fabric(4)
    fab.fails = frozenset({"node2"})
    report = bisect(nodes(4), fab)
    assert list(report.slow_nodes) == ["node2"] and "failed: exit code 1" in report.slow_nodes["node2"]


NO_TORCH = (
    "could not measure: benchmark job 3 ended FAILED (exit code 1) on node1, no node to blame\n"
    "ModuleNotFoundError: No module named 'torch'\n"
    "srun: error: node1: tasks 0-1: Exited with exit code 1"
)


def test_a_benchmark_that_fails_on_every_node_names_none() -> None:
    """Every single-node job fails alike (no torch where the job runs): nothing was measured, so no node is
    slow, the search stops after the first round, and the report keeps each job's account."""
    fab = fabric(4, error=NO_TORCH)
    fab.fails = frozenset(nodes(4))
    report = bisect(nodes(4), fab)
    assert report.slow_nodes == {} and not report.complete and len(report.rounds) == 1
    assert [j.unmeasured for j in report.rounds[0].judged] == [True] * 4
    assert report.rounds[0].judged[0].why == (
        "could not measure: benchmark job 3 ended FAILED (exit code 1) on node1, no node to blame: "
        "ModuleNotFoundError: No module named 'torch'"
    )
    assert len(report.unmeasured) == 4 and report.unmeasured[0] == f"node1: {NO_TORCH}"
    assert report.to_json()["could_not_measure"] == report.unmeasured
    outcome = drain_slow(report, NodeOps(FabricSlurm("", "")), PolicySettings())
    assert outcome.applied == () and outcome.held == ()


def test_a_failure_the_job_blames_on_its_nodes_names_them() -> None:
    """Slurm lost the node (its own evidence): named even when no other probe measured."""
    fab = fabric(2, blamed=True)
    fab.fails = frozenset(nodes(2))
    report = bisect(nodes(2), fab)
    assert list(report.slow_nodes) == ["node1", "node2"] and report.unmeasured == []


def test_a_group_that_fails_beside_one_that_measured_is_searched() -> None:
    """Halves: one fails with no node blamed while the other measures; the same test ran, so the failed
    half is slow and halved again, down to the node whose jobs fail."""
    fab = fabric(8, noise=0)
    real = fab.__call__

    def run(probes: Sequence[Probe]) -> list[Measurement]:
        fab.fails = frozenset() if all(p.kind == "single" for p in probes) else frozenset({"node6"})
        return real(probes)

    report = bisect(nodes(8), run)
    assert list(report.slow_nodes) == ["node6"] and report.unmeasured == []
    why = report.slow_nodes["node6"]
    assert why.startswith("fabric: job ") and why.endswith(" failed: exit code 1")


def test_two_nodes_cannot_be_told_apart_and_say_so() -> None:
    slow = bisect(nodes(2), fabric(2, ["node2"]), singles=False)
    assert slow.slow_nodes == {} and not slow.complete
    assert slow.notes[0].startswith("node1 and node2: 0.00")
    assert slow.notes[0].endswith("GB/s, with nothing to judge it by (no table figure, no history, no third node)")
    judged = bisect(nodes(2), fabric(2, ["node2"], figure=0.2), singles=False)
    assert judged.notes == ["node1 and node2 are slow together; a third node would tell which"]
    assert bisect(nodes(2), fabric(2, figure=0.2)).complete


def test_a_pair_slow_only_together_is_reported_not_blamed() -> None:
    """Slow between two nodes (a cable between them), fast with anyone else: no node is named."""

    class Between(Fabric):
        def __call__(self, probes: Sequence[Probe]) -> list[Measurement]:
            out = super().__call__(probes)
            return [
                Measurement(m.probe, 0.005, m.job_id) if {"node3", "node4"} <= set(m.probe.nodes) else m for m in out
            ]

    fab = Between({n: 0.3 for n in nodes(4)}, {n: 0.25 for n in nodes(4)})
    report = bisect(nodes(4), fab)
    assert report.slow_nodes == {}
    assert any("node3,node4 tested slow together" in note for note in report.notes)


def test_halves_split_evenly() -> None:
    assert halves(["a", "b", "c"]) == [("a", "b"), ("c",)]
    assert halves(["a"]) == [("a",)]
    assert all_pairs(4) == 6 and all_pairs(8) == 28 and all_pairs(16) == 120


# ---------------------------------------------------------------- the job path, GPU nodes and rails


def scaled(text: str, factor: float) -> str:
    """The sweep as if the links were `factor` times as fast: algbw, busbw up, times down."""

    def row(m: re.Match[str]) -> str:
        f = m.group(0).split()
        for i in (5, 9):
            f[i] = f"{float(f[i]) / factor:.1f}"
        for i in (6, 7, 10, 11):
            f[i] = f"{float(f[i]) * factor:.2f}"
        return " " + " ".join(f)

    return re.sub(r"^\s+\d+\s+\d+\s+float\s+sum\s+-1\s.*$", row, text, flags=re.M)


@dataclass
class FabricSlurm(FakeTransport):
    """A fake Slurm whose jobs print the H100 sweep scaled to the nodes and rail they ran on."""

    slow_node: str
    slow_rail: str
    jobs: dict[str, tuple[tuple[str, ...], str | None]] = field(default_factory=dict)
    scripts: list[str] = field(default_factory=list)
    name: str = "fake"

    def submit(self, script: str) -> str:
        self.scripts.append(script)
        listed = re.search(r"^#SBATCH --nodelist=(\S+)$", script, re.M)
        assert listed is not None, "every probe names its nodes"
        rail = re.search(r"NCCL_IB_HCA==(\w+)", script)
        job_id = str(100 + len(self.jobs))
        self.jobs[job_id] = (
            tuple(hostlist.expand_hostlist(listed.group(1).strip("'"))),
            rail.group(1) if rail else None,
        )
        return job_id

    def output(self, job_id: str) -> str:
        nodes, rail = self.jobs[job_id]
        if len(nodes) == 1:
            return scaled(H100_PROBE, 476 / H100_PEAK)  # NVLink with NVLS: the table says ~475
        if rail is not None:  # one NDR HCA: the table's 46-49 GB/s
            good = 48.0 if not (self.slow_node in nodes and rail == self.slow_rail) else 12.0
            return scaled(H100_PROBE, good / H100_PEAK)
        return scaled(H100_PROBE, (90.0 if self.slow_node in nodes else 380.0) / H100_PEAK)

    def record(self, job_id: str) -> JobRecord:
        return JobRecord(job_id, "COMPLETED", 0, 0, self.jobs[job_id][0], "sacct", batch_host=self.jobs[job_id][0][0])

    def queue_state(self, job_id: str) -> str | None:
        return None

    def accounting(self, job_id: str) -> JobRecord | None:
        return self.record(job_id)

    def info(self, job_id: str) -> JobInfo | None:
        return JobInfo(self.record(job_id), f"/shared/logs/bench-allreduce-{job_id}.out", "", "/")

    def cancel(self, job_id: str) -> None:
        raise AssertionError("nothing here should be cancelled")

    def partitions(self) -> list[str]:
        return ["gpu"]

    def answer(self, args: tuple[str, ...]) -> CommandResult:  # the Transport's
        if args[0] in ("cat", "tail"):
            job_id = args[-1].rsplit("-", 1)[1].split(".")[0]
            return self.result(args, 0, self.output(job_id))
        if args[0] == "sinfo":
            text = "\n".join(f"gpu{i:02d}|idle|gpu*|none" for i in range(1, 9))
            if self.slow_node:
                text += f"\n{self.slow_node}|idle|gpu*|none"
            return self.result(args, 0, text)
        return self.result(args)  # mkdir, the NCCL debug grep, scontrol update


HCAS = tuple(f"mlx5_{i}" for i in range(8))
HGX = ClusterFacts("hgx", "gpu", 8, 224, 8, "h100-sxm", 8, 400.0, "/shared", False, HCAS)


def gpu_context(slurm: FabricSlurm, tmp_path: Path) -> Context:
    ctx = Context(LocalTransport(), HGX)
    ctx.jobs = Jobs(slurm, slurm, sleep=lambda _: None)  # type: ignore[arg-type]
    ctx.slurm = SlurmClient(slurm)
    ctx.files = ClusterFiles(LocalTransport())
    ctx.transport = slurm
    return ctx


def test_gpu_nodes_the_slow_node_then_its_rail(tmp_path: Path) -> None:
    slurm = FabricSlurm("gpu06", "mlx5_3")
    ctx = gpu_context(slurm, tmp_path)
    base = BenchRequest(get("allreduce"), 2, backend="nccl-tests", bench_dir=str(tmp_path), history=False)
    gpus = [f"gpu{i:02d}" for i in range(1, 9)]
    report = bisect(gpus, JobRunner(base, {None: ctx}), hcas=HCAS)
    assert list(report.slow_nodes) == ["gpu06"] and report.slow_rails == {"gpu06": ["mlx5_3"]}
    why = report.slow_nodes["gpu06"]
    assert why.startswith("fabric: 90.00 GB/s on gpu06,gpu02 is below the expected 370.00 GB/s")
    assert "slow rail: mlx5_3 12.00 GB/s" in why
    # singles: the table's NVLink figure; across nodes: 8x NDR; one rail: one NDR HCA
    singles = report.rounds[0].judged
    assert all(not j.slow and "meets the expected 451.25 GB/s" in j.why for j in singles)
    rails = [r for r in report.rounds if r.kind.startswith("rail")]
    assert [r.kind for r in rails] == [f"rail {h}" for h in HCAS]
    assert all(r.judged[0].measurement.expected_low == pytest.approx(46.25) for r in rails)
    # what Slurm was asked: 8 GPUs a node, the probe's nodes, one HCA on the rail probes, sizes past 1 GiB
    rail_script = next(s for s in slurm.scripts if "NCCL_IB_HCA" in s)
    assert "#SBATCH --nodelist=gpu[01,06]\n" in rail_script  # sbatch's own syntax: no shell quotes
    assert "export NCCL_IB_HCA==mlx5_0\n" in rail_script and "-b 1G -e 4G" in rail_script
    assert all("#SBATCH --gpus-per-node=8" in s for s in slurm.scripts)
    assert report.jobs == 8 + 2 + 2 + 2 + 8


def test_drain_hands_the_slow_node_to_the_policy_with_an_owned_reason(tmp_path: Path) -> None:
    slurm = FabricSlurm("gpu06", "mlx5_3")
    report = Report(tuple(f"gpu{i:02d}" for i in range(1, 9)), slow_nodes={"gpu06": "fabric: 90 GB/s"})
    report.slow_rails["gpu06"] = ["mlx5_3"]
    commands: list[tuple[str, ...]] = []
    real_run = slurm.run

    def run(argv: Sequence[str], **kw: object) -> CommandResult:
        commands.append(tuple(argv))
        return real_run(argv)

    slurm.run = run  # type: ignore[method-assign]
    outcome = drain_slow(report, NodeOps(slurm), PolicySettings())
    assert [a.node for a in outcome.applied] == ["gpu06"] and outcome.held == ()
    updates = [c for c in commands if c[:2] == ("scontrol", "update")]
    assert updates == [
        ("scontrol", "update", "nodename=gpu06", "state=drain", "reason=hpckit:slow-fabric:bisect rail mlx5_3")
    ]


def test_drain_respects_the_circuit_breaker() -> None:
    slurm = FabricSlurm("", "")
    names = tuple(f"gpu{i:02d}" for i in range(1, 9))
    report = Report(names, slow_nodes={n: "fabric: slow" for n in names[:4]})
    outcome = drain_slow(report, NodeOps(slurm), PolicySettings(circuit_breaker=0.3))
    assert outcome.applied == () and len(outcome.held) == 1 and "4 of 8 checked nodes" in outcome.held[0]


def test_verify_search_judges_the_partition_against_its_history() -> None:
    """A partition test with a history median: slow against it starts the halving search."""
    fab = fabric(4, ["node2"], noise=0)

    class WithHistory(Fabric):
        def __call__(self, probes: Sequence[Probe]) -> list[Measurement]:
            return [
                Measurement(m.probe, m.busbw, m.job_id, None, history_median=0.25 if m.probe.kind == "all" else None)
                for m in super().__call__(probes)
            ]

    hist = WithHistory(fab.inode, fab.link)
    search = Search(hist)
    passed = search.singles(nodes(4))
    together = search.together(passed)
    assert together.slow and "of this cluster's history (0.25 GB/s)" in together.why
    search.fabric(passed, reference=together.measurement.history_median)
    assert list(search.report.slow_nodes) == ["node2"]


@pytest.mark.parametrize("slow", ["", "gpu006"])
def test_verify_an_h100_cluster_against_the_table(slow: str, repo: Path, tmp_path: Path) -> None:
    """Every node alone (NVLink figure), then the partition together (8x NDR); a slow node is then searched for."""
    from hpckit.bench.verify import VerifyOptions, verify_cluster
    from hpckit.blueprint.loader import load_blueprint

    bp = load_blueprint(repo / "blueprints" / "h100-ib.yaml")
    slurm = FabricSlurm(slow, "")

    def make(facts: ClusterFacts) -> Context:
        ctx = gpu_context(slurm, tmp_path)
        ctx.facts = facts
        return ctx

    result = verify_cluster(bp, slurm, VerifyOptions(bench_dir=str(tmp_path)), make_context=make)
    kinds = [r.kind for r in result.search.rounds]
    together = result.partitions["gpu"]
    assert together is not None and len(together.measurement.probe.nodes) == 16
    if not slow:
        assert result.status == "passed" and result.failures == [] and kinds == ["single", "all"]
        assert "meets the expected 370.00 GB/s" in together.why
        return
    assert (
        result.status == "failed"
        and together.slow
        and kinds == ["single", "all", "halves", "halves", "halves", "pairs"]
    )
    assert result.failures == [f"gpu006: {result.search.slow_nodes['gpu006']}"]
    assert result.search.slow_nodes["gpu006"].startswith("fabric: 90.00 GB/s on gpu006,")
    data = result.to_json()
    assert data["status"] == "failed" and data["slow_nodes"][0]["node"] == "gpu006"  # type: ignore[index]


def test_out_of_time_keeps_the_evidence_so_far() -> None:
    from hpckit.bench.bisect import OutOfTime

    class Slow(Fabric):
        def __call__(self, probes: Sequence[Probe]) -> list[Measurement]:
            if any(p.kind == "pair" for p in probes):
                raise OutOfTime("out of time: job 12 still RUNNING after 600 s; cancelled it")
            return super().__call__(probes)

    fab = fabric(8, ["node6"], noise=0)
    report = bisect(nodes(8), Slow(fab.inode, fab.link))
    assert not report.complete and report.slow_nodes == {} and len(report.rounds) == 3
    assert report.notes == ["out of time: job 12 still RUNNING after 600 s; cancelled it"]


def test_verify_searches_a_partition_well_below_its_history_though_not_below_the_ratio() -> None:
    """One earlier figure is a noisy yardstick: at 12% of it (not below 10%) the halving search still runs,
    and its side-by-side probes name the node."""
    from hpckit.bench.verify import VerifyReport, _partition

    fab = fabric(8, ["node6"], noise=0)

    class History(Fabric):
        def __call__(self, probes: Sequence[Probe]) -> list[Measurement]:
            out = super().__call__(probes)
            return [Measurement(m.probe, m.busbw, m.job_id, None, history_median=0.05) for m in out]

    search = Search(History(fab.inode, fab.link))
    result = VerifyReport(search.report)
    _partition(search, result, "gpu", nodes(8))
    together = result.partitions["gpu"]
    assert together is not None and not together.slow  # 0.006 is 12% of 0.05
    assert list(search.report.slow_nodes) == ["node6"] and result.failures == []
    assert [r.kind for r in search.report.rounds] == ["all", "halves", "halves", "pairs"]
